"""Benchmark: time from `git clone` to the first non-trivial number (the medium suite on the bundled model).

Target: under 15 minutes on a fresh machine, installs included. The script clones this repository
(its committed HEAD) into a temporary directory, runs `scripts/bootstrap` there (traced, so that
the virtual environment, the pip install and the vLLM environment are timed apart), then

    .venv/bin/harness eval --model smollm2-135m --tasks medium --concurrency 4   (or EVAL_ARGS...)

and prints each phase: the clone, the bootstrap's steps, the eval up to vLLM ready, the rollouts,
verification and the summary, and the number itself (resolved, loops, format errors).

A machine that ran the harness before is not a fresh machine: the script says what it found
cached before it started (the vLLM environment and the converted bundled model under
~/.cache/harness, pip's wheel stores and cache, the sandbox image), each of which a truly fresh
machine builds or downloads first.

Four episodes at once: on 2 cores vLLM decodes four sequences in about the time of one (the
bundled model's turns are 1024-token degenerate texts), so the suite's 8 episodes take two rounds.

Measured (2026-11, a shared 2-core VM, vLLM environment, converted model, sandbox image and local
wheel stores already there): clone 0.2 s, venv 2.6 s, pip install 175 s (70 s on a quieter run),
vLLM environment 0.5 s (cached), eval 168 s (vLLM ready at 49 s, rollouts 112 s, verification and
summary 7 s): 5.8 min in all; resolved 0/8, 4 episodes stopped as degenerate_text loops.

usage: .venv/bin/python bench/first_number.py [--repo PATH] [--keep] [EVAL_ARGS...]
       (EVAL_ARGS replace the default --concurrency 4)
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 15 * 60
CACHE = Path.home() / ".cache" / "harness"


def _size(path: Path) -> str:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return f"{total / 2**20:.0f} MiB"


def cached() -> list[str]:
    """What this machine already has that a fresh one would build or download first."""
    found = []
    for env in sorted((CACHE / "envs").glob("*")):
        found.append(f"vLLM environment {env.name} ({_size(env)}; `harness server setup` builds it, minutes)")
    for model in sorted((CACHE / "models").glob("[!.]*")):
        found.append(
            f"converted bundled model {model.name} ({_size(model)}; downloaded and converted on first use)"
        )
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    for line in pip.splitlines():
        if "find-links" in line or "index-url" in line:
            found.append(f"pip configuration {line.strip()} (local wheel stores: installs need no download)")
    pip_cache = Path(
        subprocess.run(
            [sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True, check=False
        ).stdout.strip()
        or Path.home() / ".cache" / "pip"
    )
    if pip_cache.is_dir():
        found.append(f"pip cache {pip_cache} ({_size(pip_cache)})")
    engine = shutil.which("podman") or shutil.which("docker")
    if engine:
        images = subprocess.run(
            [engine, "images", "--format", "{{.Repository}}:{{.Tag}}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        found += [
            f"sandbox image {i} (built once by `harness runtime setup`)"
            for i in images
            if "harness-sandbox" in i
        ]
    return found


def wait_for_free_server(limit_s: float = 3600) -> float:
    """Seconds spent waiting for another vLLM server on this machine to end (one server per device:
    the eval would be refused); the wait is not counted in the figure."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        busy = subprocess.run(
            ["pgrep", "-f", "vllm.entrypoints.openai.api_server"], capture_output=True, check=False
        )
        if busy.returncode:
            return time.monotonic() - t0
        time.sleep(10)
    raise SystemExit("another vLLM server held this machine for an hour: try again later")


def run_timed(
    argv: list[str], cwd: Path, env: dict[str, str], log: Path
) -> tuple[int, list[tuple[float, str]]]:
    """Run ``argv``, stdout and stderr together; every line with its time since the start."""
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []
    with (
        log.open("w") as fh,
        subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        ) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            t = time.monotonic() - t0
            lines.append((t, line.rstrip("\n")))
            fh.write(f"{t:8.1f} {line}")
            fh.flush()
    lines.append((time.monotonic() - t0, ""))
    return proc.returncode, lines


