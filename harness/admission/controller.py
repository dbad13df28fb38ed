"""How many episodes may be in flight on one model server: pure logic, no I/O, no clock.

The model server's KV cache is what concurrency spends. Agent prompts grow with every turn, so a
batch that fits at the start of the episodes can overflow late in them, and vLLM then preempts
requests (drops their KV and recomputes it later): the run slows down exactly when the GPU is
fullest. The controller admits episodes by the server's own gauges, every scrape (the scraper's
``MetricsSample``, about every 2 s), the rules the open RL rollout stacks use:

- grow (one more episode) while the KV cache is below ``grow_below`` (0.6), nothing waits, the
  limit is in use (every admitted slot taken) and the episodes in flight plus one, each holding a
  request of the running ones' average size at once, would still leave the cache under
  ``hold_below`` (0.8): episodes that have not sent a request yet (their KV not visible) and
  those running a tool count too, so the limit does not run ahead of the load it has not seen;
- hold between the two;
- shed at ``shed_at`` (0.9), on any new preemption, or when requests have waited
  ``waiting_persists`` scrapes in a row: the limit drops below the episodes in flight, so that
  none starts until some finish (a running episode is never stopped), and no growth until the
  queue drains (nothing waits and the cache is under ``hold_below`` again).

The host the episodes run on is the other resource (host.py): a saturated host (the episodes'
runnable threads above its cores, sustained; memory short) sheds as the server does, and growth
also needs the model turns per minute to rise with the limit: one controller on both signals.
Each decision names the resource that decided it.

The limit stays between 1 and ``cap`` (--max-concurrency; a sandbox's CPU and memory limits are
caps on each sandbox, not a count of them). A scrape that is missing or malformed (NaN, negative,
a usage above 1) changes nothing; a preemption counter that went down means the server restarted:
it is the new baseline, not a preemption.
"""

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.admission.host import HostPolicy, HostSample, HostWatch

__all__ = [
    "ADMISSION_FILE",
    "Action",
    "AdmissionController",
    "AdmissionPolicy",
    "AdmissionRecord",
    "Decision",
    "LoadSample",
]

Action = Literal["start", "grow", "hold", "shed", "drained", "ignore"]


class AdmissionPolicy(BaseModel):
    """The thresholds of the controller (fractions of the KV cache in use)."""

    model_config = ConfigDict(frozen=True)

    grow_below: float = Field(0.6, gt=0, le=1, description="Admit one more while the KV cache is below this.")
    hold_below: float = Field(
        0.8, gt=0, le=1, description="A shed ends (the queue drained) once the cache is below this again."
    )
    shed_at: float = Field(0.9, gt=0, le=1, description="Stop admitting at this KV cache usage.")
    waiting_persists: int = Field(
        3, ge=1, description="Scrapes in a row with waiting requests that count as a persistent queue."
    )

    @model_validator(mode="after")
    def _ordered(self) -> "AdmissionPolicy":
        if not self.grow_below <= self.hold_below <= self.shed_at:
            raise ValueError("the thresholds must be ordered: grow_below <= hold_below <= shed_at")
        return self


class LoadSample(BaseModel):
    """What one scrape of the server says (the fields of the scraper's MetricsSample it needs)."""

    model_config = ConfigDict(frozen=True)

    t: float
    running: float
    waiting: float
    kv_cache_usage: float
    preemptions: float  # cumulative since the server started
    turns: float | None = None  # requests the server has answered so far (None: it does not say)

    def malformed(self) -> bool:
        values = (self.t, self.running, self.waiting, self.kv_cache_usage, self.preemptions)
        return (
            not all(math.isfinite(v) for v in values)
            or min(self.running, self.waiting, self.kv_cache_usage, self.preemptions) < 0
            or self.kv_cache_usage > 1.0 + 1e-6
        )


class Decision(BaseModel):
    """One step of the controller: the limit it set and why (a line of admission.jsonl)."""

    model_config = ConfigDict(frozen=True)

    t: float
    limit: int = Field(description="Episodes that may be in flight from now on.")
    cap: int = Field(description="The most the limit may reach.")
    admitted: int = Field(description="Episodes in flight when it decided.")
    action: Action
    reason: str
    resource: str | None = Field(
        None,
        description="What decided it: the KV cache, the server's queue, preemptions, the host's CPUs or "
        "memory, the turn rate, the cap (None: nothing pressed).",
    )
    kv_cache_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = Field(None, description="New preemptions since the previous scrape.")


ADMISSION_FILE = "admission.jsonl"  # the run's decisions, beside server_metrics.jsonl


class AdmissionRecord(Decision):
    """A line of admission.jsonl: a decision and the server it was for."""

    server: str


