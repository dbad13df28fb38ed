"""`harness report` on 100,000 records whose failures carry causes, signatures and last errors:
the whole report's time, and the part the failure sections take (causes by model and scaffold,
clusters, the HTML table and links). Target: at most 1.2x the report without them.

    .venv/bin/python bench/report_failures.py [--records 100000] [--repeat 3]

The records are synthetic (two models x 500 tasks x seeds), as in bench/aggregate_compare.py, with
a failure for every unresolved one drawn from a realistic mix: tests failing with one of a few
exceptions per task, loops, format errors, context overflows. No trajectory is on disk, so the
report embeds none (the same for both timings).
"""

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.monitor import LoopFinding, LoopKind
from harness.monitor.failure import failure_cause
from harness.results import report as report_module
from harness.results.runs import load_run
from harness.results.store import EpisodeRecord

ERRORS = [
    "AssertionError: assert {n} == {m}",
    "KeyError: 'k{n}'",
    "ModuleNotFoundError: No module named 'mod{n}'",
    "bash: pyth{n}: command not found",
    "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
]


def write(root: Path, n: int) -> None:
    rng = random.Random(0)
    tasks, models = 500, ["base", "ft"]
    seeds = max(1, n // (tasks * len(models)))
    root.mkdir(parents=True)
    manifest = {
        "run_id": "bench",
        "models": models,
        "tasks": [f"t{t:03d}" for t in range(tasks)],
        "seeds": list(range(1, seeds + 1)),
        "scaffold": "openhands-codeact",
        "scaffold_hash": "x",
    }
    (root / "run.json").write_text(json.dumps(manifest))
    with (root / "episodes.jsonl").open("w") as fh:
        for mi, model in enumerate(models):
            for t in range(tasks):
                for s in range(1, seeds + 1):
                    solved = rng.random() < 0.4 + 0.05 * mi
                    looped = not solved and rng.random() < 0.2
                    turns = rng.randint(2, 40)
                    loop = (
                        LoopFinding(
                            kind=LoopKind.repeat_call,
                            start_turn=1,
                            period=1,
                            repeats=4,
                            unit="ls",
                            detected_at=4,
                        )
                        if looped
                        else None
                    )
                    fmt = {"tool_call_in_content": turns} if not solved and rng.random() < 0.05 else {}
                    error = ERRORS[(t + rng.randint(0, 1)) % len(ERRORS)].format(
                        n=rng.randint(0, 99), m=rng.randint(0, 99)
                    )
                    overflow = not solved and rng.random() < 0.03
                    status = "resolved" if solved else ("loop_stopped" if looped else "unresolved")
                    log = f"FAILED tests/test_t{t % 50}.py::test_case - {error.split(':')[0]}: x\n"
                    failure = failure_cause(
                        status="error" if overflow else status,
                        reward=1.0 if solved else 0.0,
                        tool_calls=turns,
                        format_errors=fmt,
                        loop=loop,
                        stall=None,
                        error_type="BadRequestError" if overflow else None,
                        error_message="maximum context length is 8192 tokens" if overflow else None,
                        verifier_log="" if solved else log,
                        last_error="" if solved else error,
                    )
                    rec = EpisodeRecord(
                        run_id="bench",
                        model=model,
                        model_path=f"/ckpt/{model}",
                        task_id=f"t{t:03d}",
                        suite="bench",
                        seed=s,
                        status="error" if overflow else status,  # type: ignore[arg-type]
                        reward=1.0 if solved else 0.0,
                        turns=turns,
                        tool_calls=turns,
                        format_errors=fmt,
                        loop=loop,
                        last_error="" if solved else error,
                        failure=failure,
                        prompt_tokens=turns * 6000,
                        completion_tokens=turns * 120,
                        wall_s=turns * 1.5,
                        llm_s=turns * 1.2,
                        error=None,
                        trajectory=f"trajectories/{model}/t{t:03d}/seed{s}.jsonl",
                        verified=True,
                    )
                    fh.write(rec.model_dump_json() + "\n")


def timed(root: Path, out: Path) -> float:
    t0 = time.perf_counter()
    report_module.write_report(root, out)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--keep", type=Path, help="write the run here and keep it (to time another commit's report on it)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "run"
        write(root, args.records)
        print(
            f"episodes.jsonl: {args.records} records, {(root / 'episodes.jsonl').stat().st_size / 2**20:.1f} MiB"
        )
        with_sections = [timed(root, Path(tmp) / f"with{i}") for i in range(args.repeat)]
        clusters = report_module.failure_clusters(load_run(root).records())
        # the same report without the failure sections: no clusters, no causes tables
        keep = (
            report_module.failure_clusters,
            report_module.causes_markdown,
            report_module.clusters_markdown,
        )
        report_module.failure_clusters = lambda records: []  # type: ignore[assignment]
        report_module.causes_markdown = lambda records: []  # type: ignore[assignment]
        report_module.clusters_markdown = lambda *a: []  # type: ignore[assignment]
        try:
            without = [timed(root, Path(tmp) / f"without{i}") for i in range(args.repeat)]
        finally:
            report_module.failure_clusters, report_module.causes_markdown, report_module.clusters_markdown = (
                keep
            )
        w, wo = min(with_sections), min(without)
        print(
            f"clusters: {len(clusters)} (largest {len(clusters[0].episodes)} episodes: {clusters[0].signature})"
        )
        print(
            f"report with the failure sections {w:.2f} s, without {wo:.2f} s (best of {args.repeat}): {w / wo:.2f}x (target <= 1.2x)"
        )


if __name__ == "__main__":
    main()
