"""Load a finished (or partial) run directory into pandas frames, flagging everything that is off.

Aggregation, comparison and reports all start here, so that a corrupted line, a missing episode or
an unverified reward is noticed once and carried along as a warning instead of becoming a number.
"""

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
from pydantic import TypeAdapter, ValidationError

from harness.errors import HarnessError
from harness.results._gc import gc_paused
from harness.results.failures import failure_of
from harness.results.run_files import MAX_LINE_BYTES, read_run_file, run_lines
from harness.results.store import EpisodeRecord, RunManifest
from harness.results.timeline import Timeline, load_timeline
from harness.tasks.selection import TaskSelection, select_ids

_RECORDS = TypeAdapter(list[EpisodeRecord])
_CHUNK = 5000  # lines validated at once on the fast path


@dataclass
class RunData:
    """One run: its manifest, the latest record per (model, task, seed), and what is wrong with it."""

    root: Path
    manifest: dict[str, Any]
    episodes: pd.DataFrame
    server: pd.DataFrame  # seconds up and busy per model over every start (_server_seconds): one source
    latest: list[EpisodeRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timeline: Timeline | None = None  # the server's /metrics samples (server_metrics.jsonl), if any
    selected: str | None = None  # "3 of 20 tasks (--task csv-*)" when --task / --limit narrowed the run
    # (up, busy) seconds of every server start of the run, from the same source as ``server``;
    # None when no server was recorded (--base-url).
    server_total: tuple[float, float] | None = None

    @property
    def name(self) -> str:
        return str(self.manifest.get("run_id") or self.root.name)

    @property
    def models(self) -> list[str]:
        present = list(dict.fromkeys(self.episodes["model"]))
        return [m for m in self.manifest.get("models", []) if m in present] + [
            m for m in present if m not in self.manifest.get("models", [])
        ]

    @property
    def tasks(self) -> list[str]:
        return sorted(set(self.manifest.get("tasks") or self.episodes["task_id"].unique()))

    @property
    def partial(self) -> bool:
        return bool(self.warnings)

    def records(self) -> list[EpisodeRecord]:
        """The same episodes as typed records (latest per key, file order), for the viewers."""
        return list(self.latest)


@gc_paused
def load_run(path: Path, selection: TaskSelection | None = None) -> RunData:
    """Read RUN (a run directory or its episodes.jsonl); raise HarnessError for what cannot be a run.

    ``selection`` (--task / --limit) keeps the episodes of those tasks only, as if the run had
    been made on them: missing episodes and rates are counted over the selected tasks."""
    root = path.parent if path.name == "episodes.jsonl" else path
    if not root.exists():
        raise HarnessError(f"{path}: no such run directory")
    if not root.is_dir():
        raise HarnessError(f"{path}: not a run directory (expected the --run-dir of harness eval)")
    episodes_path = root / "episodes.jsonl"
    if not episodes_path.exists():
        raise HarnessError(f"{root}: no episodes.jsonl here; is this a run directory made by harness eval?")
    manifest = _manifest(root)
    warnings: list[str] = []
    bad: list[str] = []
    records = _read_records(episodes_path, warnings, bad)
    if not records and bad:  # say why, not just "unreadable": the first bad line and its field
        raise HarnessError(
            f"{episodes_path}: none of its {len(bad)} line(s) is a valid episode record; first: {bad[0]}"
        )
    if not records:
        raise HarnessError(
            f"{root}: no episode recorded yet (episodes.jsonl is empty); run harness eval first"
        )
    selected = None
    if selection is not None and selection.active:
        every = set(manifest.get("tasks") or ()) | {r.task_id for r in records}
        keep = set(select_ids(every, selection.task, selection.limit, where=f"the run {root}"))
        records = [r for r in records if r.task_id in keep]
        manifest = {**manifest, "tasks": sorted(keep)}
        selected = selection.describe(len(keep), len(every))
        if not records:
            raise HarnessError(f"{root}: no episode of the selected {selected} is recorded yet")
    latest, frame = _latest(records)
    _check_complete(frame, latest, manifest, warnings)
    timeline = load_timeline(root)
    server, total = _server_seconds(timeline, root, warnings)
    return RunData(
        latest=latest,
        root=root,
        manifest=manifest,
        episodes=frame,
        server=server,
        warnings=warnings,
        timeline=timeline,
        server_total=total,
        selected=selected,
    )


def read_manifest(root: Path) -> dict[str, Any]:
    """A run's run.json (HarnessError naming the mistake: no such run, not valid JSON)."""
    if not (root / "run.json").is_file():
        raise HarnessError(f"{root}: no run.json there; give a harness eval run directory")
    return _manifest(root)


def _manifest(root: Path) -> dict[str, Any]:
    path = root / "run.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(read_run_file(path))
    except json.JSONDecodeError as exc:
        raise HarnessError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); restore it from the run"
        ) from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise HarnessError(
            f"{path}: not valid JSON ({type(exc).__name__}); restore it from the run"
        ) from None
    except ValueError as exc:  # an integer past Python's 4,300 digits
        raise HarnessError(f"{path}: unreadable ({str(exc)[:80]}); restore it from the run") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{path}: expected a JSON object")
    _check_fields(path, data)
    return data


