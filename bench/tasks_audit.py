"""Benchmark: what ``harness tasks audit`` costs against ``harness tasks verify``, per task.

Both on the same suite and runtime, alternated per round: verify plays the reference solution and
the untouched workspace (two fresh sandboxes a task), audit plays every scripted cheat (one fresh
sandbox each) and verifies after each. Prints seconds per task for each and the ratio (target: the
audit at most 3x verify's time per task: cheats are short scripts) and how many tasks the audit
found passable (must be 0 on the built-in suites). Medians of --rounds.

usage: .venv/bin/python bench/tasks_audit.py [--suite medium] [--runtime local|docker] [--rounds N] [--concurrency N]
"""

import argparse
import statistics
import time

from harness.runtime.base import SandboxConfig
from harness.tasks.audit import audit_suite
from harness.tasks.oracle import verify_suite


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="medium")
    ap.add_argument("--runtime", default="local", choices=("local", "docker"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    verify_s: list[float] = []
    audit_s: list[float] = []
    tasks = cheats = passable = 0
    for r in range(args.rounds):
        t0 = time.perf_counter()
        checked = verify_suite(
            args.suite, runtime=args.runtime, sandbox=SandboxConfig(), concurrency=args.concurrency
        )
        verify_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        audited = audit_suite(
            args.suite, runtime=args.runtime, sandbox=SandboxConfig(), concurrency=args.concurrency
        )
        audit_s.append(time.perf_counter() - t0)
        tasks, cheats, passable = len(audited.audits), len(audited.cheats), len(audited.passable)
        assert checked.valid, "tasks verify failed: the suite is broken"
        print(
            f"round {r + 1}: verify {verify_s[-1]:.1f} s, audit {audit_s[-1]:.1f} s "
            f"({tasks} tasks, {cheats} cheats, {passable} passable)",
            flush=True,
        )
    v, a = statistics.median(verify_s) / tasks, statistics.median(audit_s) / tasks
    print(
        f"{args.suite} on {args.runtime}, concurrency {args.concurrency}, median of {args.rounds}: "
        f"verify {v:.2f} s/task, audit {a:.2f} s/task ({cheats} cheats): {a / v:.2f}x verify; "
        f"{passable} of {tasks} tasks passable"
    )


if __name__ == "__main__":
    main()
