"""vLLM /metrics (Prometheus text) -> the few numbers the idle watchdog and the timeline need."""

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict


class LoadSnapshot(BaseModel):
    model_config = ConfigDict(frozen=True)

    running: float
    waiting: float
    generation_tokens: float
    kv_cache_usage: float

    @property
    def busy(self) -> bool:
        return self.running + self.waiting > 0


def parse_metrics(text: str) -> LoadSnapshot:
    """Sum each metric over its label sets (one per served model / engine)."""
    sums = {
        "vllm:num_requests_running": 0.0,
        "vllm:num_requests_waiting": 0.0,
        "vllm:generation_tokens": 0.0,
        "vllm:kv_cache_usage_perc": 0.0,
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # prometheus_client exposes counters as <name>_total samples of family <name>.
            name = sample.name.removesuffix("_total") if sample.name.endswith("_total") else sample.name
            if name in sums:
                sums[name] += float(sample.value)
    return LoadSnapshot(
        running=sums["vllm:num_requests_running"],
        waiting=sums["vllm:num_requests_waiting"],
        generation_tokens=sums["vllm:generation_tokens"],
        kv_cache_usage=sums["vllm:kv_cache_usage_perc"],
    )


# Timeline field -> the vLLM metric names that carry it (v1 names first; older releases' after).
TIMELINE_METRICS: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "preemptions": ("vllm:num_preemptions_total",),
}
_FIELD_OF = {name: field for field, names in TIMELINE_METRICS.items() for name in names}


def scan_metrics(text: str) -> dict[str, float]:
    """The timeline's fields from /metrics text, each summed over its label sets; absent ones are 0.

    A plain line scan instead of prometheus_client's parser: vLLM's page is ~56 KB of mostly
    histogram buckets, and the scraper reads it every few seconds for the whole run, so only the
    handful of wanted lines are split. The value is the first token after the labels (a sample
    may end with a timestamp); label values may hold spaces, so labels end at the last '}'.
    """
    out = dict.fromkeys(TIMELINE_METRICS, 0.0)
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        end = brace if brace != -1 and (space == -1 or brace < space) else space
        field = _FIELD_OF.get(line[:end]) if end > 0 else None
        if field is None:
            continue
        close = line.rfind("}")
        if brace == end and close == -1:
            continue  # labels never closed: a malformed line
        rest = line[close + 1 :] if brace == end else line[end:]
        try:
            out[field] += float(rest.split()[0])
        except (IndexError, ValueError):
            continue  # a malformed sample line: skip it, the next scrape will have the number
    return out


_TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"


def scan_ttft(text: str) -> dict[str, float]:
    """vLLM's time-to-first-token histogram: cumulative count per bucket bound (``le``, as text),
    summed over label sets; empty when the page has none. A line scan like ``scan_metrics``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(_TTFT_BUCKET):
            continue
        at = line.find('le="')
        close = line.rfind("}")
        if at == -1 or close == -1:
            continue
        le = line[at + 4 : line.find('"', at + 4)]
        try:
            out[le] = out.get(le, 0.0) + float(line[close + 1 :].split()[0])
        except (IndexError, ValueError):
            continue
    return out


class IdleTracker:
    """Pure idle bookkeeping: feed snapshots with their time; ask how long the server has been idle.

    Idle means no running or waiting request and no new generated tokens since the last snapshot.
    """

    def __init__(self, now: float) -> None:
        self._last_tokens: float | None = None
        self._idle_since: float = now
        self.busy_seconds = 0.0
        self._last_t = now

    def observe(self, snap: LoadSnapshot, now: float) -> None:
        active = snap.busy or (self._last_tokens is not None and snap.generation_tokens != self._last_tokens)
        if active:
            self.busy_seconds += now - self._last_t
            self._idle_since = now
        self._last_tokens = snap.generation_tokens
        self._last_t = now

    def touch(self, now: float) -> None:
        """A request was sent through the harness: not idle, whatever the last scrape said."""
        self._idle_since = max(self._idle_since, now)

    def idle_for(self, now: float) -> float:
        return now - self._idle_since
