"""A Harbor task's ``task.toml`` read with Harbor's own task models (the ``harbor`` package).

``harbor.models.task.config.TaskConfig`` validates the file exactly as Harbor does (legacy
``memory = "4G"``, ``allow_internet``, ``version``), and the harness then takes each field for what
it means in Harbor: honoured, or the task refused in one line naming the field. Harbor's models
ignore keys they do not know; the harness does not: a key Harbor does not define is refused too
(a typo such as ``[enviroment]`` or ``timeout_secs`` would otherwise change nothing, silently).

Honoured (docker runtime): ``[environment]`` docker_image, workdir, env (``${VAR}`` /
``${VAR:-default}`` from this machine, resolved when a container is made, never stored or
printed), cpus, memory_mb, build_timeout_sec, healthcheck, network_mode per phase (public /
no-network; ``--network`` overrides it), ``[verifier] environment_mode = "separate"`` (with
``[verifier.environment]``, tests/Dockerfile and artifacts), timeouts and env of agent, verifier
and solution. Refused: what needs machinery the harness has not got (GPUs, TPUs, Windows, MCP
servers, skills, compose collect hooks, a network allowlist without --network, a user to run
the agent or verifier as). Multi-step tasks (``[[steps]]``, steps.py) run in the one container,
verified shared after each step; a step's own user, verifier environment, network or artifacts
are refused.

Only ``harbor.models.task`` is imported (pydantic, toml, pathspec); the ``harbor`` distribution's
other ~95 dependencies are never needed, so ``pip install --no-deps harbor`` is enough (README).
"""

import contextlib
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.errors import HarnessError

HARBOR_VERSION = "0.25.0"  # what the field list below was checked against

Network = Literal["public", "none", "allowlist"]


class HarborRefused(HarnessError):
    """A Harbor task.toml field the harness cannot honour, or a file Harbor itself rejects."""


class Healthcheck(BaseModel):
    """``[environment.healthcheck]``: run in the container after it starts, until it passes
    (Docker HEALTHCHECK semantics, as Harbor runs it)."""

    model_config = ConfigDict(frozen=True)

    command: str
    interval_s: float = 5.0
    timeout_s: float = 30.0
    start_period_s: float = 0.0
    start_interval_s: float = 5.0
    retries: int = 3


class PhaseNetwork(BaseModel):
    """One phase's network policy as the task asks for it."""

    model_config = ConfigDict(frozen=True)

    mode: Network = "public"
    hosts: tuple[str, ...] = ()
    field: str = "[environment] network_mode"  # where it comes from, for messages


class HarborSpec(BaseModel):
    """What of a Harbor task.toml the harness acts on (besides limits and env tables)."""

    model_config = ConfigDict(frozen=True)

    workdir: str | None = None
    env: dict[str, str] = {}  # templates as written; resolve_env() at container creation
    healthcheck: Healthcheck | None = None
    agent_network: PhaseNetwork = PhaseNetwork()
    verifier_network: PhaseNetwork = PhaseNetwork()
    verifier_mode: Literal["shared", "separate"] = "shared"
    verifier_image: str | None = None  # separate: [verifier.environment] docker_image
    verifier_dockerfile: Path | None = None  # separate: tests/Dockerfile (context tests/)
    verifier_env: dict[str, str] = {}  # separate: the verifier environment's env (templates)
    artifacts: tuple[str, ...] = ()  # separate: paths copied from the agent's container
    storage_mb: int | None = None
    build_timeout_s: float = 600.0
    steps: tuple["StepSpec", ...] = ()  # a multi-step task's [[steps]], in order (steps.py runs them)
    reward_strategy: Literal["mean", "final"] = "mean"  # multi_step_reward_strategy (Harbor's default)


class StepSpec(BaseModel):
    """One ``[[steps]]`` entry of a multi-step task with its ``steps/<name>/`` files, as Harbor's
    MultiStepTrial uses them: a new agent run on ``instruction`` in the task's one environment, after
    ``workdir/`` is copied into the working directory and its ``setup.sh`` has run and
    ``healthcheck`` passed; then the task's ``tests/`` with the step's ``tests/`` over it run."""

    model_config = ConfigDict(frozen=True)

    name: str
    instruction: str
    tests_dir: Path | None = None  # steps/<name>/tests (over the task's tests/)
    solution_dir: Path | None = None  # steps/<name>/solution, else the task's solution/ (Harbor's oracle)
    workdir_dir: Path | None = None  # steps/<name>/workdir: copied into the working directory first
    agent_timeout_s: float | None = None  # None: the task's [agent] timeout_sec
    verify_timeout_s: float = 600.0  # [steps.verifier] timeout_sec (Harbor's default: 600, not the task's)
    verifier_env: dict[str, str] = {}  # over [verifier] env
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None


