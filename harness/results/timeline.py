"""The server's timeline from server_metrics.jsonl: where the GPU hours went.

Each server start is a segment: launched (start), ready, stopped (rollouts done, idle shutdown,
crash, restart). Between its samples a server counts as busy when requests were running or
waiting at the sample or tokens were generated since the previous one: the idle watchdog's own
rule (harness.server.metrics.IdleTracker), so the busy fraction here and server_stats.jsonl agree
up to the two threads' scrape timing. Up time runs from launch to stop, start-up included,
because that is what a GPU is billed for.
"""

import math
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from harness.results.run_files import run_lines
from harness.server.metrics_records import METRICS_FILE, TIMELINE_LINE, MetricsSample, ServerEvent

# Below this busy fraction the headline says the server was mostly idle.
MOSTLY_IDLE = 0.5
# Below this share of --max-num-seqs running (on average, while busy) the batch was mostly empty.
MOSTLY_EMPTY = 0.5


class Segment(BaseModel):
    """One server process from launch to stop (times in seconds since the run's first launch)."""

    model_config = ConfigDict(frozen=True)

    server: str
    start: float
    ready: float | None
    stop: float | None
    stopping: float | None = Field(
        None, description="When its stop began (scraping ends there); ``stop``: when the process was gone."
    )
    stop_reason: str
    up_s: float
    busy_s: float