@functools.cache
def _field_types() -> dict[str, TypeAdapter[Any]]:
    fields = RunManifest.model_fields.items()
    return {name: TypeAdapter(f.annotation) for name, f in fields if f.annotation is not None}


def _check_fields(path: Path, data: dict[str, Any]) -> None:
    """Each field run.json has is of the type its readers take (RunManifest's); one line naming
    the first that is not. Fields it lacks are an older run's, unknown, and fine."""
    for name, adapter in _field_types().items():
        if name in data:
            try:
                adapter.validate_python(data[name])
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in (name, *err["loc"]))
                raise HarnessError(f"{path}: {where}: {err['msg']}; restore it from the run") from None


def _read_records(path: Path, warnings: list[str], bad: list[str]) -> list[EpisodeRecord]:
    """All valid records in file order; each invalid line goes into ``bad`` as "line N: why (field)".

    Fast path: validate the whole file as one JSON array. A reward outside 0..1 (or NaN) makes a
    line invalid too: it would otherwise enter resolve rates (a 5.0 broke every statistic)."""
    numbered: list[tuple[int, bytes]] = []
    for i, ln in run_lines(path):
        if ln is None:
            bad.append(f"line {i}: longer than {MAX_LINE_BYTES >> 20} MiB, not a record")
        elif ln.strip():
            numbered.append((i, ln))
    try:
        # In chunks: one array of a 250,000-episode file peaked at 1.9 GB, chunks at 1.3 GB.
        fast: list[EpisodeRecord] = []
        for start in range(0, len(numbered), _CHUNK):
            chunk = numbered[start : start + _CHUNK]
            fast += _RECORDS.validate_json(b"[" + b",".join(ln for _, ln in chunk) + b"]")
        if not any(_bad_reward(r) for r in fast):
            return fast
    except ValidationError:
        pass
    records: list[EpisodeRecord] = []
    for lineno, line in numbered:
        try:
            rec = EpisodeRecord.model_validate_json(line)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(map(str, err["loc"]))
            bad.append(f"line {lineno}: {err['msg']}" + (f" ({where})" if where else ""))
            continue
        if reason := _bad_reward(rec):
            bad.append(f"line {lineno}: {reason} (reward)")
            continue
        records.append(rec)
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        warnings.append(
            f"{path}: {len(bad)} corrupted line(s) skipped ({shown}); their episodes count as missing"
        )
    return records


def _bad_reward(record: EpisodeRecord) -> str | None:
    """Why a reward cannot enter a rate (NaN, or outside 0..1), or None when it can."""
    r = record.reward
    if r is None or 0.0 <= r <= 1.0:  # NaN fails both comparisons
        return None
    return f"reward {r!r} is outside 0..1"


def _latest(records: list[EpisodeRecord]) -> tuple[list[EpisodeRecord], pd.DataFrame]:
    """The last record per (model, task, seed), as records and as a frame (one row each, same order).

    The store appends a second line for the same key after verification: the last one wins.
    Columns come from each record's __dict__ (attribute access on 100k pydantic models is slow).
    """
    frame = pd.DataFrame([r.__dict__ for r in records], columns=list(EpisodeRecord.model_fields))
    keep = ~frame.duplicated(subset=["model", "task_id", "seed"], keep="last")
    latest = [r for r, k in zip(records, keep.tolist(), strict=True) if k]
    frame = frame[keep].reset_index(drop=True)
    loops = [r.__dict__["loop"] for r in latest]
    frame["loop_kind"] = [loop.kind.value if loop else None for loop in loops]
    frame["loop_start"] = [loop.start_turn if loop else None for loop in loops]
    frame["stalled"] = [r.__dict__["stall"] is not None for r in latest]
    frame["tampered"] = [bool(r.__dict__["tamper"]) for r in latest]
    failures = [r.__dict__["failure"] or failure_of(r) for r in latest]
    frame["failure_cause"] = [f.cause if f else None for f in failures]
    frame["tokens"] = frame["prompt_tokens"] + frame["completion_tokens"]
    return latest, frame


