"""The workspace part of the episode seam: a runtime makes one sandbox per episode.

A sandbox is where the agent's tools act and where the task's tests run afterwards:

- ``host_workspace``: a directory on this machine that the SDK conversation is rooted in; after
  ``finish()`` it holds the episode's final files (exports and ``harness show`` read them);
- ``agent_workdir``: the working directory as the agent is told it (a local path, or the
  container's ``/workspace`` / the task's WORKDIR);
- ``tool_params``: what the scaffold's tool specs need to act inside this sandbox;
- ``finish()`` when the agent is done, ``verify()`` to run the tests (in a fresh sandbox with the
  final files for native and SWE-bench tasks, harness/tasks/fresh.py), ``close()`` to remove it;
- ``run_solution()`` instead of an agent: the task's reference solution, as Harbor's oracle runs it
  (``harness tasks verify``).
"""

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from harness.tasks import Task, VerifyResult


class ContainerLimits(BaseModel):
    """What one episode's container may use."""

    model_config = ConfigDict(frozen=True)

    cpus: float = Field(2.0, gt=0, description="CPUs per episode container.")
    memory_gib: float = Field(4.0, gt=0, description="Memory per episode container, GiB (no swap).")
    pids: int = Field(512, ge=16, description="Processes per episode container.")


class Sandbox(Protocol):
    @property
    def host_workspace(self) -> Path: ...

    @property
    def agent_workdir(self) -> str: ...

    def instruction(self) -> str: ...

    def tool_params(self) -> dict[str, dict[str, Any]]: ...

    def start_tools(self, terminal_type: str) -> None:
        """Before the conversation: whatever the tools need running in the sandbox."""
        ...

    def failure(self) -> BaseException | None:
        """What broke the sandbox during the episode (it ends the episode as an error), or None."""
        ...

    def finish(self) -> None:
        """The agent is done: its final files in ``host_workspace``; ExportLimit (export_caps.py)
        when they are over the run's caps, and then none of them are there."""
        ...

    def run_solution(self) -> tuple[bool, str]:
        """Apply the task's reference solution here; (ok, output tail)."""
        ...

    def verify(self) -> VerifyResult: ...

    def close(self) -> None: ...


class Runtime(Protocol):
    name: str

    def prepare(self, run_dir: Path, tasks: list[Task], keep: frozenset[str] = frozenset()) -> None:
        """Before any episode: what every episode of this run needs (images), and what killed runs
        left behind removed, except the sandboxes of ``keep`` (episode keys of this run that wait
        for verification)."""
        ...

    def warm_up(self, tasks: list[Task], terminal_type: str, ahead: int) -> None:
        """The episodes' tasks in the order their sandboxes will be opened: a runtime whose
        sandboxes are slow to start starts ``ahead`` of them before they are asked for."""
        ...

    def cool_down(self) -> None:
        """After the episodes (and the verifications): what was started ahead and not taken, removed."""
        ...

    def expect_verifications(self, tasks: list[Task], ahead: int) -> None:
        """The tasks of the verifications to come, in order: a runtime whose fresh verification
        sandboxes are slow to start starts ``ahead`` of them now (``cool_down`` removes the rest)."""
        ...

    def open(self, task: Task, episode_dir: Path, key: str, *, fresh: bool, tools: bool = True) -> Sandbox:
        """The episode's sandbox: a new one (``fresh``, for a rollout) or the one its rollout left
        (for verification; rebuilt from the exported files when that one is gone). ``tools=False``:
        no agent will act in it (``tasks verify``), so what only the agent's tools need is skipped."""
        ...