class Timeline(BaseModel):
    """Samples as a frame (t in seconds since t0) plus the segments, notes and totals the report states."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    t0: float
    samples: pd.DataFrame
    segments: list[Segment]
    notes: list[str]  # scraping stopped, unreadable lines
    up_s: float
    busy_s: float
    preemptions: int
    kv_peak: float
    prefix_hit_rate: float | None
    kv_p95: float | None = None  # over the samples while busy
    generation_tokens_per_busy_s: float | None = None
    mean_running_busy: float | None = None  # requests running, averaged over the busy time
    max_num_seqs: int | None = None  # the server's --max-num-seqs (its ready event)
    ttft_p50: float | None = None  # seconds, from vLLM's histogram (bucket-interpolated)
    ttft_p95: float | None = None
    admission: pd.DataFrame | None = None  # admission.jsonl: t (as samples), limit, admitted, action

    @property
    def busy_fraction(self) -> float | None:
        return self.busy_s / self.up_s if self.up_s > 0 else None

    def gpu_hours(self) -> float:
        """Server hours (one device per server: the harness launches vLLM on one GPU)."""
        return self.up_s / 3600

    def models(self) -> set[str]:
        return {m for s in self.segments for m in s.server.split("+")}

    def summary(self, gpu_price: float | None = None, episodes: int | None = None) -> str:
        """One line: up, busy, GPU-hours and their cost, preemptions, the use while busy (with
        ``episodes``: the GPU-seconds and cost of each)."""
        frac = self.busy_fraction
        parts = [
            f"server up {self.up_s:.0f} s, busy {self.busy_s:.0f} s"
            + (f" ({100 * frac:.0f}%)" if frac is not None else ""),
            f"{self.gpu_hours():.3f} GPU-hours"
            + (
                f" = {gpu_price * self.gpu_hours():.2f} at {gpu_price:g}/hour"
                if gpu_price is not None
                else ""
            ),
        ]
        if len(self.segments) > 1:
            stops = ", ".join(s.stop_reason for s in self.segments)
            parts.append(f"{len(self.segments)} server starts (stops: {stops})")
        parts.append(
            f"{self.preemptions} preemptions, KV cache peak {100 * self.kv_peak:.0f}%"
            + (f", p95 {100 * self.kv_p95:.0f}%" if self.kv_p95 is not None else "")
        )
        if self.prefix_hit_rate is not None:
            parts.append(f"prefix cache hit rate {100 * self.prefix_hit_rate:.0f}%")
        if use := self.use(episodes, gpu_price):
            parts.append(use)
        return "; ".join(parts)

    def use(self, episodes: int | None = None, gpu_price: float | None = None) -> str:
        """How well the server was used while busy: generation tokens/s, the batch against
        --max-num-seqs, time to first token; with ``episodes``, the GPU-seconds each cost."""
        parts = []
        if self.generation_tokens_per_busy_s is not None:
            parts.append(f"{self.generation_tokens_per_busy_s:.0f} generation tokens/s while busy")
        if self.mean_running_busy is not None:
            of = f" of --max-num-seqs {self.max_num_seqs}" if self.max_num_seqs else ""
            parts.append(f"{self.mean_running_busy:.1f} requests running on average{of}")
        if self.ttft_p50 is not None and self.ttft_p95 is not None:
            parts.append(f"time to first token p50 {_seconds(self.ttft_p50)}, p95 {_seconds(self.ttft_p95)}")
        if episodes:
            per = self.up_s / episodes
            cost = (
                f" = {gpu_price * per / 3600:.4f} at {gpu_price:g}/GPU-hour" if gpu_price is not None else ""
            )
            parts.append(f"{per:.0f} GPU-seconds per episode{cost}")
        return ", ".join(parts)

    def diagnosis(self) -> str | None:
        """One sentence when the server was badly used: it preempted, or left most of its batch
        empty while busy; with what to change."""
        if self.preemptions:
            return (
                f"{self.preemptions} preemption(s): the KV cache filled (peak {100 * self.kv_peak:.0f}%) and vLLM "
                "recomputed requests; run with --concurrency auto (or a lower --concurrency), or give the KV "
                "cache more room (--gpu-memory-utilization, a shorter --max-model-len)"
            )
        if (
            self.mean_running_busy is not None
            and self.max_num_seqs
            and self.mean_running_busy < MOSTLY_EMPTY * self.max_num_seqs
            and (self.kv_p95 is None or self.kv_p95 < 0.5)
        ):
            capped = self._auto_capped()
            if capped:
                change = f"--concurrency auto stayed at its cap of {capped} (--max-concurrency): raise it"
            elif self.admission is not None and not self.admission.empty:
                change = (
                    "--concurrency auto held it there (what decided is said below); --concurrency N fixes it"
                )
            else:
                change = "raise --concurrency, or use --concurrency auto"
            return (
                f"the batch was mostly empty: {self.mean_running_busy:.1f} of {self.max_num_seqs} sequences running "
                f"on average while busy (KV cache p95 {100 * (self.kv_p95 or 0):.0f}%); {change}"
            )
        return None

    def _auto_capped(self) -> int | None:
        """auto's cap when its limit sat there for most of the run (the controller wanted more)."""
        a = self.admission
        if a is None or a.empty or "cap" not in a or a["cap"].isna().all():
            return None
        cap = int(a["cap"].max())
        return cap if (a["limit"] >= cap).mean() >= 0.5 else None

    def decided_by(self) -> str | None:
        """Which resources decided --concurrency auto's limit, in words: the share of its decisions
        each named (None: no auto decision named one)."""
        a = self.admission
        if a is None or a.empty or "resource" not in a:
            return None
        named = a["resource"].dropna()
        named = named[named != ""]
        if named.empty:
            return None
        shares = named.value_counts(normalize=True)
        parts = ", ".join(f"{r} {100 * v:.0f}%" for r, v in shares.items())
        low, high = int(a["limit"].min()), int(a["limit"].max())
        span = f"{low}" if low == high else f"{low} to {high}"
        return f"--concurrency auto admitted {span} episodes at once, decided by: {parts} of its decisions"

    def headline_notes(self) -> list[str]:
        """What a headline must say: a mostly idle server, preempted requests, a lost timeline, and
        what decided --concurrency auto's limit."""
        out = []
        frac = self.busy_fraction
        if frac is not None and frac < MOSTLY_IDLE:
            startup = sum(
                (s.ready if s.ready is not None else s.up_s + s.start) - s.start for s in self.segments
            )
            out.append(
                f"server mostly idle: busy {100 * frac:.0f}% of its {self.up_s:.0f} s up "
                f"({startup:.0f} s of that was start-up)"
            )
        if why := self.diagnosis():
            out.append(why)
        if decided := self.decided_by():
            out.append(decided)
        return out + self.notes


