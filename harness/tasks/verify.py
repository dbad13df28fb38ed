"""Run a task's tests (and its reference solution) against a workspace, with a time limit.

Under --runtime local: a native task's tests run in a fresh private directory (fresh.py says what
that holds and why), a Harbor task's in the agent's workspace (shared mode).
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.host_env import task_env
from harness.leader import Leader
from harness.runtime.procs import end_reaped, end_reaped_sessions, kill_session, reaped
from harness.tasks.fresh import (
    VerifyMode,
    copy_workspace,
    guarded,
    read_capped,
    score_exit,
    tree_digest,
    verify_mode,
    write_local_guard,
)
from harness.tasks.harbor import build_workspace, copy_localized, localize, read_reward
from harness.tasks.loader import Task


class VerifyResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    resolved: bool
    reward: float
    exit_code: int | None
    timed_out: bool
    seconds: float
    output_tail: str
    note: str | None = None  # why the tests did not run on the workspace as the agent left it
    tampering: str | None = None  # what the harness caught the tested code doing (reward 0)
    mode: VerifyMode = "shared"  # where the tests ran (fresh.py)
    network: str | None = None  # the network mode of the tests' container as the engine reports it
    rewards: dict[str, float] = {}  # every key of the reward file (a multi-step task's steps: steps.py)
    # The tests' whole output (capped, fresh.OUTPUT_CAP): kept as the episode's verifier.log.
    output: str = Field("", exclude=True, repr=False)


def prepare_workspace(task: Task, dest: Path) -> Path:
    """A fresh copy of the task's starting files at ``dest`` (created; must not exist)."""
    if task.container is not None:
        return build_workspace(task.container, task.workspace_dir, dest)
    if task.workspace_dir.is_dir():
        shutil.copytree(task.workspace_dir, dest, symlinks=True)
    else:
        dest.mkdir(parents=True)
    return dest


def _python_with_pytest() -> str:
    """The interpreter tests run with: this harness's own (it has pytest), unless $HARNESS_TASK_PYTHON."""
    python = os.environ.get("HARNESS_TASK_PYTHON", sys.executable)
    # A relative path would be looked up from the workspace, where the tests run; a bare name on PATH.
    return os.path.abspath(python) if os.sep in python else python


_running: set[Leader] = set()  # sessions of the test scripts running now (verification runs in threads)
_running_lock = threading.Lock()


# How a confining runtime runs a script (runtime/bwrap.py): (argv, writable, readable, cwd) -> argv.
Wrap = Callable[[list[str], Sequence[Path], Sequence[Path], Path], list[str]]


def kill_running_tests() -> int:
    """Kill every running test script's session (a stopped run's verification); the processes killed."""
    with _running_lock:
        leaders = list(_running)
    return end_reaped_sessions(leaders)


