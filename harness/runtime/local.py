"""The local runtime: the episode's workspace is a directory on this machine.

The agent's commands and the task's tests run here, with the user's privileges: the harness
says so when ``--runtime auto`` falls back to it. Only its signals are fenced in: the agent's
shell runs in a PID namespace of its own where the machine allows one (procs.own_pid_namespace),
so a ``kill -9 -1`` or ``pkill python`` it types ends only what it started; where none is
allowed, ``prepare`` says what that shell could reach.
"""

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.host_env import task_env
from harness.leader import Leader
from harness.runtime.base import SandboxConfig, SandboxPrep
from harness.runtime.export_caps import ExportLimit, ExportLimits, check_tree, remove_tree
from harness.runtime.procs import kill_session, own_pid_namespace
from harness.seam import ExecResult
from harness.tasks import Task, VerifyResult, prepare_workspace, run_solution, run_tests
from harness.tasks.fresh import read_capped


class LocalSandbox:
    """A directory on this machine; ``workdir`` is its absolute path."""

    def __init__(self, task: Task, workspace: Path, exports: ExportLimits | None = None) -> None:
        self.task = task
        self._workspace = Path(os.path.abspath(workspace))
        self._exports = exports or ExportLimits()

    @property
    def exports(self) -> ExportLimits:
        """How much of its files may be copied (its export and its checkpoints)."""
        return self._exports

    @property
    def workdir(self) -> str:
        return str(self._workspace)

    def _path(self, path: str) -> Path:
        return self._workspace / path  # an absolute path stays itself

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """``cmd`` with this user's privileges (``user`` cannot change that here), in a PID namespace
        of its own where the machine allows one, so that what it starts (and what it kills) stays
        with it; its whole session ends with it. Output goes to a file: a daemon it leaves behind
        holds a pipe open, and reading a pipe to its end would wait for the daemon."""
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(
                [*own_pid_namespace(), *argv],
                cwd=self._path(cwd) if cwd else self._workspace,
                env=task_env(env or {}),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            leader = Leader.of(proc.pid)  # not reaped yet: the number is this command's
            try:
                code: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                kill_session(leader)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            return ExecResult(exit_code=code, output=read_capped(out), timed_out=code is None)

    def read(self, path: str) -> bytes:
        return self._path(path).read_bytes()

    def write(self, path: str, data: bytes) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def copy_in(self, src: Path, dest: str) -> None:
        target = self._path(dest)
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target, follow_symlinks=False)

    def copy_out(self, src: str, dest: Path) -> None:
        source = self._path(src)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest, follow_symlinks=False)

    def instruction(self) -> str:
        return self.task.instruction_for(self._workspace)

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
    images = False  # a task's container image is not used here (its tasks run from their directories)

    def __init__(self, exports: ExportLimits | None = None) -> None:
        self.exports = exports or ExportLimits()

    def prepare(self, run_dir: Path, tasks: list[Task], keep: frozenset[str] = frozenset()) -> None:
        from harness.progress import console

        if not own_pid_namespace():
            console.print(
                "[yellow]warning:[/] this machine allows no PID namespace for the agent's shell (unshare with "
                "user namespaces): a `kill -9 -1` or `pkill python` the agent runs would end every process "
                "of yours, this harness included; --runtime docker confines it",
                highlight=False,
            )

    def warm_up(self, episodes: list[tuple[Task, SandboxPrep | None]], ahead: int) -> None:
        pass  # a directory starts in no time

    def cool_down(self) -> None:
        pass

    def expect_verifications(self, tasks: list[Task], ahead: int) -> None:
        pass  # a directory starts in no time

    def halt(self) -> int:
        """The run is stopping: every test script running now ends (its whole process tree)."""
        from harness.tasks.verify import kill_running_tests

        return kill_running_tests()

    def open(
        self, task: Task, episode_dir: Path, key: str, *, agent: bool = True, prep: SandboxPrep | None = None
    ) -> LocalSandbox:
        workspace = episode_dir / "workspace"
        prepare_workspace(task, workspace)
        return LocalSandbox(task, workspace, self.exports)

    def reopen(self, task: Task, episode_dir: Path, key: str) -> LocalSandbox:
        # Whatever the agent left, even nothing or a symlink: run_tests copes with it.
        return LocalSandbox(task, episode_dir / "workspace", self.exports)


def make_runtime(config: SandboxConfig) -> LocalRuntime:
    """The registry's factory (harness/registry.py)."""
    return LocalRuntime(config.exports)