def load_timeline(root: Path) -> Timeline | None:
    """The run's server timeline, or None when it has no server_metrics.jsonl (e.g. --base-url runs)."""
    path = root / METRICS_FILE
    if not path.is_file():
        return None
    samples: list[MetricsSample] = []
    events: list[ServerEvent] = []
    bad = 0
    for _, line in run_lines(path):
        if line is None:  # longer than any sample
            bad += 1
            continue
        if not line.strip():
            continue
        try:
            item = TIMELINE_LINE.validate_json(line)
        except ValueError:  # pydantic's ValidationError is one, so is invalid JSON
            bad += 1
            continue
        if isinstance(item, MetricsSample):
            samples.append(item)
        else:
            events.append(item)
    if not samples and not events:
        return None
    notes = [e.note for e in events if e.event == "scrape_stopped"]
    if bad:
        notes.append(f"{path}: {bad} unreadable line(s) skipped")
    t0 = min([e.t for e in events] + [s.t for s in samples])
    frame = pd.DataFrame([s.model_dump() for s in samples]).drop(columns=["kind"], errors="ignore")
    if frame.empty:
        frame = pd.DataFrame(columns=["t", "server", *MetricsSample.model_fields])
    frame["t"] = frame["t"].astype(float) - t0
    frame = frame.sort_values("t", kind="stable").reset_index(drop=True)
    events.sort(key=lambda e: e.t)
    rates = _rates(frame, [e.t - t0 for e in events if e.event == "start"])
    segments = _segments(frame, rates, events, t0)
    queries = float(rates["queries"].sum())
    busy = rates["busy"].astype(bool)
    busy_dt = float(rates.loc[busy, "dt"].sum())
    ready = [e.max_num_seqs for e in events if e.event == "ready" and e.max_num_seqs]
    p50, p95 = _ttft_quantiles(frame, [e.t - t0 for e in events if e.event == "start"])
    return Timeline(
        t0=t0,
        samples=pd.concat([frame, rates[["tokens_per_s", "hit_rate", "busy"]]], axis=1),
        segments=segments,
        notes=notes,
        up_s=sum(s.up_s for s in segments),
        busy_s=sum(s.busy_s for s in segments),
        preemptions=int(rates["preempted"].sum()),
        kv_peak=float(frame["kv_cache_usage"].max()) if len(frame) else 0.0,
        prefix_hit_rate=float(rates["hits"].sum()) / queries if queries > 0 else None,
        kv_p95=float(frame.loc[busy, "kv_cache_usage"].quantile(0.95)) if busy.any() else None,
        generation_tokens_per_busy_s=float(rates.loc[busy, "tokens"].clip(lower=0).sum()) / busy_dt
        if busy_dt > 0
        else None,
        # the running count at a sample stands for the interval up to it: weighted by that interval
        mean_running_busy=float((frame.loc[busy, "running"] * rates.loc[busy, "dt"]).sum()) / busy_dt
        if busy_dt > 0
        else None,
        max_num_seqs=max(ready) if ready else None,
        ttft_p50=p50,
        ttft_p95=p95,
        admission=_admission(root, t0),
    )


def _ttft_quantiles(frame: pd.DataFrame, starts: list[float]) -> tuple[float | None, float | None]:
    """p50 and p95 of the time to first token over every server process of the run: each
    process's last histogram (its counters run from its start), summed, interpolated within the
    bucket as Prometheus's histogram_quantile does."""
    if "ttft_buckets" not in frame or frame.empty:
        return None, None
    process = np.searchsorted(np.asarray(starts, dtype=float), frame["t"].to_numpy(dtype=float), side="right")
    total: dict[float, float] = {}
    for _, rows in frame.groupby(process):
        last = rows["ttft_buckets"].iloc[-1]
        for le, count in (last or {}).items():
            try:
                bound = float(le)
            except ValueError:
                continue
            total[bound] = total.get(bound, 0.0) + float(count)
    bounds = sorted(total)
    n = total[bounds[-1]] if bounds else 0.0
    if n <= 0:
        return None, None

    def quantile(q: float) -> float:
        rank, low, below = q * n, 0.0, 0.0
        for bound in bounds:
            count = total[bound]
            if count >= rank:
                if math.isinf(bound):
                    return low  # past the last finite bound: that bound is all that is known
                inside = count - below
                return low + (bound - low) * ((rank - below) / inside if inside > 0 else 1.0)
            low, below = bound, count
        return low

    return quantile(0.5), quantile(0.95)


