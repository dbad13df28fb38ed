"""The local runtime: the episode's workspace is a directory on this machine.

The agent's commands and the task's tests run here, with the user's privileges: the harness
says so when ``--runtime auto`` falls back to it.
"""

from pathlib import Path
from typing import Any

from harness.tasks import Task, VerifyResult, prepare_workspace, run_solution, run_tests


class LocalSandbox:
    def __init__(self, task: Task, workspace: Path) -> None:
        self.task = task
        self._workspace = workspace

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
        pass

    def run_solution(self) -> tuple[bool, str]:
        return run_solution(self.task, self._workspace, timeout=self.task.limits.agent_timeout_s)

    def verify(self) -> VerifyResult:
        return run_tests(self.task, self._workspace)

    def close(self) -> None:
        pass


class LocalRuntime:
    name = "local"

    def prepare(self, run_dir: Path, tasks: list[Task], keep: frozenset[str] = frozenset()) -> None:
        pass

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
        return LocalSandbox(task, workspace)
