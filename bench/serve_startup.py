"""Benchmark: `harness serve` time-to-ready divided by the bare vLLM command's, same flags, one run.

Target <= 1.05. Both are measured from process start to the server answering /health, polled at
the same interval; the bare command is the exact argv and environment the harness launches (read
back from the first line of its server.log). One discarded warm-up start first (the first vLLM
start after a pause pays for cold file caches, whichever command runs it), then rounds alternate
which command goes first. Starts on a shared 2-core VM vary by +-15% from one to the next, so
the median over several rounds (default 6) is the figure; the harness's own time before it
launches vLLM is printed apart.

usage: .venv/bin/python bench/serve_startup.py [--rounds N] [--model smollm2-135m]
"""

import argparse
import os
import re
import secrets
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

POLL_S = 0.25


def wait_health(port: int, proc: subprocess.Popen[bytes], t0: float) -> float:
    # One client for all polls, as the harness does: httpx.get() builds a client (and an SSL
    # context) per call, ~10% of a core at 4 polls/s, which slowed the bare start it measured.
    with httpx.Client(timeout=2) as http:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"bare vLLM exited with {proc.returncode}")
            try:
                if http.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(POLL_S)


def time_harness(model: str, run_dir: Path) -> tuple[float, float, list[str], dict[str, str]]:
    """(seconds to ready, seconds until it launched vLLM, the vLLM argv, its extra environment)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "serve",
            "--model",
            model,
            "--max-model-len",
            "4096",
            "--idle-timeout",
            "0",
            "--run-dir",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
        # A shell's background job starts with SIGINT ignored, and Python then never turns
        # SIGINT into KeyboardInterrupt; restore the default so the Ctrl-C path is what runs.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    # The harness's own share, free of vLLM's start-up noise: the launch line is written to
    # server.log just before vLLM is started.
    log = run_dir / "server.log"
    while not (log.is_file() and "# harness: " in log.read_text()):
        if proc.poll() is not None:
            raise SystemExit("harness serve ended before it launched vLLM")
        time.sleep(0.005)
    launched = time.monotonic() - t0
    for line in proc.stdout:
        if "base URL" in line:
            elapsed = time.monotonic() - t0
            break
    else:
        raise SystemExit("harness serve ended before it was ready")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    first = next(
        line for line in (run_dir / "server.log").read_text().splitlines() if line.startswith("# harness: ")
    )
    words = shlex.split(first.removeprefix("# harness: "))
    env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
    argv = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
    return elapsed, launched, argv, env


def time_bare(argv: list[str], env: dict[str, str], log: Path) -> float:
    port = int(argv[argv.index("--port") + 1])
    t0 = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **env, "VLLM_API_KEY": secrets.token_hex(8)},
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,  # as the harness starts it
            start_new_session=True,
        )
    try:
        return wait_health(port, proc, t0)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    ratios, launches = [], []
    with tempfile.TemporaryDirectory() as tmp:
        _, _, argv, env = time_harness(args.model, Path(tmp) / "warmup")  # discarded: warms caches
        time.sleep(3)
        for i in range(args.rounds):
            if i % 2 == 0:
                h, launched, argv, env = time_harness(args.model, Path(tmp) / f"h{i}")
                time.sleep(3)
                b = time_bare(argv, env, Path(tmp) / f"bare{i}.log")
            else:
                b = time_bare(argv, env, Path(tmp) / f"bare{i}.log")
                time.sleep(3)
                h, launched, argv, env = time_harness(args.model, Path(tmp) / f"h{i}")
            time.sleep(3)
            ratios.append(h / b)
            launches.append(launched)
            first = "harness first" if i % 2 == 0 else "bare first"
            print(
                f"round {i + 1} ({first}): harness serve ready {h:.2f} s (vLLM launched at "
                f"{launched:.2f} s), bare vLLM ready {b:.2f} s, ratio {h / b:.3f}"
            )
    print(f"median ratio {statistics.median(ratios):.3f} (target <= 1.05) over {len(ratios)} rounds")
    print(
        f"harness time before vLLM starts: median {statistics.median(launches):.2f} s "
        "(imports, checkpoint inspection, memory plan, lock); the rest of a round's difference "
        "is vLLM's own start-up varying from one start to the next"
    )


if __name__ == "__main__":
    main()
