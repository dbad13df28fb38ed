"""vLLM /metrics (Prometheus text) -> the few numbers the idle watchdog needs."""

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
