"""An episode record's failure cause (harness/monitor/failure.py decides it from the record's
fields) and the report's "Why episodes failed" section: causes by model, largest first."""

from collections import Counter

from harness.monitor.failure import CAUSES, Failure, failure_cause
from harness.results.store import EpisodeRecord


def failure_of(rec: EpisodeRecord, verifier_log: str = "") -> Failure | None:
    """Why ``rec`` failed (None: resolved, unverified or an infrastructure failure). A record
    written before causes were kept gets one here, without the verifier log's detail."""
    if rec.failure is not None:
        return rec.failure
    return failure_cause(
        status=rec.status,
        reward=rec.reward,
        tool_calls=rec.tool_calls,
        format_errors=rec.format_errors,
        loop=rec.loop,
        stall=rec.stall,
        error_type=rec.error.type if rec.error else None,
        error_message=rec.error.message if rec.error else None,
        verifier_log=verifier_log,
    )


def causes_markdown(records: list[EpisodeRecord]) -> list[str]:
    """The section: one row per cause that occurred, a column per model (a MODEL@SCAFFOLD arm is
    one), the precedence documented in harness/monitor/failure.py."""
    failures = [(r.model, f) for r in records if (f := failure_of(r)) is not None]
    if not failures:
        return []
    models = sorted({r.model for r in records})
    counts = Counter((model, f.cause) for model, f in failures)
    totals = Counter(model for model in (r.model for r in records))
    seen = [c for c in CAUSES if any(counts[(m, c)] for m in models)]
    seen.sort(key=lambda c: -sum(counts[(m, c)] for m in models))
    parts = [
        "## Why episodes failed",
        "",
        "One cause per unresolved episode, the first that applies of: context overflow, time limit, "
        "model server error, sandbox error, loop, turn limit, no tool call, format errors, stall, "
        "tests failed (what ended an episode before what was seen in it). Episodes of each model.",
        "",
        "| cause | " + " | ".join(models) + " |",
        "| --- | " + " | ".join("---:" for _ in models) + " |",
    ]
    for cause in seen:
        cells = [f"{counts[(m, cause)]}/{totals[m]}" for m in models]
        parts.append(f"| {cause.replace('_', ' ')} | " + " | ".join(cells) + " |")
    parts.append("")
    return parts