def _admission(root: Path, t0: float) -> pd.DataFrame | None:
    """admission.jsonl as a frame on the samples' clock (None: the run has none)."""
    from harness.admission.controller import ADMISSION_FILE, AdmissionRecord

    path = root / ADMISSION_FILE
    if not path.is_file():
        return None
    rows = []
    for _, line in run_lines(path):
        if not line or not line.strip():
            continue
        try:
            rows.append(AdmissionRecord.model_validate_json(line).model_dump())
        except ValueError:
            continue
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    frame["t"] = frame["t"].astype(float) - t0
    return frame.sort_values("t", kind="stable").reset_index(drop=True)


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _rates(frame: pd.DataFrame, starts: list[float]) -> pd.DataFrame:
    """Per sample: tokens/s, prefix hit rate and busy since the previous sample of the same process.

    starts: the launch times (relative), so that counters are never differenced across a restart.
    """
    process = np.searchsorted(np.asarray(starts, dtype=float), frame["t"].to_numpy(dtype=float), side="right")
    g = frame.groupby(process)
    dt = g["t"].diff()
    tokens = g["generation_tokens"].diff()
    hits = g["prefix_cache_hits"].diff().fillna(0).clip(lower=0)
    queries = g["prefix_cache_queries"].diff().fillna(0).clip(lower=0)
    busy = (frame["running"] + frame["waiting"] > 0) | (tokens.fillna(0) != 0)
    first = dt.isna()
    busy = busy & ~first  # the first sample of a process has no interval before it
    return pd.DataFrame(
        {
            "dt": dt.fillna(0.0),
            "tokens_per_s": (tokens / dt).where(dt > 0),
            "hit_rate": (hits / queries).where(queries > 0),
            "hits": hits,
            "queries": queries,
            "busy": busy,
            "tokens": tokens.fillna(0.0),
            "preempted": g["preemptions"].diff().fillna(frame["preemptions"]).clip(lower=0),
        },
        index=frame.index,
    )


def _segments(
    frame: pd.DataFrame, rates: pd.DataFrame, events: list[ServerEvent], t0: float
) -> list[Segment]:
    """Pair start/ready/stop events into segments; busy time from the samples inside each."""
    out: list[Segment] = []
    open_start: ServerEvent | None = None
    ready: float | None = None
    stopping: float | None = None
    for e in events:
        if e.event == "start":
            if open_start is not None:  # a start without its stop (harness killed): until its last sample
                end = _last_sample(frame, open_start, e.t, t0)
                out.append(_segment(frame, rates, open_start, ready, None, "not recorded", t0, end))
            open_start, ready, stopping = e, None, None
        elif e.event == "ready" and open_start is not None:
            ready = e.t
        elif e.event == "stopping" and open_start is not None:
            stopping = e.t
        elif e.event == "stop" and open_start is not None:
            out.append(_segment(frame, rates, open_start, ready, e.t, e.note, t0, e.t, stopping))
            open_start, ready, stopping = None, None, None
    if open_start is not None:
        last = _last_sample(frame, open_start, float("inf"), t0)
        out.append(
            _segment(frame, rates, open_start, ready, None, "not recorded (run interrupted?)", t0, last)
        )
    return out


def _last_sample(frame: pd.DataFrame, start: ServerEvent, before: float, t0: float) -> float:
    """When a server whose stop was not recorded was last seen up: its last sample before the next
    start (a killed run's server dies with it; the time until the run is resumed is not its up time)."""
    t = frame["t"]
    mine = t[(t >= start.t - t0) & (t < before - t0) & (frame["server"] == start.server)]
    return float(mine.max()) + t0 if len(mine) else start.t


def _segment(
    frame: pd.DataFrame,
    rates: pd.DataFrame,
    start: ServerEvent,
    ready: float | None,
    stop: float | None,
    reason: str,
    t0: float,
    end: float,
    stopping: float | None = None,
) -> Segment:
    inside = (frame["t"] >= start.t - t0) & (frame["t"] <= end - t0) & (frame["server"] == start.server)
    busy = float(rates.loc[inside & rates["busy"], "dt"].sum())
    return Segment(
        server=start.server,
        start=start.t - t0,
        ready=None if ready is None else ready - t0,
        stop=None if stop is None else stop - t0,
        stopping=None if stopping is None else stopping - t0,
        stop_reason=reason,
        up_s=max(0.0, end - start.t),
        busy_s=busy,
    )
