"""Benchmark: time from SIGINT to exit of `harness eval` with N episodes queued and 4 running.

A real `harness replay` server in its own process answers every model call after 300 s, so the
4 running episodes each have a model call in flight when the signal comes; the other N wait in
the queue. Measured: SIGINT -> the harness process has exited (and its exit code and last line).
Target: < 5 s whatever N (printed for N = 8 and 64).

usage: .venv/bin/python bench/stop_latency.py [--reps 3]
"""

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_overhead import replay_process

from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse

RUNNING = 4
SMOKE_TASKS = 3


def in_flight(pid: int, port: int) -> int:
    """Open connections from the harness process to the replay server: model calls in flight."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return 0
    return sum(1 for c in conns if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def one(tmp: Path, queued: int, base_url: str) -> tuple[float, int, str]:
    seeds = math.ceil((queued + RUNNING) / SMOKE_TASKS)
    run = tmp / f"run-{queued}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "eval",
            "--model",
            "bench",
            "--base-url",
            base_url,
            "--tasks",
            "smoke",
            "--seeds",
            str(seeds),
            "--concurrency",
            str(RUNNING),
            "--runtime",
            "local",
            "--run-dir",
            str(run),
            "--stop-grace",  # the immediate stop; the graceful one is bench/resume.py's
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    port = int(base_url.rsplit(":", 1)[1].split("/")[0])
    deadline = time.monotonic() + 300
    while in_flight(proc.pid, port) < RUNNING:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(
                f"harness eval never had {RUNNING} calls in flight: {proc.stderr.read() if proc.stderr else ''}"
            )
        time.sleep(0.05)
    time.sleep(0.5)  # well inside the calls, not at their start
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    return took, proc.returncode, (err.strip().splitlines() or [""])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    hang = ScriptedResponse(
        content="Thinking.",
        delay=300,
        tool_calls=[ScriptedCall(name="terminal", arguments={"command": "ls"})],
    )
    script = ReplayScript(model="bench", responses=[hang], when_exhausted="repeat_last")
    with (
        tempfile.TemporaryDirectory(prefix="bench-stop-") as tmp_name,
        replay_process(script, Path(tmp_name)) as url,
    ):
        tmp = Path(tmp_name)
        print(
            f"SIGINT -> exit, {RUNNING} episodes running (a model call in flight each), N queued; target < 5 s"
        )
        for queued in (8, 64):
            times = []
            for _ in range(args.reps):
                took, code, last = one(tmp, queued, url)
                times.append(took)
            print(
                f"  N = {queued:3d}: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
                f"over {args.reps} runs (exit code {code}; {last[:110]})"
            )


if __name__ == "__main__":
    main()
