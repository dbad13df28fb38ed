"""``harness tasks audit``: no task passable without solving it, shown task by task.

Like ``tasks verify``, per task in the runtime its episodes run in, but instead of the reference
solution each of the scripted cheats (cheats.py) plays in a fresh sandbox of its own, and then the
task is verified exactly as an episode is. A cheat whose verification resolves the task is a way
to pass it without solving it: the task's row names it, and the audit exits 1.
"""

import hashlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from harness._signals import Stopped, stop_message, stop_on_signals
from harness.errors import HarnessError
from harness.tasks.cheats import CHEATS, NOT_APPLICABLE, Cheat
from harness.tasks.fresh import verify_mode
from harness.tasks.harbor_config import host_vars_allowed
from harness.tasks.loader import Skipped, Task, load_suite, select_tasks, unnamed_host_var
from harness.tasks.oracle import _OpenSandboxes, _StopRequested, _tail
from harness.tasks.selection import narrow
from harness.tasks.steps import run_steps, verdict

if TYPE_CHECKING:
    from harness.runtime.base import EpisodeSandbox, Runtime, SandboxConfig

_CHEAT_TIMEOUT_S = 120.0
_INSTRUCTION_CAP = 64_000  # characters: one environment value stays under Linux's 128 KiB

Outcome = Literal["held", "passed", "n/a", "error"]


class CheatResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    cheat: str
    outcome: Outcome  # passed: the cheat resolved the task; held: it did not
    detail: str = ""  # n/a or error: why; passed: the end of the tests' output


