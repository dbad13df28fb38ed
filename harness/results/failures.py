"""An episode record's failure cause (harness/monitor/failure.py decides it from the record's
fields), the report's "Why episodes failed" section (causes by model, and by scaffold), the
clusters of the same failure, and compare's pairing of causes task by task."""

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.monitor.failure import CAUSES, Failure, failure_cause
from harness.results.store import EpisodeRecord

CLUSTERS_SHOWN = 20  # clusters listed in a report; the rest are counted
EXAMPLES = 3  # example episodes per cluster


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
        last_error=rec.last_error,
    )


def _label(cause: str) -> str:
    return cause.replace("_", " ")


def cause_table(
    failures: list[tuple[str, Failure]], totals: Counter[str], head: str = "cause"
) -> tuple[list[str], list[list[str]]]:
    """(header, rows): a row per cause that occurred, the most frequent first, a column per group
    (model or scaffold) counting its failures of that cause out of its episodes."""
    columns = sorted(totals)
    counts = Counter((col, f.cause) for col, f in failures)
    seen = [c for c in CAUSES if any(counts[(m, c)] for m in columns)]
    seen.sort(key=lambda c: -sum(counts[(m, c)] for m in columns))
    rows = [[_label(cause), *(f"{counts[(m, cause)]}/{totals[m]}" for m in columns)] for cause in seen]
    return [head, *columns], rows


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "| --- | " + " | ".join("---:" for _ in head[1:]) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def causes_markdown(records: list[EpisodeRecord]) -> list[str]:
    """The section: one row per cause that occurred, a column per model (a MODEL@SCAFFOLD arm is
    one), then per scaffold when the run has several; the precedence documented in
    harness/monitor/failure.py."""
    failures = [(r, f) for r in records if (f := failure_of(r)) is not None]
    if not failures:
        return []
    parts = [
        "## Why episodes failed",
        "",
        "One cause per unresolved episode, the first that applies of: context overflow, time limit, "
        "model server error, sandbox error, loop, turn limit, no tool call, format errors, stall, "
        "tests failed (what ended an episode before what was seen in it). Episodes of each model.",
        "",
        *_md(*cause_table([(r.model, f) for r, f in failures], Counter(r.model for r in records))),
        "",
    ]
    scaffolds = Counter(r.scaffold or "?" for r in records)
    if len(scaffolds) > 1:
        parts += [
            "By scaffold (every model's episodes under it):",
            "",
            *_md(*cause_table([(r.scaffold or "?", f) for r, f in failures], scaffolds)),
            "",
        ]
    return parts


@dataclass(frozen=True)
class Cluster:
    """Failures with one signature: the same cause, kind, failing tests and last error."""

    signature: str
    cause: str
    episodes: list[EpisodeRecord] = field(default_factory=list)
    detail: str = ""  # the first episode's detail, as it was (the signature masks particulars)
    last_error: str = ""  # the first episode's last error, as it was

    @property
    def models(self) -> Counter[str]:
        return Counter(r.model for r in self.episodes)


def failure_clusters(records: Iterable[EpisodeRecord]) -> list[Cluster]:
    """The run's failures grouped by signature, largest first (ties: the cause's precedence, then
    the signature), each cluster's episodes in the run's order."""
    groups: dict[str, list[EpisodeRecord]] = defaultdict(list)
    first: dict[str, Failure] = {}
    for rec in records:
        f = failure_of(rec)
        if f is None:
            continue
        key = f.key()
        groups[key].append(rec)
        first.setdefault(key, f)
    rank = {c: i for i, c in enumerate(CAUSES)}
    ordered = sorted(groups, key=lambda k: (-len(groups[k]), rank[first[k].cause], k))
    return [
        Cluster(
            signature=k,
            cause=first[k].cause,
            episodes=groups[k],
            detail=first[k].detail,
            last_error=groups[k][0].last_error,
        )
        for k in ordered
    ]


def clusters_markdown(
    clusters: list[Cluster], episode_id: Callable[[EpisodeRecord], str], root: str
) -> list[str]:
    """The report's "Failure clusters" section: the largest first, each with its episodes per model
    and a few examples to open."""
    if not clusters:
        return []
    parts = [
        "## Failure clusters",
        "",
        "Failures with one signature (cause, kind, failing tests and exception, the last error the agent "
        "saw, with numbers, quoted names and paths masked), largest first.",
        "",
    ]
    for c in clusters[:CLUSTERS_SHOWN]:
        models = ", ".join(f"{m} {n}" for m, n in sorted(c.models.items()))
        examples = ", ".join(f"`{episode_id(r)}`" for r in c.episodes[:EXAMPLES])
        parts.append(f"- **{len(c.episodes)} episodes**: `{c.signature}` ({models}); e.g. {examples}")
    if len(clusters) > CLUSTERS_SHOWN:
        rest = sum(len(c.episodes) for c in clusters[CLUSTERS_SHOWN:])
        parts.append(f"- and {len(clusters) - CLUSTERS_SHOWN} smaller clusters ({rest} episodes)")
    parts += ["", f"Open one: `harness show {root} EPISODE`.", ""]
    return parts
