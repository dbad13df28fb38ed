"""Run a task's tests (and its reference solution) against a workspace, with a time limit."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.tasks.loader import Task


class VerifyResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    resolved: bool
    reward: float
    exit_code: int | None
    timed_out: bool
    seconds: float
    output_tail: str


def prepare_workspace(task: Task, dest: Path) -> Path:
    """A fresh copy of the task's starting files at ``dest`` (created; must not exist)."""
    if task.workspace_dir.is_dir():
        shutil.copytree(task.workspace_dir, dest, symlinks=True)
    else:
        dest.mkdir(parents=True)
    return dest


def _python_with_pytest() -> str:
    """The interpreter tests run with: this harness's own (it has pytest), unless $HARNESS_TASK_PYTHON."""
    return os.environ.get("HARNESS_TASK_PYTHON", sys.executable)


def _run(
    script: Path, workspace: Path, timeout: float, extra_env: dict[str, str]
) -> tuple[int | None, bool, str]:
    env = {**os.environ, "WORKSPACE": str(workspace), "PYTHON": _python_with_pytest(), **extra_env}
    with subprocess.Popen(
        ["bash", str(script)],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
            return proc.returncode, False, out.decode(errors="replace")[-2000:]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: test runners spawn children
            out, _ = proc.communicate()
            return None, True, out.decode(errors="replace")[-2000:]


def run_tests(task: Task, workspace: Path, timeout: float | None = None) -> VerifyResult:
    """Run tests/test.sh on ``workspace``; hidden tests are copied to a private directory first."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"verify-{task.id}-") as tmp:
        tests = Path(tmp) / "tests"
        shutil.copytree(task.tests_dir, tests)
        reward_file = Path(tmp) / "reward.txt"
        code, timed_out, tail = _run(
            tests / "test.sh",
            workspace,
            timeout or task.limits.verify_timeout_s,
            {"TESTS_DIR": str(tests), "REWARD_FILE": str(reward_file)},
        )
        reward = 1.0 if code == 0 else 0.0
        if reward_file.is_file():
            try:
                reward = min(1.0, max(0.0, float(reward_file.read_text().strip())))
            except ValueError:
                tail += f"\n[harness] reward file is not a number: {reward_file.read_text()[:80]!r}"
    if timed_out:
        tail += f"\n[harness] tests timed out after {timeout or task.limits.verify_timeout_s:g} s"
        reward = 0.0
    return VerifyResult(
        resolved=reward >= 1.0,
        reward=reward,
        exit_code=code,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
        output_tail=tail,
    )


def run_solution(task: Task, workspace: Path, timeout: float = 300) -> tuple[bool, str]:
    """Apply the reference solution in ``workspace``; (ok, output tail)."""
    if not task.solution.is_file():
        return False, f"{task.solution} is missing"
    code, timed_out, tail = _run(task.solution, workspace, timeout, {})
    return code == 0 and not timed_out, tail
