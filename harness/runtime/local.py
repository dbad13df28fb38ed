"""The local runtime: the episode's workspace is a directory on this machine.

The agent's commands and the task's tests run here, with the user's privileges: the harness
says so when ``--runtime auto`` falls back to it. Only its signals are fenced in: the agent's
shell runs in a PID namespace of its own where the machine allows one (procs.own_pid_namespace),
so a ``kill -9 -1`` or ``pkill python`` it types ends only what it started; where none is
allowed, ``prepare`` says what that shell could reach.
"""

from pathlib import Path
from typing import Any

from harness.runtime.export_caps import ExportLimit, ExportLimits, check_tree, remove_tree
from harness.tasks import Task, VerifyResult, prepare_workspace, run_solution, run_tests


class LocalSandbox:
    def __init__(self, task: Task, workspace: Path, exports: ExportLimits | None = None) -> None:
        self.task = task
        self._workspace = workspace
        self._exports = exports or ExportLimits()

    @property
    def host_workspace(self) -> Path:
        return self._workspace

    @property
    def agent_workdir(self) -> str:
        return str(self._workspace)

    def instruction(self) -> str:
        return self.task.instruction_for(self._workspace)

    def tool_params(self) -> dict[str, dict[str, Any]]:
        return {}

    def start_tools(self, terminal_type: str) -> None:
        pass

    def failure(self) -> BaseException | None:
        return None

    def finish(self) -> None:
        """The workspace is the agent's own directory, in the run directory: over the export caps it
        is removed (ExportLimit), as every copy the harness makes of it (verification, Ray's tar of
        the episode, export-preds) would write it out in full (a sparse 1 TB file as 1 TB)."""
        if self._workspace.is_symlink() or not self._workspace.is_dir():
            return  # a wrecked workspace: verification copes with it
        try:
            check_tree(self._workspace, self._exports)
        except ExportLimit:
            remove_tree(self._workspace)
            raise

    def run_solution(self) -> tuple[bool, str]:
        return run_solution(self.task, self._workspace, timeout=self.task.limits.agent_timeout_s)

    def verify(self) -> VerifyResult:
        return run_tests(self.task, self._workspace)

    def close(self) -> None:
        pass


class LocalRuntime:
    name = "local"

    def __init__(self, exports: ExportLimits | None = None) -> None:
        self.exports = exports or ExportLimits()

    def prepare(self, run_dir: Path, tasks: list[Task], keep: frozenset[str] = frozenset()) -> None:
        from harness.progress import console
        from harness.runtime.procs import own_pid_namespace

        if not own_pid_namespace():
            console.print(
                "[yellow]warning:[/] this machine allows no PID namespace for the agent's shell (unshare with "
                "user namespaces): a `kill -9 -1` or `pkill python` the agent runs would end every process "
                "of yours, this harness included; --runtime docker confines it",
                highlight=False,
            )

    def warm_up(self, tasks: list[Task], terminal_type: str, ahead: int) -> None:
        pass  # a directory starts in no time

    def cool_down(self) -> None:
        pass

    def expect_verifications(self, tasks: list[Task], ahead: int) -> None:
        pass  # a directory starts in no time

    def open(
        self, task: Task, episode_dir: Path, key: str, *, fresh: bool, tools: bool = True
    ) -> LocalSandbox:
        workspace = episode_dir / "workspace"
        if fresh:
            prepare_workspace(task, workspace)
        # else: whatever the agent left, even nothing or a symlink; run_tests copes with it
        return LocalSandbox(task, workspace, self.exports)
