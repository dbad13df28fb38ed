"""The lines of server_metrics.jsonl: a sample per scrape and the server's start/ready/stop events.

Kept apart from the scraper so that reading a run (report, compare) needs pydantic only, not the
HTTP client.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

METRICS_FILE = "server_metrics.jsonl"


class MetricsSample(BaseModel):
    """One scrape: gauges as read, counters cumulative since the server started."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["sample"] = "sample"
    t: float = Field(description="Unix time of the scrape.")
    server: str = Field(description="The models the server serves, joined by '+'.")
    running: float
    waiting: float
    kv_cache_usage: float = Field(description="Fraction of the KV cache in use (0..1).")
    generation_tokens: float
    prompt_tokens: float
    prefix_cache_queries: float
    prefix_cache_hits: float
    preemptions: float
    ttft_buckets: dict[str, float] = Field(
        default_factory=dict,
        description="vLLM's time-to-first-token histogram: cumulative requests per bucket bound (le).",
    )


# "stopping": the stop began (scraping ends there); "stop": the process is gone (its up time ends).
EventName = Literal["start", "ready", "stopping", "stop", "scrape_stopped"]


class ServerEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["event"] = "event"
    t: float
    server: str
    event: EventName
    note: str = ""
    max_num_seqs: int | None = Field(None, description="ready: the sequences vLLM runs at most at once.")


TimelineLine = Annotated[MetricsSample | ServerEvent, Field(discriminator="kind")]
TIMELINE_LINE: TypeAdapter[MetricsSample | ServerEvent] = TypeAdapter(TimelineLine)