class TaskAudit(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_id: str
    results: list[CheatResult]
    seconds: float = 0.0

    @property
    def passable(self) -> list[str]:
        """The cheats that pass this task."""
        return [r.cheat for r in self.results if r.outcome == "passed"]


class SuiteAudit(BaseModel):
    model_config = ConfigDict(frozen=True)

    suite: str
    runtime: str
    cheats: list[str]
    audits: list[TaskAudit]
    skipped: list[Skipped]
    concurrency: int
    wall_s: float

    @property
    def passable(self) -> list[TaskAudit]:
        return [a for a in self.audits if a.passable]

    @property
    def errors(self) -> int:
        return sum(r.outcome == "error" for a in self.audits for r in a.results)


def _cheat_env(outside: bool, python: str | None) -> dict[str, str]:
    env = {"HARNESS_AUDIT_OUTSIDE": "1"} if outside else {}
    return {**env, **({"HARNESS_AUDIT_PYTHON": python} if python else {})}


def play(
    cheat: Cheat,
    task: Task,
    sandbox: "EpisodeSandbox",
    env: dict[str, str],
    seen: "dict[str, CheatResult] | None" = None,
) -> CheatResult:
    """``cheat`` in ``sandbox`` as the agent, then the task's verification as an episode's.
    ``seen``: the verdicts of the task's earlier cheats by their final files' fingerprint, for a
    task verified in fresh mode (reused when this cheat leaves the same files; filled otherwise)."""
    # what the agent reads, for the cheats that mine it (echo-expected); an argument's size at most
    env = {**env, "HARNESS_AUDIT_INSTRUCTION": sandbox.instruction()[:_INSTRUCTION_CAP]}
    done = sandbox.exec(cheat.script, cwd=sandbox.workdir, env=env, timeout=_CHEAT_TIMEOUT_S)
    if done.exit_code == NOT_APPLICABLE:
        return CheatResult(cheat=cheat.name, outcome="n/a", detail=_tail(done.output) or "nothing to act on")
    if done.exit_code != 0:
        return CheatResult(
            cheat=cheat.name, outcome="error", detail=f"the cheat failed: {_tail(done.output)}"
        )
    if cheat.around_solution is not None:
        applied, output = sandbox.run_solution()
        if not applied:
            return CheatResult(cheat=cheat.name, outcome="n/a", detail=f"solve.sh failed: {_tail(output)}")
        # The reference ran as root (as Harbor's oracle runs it): the files of the fix are root's,
        # where an agent's own fix would be its own. So what follows the fix runs as root too;
        # it acts on the workspace only.
        done = sandbox.exec(
            cheat.around_solution, cwd=sandbox.workdir, env=env, timeout=_CHEAT_TIMEOUT_S, user="root"
        )
        if done.exit_code == NOT_APPLICABLE:
            return CheatResult(
                cheat=cheat.name, outcome="n/a", detail=_tail(done.output) or "nothing to act on"
            )
        if done.exit_code != 0:
            return CheatResult(
                cheat=cheat.name, outcome="error", detail=f"the cheat failed: {_tail(done.output)}"
            )
    if seen is not None and (print_ := fingerprint(sandbox)) is not None:
        if (same := seen.get(print_)) is not None:
            return same.model_copy(
                update={"cheat": cheat.name, "detail": f"the same final files as {same.cheat}: its verdict"}
            )
        result = _verified(cheat, task, sandbox)
        seen[print_] = result
        return result
    return _verified(cheat, task, sandbox)


def _verified(cheat: Cheat, task: Task, sandbox: "EpisodeSandbox") -> CheatResult:
    result = verdict(task, run_steps(task, sandbox, lambda _: None)[0]) if task.steps else sandbox.verify()
    if result.resolved:
        return CheatResult(cheat=cheat.name, outcome="passed", detail=_tail(result.output_tail))
    return CheatResult(cheat=cheat.name, outcome="held")


# Every file and directory of the workspace with its type, mode, size, modification time and link
# target, then every regular file's digest: the final files as a fresh verification copies them.
# Absolute paths and a fixed PATH: a cheat's shadows on PATH cannot answer for these tools.
_FINGERPRINT = (
    "export LC_ALL=C PATH=/usr/bin:/bin; "
    "/usr/bin/find . -mindepth 1 -printf '%P\\t%y\\t%m\\t%s\\t%T@\\t%l\\n' | /usr/bin/sort && "
    "/usr/bin/find . -type f -print0 | /usr/bin/sort -z | /usr/bin/xargs -0 -r /usr/bin/sha256sum"
)


def fingerprint(sandbox: "EpisodeSandbox") -> str | None:
    """A digest of the sandbox's final files (None: it could not be taken). In fresh mode the
    verdict depends on these alone (the tests run in a new sandbox with a copy of them), so two
    cheats that leave the same files get the same verdict: the second is not verified again."""
    done = sandbox.exec(_FINGERPRINT, cwd=sandbox.workdir, timeout=_CHEAT_TIMEOUT_S)
    if done.exit_code != 0 or done.timed_out:
        return None
    return hashlib.sha256(done.output.encode("utf-8", "surrogateescape")).hexdigest()


def audit_task(
    runtime: "Runtime",
    task: Task,
    work: Path,
    cheats: tuple[Cheat, ...],
    env: dict[str, str],
    sandboxes: _OpenSandboxes,
    on_cheat: Callable[[], None] = lambda: None,
) -> TaskAudit:
    start = time.monotonic()
    results: list[CheatResult] = []
    seen: dict[str, CheatResult] | None = {} if verify_mode(task) == "fresh" and not task.steps else None
    for cheat in cheats:
        try:
            # as the agent: a cheat can do only what an episode's agent could
            with sandboxes.open(runtime, task, work, f"audit-{cheat.name}", agent=True) as sandbox:
                results.append(play(cheat, task, sandbox, env, seen))
        except _StopRequested:
            raise
        except Exception as exc:  # no image, an engine error: this cheat's row, the others go on
            detail = str(exc) if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
            results.append(CheatResult(cheat=cheat.name, outcome="error", detail=detail))
        on_cheat()
    return TaskAudit(task_id=task.id, results=results, seconds=time.monotonic() - start)


def audit_tasks(
    runtime: "Runtime",
    tasks: list[Task],
    work: Path,
    cheats: tuple[Cheat, ...],
    env: dict[str, str],
    concurrency: int = 1,
    on_done: Callable[[TaskAudit], None] | None = None,
    stopped: list[int] | None = None,
    on_cheat: Callable[[], None] = lambda: None,
) -> list[TaskAudit]:
    """Every task audited, ``concurrency`` tasks at a time; a stop as in oracle.check_tasks."""
    runtime.prepare(work, tasks)
    sandboxes = _OpenSandboxes()

    def one(task: Task) -> TaskAudit:
        audit = audit_task(runtime, task, work, cheats, env, sandboxes, on_cheat)
        if on_done is not None and not sandboxes.stop.is_set():
            on_done(audit)
        return audit

    runtime.expect_verifications([t for t in tasks for _ in cheats], max(1, concurrency))
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="audit")
    try:
        return list(pool.map(one, tasks))
    except BaseException:
        halted = sandboxes.halt()
        runtime.halt()
        if stopped is not None:
            stopped.append(halted)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        runtime.cool_down()


