"""Benchmark: what an interruption costs with mid-episode checkpoints, and what checkpoints cost.

1. GPU time saved: 8 episodes x 20 turns (OpenHands, local, all 8 running at once against a
   replay server that takes 0.3 s per completion, ``pick: by_turn``), interrupted when half the
   model requests are made, then rerun to the end, against the same run uninterrupted. Model
   requests of interrupted + rerun / uninterrupted, for: SIGTERM with the default grace (each
   episode finishes its turn and checkpoints; target <= 1.05); kill -9 (each loses its turn in
   flight); and the harness before checkpoints (``--stop-grace 0 --checkpoint-every 0``: every
   episode in flight reruns from turn 1; about 1.5).
2. Checkpoint cost per turn: the seconds each episode spent saving checkpoints (its record's
   ``checkpoint_s``) per turn, against the harness's own overhead per turn measured as
   bench/eval_overhead.py does ((wall - LLM - tool) / turns, a replay server in its own process,
   no delay), with checkpoints on and off. Target: cost < 5% of the overhead.

usage: .venv/bin/python bench/resume.py [--only interrupt|cost] [--reps N] [--runtime local|docker]
  (--runtime: where part 2's episodes run; docker: a container's changed files through find/tar
  in it and one copy out per checkpoint)
"""

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_overhead import FIX_ADD, replay_process, tool_seconds

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from harness.resume.checkpoint import EpisodeCheckpoint

REPO = Path(__file__).resolve().parent.parent
EPISODES, TURNS = 8, 20


def script(delay: float) -> ReplayScript:
    steps = [
        ScriptedResponse(
            content=f"Step {i}.",
            tool_calls=[ScriptedCall(name="terminal", arguments={"command": f"echo line{i} >> log.txt"})],
            delay=delay,
        )
        for i in range(1, TURNS)
    ]
    finish = ScriptedResponse(
        tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})], delay=delay
    )
    return ReplayScript(model="bench", responses=[*steps, finish], pick="by_turn")


def argv(run: Path, base_url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "harness.cli", "eval", "--model", "bench", "--base-url", base_url,
        "--tasks", "smoke", "--task", "hello-file", "--seeds", str(EPISODES), "--concurrency", str(EPISODES),
        "--runtime", "local", "--max-iterations", "25", "--run-dir", str(run), *extra,
    ]  # fmt: skip


def requests(tmp: Path, name: str, signo: int | None, *extra: str) -> tuple[int, float]:
    """Model requests of the run (interrupted at half of them by ``signo`` and rerun), and the
    seconds from the signal to the exit."""
    run = tmp / name
    took = 0.0
    with ReplayServer(script(0.3)) as server:
        if signo is not None:
            proc = subprocess.Popen(
                argv(run, server.base_url, *extra),
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while server.served < EPISODES * TURNS // 2:
                assert proc.poll() is None, "the run ended before its mid-point"
                time.sleep(0.02)
            started = time.monotonic()
            proc.send_signal(signo)
            proc.wait(timeout=300)
            took = time.monotonic() - started
        done = subprocess.run(argv(run, server.base_url, *extra), cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        records = RunStore(run).records()
        assert len(records) == EPISODES and all(r.turns == TURNS for r in records.values())
        return server.served, took


def overhead(tmp: Path, every: int, reps: int = 3, runtime: str = "local") -> tuple[list[float], list[float]]:
    """(harness overhead per turn, checkpoint seconds per turn) of 30-turn episodes, one at a time."""
    tmp.mkdir(parents=True, exist_ok=True)
    steps = [
        ScriptedResponse(
            content=f"step {i}",
            tool_calls=[
                ScriptedCall(name="think", arguments={"thought": f"plan step {i}"})
                if i % 2
                else ScriptedCall(name="terminal", arguments={"command": f"echo {i} >> notes.txt"})
            ],
        )
        for i in range(29)
    ]
    responses = [
        *steps,
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "ok"})]),
    ]
    per_turn, cost = [], []
    for rep in range(reps):
        run = tmp / f"overhead-{runtime}-every{every}-{rep}"
        with replay_process(ReplayScript(model="bench", responses=responses), tmp) as base_url:
            run_eval(
                EvalConfig(
                    runtime=runtime,  # type: ignore[arg-type]
                    models=("bench",),
                    tasks=str(FIX_ADD),
                    base_url=base_url,
                    run_dir=run,
                    max_iterations=30,
                    checkpoint_every=every,
                )
            )
        for rec in RunStore(run).records().values():
            conv = run / "episodes" / "bench" / rec.task_id / f"seed{rec.seed}" / "conversation"
            turns = max(rec.turns, 1)
            per_turn.append((rec.wall_s - rec.llm_s - tool_seconds(conv)) / turns)
            cost.append(rec.checkpoint_s / turns)
    return per_turn, cost


