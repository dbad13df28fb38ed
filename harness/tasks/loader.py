"""Tasks as directories (instruction.md, task.toml, environment/workspace/, tests/test.sh, solution/solve.sh).

``load_tasks`` takes a built-in suite name (tasks/<suite>/), a directory of task directories, or
one task directory. Harbor / Terminal-Bench directories use the same layout and load the same way
when they need no Docker image.
"""

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError
from harness.paths import repo_root


class TaskLimits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    agent_timeout_s: float = Field(900, gt=0, description="Wall time for the episode.")
    verify_timeout_s: float = Field(120, gt=0, description="Wall time for tests/test.sh.")
    max_iterations: int | None = Field(None, ge=1, description="Model turns (default: the scaffold's).")


class Task(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    suite: str
    path: Path
    instruction: str
    limits: TaskLimits = TaskLimits()
    metadata: dict[str, Any] = {}

    @property
    def workspace_dir(self) -> Path:
        return self.path / "environment" / "workspace"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution(self) -> Path:
        return self.path / "solution" / "solve.sh"


def builtin_suites() -> list[str]:
    root = repo_root() / "tasks"
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*/instruction.md")))


def load_task(path: Path, suite: str) -> Task:
    if not (path / "instruction.md").is_file():
        raise HarnessError(f"{path}: no instruction.md; not a task directory")
    if not (path / "tests" / "test.sh").is_file():
        raise HarnessError(f"{path}: missing tests/test.sh; a task needs tests to verify the episode")
    meta: dict[str, Any] = {}
    toml = path / "task.toml"
    if toml.is_file():
        try:
            meta = tomllib.loads(toml.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise HarnessError(f"{toml}: malformed TOML ({exc})") from None
    limits = meta.get("limits") or {}
    # Harbor keeps timeouts under [agent] / [verifier] as timeout_sec.
    if "agent" in meta and isinstance(meta["agent"], dict) and "timeout_sec" in meta["agent"]:
        limits.setdefault("agent_timeout_s", meta["agent"]["timeout_sec"])
    if "verifier" in meta and isinstance(meta["verifier"], dict) and "timeout_sec" in meta["verifier"]:
        limits.setdefault("verify_timeout_s", meta["verifier"]["timeout_sec"])
    try:
        parsed_limits = TaskLimits.model_validate(limits)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise HarnessError(f"{toml}: limits.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    return Task(
        id=path.name,
        suite=suite,
        path=path.resolve(),
        instruction=(path / "instruction.md").read_text(),
        limits=parsed_limits,
        metadata=meta.get("task") or meta.get("metadata") or {},
    )


def load_tasks(suite_or_path: str) -> list[Task]:
    """All tasks of a built-in suite, a directory of tasks, or a single task directory."""
    path = Path(suite_or_path).expanduser()
    if path.is_file() and path.suffix == ".jsonl":
        from harness.tasks.swebench import load_swebench

        generated = load_swebench(path)
        return [
            load_task(d, suite=path.stem)
            for d in sorted(p for p in generated.iterdir() if p.is_dir())
            if not d.name.endswith(".tmp")
        ]
    if not path.exists():
        builtin = repo_root() / "tasks" / suite_or_path
        if "/" in suite_or_path or not builtin.is_dir():
            raise HarnessError(
                f"--tasks {suite_or_path}: no such suite or directory (built-in suites: "
                f"{', '.join(builtin_suites())})"
            )
        path = builtin
    if (path / "instruction.md").is_file():
        return [load_task(path, suite=path.parent.name)]
    dirs = sorted(p for p in path.iterdir() if p.is_dir() and (p / "instruction.md").is_file())
    if not dirs:
        raise HarnessError(f"--tasks {suite_or_path}: no task directories (with instruction.md) in {path}")
    return [load_task(d, suite=path.name) for d in dirs]
