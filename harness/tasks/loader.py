"""Tasks as directories (instruction.md, task.toml, environment/workspace/, tests/test.sh, solution/solve.sh).

``load_tasks`` takes a built-in suite name (tasks/<suite>/), a directory of task directories
(nested suites such as tasks/<category>/<task> included), or one task directory. Harbor /
Terminal-Bench 2 directories (environment/Dockerfile instead of environment/workspace/) load as
image tasks for a container runtime, and without one when their Dockerfile needs no image of its
own (harbor.py).

In a directory, one task that cannot be read (malformed task.toml, no tests/test.sh, a Terminal-Bench
1 task.yaml) never stops the others: it is listed with its
reason (``Suite.skipped``). A task directory given on its own still errors.
"""

import math
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.markup import escape

from harness.errors import HarnessError
from harness.paths import absolute, repo_root
from harness.progress import console
from harness.tasks.harbor import ContainerLayout, UnsupportedTask, localize, parse_dockerfile
from harness.tasks.harbor_config import HarborSpec, StepSpec, harbor_spec, read_spec
from harness.tasks.identifiers import check_image_reference, check_path_component
from harness.tasks.swebench_dataset import dataset_jsonl, hub_dataset, parquet_jsonl


class TaskLimits(BaseModel):
    # strict: `timeout_sec = true` or "600" in a task.toml is a mistake, not 1 s or 600 s
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    # Upper bounds: 1e9 or inf in a task.toml is a typo, and past ~1e9 s the timers underneath
    # (threading, asyncio, docker) overflow. A day is far beyond any real task.
    agent_timeout_s: float = Field(
        900, gt=0, le=86400, description="Wall time for the episode (at most a day)."
    )
    verify_timeout_s: float = Field(
        120, gt=0, le=86400, description="Wall time for tests/test.sh (at most a day)."
    )
    max_iterations: int | None = Field(None, ge=1, description="Model turns (default: the scaffold's).")
    cpus: float | None = Field(
        None,
        ge=0.01,
        allow_inf_nan=False,
        description="CPUs of the task's container ([environment] cpus); None: the run's --sandbox-cpus.",
    )
    memory_gib: float | None = Field(
        None,
        ge=6 / 1024,
        allow_inf_nan=False,
        description="Memory of the task's container ([environment] memory_mb or memory); None: --sandbox-memory-gib.",
    )


class TaskRefused(HarnessError):
    """A directory that is not a task the harness can run at all (format, missing parts)."""


class Skipped(BaseModel):
    """A task directory of a suite that was not loaded, and why."""

    model_config = ConfigDict(frozen=True)

    id: str
    path: Path
    reason: str
    needs_image: bool = False  # it loads under a container runtime (UnsupportedTask)


class TaskImage(BaseModel):
    """A task that runs in its own image (container runtimes only): a prebuilt reference, or
    built from ``environment/Dockerfile`` with ``environment/`` as the build context."""

    model_config = ConfigDict(frozen=True)

    ref: str | None = None
    dockerfile: Path | None = None


