"""``harness tasks verify``: every task's tests really test it, checked in the runtime its
episodes run in.

Per task, two fresh sandboxes (containers under the docker runtime, directories under local):
in the first the reference solution runs as Harbor's oracle runs it, then the tests; they must
pass. The second stays untouched; its tests must fail. Sandboxes are removed afterwards. Tasks
are checked ``concurrency`` at a time (threads: the work is the engine's and the tests').
The first Ctrl-C or SIGTERM removes the open sandboxes (their tests end with them) and stops
within seconds: verify_suite raises Stopped.
"""

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from harness._signals import Stopped, stop_message, stop_on_signals
from harness.errors import HarnessError
from harness.tasks.harbor_config import StepSpec, host_vars_allowed
from harness.tasks.loader import Skipped, Task, load_suite, select_tasks, unnamed_host_var
from harness.tasks.selection import narrow
from harness.tasks.steps import run_steps, verdict
from harness.tasks.verify import VerifyResult, kill_running_tests

if TYPE_CHECKING:
    from harness.runtime.base import EpisodeSandbox, Runtime, SandboxConfig

_OPENING_WAIT_S = 10.0  # a stop waits this long for sandboxes being made, to remove them too

Status = Literal["valid", "invalid", "error"]


class TaskCheck(BaseModel):
    """One task's verdict: ``valid`` when the reference passes and the untouched workspace fails."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    status: Status
    reference: VerifyResult | None = None  # None: solve.sh failed, or no sandbox could be made
    untouched: VerifyResult | None = None
    detail: str = ""  # why it is not valid: the end of solve.sh's or the tests' output
    seconds: float = 0.0


class SuiteCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    suite: str
    runtime: str
    checks: list[TaskCheck]
    skipped: list[Skipped]
    concurrency: int
    wall_s: float

    @property
    def valid(self) -> bool:
        return all(c.status == "valid" for c in self.checks)


def _tail(text: str, lines: int = 4, chars: int = 400) -> str:
    """The last non-empty lines of an output, on one line."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-chars:]


class _OpenSandboxes:
    """The sandboxes of the checks running now, so that a stop removes them: a container's tests
    end with it, and a local test script's session is killed."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._lock = threading.Condition()
        self._open: set[EpisodeSandbox] = set()
        self._opening = 0

    @contextlib.contextmanager
    def open(
        self, runtime: "Runtime", task: Task, work: Path, role: str, *, agent: bool = False
    ) -> "Iterator[EpisodeSandbox]":
        """``agent``: a sandbox fitted as an episode's (its working directory the agent's own), for
        what plays the agent (an audit's cheats); a check's reference runs as the task's author."""
        with self._lock:
            if self.stop.is_set():
                raise _StopRequested
            self._opening += 1
        try:
            sandbox = runtime.open(task, work / task.id / role, f"verify/{task.id}/{role}", agent=agent)
        finally:
            with self._lock:
                self._opening -= 1
                self._lock.notify_all()
        with self._lock:
            stopping = self.stop.is_set()
            if not stopping:
                self._open.add(sandbox)
        try:
            if stopping:
                raise _StopRequested
            yield sandbox
        finally:
            with self._lock:
                self._open.discard(sandbox)
            sandbox.close()

    def halt(self) -> int:
        """Stop every check now: open sandboxes closed (containers removed), those being made
        waited for (briefly) and closed by their own thread; the number of checks stopped."""
        self.stop.set()
        with self._lock:
            # counted before the kill: a check whose tests it ends leaves on its own at once, and
            # was stopped all the same (counted after, one was missed now and then)
            running = len(self._open)
        kill_running_tests()
        with self._lock:
            self._lock.wait_for(lambda: self._opening == 0, timeout=_OPENING_WAIT_S)
            boxes = list(self._open)  # none joins once stop is set
            self._open.clear()
        for box in boxes:
            with contextlib.suppress(Exception):  # already gone is fine
                box.close()
        return running


def _default_sandbox() -> "SandboxConfig":
    from harness.runtime.base import SandboxConfig

    return SandboxConfig()


class _StopRequested(Exception):
    """The run is stopping: this check ends without a verdict."""


def check_task(
    runtime: "Runtime", task: Task, work: Path, sandboxes: _OpenSandboxes | None = None
) -> TaskCheck:
    """The reference solution then the tests in one fresh sandbox, the tests alone in another."""
    start = time.monotonic()
    sandboxes = sandboxes or _OpenSandboxes()
    reference: VerifyResult | None = None
    untouched: VerifyResult | None = None
    detail = ""
    try:
        with sandboxes.open(runtime, task, work, "reference") as sandbox:
            if task.steps:
                reference, detail = _reference_steps(task, sandbox)
            else:
                applied, output = sandbox.run_solution()
                if applied:
                    reference = sandbox.verify()
                else:
                    detail = f"solve.sh failed: {_tail(output)}"
        with sandboxes.open(runtime, task, work, "untouched") as sandbox:
            untouched = (
                verdict(task, run_steps(task, sandbox, lambda _: None)[0]) if task.steps else sandbox.verify()
            )
    except Exception as exc:  # no image, an engine error: this task's verdict, the others go on
        return TaskCheck(
            task_id=task.id,
            status="error",
            reference=reference,
            detail=str(exc) if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}",
            seconds=time.monotonic() - start,
        )
    if reference is not None and not reference.resolved:
        detail = f"tests fail with the reference solution (reward {reference.reward:g}): {_tail(reference.output_tail)}"
    elif untouched.resolved:
        detail = "tests pass on the untouched workspace: they do not test the task"
    ok = reference is not None and reference.resolved and not untouched.resolved
    return TaskCheck(
        task_id=task.id,
        status="valid" if ok else "invalid",
        reference=reference,
        untouched=untouched,
        detail=detail,
        seconds=time.monotonic() - start,
    )