def bootstrap_phases(lines: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """Seconds per step of scripts/bootstrap, from its `bash -x` trace (PS4 carries the time)."""
    marks: list[tuple[str, float]] = []
    for t, line in lines:
        if not line.startswith("+"):
            continue
        if " -m venv " in line and not any(m[0] == "virtual environment" for m in marks):
            marks.append(("virtual environment", t))
        elif " -m pip install" in line and not any(
            m[0] == "pip install (harness and its dependencies)" for m in marks
        ):
            marks.append(("pip install (harness and its dependencies)", t))
        elif "harness server setup" in line:
            marks.append(("vLLM environment (harness server setup)", t))
    end = lines[-1][0]
    return [(name, (marks[i + 1][1] if i + 1 < len(marks) else end) - t) for i, (name, t) in enumerate(marks)]


def eval_phases(lines: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """Up to vLLM ready, the rollouts (ready to the last episode's line), then verification and the summary."""
    ready = next((t for t, line in lines if "vLLM ready" in line), None)
    episodes = [t for t, line in lines if re.match(r"^\s+\S+ seed \d+: ", line)]
    end = lines[-1][0]
    if ready is None or not episodes:
        return [("eval (no phases found: see the log)", end)]
    return [
        ("preflight and vLLM start-up (to ready)", ready),
        (f"rollouts ({len(episodes)} episodes)", episodes[-1] - ready),
        ("verification and summary", end - episodes[-1]),
    ]


def the_number(run_dir: Path) -> str:
    latest: dict[tuple[str, str, int], dict[str, Any]] = {}
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            latest[(rec["model"], rec["task_id"], rec["seed"])] = rec
    n = len(latest)
    resolved = sum(r["status"] == "resolved" for r in latest.values())
    loops = sum(r["loop"] is not None for r in latest.values())
    turns = sum(int(r["turns"]) for r in latest.values())
    errors = sum(sum(r["format_errors"].values()) for r in latest.values())
    return (
        f"resolved {resolved}/{n}; {loops} episode(s) stopped by a loop; {turns} turns, "
        f"{errors / max(turns, 1):.2f} format errors per turn"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--repo", type=Path, default=REPO, help="repository to clone [default: this one]")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its run directory")
    args, eval_args = ap.parse_known_args()
    eval_args = eval_args or ["--concurrency", "4"]
    print("cached on this machine before the run (a fresh machine builds or downloads these first):")
    for item in cached() or ["nothing"]:
        print(f"  - {item}")
    tmp = Path(tempfile.mkdtemp(prefix="harness-first-number-"))
    clone, run_dir = tmp / "harness", tmp / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PYTHONUNBUFFERED": "1", "COLUMNS": "160", "PS4": "+ "}
    phases: list[tuple[str, float]] = []
    try:
        t0 = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", str(args.repo), str(clone)], check=True)
        phases.append(("git clone", time.monotonic() - t0))

        code, lines = run_timed(["bash", "-x", "scripts/bootstrap"], clone, env, tmp / "bootstrap.log")
        if code:
            print(f"scripts/bootstrap failed ({code}): see {tmp / 'bootstrap.log'}")
            args.keep = True
            return 1
        phases += [(f"bootstrap: {name}", s) for name, s in bootstrap_phases(lines)]

        command = [
            ".venv/bin/harness",
            "eval",
            "--model",
            "smollm2-135m",
            "--tasks",
            "medium",
            "--run-dir",
            str(run_dir),
            *eval_args,
        ]
        waited = wait_for_free_server()
        if waited > 1:
            print(f"waited {waited:.0f} s for another vLLM server on this machine to end (not counted)")
        print("running: " + " ".join(command[:6] + command[8:]))
        code, lines = run_timed(command, clone, env, tmp / "eval.log")
        phases += [(f"eval: {name}", s) for name, s in eval_phases(lines)]
        total = time.monotonic() - t0 - waited
        for name, seconds in phases:
            print(f"  {name:<55} {seconds:7.1f} s")
        print(
            f"  {'total, git clone to the first number':<55} {total:7.1f} s ({total / 60:.1f} min; target under {TARGET_S // 60} min)"
        )
        if code:
            print(f"harness eval failed ({code}): see {tmp / 'eval.log'}")
            args.keep = True
            return 1
        print(f"first number (medium suite, smollm2-135m): {the_number(run_dir)}")
        stats = run_dir / "server_stats.jsonl"
        if stats.exists():
            for line in stats.read_text().splitlines():
                s = json.loads(line)
                up, busy = s.get("up_s"), s.get("busy_s")
                if up is not None and busy is not None:
                    print(f"vLLM server: up {up:.0f} s, busy {busy:.0f} s")
        return 0
    finally:
        if args.keep:
            print(f"kept {tmp} (bootstrap.log, eval.log, the clone and the run directory)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