class Task(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    suite: str
    path: Path
    instruction: str
    limits: TaskLimits = TaskLimits()
    metadata: dict[str, Any] = {}
    container: ContainerLayout | None = None  # a Harbor task: its Dockerfile, replayed locally
    image: TaskImage | None = None  # a Harbor task in a container runtime: its own image
    verifier_env: dict[str, str] = {}
    solution_env: dict[str, str] = {}
    harbor: HarborSpec | None = None  # a Harbor-format task.toml, as Harbor's models read it

    @property
    def workspace_dir(self) -> Path:
        """The starting files (a Harbor task's build context: use prepare_workspace)."""
        return self.path / "environment" / ("" if self.container else "workspace")

    def instruction_for(self, workspace: Path) -> str:
        """The instruction as the agent reads it: a Harbor task's working directory is ``workspace``."""
        if self.container is None:
            return self.instruction
        return localize(self.instruction, {self.container.workdir: workspace.resolve()})

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def steps(self) -> "tuple[StepSpec, ...]":
        """A Harbor multi-step task's steps, in order (harness/tasks/steps.py); () for the others."""
        return self.harbor.steps if self.harbor is not None else ()

    @property
    def solution(self) -> Path:
        return self.path / "solution" / "solve.sh"


class Suite(BaseModel):
    """What a suite, directory or file of tasks gave: the tasks, and the directories skipped."""

    model_config = ConfigDict(frozen=True)

    tasks: list[Task]
    skipped: list[Skipped] = []


def builtin_suites() -> list[str]:
    root = repo_root() / "tasks"
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*/instruction.md")))


def load_task(path: Path, suite: str, *, images: bool = False, task_id: str | None = None) -> Task:
    """One task directory; ``images``: a container runtime will run it, so a Dockerfile task is
    built as its image instead of being replayed on this machine. Whatever the directory holds
    (a 5,000-deep task.toml, `limits = 5`, bytes that are no text), the error is a HarnessError
    naming it: one hostile task directory never ends the load of the others."""
    try:
        return _load_task(path, suite, images=images, task_id=task_id)
    except HarnessError:
        raise
    except Exception as exc:  # RecursionError, TypeError, UnicodeDecodeError, ValidationError ...
        raise TaskRefused(
            f"{path}: cannot be read as a task: {type(exc).__name__}: {str(exc)[:300]}"
        ) from None


def _load_task(path: Path, suite: str, *, images: bool, task_id: str | None) -> Task:
    toml = path / "task.toml"
    if (path / "task.yaml").is_file() and not toml.is_file():
        raise TaskRefused(
            f"{path / 'task.yaml'}: a Terminal-Bench 1 task (task.yaml); the harness reads the Harbor "
            "format (task.toml): convert it with `harbor tasks migrate`"
        )
    meta: dict[str, Any] = {}
    if toml.is_file():
        try:
            meta = tomllib.loads(toml.read_text(errors="replace"))
        except tomllib.TOMLDecodeError as exc:
            raise TaskRefused(f"{toml}: malformed TOML ({exc})") from None
    multi_step = isinstance(meta.get("steps"), list) and bool(meta.get("steps"))
    # A multi-step task's instructions and tests are per step (harbor_config._steps checks them)
    if not multi_step and not (path / "instruction.md").is_file():
        raise TaskRefused(f"{path}: no instruction.md; not a task directory")
    if not multi_step and not (path / "tests" / "test.sh").is_file():
        raise TaskRefused(f"{path}: missing tests/test.sh; a task needs tests to verify the episode")
    limits = dict(meta.get("limits") or {})
    # Harbor keeps timeouts under [agent] / [verifier] as timeout_sec.
    if "agent" in meta and isinstance(meta["agent"], dict) and "timeout_sec" in meta["agent"]:
        limits.setdefault("agent_timeout_s", meta["agent"]["timeout_sec"])
    if "verifier" in meta and isinstance(meta["verifier"], dict) and "timeout_sec" in meta["verifier"]:
        limits.setdefault("verify_timeout_s", meta["verifier"]["timeout_sec"])
    limits.update(_environment_limits(toml, meta.get("environment")))
    spec = harbor_spec(path, read_spec(toml, meta)) if multi_step or _harbor_format(path, meta) else None
    if spec is not None and not images:
        _local_refusals(path, spec)
    try:
        parsed_limits = TaskLimits.model_validate(limits)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise TaskRefused(f"{toml}: limits.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    image = _task_image(path, meta) if images else None
    return Task(
        # It names the episode's directories in the run (and Ray's scratch ones): one name, never ..
        id=check_path_component(task_id or path.name, f"{path}: the task id"),
        suite=suite,
        path=path.resolve(),
        # a multi-step task's first step is what its agent reads first (each step: its own)
        instruction=spec.steps[0].instruction
        if spec and spec.steps
        else (path / "instruction.md").read_text(),
        limits=parsed_limits,
        metadata=meta.get("task") or meta.get("metadata") or {},
        container=None if image else _harbor_layout(path, meta),
        image=image,
        verifier_env=_section_env(meta, "verifier"),
        solution_env=_section_env(meta, "solution"),
        harbor=spec,
    )


def _harbor_format(path: Path, meta: dict[str, Any]) -> bool:
    """Whether task.toml is Harbor's (read with Harbor's models) rather than the harness's own
    (``[limits]``, a free-form ``[task]`` table) or a generated SWE-bench instance's."""
    if not (path / "task.toml").is_file() or "limits" in meta:
        return False
    if (path / "tests" / "swebench.json").is_file():
        return False
    table = meta.get("task")
    return not (isinstance(table, dict) and "name" not in table)  # Harbor's [task] names a package


def _local_refusals(path: Path, spec: HarborSpec) -> None:
    """What of a Harbor task needs its container (under --runtime local, a reason to skip it)."""
    toml = path / "task.toml"
    if spec.steps:
        raise UnsupportedTask(
            f"{toml}: [[steps]]: a multi-step task runs in its container (--runtime docker)"
        )
    if spec.healthcheck is not None:
        raise UnsupportedTask(f"{toml}: [environment.healthcheck] runs in the task's container")
    if spec.verifier_mode == "separate":
        raise UnsupportedTask(f'{toml}: [verifier] environment_mode = "separate" needs a verifier container')
    if spec.workdir is not None:
        raise UnsupportedTask(
            f"{toml}: [environment] workdir {spec.workdir} is a path in the task's container"
        )


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)I?B?\s*$", re.IGNORECASE)


def _mib(value: object) -> float | None:
    """Harbor's memory sizes: "4G", "512M", "1024K" (Harbor's own parser), a plain number is MiB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    m = _SIZE.match(str(value))
    if not m:
        return None
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return float(m.group(1)) * scale


# What an engine can apply: Docker refuses under 0.01 CPUs and 6 MiB; a limit that rounds to 0
# (memory_mb = 0.5 -> "0m") means none at all, and inf overflows the engine's integers.
_MIN_CPUS, _MIN_MIB, _MAX_MIB = 0.01, 6.0, 1024.0**3  # 1 PiB: no machine has more


def _environment_limits(toml: Path, table: object) -> dict[str, float]:
    """Harbor's ``[environment] cpus`` and ``memory_mb`` (or the older ``memory = "4G"``), as
    TaskLimits fields; only what the task sets (the run's --sandbox-* flags stand for the rest).
    ``storage_mb`` / ``storage`` and ``build_timeout_sec`` are not applied, but an impossible
    value there is refused too: it says the file is not what its author meant."""
    if not isinstance(table, dict):
        return {}
    out: dict[str, float] = {}
    cpus = table.get("cpus")
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not _MIN_CPUS <= cpus < math.inf:
            raise TaskRefused(
                f"{toml}: [environment] cpus = {cpus!r}: a positive number of CPUs (at least {_MIN_CPUS:g}) is needed"
            )
        out["cpus"] = float(cpus)
    for group in (("memory_mb", "memory"), ("storage_mb", "storage")):
        for key in group:
            if table.get(key) is None:
                continue
            mib = _mib(table[key])
            if mib is None or not _MIN_MIB <= mib <= _MAX_MIB:
                raise TaskRefused(
                    f"{toml}: [environment] {key} = {table[key]!r}: write a size of at least "
                    f'{_MIN_MIB:g} MiB, e.g. {group[0]} = 4096 or {group[1]} = "4G"'
                )
            if key.startswith("memory"):
                out["memory_gib"] = mib / 1024
            break
    build = table.get("build_timeout_sec")
    if build is not None and (
        isinstance(build, bool) or not isinstance(build, int | float) or not 0 < build <= 86400
    ):
        raise TaskRefused(
            f"{toml}: [environment] build_timeout_sec = {build!r}: seconds, more than 0, at most a day"
        )
    return out


def _section_env(meta: dict[str, Any], section: str) -> dict[str, str]:
    """Harbor's ``[verifier] env`` / ``[solution] env`` tables."""
    table = meta.get(section)
    env = table.get("env") if isinstance(table, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def _task_image(path: Path, meta: dict[str, Any]) -> TaskImage | None:
    """A Harbor task's own image: ``[environment] docker_image``, else its Dockerfile; None for a
    task with environment/workspace/ (it runs in the default sandbox image)."""
    env = path / "environment"
    table = meta.get("environment")
    ref = table.get("docker_image") if isinstance(table, dict) else None
    dockerfile = env / "Dockerfile"
    if (env / "workspace").is_dir() and not dockerfile.is_file() and not ref:
        return None
    for compose in ("docker-compose.yaml", "docker-compose.yml"):
        if (env / compose).is_file():
            raise UnsupportedTask(f"{env / compose}: docker-compose environments are not run yet")
    if not ref and not dockerfile.is_file():
        return None
    if ref:  # it goes into the engine's API paths (inspect, pull): a reference, nothing else
        check_image_reference(ref, f"{path / 'task.toml'}: [environment] docker_image")
    return TaskImage(ref=str(ref) if ref else None, dockerfile=dockerfile if dockerfile.is_file() else None)


def _harbor_layout(path: Path, meta: dict[str, Any]) -> ContainerLayout | None:
    """A Harbor task's Dockerfile layout; None for a task with environment/workspace/."""
    env = path / "environment"
    if (env / "workspace").is_dir() and (env / "Dockerfile").is_file():
        # TermiGen-style: workspace/ is the Dockerfile's build input, copied wherever it says.
        raise UnsupportedTask(
            f"{env / 'Dockerfile'}: the task's environment is built from its Dockerfile (environment/workspace/ "
            "beside it is build input, not the agent's working directory): it needs its image"
        )
    if (env / "workspace").is_dir():
        return None
    table = meta.get("environment")
    image = table.get("docker_image") if isinstance(table, dict) else None
    if image:
        raise UnsupportedTask(
            f"{path / 'task.toml'}: [environment] docker_image = {image!r}: the task runs in that "
            "prebuilt image; under --runtime local the harness runs tasks on this machine without Docker"
        )
    for compose in ("docker-compose.yaml", "docker-compose.yml"):
        if (env / compose).is_file():
            raise UnsupportedTask(f"{env / compose}: a docker-compose environment needs Docker")
    if (env / "Dockerfile").is_file():
        return parse_dockerfile(env / "Dockerfile")
    return None  # no starting files: an empty workspace


_MARKERS = ("instruction.md", "task.toml", "task.yaml")
_MAX_DEPTH = 3  # suite/category/task


def _is_task_dir(d: Path) -> bool:
    return any((d / name).is_file() for name in _MARKERS)


def _task_dirs(root: Path, depth: int = _MAX_DEPTH) -> list[Path]:
    """Task directories under ``root`` (not ``root`` itself), nested suites included; a task
    directory's own subdirectories are never searched."""
    found: list[Path] = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        if _is_task_dir(child):
            found.append(child)
        elif depth > 1:
            found.extend(_task_dirs(child, depth - 1))
    return found


def _ids(root: Path, dirs: list[Path]) -> list[str]:
    """A task's id is its directory's name; names found twice in a nested suite take their path."""
    names = [d.name for d in dirs]
    return [d.name if names.count(d.name) == 1 else "-".join(d.relative_to(root).parts) for d in dirs]


def check_source(suite_or_path: str) -> None:
    """A ``--tasks`` that names nothing fails in one line, before any engine or server work (an
    eval's runtime is chosen after; ``auto`` may start podman's service)."""
    if absolute(suite_or_path).exists() or hub_dataset(suite_or_path) is not None:
        return
    if "/" in suite_or_path or not (repo_root() / "tasks" / suite_or_path).is_dir():
        raise HarnessError(
            f"--tasks {suite_or_path}: no such suite or directory (built-in suites: "
            f"{', '.join(builtin_suites())})"
        )


def load_suite(suite_or_path: str, *, images: bool = False, swebench_images: str = "swebench") -> Suite:
    """The tasks of a built-in suite, a directory of tasks (nested too), a single task directory,
    a SWE-bench .jsonl or .parquet of instances, or a SWE-bench dataset (``swe-bench-verified``,
    ``swe-bench-lite``, ``hf:OWNER/NAME``: swebench_dataset.py), and the task directories of a
    directory that could not be loaded. ``swebench_images``: the namespace of the official
    SWE-bench instance images, or ``local`` to build them here (swebench.py).

    A single task directory that cannot be loaded raises; in a directory it is skipped with its
    reason (``Skipped.needs_image``: a Harbor task that needs its image and ``images`` is off).
    """
    path = absolute(suite_or_path)  # "." names its directory (the task id of a single task)
    if not path.exists() and hub_dataset(suite_or_path) is not None:
        path = dataset_jsonl(suite_or_path)
    elif path.is_file() and path.suffix == ".parquet":
        path = parquet_jsonl(path)
    if path.is_file() and path.suffix == ".jsonl":
        from harness.tasks.swebench import load_swebench

        generated, failed = load_swebench(path, swebench_images)
        instances: list[Task] = []
        rows_skipped = [Skipped(id=label, path=path, reason=reason) for label, reason in failed]
        for d in sorted(p for p in generated.iterdir() if p.is_dir() and not p.name.endswith(".tmp")):
            try:  # each instance is built in its own image: under --runtime local it needs one
                instances.append(load_task(d, suite=path.stem, images=images))
            except UnsupportedTask as exc:
                rows_skipped.append(Skipped(id=d.name, path=d, reason=str(exc), needs_image=True))
            except HarnessError as exc:
                rows_skipped.append(Skipped(id=d.name, path=d, reason=str(exc)))
        return Suite(tasks=instances, skipped=rows_skipped)
    if not path.exists():
        check_source(suite_or_path)
        path = repo_root() / "tasks" / suite_or_path
    if _is_task_dir(path):
        return Suite(tasks=[load_task(path, suite=path.parent.name, images=images)])
    dirs = _task_dirs(path)
    if not dirs:
        raise HarnessError(
            f"--tasks {suite_or_path}: no task directories (with instruction.md or task.toml) in {path}"
        )
    tasks: list[Task] = []
    skipped: list[Skipped] = []
    for d, task_id in zip(dirs, _ids(path, dirs), strict=True):
        try:
            tasks.append(load_task(d, suite=path.name, images=images, task_id=task_id))
        except UnsupportedTask as exc:
            skipped.append(Skipped(id=task_id, path=d, reason=str(exc), needs_image=True))
        except HarnessError as exc:
            skipped.append(Skipped(id=task_id, path=d, reason=str(exc)))
    return Suite(tasks=tasks, skipped=skipped)


def _names(items: list[Skipped]) -> str:
    return ", ".join(s.id for s in items[:8]) + (" ..." if len(items) > 8 else "")


def select_tasks(
    suite: Suite,
    suite_or_path: str,
    *,
    skip_unsupported: bool = False,
    images: bool = False,
    quiet: bool = False,
) -> list[Task]:
    """The tasks of a loaded suite that will run. Unreadable task directories are listed (unless
    ``quiet``: the caller shows ``suite.skipped``). A Harbor task that needs its Docker image
    (``images`` off) stops the load with what needs it and how many tasks are affected; with
    ``skip_unsupported`` the others run and the skipped ones are listed."""
    broken = [s for s in suite.skipped if not s.needs_image]
    unsupported = [s for s in suite.skipped if s.needs_image]
    total = len(suite.tasks) + len(suite.skipped)
    if broken and not quiet:
        console.print(
            f"[yellow]skipped {len(broken)} of {total} task directories that cannot be run[/] "
            f"({escape(_names(broken))}):",
            highlight=False,
        )
        for s in broken:
            console.print(f"  {escape(s.id)}: {escape(s.reason)}", highlight=False)
    if unsupported:
        first = unsupported[0].reason
        if not skip_unsupported or not suite.tasks:
            hint = f"; pass --skip-unsupported to run the other {len(suite.tasks)}" if suite.tasks else ""
            how = "" if images else "; --runtime docker runs them in their images"
            raise HarnessError(
                f"--tasks {suite_or_path}: {len(unsupported)} of {total} tasks need a Docker "
                f"image, e.g. {first}{how}{hint}"
            )
        if not quiet:
            console.print(
                f"[yellow]skipped {len(unsupported)} of {total} tasks that need a Docker image[/] "
                f"({escape(_names(unsupported))}); e.g. {escape(first)}",
                highlight=False,
            )
    if not suite.tasks:
        raise HarnessError(
            f"--tasks {suite_or_path}: none of its {total} task directories can be run, e.g. {suite.skipped[0].reason}"
        )
    return suite.tasks


def load_tasks(
    suite_or_path: str,
    *,
    skip_unsupported: bool = False,
    images: bool = False,
    swebench_images: str = "swebench",
) -> list[Task]:
    """All tasks of a built-in suite, a directory of tasks, or a single task directory
    (``load_suite`` then ``select_tasks``: unreadable ones listed, image tasks as ``images`` says)."""
    suite = load_suite(suite_or_path, images=images, swebench_images=swebench_images)
    return select_tasks(suite, suite_or_path, skip_unsupported=skip_unsupported, images=images)


def unnamed_host_var(tasks: list[Task], names: Iterable[str]) -> str | None:
    """The one-line refusal for the first task whose env tables take a variable of this machine
    that ``--task-env`` does not name (and that has no default); None when there is none."""
    from harness.tasks.harbor_config import host_vars

    allowed = set(names)
    for task in tasks:
        tables = [("[verifier] env", task.verifier_env), ("[solution] env", task.solution_env)]
        if task.harbor is not None:
            tables += [
                ("[environment] env", task.harbor.env),
                ("[verifier.environment] env", task.harbor.verifier_env),
            ]
        tables += [(f"step {step.name!r} [verifier] env", step.verifier_env) for step in task.steps]
        for field, env in tables:
            for key, var, has_default in host_vars(env):
                if var not in allowed and not has_default:
                    return (
                        f"{task.path / 'task.toml'}: {field}: {key} = ${{{var}}} asks for this machine's {var}: "
                        f"pass it with --task-env {var} if the task may have it (its value is then masked in "
                        "the run's files), or leave the task out"
                    )
    return None
