"""Benchmark: what verifying in a fresh sandbox costs against verifying in place (the agent's own).

Suites: the 20 Harbor-shaped fixtures of bench/harbor_verify.py (docker; cached task images) and the
built-in suites smoke + pybugs (23 tasks; docker and local). Per round and mode, every task gets an
"episode" without a model: its sandbox opened as eval opens one, the reference solution applied as
the agent's work, the rollout finished (files exported; the container removed in fresh mode,
stopped in place mode). Then the verification phase, as eval runs it and timed alone: the
verifications ahead announced (fresh containers start ahead, ``--concurrency`` at a time), each
one opened, verified and closed on ``--concurrency`` threads. Every verification must score 1.

Modes: ``fresh`` is what the harness does now for native tasks (harness/tasks/fresh.py: a new
container or directory with only the exported files, the guarded runner); ``in-place`` is what it
did before (tests in the agent's stopped container, restarted, as root; locally in the workspace),
forced through fresh.FORCED_MODE. Harbor tasks are verified in place by the harness (Harbor's
shared mode); here they are forced fresh too, to see what that mode would cost them.
Target: fresh within 1.3x of in-place. Medians of --rounds, modes alternated per round.

usage: .venv/bin/python bench/fresh_verify.py [--rounds N] [--concurrency N] [--only docker|local]
"""

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.runtime.base import Runtime
from harness.tasks import Task, fresh, load_tasks

MODES = {"fresh": "fresh", "in-place": "shared"}


def episodes(rt: Runtime, tasks: list[Task], work: Path) -> float:
    """Each task's sandbox as a rollout leaves it (the solution applied, finished); seconds spent."""
    t0 = time.perf_counter()

    def one(item: tuple[int, Task]) -> None:
        i, task = item
        sandbox = rt.open(task, work / f"ep{i}", f"bench/{task.id}/{i}", agent=False)
        ok, out = sandbox.run_solution()
        if not ok:
            raise SystemExit(f"bench: {task.id}: solve.sh failed: {out[-300:]}")
        sandbox.finish()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, enumerate(tasks)))
    return time.perf_counter() - t0


def verifications(rt: Runtime, tasks: list[Task], work: Path, concurrency: int) -> float:
    """The verification phase as eval runs it; its wall seconds."""
    t0 = time.perf_counter()
    rt.expect_verifications(tasks, concurrency)

    def one(item: tuple[int, Task]) -> float:
        i, task = item
        sandbox = rt.reopen(task, work / f"ep{i}", f"bench/{task.id}/{i}")
        try:
            return sandbox.verify().reward
        finally:
            sandbox.close()

    try:
        with ThreadPoolExecutor(concurrency) as pool:
            rewards = list(pool.map(one, enumerate(tasks)))
    finally:
        rt.cool_down()
    if bad := [t.id for t, r in zip(tasks, rewards, strict=True) if r != 1.0]:
        raise SystemExit(f"bench: verification did not score 1 for {bad[:3]}")
    return time.perf_counter() - t0


def measure(runtime: str, suite: str, tasks: list[Task], rounds: int, concurrency: int) -> None:
    from harness.runtime.select import make_runtime

    walls: dict[str, list[float]] = {m: [] for m in MODES}
    finish: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            fresh.FORCED_MODE = MODES[mode]  # type: ignore[assignment]
            try:
                with tempfile.TemporaryDirectory(prefix="bench-fv-") as tmp:
                    rt = make_runtime(runtime)
                    rt.prepare(Path(tmp), tasks)
                    finish[mode].append(episodes(rt, tasks, Path(tmp)))
                    walls[mode].append(verifications(rt, tasks, Path(tmp), concurrency))
            finally:
                fresh.FORCED_MODE = None
            print(
                f"  {runtime} {suite} round {r + 1} {mode}: verification {walls[mode][-1]:.2f} s "
                f"(rollouts' ends {finish[mode][-1]:.1f} s)",
                flush=True,
            )
    f, p = statistics.median(walls["fresh"]), statistics.median(walls["in-place"])
    # Each round's two modes ran back to back: their ratio is what a shared machine's drift
    # disturbs least, so the median of those ratios is the figure to read.
    paired = statistics.median(a / b for a, b in zip(walls["fresh"], walls["in-place"], strict=True))
    print(
        f"{runtime:6s} {suite:28s} {len(tasks):2d} tasks, concurrency {concurrency}: verification fresh "
        f"{f:.2f} s, in place {p:.2f} s (medians); fresh / in place per round: median {paired:.2f}x "
        f"(target <= 1.3); rollouts' ends (export + remove vs stop) "
        f"{statistics.median(finish['fresh']):.1f} vs {statistics.median(finish['in-place']):.1f} s; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--only", choices=["docker", "local"])
    args = ap.parse_args()
    builtin = load_tasks("smoke", images=True) + load_tasks("pybugs", images=True)
    if args.only != "docker":
        measure(
            "local", "smoke+pybugs", load_tasks("smoke") + load_tasks("pybugs"), args.rounds, args.concurrency
        )
    if args.only == "local":
        return
    from harbor_verify import make_tasks  # this directory is on sys.path when run as a script

    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    base = ensure_sandbox_image(docker_client())
    measure("docker", "smoke+pybugs", builtin, args.rounds, args.concurrency)
    with tempfile.TemporaryDirectory(prefix="bench-harbor-") as tmp:
        harbor = load_tasks(str(make_tasks(Path(tmp), base, 20)), images=True)
        measure("docker", "20 Harbor fixtures (forced)", harbor, args.rounds, args.concurrency)


if __name__ == "__main__":
    main()
