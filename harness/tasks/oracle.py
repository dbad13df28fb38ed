"""``harness tasks verify``: every task's tests really test it, checked in the runtime its
episodes run in.

Per task, two fresh sandboxes (containers under the docker runtime, directories under local):
in the first the reference solution runs as Harbor's oracle runs it, then the tests; they must
pass. The second stays untouched; its tests must fail. Sandboxes are removed afterwards. Tasks
are checked ``concurrency`` at a time (threads: the work is the engine's and the tests').
"""

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError
from harness.tasks.loader import Skipped, Task, load_suite, select_tasks
from harness.tasks.verify import VerifyResult

if TYPE_CHECKING:
    from harness.runtime.base import ContainerLimits, Runtime

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


def check_task(runtime: "Runtime", task: Task, work: Path) -> TaskCheck:
    """The reference solution then the tests in one fresh sandbox, the tests alone in another."""
    start = time.monotonic()
    reference: VerifyResult | None = None
    untouched: VerifyResult | None = None
    detail = ""
    try:
        sandbox = runtime.open(
            task, work / task.id / "reference", f"verify/{task.id}/reference", fresh=True, tools=False
        )
        try:
            applied, output = sandbox.run_solution()
            if applied:
                reference = sandbox.verify()
            else:
                detail = f"solve.sh failed: {_tail(output)}"
        finally:
            sandbox.close()
        sandbox = runtime.open(
            task, work / task.id / "untouched", f"verify/{task.id}/untouched", fresh=True, tools=False
        )
        try:
            untouched = sandbox.verify()
        finally:
            sandbox.close()
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


def check_tasks(
    runtime: "Runtime",
    tasks: list[Task],
    work: Path,
    concurrency: int = 1,
    on_done: Callable[[TaskCheck], None] | None = None,
) -> list[TaskCheck]:
    """Every task checked, ``concurrency`` at a time; results in the tasks' order."""
    runtime.prepare(work, tasks)

    def one(task: Task) -> TaskCheck:
        check = check_task(runtime, task, work)
        if on_done is not None:
            on_done(check)
        return check

    # Each task's two verifications (reference, untouched), their fresh sandboxes started ahead.
    runtime.expect_verifications([t for t in tasks for _ in range(2)], max(1, concurrency))
    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="verify") as pool:
            return list(pool.map(one, tasks))
    finally:
        runtime.cool_down()


def verify_suite(
    suite_or_path: str,
    *,
    runtime: Literal["auto", "local", "docker"] = "auto",
    limits: "ContainerLimits | None" = None,
    image_map: tuple[str, ...] = (),
    skip_unsupported: bool = False,
    concurrency: int = 1,
    on_done: Callable[[TaskCheck], None] | None = None,
) -> SuiteCheck:
    """``harness tasks verify``: load the suite (unreadable task directories listed, not fatal),
    pick the runtime, check every task."""
    from harness.runtime.select import get_runtime

    rt = get_runtime(runtime, limits, image_map)
    suite = load_suite(suite_or_path, images=rt.name == "docker")
    tasks = select_tasks(suite, suite_or_path, skip_unsupported=skip_unsupported, images=rt.name == "docker")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-verify-") as tmp:
        checks = check_tasks(rt, tasks, Path(tmp), concurrency, on_done)
    return SuiteCheck(
        suite=suite_or_path,
        runtime=rt.name,
        checks=checks,
        skipped=[s for s in suite.skipped if not s.needs_image or skip_unsupported],
        concurrency=concurrency,
        wall_s=time.monotonic() - start,
    )