def _run(
    script: Path,
    workspace: Path,
    timeout: float,
    extra_env: dict[str, str],
    wrap: "Wrap | None" = None,
    writable: Sequence[Path] = (),
) -> tuple[int | None, bool, str]:
    """Run ``script`` in its own session; when it ends (or times out, or the run is stopped),
    everything it left running in that session is killed too (a server started with ``&``).
    Returns its exit status (None: timed out), whether it timed out, and its output (capped).

    Output goes to a file, not a pipe: a daemon the script leaves behind holds a pipe open, so
    reading a pipe to its end waited for the daemon, up to the time limit (reward 0 for a pass).
    """
    workspace = Path(os.path.abspath(workspace))  # $WORKSPACE is read from inside it: absolute
    env = task_env({"WORKSPACE": str(workspace), "PYTHON": _python_with_pytest(), **extra_env})
    with tempfile.TemporaryFile() as out:
        argv = reaped(["bash", str(script)])  # what it starts ends with it, even in a new session
        if wrap is not None:  # a confining runtime's sandbox (runtime/bwrap.py)
            argv = wrap(argv, [workspace, *writable], [script.parent], workspace)
        proc = subprocess.Popen(
            argv,
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        leader = Leader.of(proc.pid)  # not reaped yet: the number is this script's reaper's
        assert leader is not None
        with _running_lock:
            _running.add(leader)
        try:
            code: int | None = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            code, timed_out = None, True
        finally:
            end_reaped(proc)  # the whole tree: test runners and what they started, new sessions too
            kill_session(leader)
            with _running_lock:
                _running.discard(leader)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        return code, timed_out, read_capped(out)


def _scratch(task: Task, tmp: Path, workspace: Path) -> dict[str, Path]:
    """Local stand-ins for a Harbor task's container paths (none for a native task)."""
    if task.container is None:
        return {}
    paths = task.container.container_paths(
        workspace=workspace.resolve(), tests=tmp / "tests", logs=tmp / "logs", solution=tmp / "solution"
    )
    for sub in ("verifier", "agent"):
        (tmp / "logs" / sub).mkdir(parents=True, exist_ok=True)
    return paths


def _container_env(task: Task, paths: dict[str, Path]) -> dict[str, str]:
    """A Harbor task's Dockerfile ENV, with container paths in the values made local."""
    if task.container is None:
        return {}
    return {k: localize(v, paths) for k, v in task.container.env.items()}


def _wrecked(workspace: Path) -> str | None:
    """Why ``workspace`` cannot be verified in place, or None: the agent may have removed it,
    replaced it with a file or a symlink (to / even), or made it unreadable."""
    if workspace.is_symlink():
        return f"the agent replaced its workspace with a symlink to {os.readlink(workspace)} (not followed)"
    if not workspace.exists():
        return "the agent removed its workspace"
    if not workspace.is_dir():
        return "the agent replaced its workspace with a file"
    if not os.access(workspace, os.R_OK | os.W_OK | os.X_OK):
        return "the agent made its workspace unreadable"
    return None


def _salvage(task: Task, workspace: Path, dest: Path) -> None:
    """The task's starting files at ``dest``, overlaid with what of ``workspace`` can still be
    read as a real directory (links copied as links, never followed; unreadable entries skipped)."""
    prepare_workspace(task, dest)
    if workspace.is_dir() and not workspace.is_symlink():
        with contextlib.suppress(shutil.Error, OSError):
            shutil.copytree(workspace, dest, symlinks=True, dirs_exist_ok=True)


def score_tests(
    code: int | None, timed_out: bool, verifier_logs: Path, tail: str, timeout: float
) -> tuple[float, str]:
    """The reward of a test run (reward.txt / reward.json when test.sh wrote one, else its exit
    code; 0 when it timed out) and the output tail with the harness's notes on it. A reward file
    holding anything but a number in 0..1 raises InvalidReward."""
    if timed_out:
        return 0.0, tail + f"\n[harness] tests timed out after {timeout:g} s"
    reward = 1.0 if code == 0 else 0.0
    written = read_reward(verifier_logs)  # InvalidReward (5.0, NaN, true, text): the verification's error
    if written is not None:
        reward = written[0]
        if written[1]:
            tail += f"\n[harness] {written[1]}"
    return reward, tail


def run_tests(
    task: Task, workspace: Path, timeout: float | None = None, wrap: "Wrap | None" = None
) -> VerifyResult:
    """Run tests/test.sh on ``workspace``: in a fresh directory for a native task, in place for a
    Harbor task (fresh.verify_mode); ``wrap``: how a confining runtime runs the script."""
    if verify_mode(task) == "fresh" and guarded(task):
        return _run_fresh(task, workspace, timeout or task.limits.verify_timeout_s, wrap)
    return _run_shared(task, workspace, timeout, wrap)


def _run_shared(
    task: Task, workspace: Path, timeout: float | None = None, wrap: "Wrap | None" = None
) -> VerifyResult:
    """Run tests/test.sh on ``workspace``; hidden tests are copied to a private directory first.

    A workspace the agent wrecked (``_wrecked``) is not used in place: the tests run on the
    starting files plus whatever of it is left, and the result's ``note`` says why.
    """
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"verify-{task.id}-") as tmp_name:
        tmp = Path(tmp_name)
        note = _wrecked(workspace)
        if note is not None:
            _salvage(task, workspace, tmp / "workspace")
            workspace = tmp / "workspace"
        tests = tmp / "tests"
        paths = _scratch(task, tmp, workspace)
        if paths:
            copy_localized(task.tests_dir, tests, paths)
        else:
            shutil.copytree(task.tests_dir, tests)
        verifier_logs = tmp / "logs" / "verifier"
        reward_file = verifier_logs / "reward.txt"
        verifier_logs.mkdir(parents=True, exist_ok=True)
        code, timed_out, output = _run(
            tests / "test.sh",
            workspace,
            timeout or task.limits.verify_timeout_s,
            {
                **_container_env(task, paths),
                **task.verifier_env,
                "TESTS_DIR": str(tests),
                "TEST_DIR": str(tests),  # Terminal-Bench's name for it
                "REWARD_FILE": str(reward_file),
                # Bytecode from a private prefix: the workspace's __pycache__ (a fix compiled, its
                # buggy source put back) is never read. As far as shared mode can go: the task's
                # own test command and plugins are Harbor's to choose.
                "PYTHONPYCACHEPREFIX": str(tmp / "pycache"),
            },
            wrap,
            [tmp],
        )
        reward, tail = score_tests(
            code, timed_out, verifier_logs, output, timeout or task.limits.verify_timeout_s
        )
    tail += f"\n[harness] {note}: tests ran on the starting files plus what was left" if note else ""
    return VerifyResult(
        resolved=reward >= 1.0,
        reward=reward,
        exit_code=code,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
        output_tail=tail[-2000:],
        note=note,
        output=tail,
    )