def main() -> None:
    parser = argparse.ArgumentParser(description="What an interruption costs, and what checkpoints cost.")
    parser.add_argument("--only", choices=("interrupt", "cost"), help="run one part (default: both)")
    parser.add_argument("--reps", type=int, default=3, help="part 2: 30-turn episodes per setting")
    parser.add_argument("--runtime", choices=("local", "docker"), default="local", help="part 2's runtime")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.only != "cost":
            interruptions(tmp)
        if args.only != "interrupt":
            cost(tmp, args.reps, args.runtime)


def interruptions(tmp: Path) -> None:
    base, _ = requests(tmp, "uninterrupted", None)
    print(f"{EPISODES} episodes x {TURNS} turns, uninterrupted: {base} model requests")
    for name, signo, extra in (
        ("SIGTERM, default grace (finish the turn, checkpoint)", signal.SIGTERM, ()),
        ("kill -9 (checkpoints every turn)", signal.SIGKILL, ()),
        ("SIGTERM before checkpoints (--stop-grace 0 --checkpoint-every 0)", signal.SIGTERM, ("--stop-grace", "0", "--checkpoint-every", "0")),
    ):  # fmt: skip
        n, took = requests(tmp, name.split()[0] + str(len(extra)), signo, *extra)
        target = " (target <= 1.05)" if not extra and signo == signal.SIGTERM else ""
        print(
            f"  interrupted at the mid-point by {name}: {n} requests, ratio {n / base:.3f}{target}; exit {took:.1f} s after the signal"
        )


def cost(tmp: Path, reps: int, runtime: str) -> None:
    # the time spent saving, also beside the episode (no record holds it): read as each closes
    saving: list[float] = []
    close = EpisodeCheckpoint.close

    def closing(self: EpisodeCheckpoint) -> None:
        close(self)
        saving.append(self.save_seconds / max(self.saves + self.skipped, 1))

    EpisodeCheckpoint.close = closing  # type: ignore[method-assign]
    overhead(tmp / "warm-up", 1, 1, runtime)  # imports and first-use costs, paid by neither setting
    saving.clear()
    on: list[float] = []
    off: list[float] = []
    spent: list[float] = []
    for rep in range(reps):  # interleaved: a slow spell of the machine falls on both settings
        per_turn, cost_s = overhead(tmp / f"on{rep}", 1, 1, runtime)
        on += per_turn
        spent += cost_s
        off += overhead(tmp / f"off{rep}", 0, 1, runtime)[0]
    print(
        f"harness overhead per turn (30-turn episodes, {runtime}): median {statistics.median(on) * 1e3:.1f} ms "
        f"with checkpoints, {statistics.median(off) * 1e3:.1f} ms without "
        f"(difference of the medians {(statistics.median(on) - statistics.median(off)) * 1e3:+.1f} ms)"
    )
    c = statistics.median(spent)
    print(
        f"checkpoint cost per turn (agent state + changed files, timed where the episode waits for it): "
        f"median {c * 1e3:.2f} ms = {100 * c / statistics.median(off):.1f}% of the overhead per turn "
        "without checkpoints (target < 5%)"
    )
    print(
        f"  saving a checkpoint takes {statistics.median(saving) * 1e3:.2f} ms (median of the episodes' means), "
        "most of it while the model answers the next call, beside the episode"
    )


if __name__ == "__main__":
    main()