HarborSpec.model_rebuild()

ARTIFACTS_DIR = "/logs/artifacts"  # Harbor's convention: what the agent publishes for a verifier


def _models() -> Any:
    try:
        from harbor.models.task import config
    except ImportError:
        raise HarborRefused(
            "reading a Harbor task needs Harbor's task models: pip install --no-deps "
            f"harbor=={HARBOR_VERSION} (scripts/bootstrap does; README: why --no-deps)"
        ) from None
    return config


def _unknown(model: type[BaseModel], data: object, where: str) -> str | None:
    """The first key of ``data`` that ``model`` does not define (dotted), or None."""
    if not isinstance(data, dict):
        return None
    aliases = {"TaskConfig": {"version"}, "EnvironmentConfig": {"memory", "storage", "allow_internet"}}
    known = set(model.model_fields) | aliases.get(model.__name__, set())
    for key, value in data.items():
        here = f"{where}.{key}" if where else str(key)
        if key not in known:
            return here
        annotation = model.model_fields[key].annotation if key in model.model_fields else None
        for sub in _submodels(annotation):
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                label = f"{here}[{i}]" if isinstance(value, list) else here
                if (found := _unknown(sub, item, label)) is not None:
                    return found
    return None


def _submodels(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation holds (X, X | None, list[X], list[str | X])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _submodels(arg)
    return found


def _section(dotted: str) -> str:
    """``environment.healthcheck.cmd`` -> ``[environment.healthcheck] cmd``."""
    *table, key = dotted.split(".")
    return f"[{'.'.join(table)}] {key}" if table else key


def read_spec(toml: Path, raw: dict[str, Any]) -> Any:
    """Harbor's TaskConfig of ``raw`` (task.toml's tables); HarborRefused in one line when Harbor
    rejects it or a key is not Harbor's."""
    config = _models()
    if (key := _unknown(config.TaskConfig, raw, "")) is not None:
        raise HarborRefused(
            f"{toml}: {_section(key)}: not a field of Harbor's task.toml (harbor {HARBOR_VERSION}); the harness "
            "does not guess what it asks for"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # memory = "4G", allow_internet: still read
            return config.TaskConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise HarborRefused(f"{toml}: {_section(where) if where else 'task.toml'}: {err['msg']}") from None


def _policy(policy: Any, field: str) -> PhaseNetwork:
    mode = {"public": "public", "no-network": "none", "allowlist": "allowlist"}[policy.network_mode.value]
    return PhaseNetwork(mode=mode, hosts=tuple(policy.allowed_hosts or ()), field=field)  # type: ignore[arg-type]


def harbor_spec(task_dir: Path, cfg: Any) -> HarborSpec:
    """The harness's reading of a validated TaskConfig; HarborRefused naming the first field the
    harness cannot honour."""
    config = _models()
    toml = task_dir / "task.toml"
    env = cfg.environment

    def refuse(field: str, why: str) -> HarborRefused:
        return HarborRefused(f"{toml}: {field}: {why}")

    if env.os.value != "linux":
        raise refuse("[environment] os", f"{env.os.value!r}: the harness runs Linux containers only")
    if env.gpus:
        raise refuse("[environment] gpus", f"{env.gpus}: the harness gives task containers no GPUs")
    if env.gpu_types:
        raise refuse("[environment] gpu_types", "the harness gives task containers no GPUs")
    if env.tpu is not None:
        raise refuse("[environment] tpu", "the harness gives task containers no TPUs")
    if env.mcp_servers:
        raise refuse("[[environment.mcp_servers]]", "MCP servers are not given to the harness's agents")
    if env.skills_dir:
        raise refuse("[environment] skills_dir", "agent skills are not installed by the harness")
    if cfg.agent.user is not None:
        raise refuse("[agent] user", f"{cfg.agent.user!r}: the harness runs the agent as its own user")
    if cfg.verifier.user is not None:
        raise refuse("[verifier] user", f"{cfg.verifier.user!r}: the harness runs the tests as root")
    if cfg.verifier.collect:
        raise refuse("[[verifier.collect]]", "collect hooks run in compose services; compose is not run")
    for entry in cfg.artifacts:
        if not isinstance(entry, str) and entry.service not in (None, "main"):
            raise refuse("artifacts", f"{entry.source} from service {entry.service!r}: compose is not run")
    check_env(toml, "[environment] env", env.env)
    check_env(toml, "[verifier] env", cfg.verifier.env)
    check_env(toml, "[solution] env", cfg.solution.env)
    agent = cfg.agent.explicit_phase_policy()
    baseline = env.resolve_baseline()
    mode = "separate" if _verifier_mode(cfg) == config.VerifierEnvironmentMode.SEPARATE else "shared"
    spec: dict[str, Any] = {
        "workdir": env.workdir,
        "env": dict(env.env),
        "agent_network": _policy(agent, "[agent] network_mode")
        if agent
        else _policy(baseline, "[environment] network_mode"),
        "storage_mb": env.storage_mb,
        "build_timeout_s": float(env.build_timeout_sec),
        "verifier_mode": mode,
    }
    if env.healthcheck is not None:
        spec["healthcheck"] = _healthcheck(env.healthcheck)
    verifier = cfg.verifier.explicit_phase_policy()
    if mode == "separate":
        from harbor.models.task.verifier_mode import resolve_effective_verifier_env_config

        venv = resolve_effective_verifier_env_config(cfg, None)
        if venv.healthcheck is not None and cfg.verifier.environment is not None:
            raise refuse("[verifier.environment.healthcheck]", "not run in a separate verifier container")
        check_env(toml, "[verifier.environment] env", venv.env)
        baseline = venv.resolve_baseline()
        spec["verifier_env"] = dict(venv.env)  # its own environment's, or the task's (a fresh copy)
        own = cfg.verifier.environment
        if own is not None and own.docker_image:
            spec["verifier_image"] = own.docker_image
        elif (task_dir / "tests" / "Dockerfile").is_file():
            spec["verifier_dockerfile"] = task_dir / "tests" / "Dockerfile"
        elif (task_dir / "tests" / "docker-compose.yaml").is_file():
            raise refuse("tests/docker-compose.yaml", "a compose verifier environment; compose is not run")
        sources = [ARTIFACTS_DIR]
        for entry in cfg.artifacts:
            source = entry if isinstance(entry, str) else entry.source
            if source not in sources:
                sources.append(source)
        spec["artifacts"] = tuple(sources)
    spec["verifier_network"] = (
        _policy(verifier, "[verifier] network_mode")
        if verifier
        else _policy(
            baseline,
            "[verifier.environment] network_mode" if mode == "separate" else "[environment] network_mode",
        )
    )
    if cfg.steps:
        spec["steps"] = _steps(task_dir, cfg, mode, spec, refuse)
        strategy = cfg.multi_step_reward_strategy
        spec["reward_strategy"] = strategy.value if strategy is not None else "mean"
    return HarborSpec(**spec)


def _healthcheck(hc: Any) -> Healthcheck:
    return Healthcheck(
        command=hc.command,
        interval_s=hc.interval_sec,
        timeout_s=hc.timeout_sec,
        start_period_s=hc.start_period_sec,
        start_interval_s=hc.start_interval_sec,
        retries=hc.retries,
    )


def _steps(task_dir: Path, cfg: Any, mode: str, spec: dict[str, Any], refuse: Any) -> tuple[StepSpec, ...]:
    """The task's ``[[steps]]`` with their files; HarborRefused naming the first step field the
    harness cannot honour (what needs a second environment, another user or another network
    between the steps of the one container)."""
    if mode == "separate":
        raise refuse(
            "[verifier] environment_mode", '"separate" in a multi-step task: steps are verified shared only'
        )
    if spec["agent_network"].mode != spec["verifier_network"].mode:
        raise refuse(
            "[verifier] network_mode",
            f"{spec['verifier_network'].mode!r} beside the agent's {spec['agent_network'].mode!r} in a multi-step "
            "task: its steps share one container, which the harness does not move between networks",
        )
    out = []
    for step in cfg.steps:
        where = f"[[steps]] {step.name!r}"
        if step.agent.user is not None:
            raise refuse(
                f"{where} agent.user", f"{step.agent.user!r}: the harness runs the agent as its own user"
            )
        if step.verifier.user is not None:
            raise refuse(
                f"{where} verifier.user", f"{step.verifier.user!r}: the harness runs the tests as root"
            )
        if step.verifier.environment_mode is not None or step.verifier.environment is not None:
            raise refuse(f"{where} verifier.environment", "a step's own verifier environment is not run")
        if step.verifier.collect:
            raise refuse(
                f"{where} verifier.collect", "collect hooks run in compose services; compose is not run"
            )
        if step.agent.explicit_phase_policy() or step.verifier.explicit_phase_policy():
            raise refuse(f"{where} network_mode", "a step's own network: its steps share one container")
        if step.artifacts:
            raise refuse(f"{where} artifacts", "a step's artifacts are not collected (shared verifier)")
        root = task_dir / "steps" / step.name
        instruction = root / "instruction.md"
        if not instruction.is_file():
            raise HarborRefused(
                f"{instruction}: missing; each step of a multi-step task needs its instruction"
            )
        tests = root / "tests"
        if not (tests / "test.sh").is_file() and not (task_dir / "tests" / "test.sh").is_file():
            raise HarborRefused(
                f"{tests / 'test.sh'}: missing, and no tests/test.sh of the task stands in for it"
            )
        check_env(task_dir / "task.toml", f"{where} verifier.env", step.verifier.env)
        out.append(
            StepSpec(
                name=step.name,
                instruction=instruction.read_text(),
                tests_dir=tests if tests.is_dir() else None,
                solution_dir=root / "solution" if (root / "solution").is_dir() else None,
                workdir_dir=root / "workdir" if (root / "workdir").is_dir() else None,
                agent_timeout_s=step.agent.timeout_sec,
                verify_timeout_s=float(step.verifier.timeout_sec),
                verifier_env=dict(step.verifier.env),
                min_reward=step.min_reward,
                healthcheck=_healthcheck(step.healthcheck) if step.healthcheck is not None else None,
            )
        )
    return tuple(out)


def _verifier_mode(cfg: Any) -> Any:
    from harbor.models.task.verifier_mode import resolve_task_verifier_mode

    return resolve_task_verifier_mode(cfg)


def check_env(toml: Path, field: str, env: dict[str, str]) -> None:
    """Every ``${VAR}`` of an env table can be resolved here (set, or with a default)."""
    for _key, var, has_default in host_vars(env):  # resolvable here; whether allowed: at run start
        if not has_default and var not in os.environ:
            raise HarborRefused(
                f"{toml}: {field}: Environment variable '{var}' not found in host environment: set it, "
                "or write ${VAR:-default}"
            )


# The variables of this machine a task's ``${VAR}`` may be given (``--task-env VAR``), for the
# duration of a run (host_vars_allowed); none outside one.
_allowed: frozenset[str] = frozenset()
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")  # Harbor's: a whole value, with an optional default


def allowed_host_vars() -> frozenset[str]:
    """The host variables tasks may be given now (masking reads their values)."""
    return _allowed


def allow_host_vars(names: Iterable[str]) -> None:
    """From now on in this process (a Ray worker: one run's episodes), as host_vars_allowed."""
    global _allowed
    _allowed = frozenset(names)


@contextlib.contextmanager
def host_vars_allowed(names: Iterable[str]) -> Iterator[None]:
    """Within the block, a task's ``${VAR}`` takes this machine's value only for ``names``; any
    other with a default gets its default, and one without is refused (resolve_env)."""
    global _allowed
    before, _allowed = _allowed, frozenset(names)
    try:
        yield
    finally:
        _allowed = before


def host_vars(env: dict[str, str]) -> list[tuple[str, str, bool]]:
    """(key, variable, has a default) of each ``${VAR}`` template of an env table."""
    out = []
    for key, value in env.items():
        if (m := _TEMPLATE.fullmatch(str(value))) is not None:
            out.append((key, m.group(1), m.group(2) is not None))
    return out


def resolve_env(env: dict[str, str], allowed: frozenset[str] | None = None) -> dict[str, str]:
    """An env table with ``${VAR}`` / ``${VAR:-default}`` resolved as Harbor does, except that a
    variable of this machine is read only when allowed (``allowed``, else the run's --task-env
    names): a downloaded task must not copy any host variable (an API key) into the agent's
    container unasked. ValueError names a variable it cannot have."""
    names = allowed if allowed is not None else _allowed
    resolved: dict[str, str] = {}
    for key, value in (env or {}).items():
        m = _TEMPLATE.fullmatch(str(value))
        if m is None:
            resolved[key] = value
            continue
        var, default = m.group(1), m.group(2)
        if var not in names:
            if default is None:
                raise ValueError(
                    f"{key} = ${{{var}}} asks for this machine's {var}: pass it with --task-env {var} "
                    "(its value is then masked in the run's files), or give the task a default"
                )
            resolved[key] = default
        elif var in os.environ:
            resolved[key] = os.environ[var]
        elif default is not None:
            resolved[key] = default
        else:
            raise ValueError(f"Environment variable '{var}' not found in host environment")
    return resolved