def _task_python() -> str | None:
    """The interpreter for native tasks' tests when the user names one ($HARNESS_TASK_PYTHON):
    absolute, since the tests start in the workspace (a bare name is looked up on PATH)."""
    python = os.environ.get("HARNESS_TASK_PYTHON") or None
    return os.path.abspath(python) if python and os.sep in python else python


def _run_fresh(task: Task, workspace: Path, timeout: float, wrap: "Wrap | None" = None) -> VerifyResult:
    """A native task's tests in a new private directory: a copy of the agent's final workspace
    (its starting files plus what is left, when it wrecked it), the tests, the guarded runner
    (fresh.py, guard.py) and a ``pytest.ini`` above the tests, so that pytest's rootdir search
    stops there (a ``pytest.ini`` or ``conftest.py`` the agent left in /tmp is never read). The
    reward is the exit status; the tests and the runner are checked unchanged afterwards."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"verify-{task.id}-") as tmp_name:
        tmp = Path(tmp_name)
        ws = tmp / "workspace"
        note = _wrecked(workspace)
        if note is not None:
            _salvage(task, workspace, ws)
            note += ": tests ran on the starting files plus what was left"
        else:
            note = copy_workspace(workspace, ws)
        tests = tmp / "tests"
        shutil.copytree(task.tests_dir, tests)
        (tmp / "pytest.ini").write_text("[pytest]\n")
        guard_bin = write_local_guard(tmp / "guard", _task_python())
        logs = tmp / "logs" / "verifier"
        logs.mkdir(parents=True)
        kept = tree_digest(tests, tmp / "guard", tmp / "pytest.ini")
        code, timed_out, output = _run(
            tests / "test.sh",
            ws,
            timeout,
            {
                **task.verifier_env,
                "PYTHON": str(guard_bin / "python"),
                "PATH": f"{guard_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
                "TESTS_DIR": str(tests),
                "TEST_DIR": str(tests),
                "REWARD_FILE": str(logs / "reward.txt"),
            },
            wrap,
            [tmp],
        )
        try:
            written = read_reward(logs)
        except ValueError:  # not a number: ignored all the same
            written = None
        reward, tampering, remark = score_exit(code, timed_out, written, "$REWARD_FILE", output)
        if tree_digest(tests, tmp / "guard", tmp / "pytest.ini") != kept:
            reward = 0.0
            changed = "the tested code changed the hidden tests or the test runner while they ran"
            tampering = f"{tampering}; {changed}" if tampering else changed
    output += remark
    if timed_out:
        output += f"\n[harness] tests timed out after {timeout:g} s"
    if tampering:
        output += f"\n[harness] scored 0: {tampering}"
    if note:
        output += f"\n[harness] {note}"
    return VerifyResult(
        resolved=reward >= 1.0,
        reward=reward,
        exit_code=code,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
        output_tail=output[-2000:],
        note=note,
        tampering=tampering,
        mode="fresh",
        output=output,
    )


def run_solution(
    task: Task, workspace: Path, timeout: float = 300, wrap: "Wrap | None" = None
) -> tuple[bool, str]:
    """Apply the reference solution in ``workspace``; (ok, output tail)."""
    if not task.solution.is_file():
        return False, f"{task.solution} is missing"
    if task.container is None:
        code, timed_out, output = _run(task.solution, workspace, timeout, {}, wrap)
        return code == 0 and not timed_out, output[-2000:]
    with tempfile.TemporaryDirectory(prefix=f"solve-{task.id}-") as tmp_name:
        tmp = Path(tmp_name)
        paths = _scratch(task, tmp, workspace)
        copy_localized(task.solution.parent, tmp / "solution", paths)
        code, timed_out, output = _run(
            tmp / "solution" / task.solution.name,
            workspace,
            timeout,
            {**_container_env(task, paths), **task.solution_env},
            wrap,
            [tmp],
        )
    return code == 0 and not timed_out, output[-2000:]
