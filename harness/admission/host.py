"""The host's side of ``--concurrency auto``: is the machine the episodes run on saturated, and does
one more episode still buy throughput? Pure logic, no I/O, no clock: ``host_probe.py`` reads the
machine, the controller (controller.py) asks this at every scrape.

A sandbox's CPU limit is a cap the engine enforces, not a reservation: agents mostly wait on the
model, so counting every episode as if it used its cap all the time leaves most of the machine
idle (measured: a 2-core box at concurrency 1 against 1.8x the episodes per minute at 4). So the
host's share is measured the way the server's is:

- saturated (shed): the episodes' own runnable threads (the model server's left out: on a CPU box
  it runs on the same cores, and its threads are busy whenever it generates) above the cores for
  ``sustained`` samples in a row; or memory running out (available below ``memory_floor``, or
  the kernel's memory pressure stall above ``memory_pressure_at`` percent);
- rate (grow or hold): the model turns completed per minute at each limit, measured once the
  limit has held ``settle_s`` seconds; one more episode is admitted while the rate at the limit
  beats the rate one below it by ``min_gain``, and held once it is flat: more episodes that buy
  nothing only add contention.
"""

from collections import deque
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["HostPolicy", "HostSample", "HostWatch", "RateTracker"]


class HostPolicy(BaseModel):
    """The thresholds of the host's side."""

    model_config = ConfigDict(frozen=True)

    cpu_over: float = Field(
        1.0, gt=0, description="Episodes' runnable threads per core above which the CPUs are saturated."
    )
    sustained: int = Field(3, ge=1, description="Samples in a row over cpu_over that make it saturation.")
    memory_floor: float = Field(
        0.10, ge=0, lt=1, description="Available memory (fraction) below which it is short."
    )
    memory_pressure_at: float = Field(
        10.0,
        gt=0,
        le=100,
        description="The kernel's memory stall (PSI some avg10, percent) counted as pressure.",
    )
    settle_s: float = Field(30.0, ge=0, description="Seconds at a limit before its rate counts.")
    min_gain: float = Field(
        0.05, ge=0, description="The rise in turns per minute that one more episode must buy."
    )


class HostSample(BaseModel):
    """One look at the host (host_probe.read_host)."""

    model_config = ConfigDict(frozen=True)

    t: float
    cores: float = Field(gt=0)
    runnable: float = Field(ge=0, description="Runnable threads outside the model server.")
    memory_available: float = Field(ge=0, le=1, description="Fraction of memory available.")
    memory_pressure: float | None = Field(None, description="PSI memory some avg10 (percent); None: unknown.")


@dataclass
class RateTracker:
    """Turns completed per minute at each limit: ``note`` the cumulative count at every scrape."""

    settle_s: float
    limit: int = 0
    since: float | None = None  # when the current limit was set
    base: float | None = None  # the turn count then
    last: tuple[float, float] | None = None  # (t, turns) of the latest scrape
    rates: dict[int, float] = field(default_factory=dict)  # limit -> turns per minute, once settled

    def limit_set(self, limit: int, t: float) -> None:
        """The limit changed at ``t``: its rate is measured from here."""
        if limit == self.limit and self.since is not None:
            return
        self.limit, self.since = limit, t
        self.base = self.last[1] if self.last is not None else None

    def note(self, t: float, turns: float) -> None:
        if self.last is not None and turns < self.last[1]:  # a restarted server counts from 0
            self.base = turns
        self.last = (t, turns)
        if self.base is None:
            self.base = turns
        if self.since is not None and t - self.since >= self.settle_s and t > self.since:
            self.rates[self.limit] = 60.0 * (turns - self.base) / (t - self.since)

    def settled(self) -> bool:
        return self.limit in self.rates


class HostWatch:
    """The host's verdicts over time: ``saturated`` at each sample, ``growth`` before one more."""

    def __init__(self, policy: HostPolicy | None = None) -> None:
        self.policy = policy or HostPolicy()
        self.rate = RateTracker(self.policy.settle_s)
        self._cpu: deque[bool] = deque(maxlen=self.policy.sustained)

    def saturated(self, sample: HostSample | None) -> tuple[str, str] | None:
        """(resource, why) when the host is saturated now; None when it has room or is unknown."""
        if sample is None:
            return None
        p = self.policy
        if sample.memory_available < p.memory_floor:
            return (
                "host memory",
                f"memory available {100 * sample.memory_available:.0f}% < {100 * p.memory_floor:.0f}%",
            )
        if sample.memory_pressure is not None and sample.memory_pressure >= p.memory_pressure_at:
            return (
                "host memory",
                f"memory pressure {sample.memory_pressure:.0f}% >= {p.memory_pressure_at:.0f}%",
            )
        per_core = sample.runnable / sample.cores
        self._cpu.append(per_core > p.cpu_over)
        if len(self._cpu) == p.sustained and all(self._cpu):
            return "host cpu", (
                f"episodes' runnable threads {per_core:.1f} per core > {p.cpu_over:g} for {p.sustained} samples"
            )
        return None

    def growth(self, limit: int) -> tuple[bool, str]:
        """Whether one more episode may be admitted at ``limit``, by the turn rate, and why not."""
        rates = self.rate.rates
        if not self.rate.settled():
            return False, f"measuring the turn rate at limit {limit}"
        below = rates.get(limit - 1)
        now = rates[limit]
        if below is None:
            return True, f"{now:.1f} turns/min at limit {limit}"
        if now > below * (1 + self.policy.min_gain):
            return True, f"turn rate rising: {below:.1f} -> {now:.1f}/min from limit {limit - 1} to {limit}"
        return False, f"turn rate flat: {below:.1f} -> {now:.1f}/min from limit {limit - 1} to {limit}"