def _reference_steps(task: Task, sandbox: "EpisodeSandbox") -> tuple[VerifyResult | None, str]:
    """A multi-step task's reference: each step's solution, then that step's tests (steps.py)."""

    def solve(step: StepSpec) -> str | None:
        applied, output = sandbox.run_step_solution(step)  # type: ignore[attr-defined]
        return None if applied else f"step {step.name!r}: solve.sh failed: {_tail(output)}"

    results, ended = run_steps(task, sandbox, solve)
    return (None, ended) if ended is not None else (verdict(task, results), "")


def check_tasks(
    runtime: "Runtime",
    tasks: list[Task],
    work: Path,
    concurrency: int = 1,
    on_done: Callable[[TaskCheck], None] | None = None,
    stopped: list[int] | None = None,
) -> list[TaskCheck]:
    """Every task checked, ``concurrency`` at a time; results in the tasks' order. An exception
    in the calling thread (KeyboardInterrupt from a stop signal) removes the open sandboxes and
    propagates without waiting for the running checks; ``stopped`` gets their number."""
    runtime.prepare(work, tasks)
    sandboxes = _OpenSandboxes()

    def one(task: Task) -> TaskCheck:
        check = check_task(runtime, task, work, sandboxes)
        if on_done is not None and not sandboxes.stop.is_set():
            on_done(check)
        return check

    # Each task's two verifications (reference, untouched), their fresh sandboxes started ahead.
    runtime.expect_verifications([t for t in tasks for _ in range(2)], max(1, concurrency))
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="verify")
    try:
        return list(pool.map(one, tasks))
    except BaseException:
        halted = sandboxes.halt()
        runtime.halt()  # fresh verifier containers running tests: removed with their tests
        if stopped is not None:
            stopped.append(halted)
        raise
    finally:
        # without waiting: after a stop the running checks end as their sandboxes go
        pool.shutdown(wait=False, cancel_futures=True)
        runtime.cool_down()


def verify_suite(
    suite_or_path: str,
    *,
    runtime: str = "auto",
    sandbox: "SandboxConfig | None" = None,
    skip_unsupported: bool = False,
    concurrency: int = 1,
    on_done: Callable[[TaskCheck], None] | None = None,
    task: tuple[str, ...] = (),
    limit: int | None = None,
) -> SuiteCheck:
    """``harness tasks verify``: load the suite (unreadable task directories listed, not fatal),
    pick the runtime, check every task (or those ``task`` globs and ``limit`` select)."""
    from harness.runtime.select import make_runtime

    rt = make_runtime(runtime, sandbox)
    suite = load_suite(
        suite_or_path,
        images=rt.images,
        swebench_images=(sandbox or _default_sandbox()).swebench_images,
    )
    suite = narrow(suite, task, limit, where=suite_or_path)
    tasks = select_tasks(suite, suite_or_path, skip_unsupported=skip_unsupported, images=rt.images)
    allowed = (sandbox or _default_sandbox()).task_env
    if (refused := unnamed_host_var(tasks, allowed)) is not None:
        raise HarnessError(refused)
    start = time.monotonic()
    stop, caught, stopped = threading.Event(), list[int](), list[int]()
    try:
        with (
            stop_on_signals(stop, caught),
            host_vars_allowed(allowed),
            tempfile.TemporaryDirectory(
                prefix="harness-verify-",
                ignore_cleanup_errors=True,  # a stopped check may still write there
            ) as tmp,
        ):
            checks = check_tasks(rt, tasks, Path(tmp), concurrency, on_done, stopped)
    except KeyboardInterrupt:
        name, code = stop_message(caught)
        running = (
            f"{stopped[0]} running task check(s) stopped, their sandboxes removed"
            if stopped
            else "no task check had started"
        )
        raise Stopped(f"stopped by {name}: {running}; no verdict for the suite", code) from None
    return SuiteCheck(
        suite=suite_or_path,
        runtime=rt.name,
        checks=checks,
        skipped=[s for s in suite.skipped if not s.needs_image or skip_unsupported],
        concurrency=concurrency,
        wall_s=time.monotonic() - start,
    )