def pick_cheats(names: tuple[str, ...]) -> tuple[Cheat, ...]:
    """The cheats ``--cheat`` names (all when none); an unknown name is one line."""
    if not names:
        return CHEATS
    known = {c.name: c for c in CHEATS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise HarnessError(f"--cheat {unknown[0]}: no such cheat; one of: {', '.join(known)}")
    return tuple(known[n] for n in names)


def audit_suite(
    suite_or_path: str,
    *,
    runtime: str = "auto",
    sandbox: "SandboxConfig | None" = None,
    skip_unsupported: bool = False,
    concurrency: int = 1,
    on_done: Callable[[TaskAudit], None] | None = None,
    task: tuple[str, ...] = (),
    limit: int | None = None,
    cheat: tuple[str, ...] = (),
    progress: bool = False,
) -> SuiteAudit:
    """``harness tasks audit``: the suite loaded and narrowed as ``tasks verify`` does, every
    selected task played by every cheat (or those ``cheat`` names); ``progress``: a bar of the
    cheats played."""
    from harness.progress import progress_bar
    from harness.runtime.select import make_runtime
    from harness.tasks.oracle import _default_sandbox
    from harness.tasks.verify import _task_python

    cheats = pick_cheats(cheat)
    rt = make_runtime(runtime, sandbox)
    confined = rt.images
    suite = load_suite(
        suite_or_path,
        images=confined,
        swebench_images=(sandbox or _default_sandbox()).swebench_images,
    )
    suite = narrow(suite, task, limit, where=suite_or_path)
    tasks = select_tasks(suite, suite_or_path, skip_unsupported=skip_unsupported, images=confined)
    allowed = (sandbox or _default_sandbox()).task_env
    if (refused := unnamed_host_var(tasks, allowed)) is not None:
        raise HarnessError(refused)
    # Locally the tests run on the harness's interpreter (or $HARNESS_TASK_PYTHON): bytecode is
    # compiled for that one, as a cheater who knew it would.
    env = _cheat_env(confined, None if confined else (_task_python() or sys.executable))
    start = time.monotonic()
    stop, caught, stopped = threading.Event(), list[int](), list[int]()
    try:
        with (
            stop_on_signals(stop, caught),
            host_vars_allowed(allowed),
            tempfile.TemporaryDirectory(prefix="harness-audit-", ignore_cleanup_errors=True) as tmp,
            progress_bar("cheats played", len(tasks) * len(cheats)) if progress else nullcontext() as bar,
        ):
            advance = bar.advance if bar is not None else lambda: None
            audits = audit_tasks(rt, tasks, Path(tmp), cheats, env, concurrency, on_done, stopped, advance)
    except KeyboardInterrupt:
        name, code = stop_message(caught)
        running = (
            f"{stopped[0]} running cheat(s) stopped, their sandboxes removed"
            if stopped
            else "no cheat had started"
        )
        raise Stopped(f"stopped by {name}: {running}; no verdict for the suite", code) from None
    return SuiteAudit(
        suite=suite_or_path,
        runtime=rt.name,
        cheats=[c.name for c in cheats],
        audits=audits,
        skipped=[s for s in suite.skipped if not s.needs_image or skip_unsupported],
        concurrency=concurrency,
        wall_s=time.monotonic() - start,
    )