class AdmissionController:
    """The limit for one model server: ``decide`` once per scrape (deterministic, no I/O)."""

    def __init__(
        self,
        start: int,
        cap: int,
        policy: AdmissionPolicy | None = None,
        host_policy: HostPolicy | None = None,
    ) -> None:
        if cap < 1:
            raise ValueError(f"cap must be at least 1, got {cap}")
        self.cap = cap
        self.limit = max(1, min(start, cap))
        self.policy = policy or AdmissionPolicy()
        self.host = HostWatch(host_policy)
        self.draining = False
        self._preemptions: float | None = None  # the counter's last value (None: no valid scrape yet)
        self._waiting_streak = 0

    def first(self, t: float, reason: str) -> Decision:
        """The starting limit, as a record."""
        return Decision(t=t, limit=self.limit, cap=self.cap, admitted=0, action="start", reason=reason)

    def decide(
        self, admitted: int, sample: LoadSample | None, t: float = 0.0, host: HostSample | None = None
    ) -> Decision:
        """The limit after this scrape, with ``admitted`` episodes in flight and the host as
        ``host`` shows it (None: not looked at); ``t``: the time its record carries when the scrape
        has none (missing or malformed)."""
        if sample is None or sample.malformed():
            return Decision(
                t=sample.t if sample is not None and math.isfinite(sample.t) else t,
                limit=self.limit,
                cap=self.cap,
                admitted=admitted,
                action="ignore",
                reason="no scrape" if sample is None else "malformed scrape",
            )
        p = self.policy
        kv, waiting = sample.kv_cache_usage, sample.waiting
        before = self._preemptions
        # A fresh counter (below the last one) is a restarted server: the new baseline.
        new = 0.0 if before is None or sample.preemptions < before else sample.preemptions - before
        self._preemptions = sample.preemptions
        self._waiting_streak = self._waiting_streak + 1 if waiting > 0 else 0
        rated = sample.turns is not None and math.isfinite(sample.turns)
        if rated:
            self.host.rate.limit_set(self.limit, sample.t)
            self.host.rate.note(sample.t, float(sample.turns))  # type: ignore[arg-type]
        host_full = self.host.saturated(host)

        def out(action: Action, reason: str, resource: str | None = None) -> Decision:
            if rated:
                self.host.rate.limit_set(self.limit, sample.t)
            return Decision(
                t=sample.t,
                limit=self.limit,
                cap=self.cap,
                admitted=admitted,
                action=action,
                reason=reason,
                resource=resource,
                kv_cache_usage=kv,
                running=sample.running,
                waiting=waiting,
                preemptions=new,
            )

        why: tuple[str, str] | None = (
            ("preemptions", f"{new:.0f} preemption(s)")
            if new > 0
            else ("kv cache", f"KV cache {100 * kv:.0f}% >= {100 * p.shed_at:.0f}%")
            if kv >= p.shed_at
            else ("server queue", f"requests waiting {self._waiting_streak} scrapes in a row")
            if self._waiting_streak >= p.waiting_persists
            else host_full
        )
        if why is not None and (new > 0 or not self.draining):
            # Once per event (a new preemption sheds again): no episode starts until some finish.
            self.draining = True
            self.limit = max(1, min(self.limit, admitted) - 1)
            return out("shed", why[1], why[0])
        if self.draining:
            if waiting == 0 and kv < p.hold_below and host_full is None:
                self.draining = False
                return out("drained", f"queue drained, KV cache {100 * kv:.0f}%, host has room")
            return out("hold", "draining", why[0] if why else None)
        if kv >= p.grow_below:
            return out("hold", f"KV cache {100 * kv:.0f}% >= {100 * p.grow_below:.0f}%", "kv cache")
        if waiting > 0:
            return out("hold", f"{waiting:.0f} request(s) waiting", "server queue")
        if self.limit >= self.cap:
            return out("hold", f"at the cap ({self.cap})", "cap")
        if admitted < self.limit:
            return out("hold", f"{admitted} of {self.limit} admitted")
        if sample.running < 1:
            return out("hold", "no request running: nothing to size one more by")
        # Every episode in flight (and one more) holding a request of today's average size at once:
        # an episode that has not sent its first request yet, or is running a tool, counts too.
        projected = kv / sample.running * (admitted + 1)
        if projected >= p.hold_below:
            return out(
                "hold",
                f"{admitted + 1} requests of the average size would fill ~{100 * projected:.0f}%",
                "kv cache",
            )
        if rated:
            more, said = self.host.growth(self.limit)
            if not more:
                return out("hold", said, "turn rate")
        self.limit += 1
        return out(
            "grow", f"KV cache {100 * kv:.0f}%, nothing waits" + ("" if host is None else ", host has room")
        )