def _check_complete(
    frame: pd.DataFrame, records: list[EpisodeRecord], manifest: dict[str, Any], warnings: list[str]
) -> None:
    infra = frame[frame["status"] == "infra_error"]
    if len(infra):
        warnings.append(
            f"{len(infra)} episode(s) failed on the infrastructure (infra_error: server, connection, disk or "
            "container) after their retries: not scored; run the same harness eval command again to rerun them"
        )
    if manifest.get("kind") == "proxy":  # harness proxy: watched agents, no tests, no plan
        return
    unverified = frame[~frame["verified"] & (frame["status"] != "infra_error")]
    if len(unverified):
        warnings.append(
            f"{len(unverified)} episode(s) not verified yet (no reward): run the same harness eval command again "
            "to verify them; they are left out of resolve rates"
        )
    errored = frame.index[frame["status"] == "error"]
    if len(errored):
        first = records[errored[0]]
        reason = f"{first.error.type}: {first.error.message[:120]}" if first.error else "no reason recorded"
        warnings.append(
            f"{len(errored)} of {len(records)} episode(s) ended in error (counted as unresolved; first: "
            f"{first.task_id} seed {first.seed}, {reason})"
        )
    tasks, seeds, models = manifest.get("tasks"), manifest.get("seeds"), manifest.get("models")
    if tasks and seeds and models:
        # a run of several scaffolds runs each model under each (run.json: "scaffold": "A,B")
        scaffolds = len(str(manifest.get("scaffold") or "").split(","))
        expected = len(tasks) * len(seeds) * len(models) * scaffolds
        if len(frame) < expected:
            warnings.append(
                f"{expected - len(frame)} of {expected} planned episodes missing (run interrupted?): "
                "run the same harness eval command again to finish it"
            )


_SERVER_COLUMNS = ["model", "up_s", "busy_s"]


def _server_seconds(
    timeline: Timeline | None, root: Path, warnings: list[str]
) -> tuple[pd.DataFrame, tuple[float, float] | None]:
    """Server seconds up and busy per model over every start of the run, and the run's total.

    One source, so that the eval summary, the report's table, its server section and the headline
    say the same: the timeline (server_metrics.jsonl: a segment per start, its stop written even
    when the run was stopped, its busy seconds from its own samples) for every model it covers;
    server_stats.jsonl (a line per server per eval invocation) only for models it does not cover
    (scraping off, Ray replicas). A shared server (base + LoRA) counts for each of its models.
    """
    stats, stats_total = _server_stats(root, warnings)
    if timeline is None:
        return stats, stats_total
    rows = [
        {"model": m, "up_s": seg.up_s, "busy_s": seg.busy_s}
        for seg in timeline.segments
        for m in seg.server.split("+")
    ]
    covered = timeline.models()
    frame = pd.concat(
        [pd.DataFrame(rows, columns=_SERVER_COLUMNS), stats[~stats["model"].isin(covered)]],
        ignore_index=True,
    )
    per_model = frame.groupby("model", as_index=False)[["up_s", "busy_s"]].sum()
    return per_model, (timeline.up_s, timeline.busy_s)


def _server_stats(root: Path, warnings: list[str]) -> tuple[pd.DataFrame, tuple[float, float] | None]:
    """server_stats.jsonl per model, and summed over its lines (each one server's seconds)."""
    rows: list[dict[str, Any]] = []
    total: tuple[float, float] | None = None
    path = root / "server_stats.jsonl"
    if path.exists():
        for lineno, line in run_lines(path):
            if line is not None and not line.strip():
                continue
            try:
                d = orjson.loads(line or b"")
                up, busy = float(d["up_s"]), float(d["busy_s"])
                rows.extend({"model": m, "up_s": up, "busy_s": busy} for m in d["model"].split("+"))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                warnings.append(
                    f"{path}: line {lineno} is not a server record; server seconds are incomplete"
                )
                continue
            total = (up, busy) if total is None else (total[0] + up, total[1] + busy)
    frame = pd.DataFrame(rows, columns=_SERVER_COLUMNS)
    return frame.groupby("model", as_index=False)[["up_s", "busy_s"]].sum(), total
