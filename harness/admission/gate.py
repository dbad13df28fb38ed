"""The admission gate of one model server: episodes start only while the limit allows.

An executor's workers ``acquire`` a slot before they take an episode and ``release`` it when the
episode is over; nothing here ever stops a running episode. With ``--concurrency N`` the limit is
N. With ``--concurrency auto`` it starts where admission/start.py says and follows the server's
metrics: the gate subscribes to the scraper the server already runs (one poller, not two) and
asks the controller (admission/controller.py) at every scrape; each decision is a line of
``admission.jsonl`` beside ``server_metrics.jsonl``, which the report draws under the server's
timeline. A server without /metrics (a replay script, ``--base-url``) keeps the start, and the
run says so once.
"""

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from harness._text import markup
from harness.admission.controller import (
    ADMISSION_FILE,
    AdmissionController,
    AdmissionRecord,
    Decision,
    LoadSample,
)
from harness.admission.host import HostSample
from harness.admission.host_probe import read_host
from harness.admission.start import AutoStart, auto_start, host_room, memory_room, sandbox_capacity
from harness.progress import console
from harness.seam import ModelEndpoint
from harness.server.metrics_records import MetricsSample

if TYPE_CHECKING:
    from harness.eval_config import EvalConfig

__all__ = [
    "ADMISSION_FILE",
    "Admission",
    "AdmissionRecord",
    "LoadSource",
    "admission_for",
    "auto_admission",
    "planned_start",
]

_WAIT_S = 0.2  # a waiting worker looks at the run's stop this often

Listener = Callable[[MetricsSample], None]


@runtime_checkable
class LoadSource(Protocol):
    """An endpoint whose server's scrapes can be watched (a managed vLLM server)."""

    def watch_load(self, listener: Listener) -> Callable[[], None] | None:
        """Call ``listener`` with every scrape from now on; the returned call stops that (None:
        the server is not scraped, --metrics-interval 0)."""
        ...

    def planned_sequences(self) -> tuple[int | None, int | None]:
        """(full-length sequences the KV cache holds, --max-num-seqs) from the server's plan."""
        ...


class Admission:
    """The limit on episodes in flight for one server, and the episodes in flight now."""

    def __init__(
        self,
        server: str,
        *,
        fixed: int | None = None,
        auto: AutoStart | None = None,
        path: Path | None = None,
        status: Callable[[str], None] = lambda _: None,
        probe: "Callable[[float, Callable[[], set[int]] | None], HostSample | None]" = read_host,
    ) -> None:
        """``probe``: a look at the host the episodes run on, with every scrape (read_host; a
        test's own host)."""
        if (fixed is None) == (auto is None):
            raise ValueError("give either fixed or auto")
        self.server = server
        self.path = path
        self.auto = auto
        self.controller = AdmissionController(auto.start, auto.cap) if auto is not None else None
        self.limit = fixed if fixed is not None else self.controller.limit  # type: ignore[union-attr]
        self.threads = fixed if fixed is not None else auto.cap  # type: ignore[union-attr]
        self.in_flight = 0
        self.peak = 0
        self.kv: float | None = None
        self._status = status
        self._cond = threading.Condition()
        self._unwatch: Callable[[], None] | None = None
        # the host the episodes run on is looked at with every scrape (a Ray replica's gate
        # looks at its own node); the model server's processes are not the episodes' load
        self._probe = probe
        self._server_pids: Callable[[], set[int]] | None = None
        self.resource: str | None = None  # what decided the latest limit (shown on the progress line)
        if self.controller is not None and auto is not None:
            self._record(self.controller.first(time.time(), auto.why))

    # ---- the executor's side ---------------------------------------------------------------------
    def acquire(self, stopping: Callable[[], bool]) -> bool:
        """Wait for a slot; False when ``stopping()`` turned true first (take nothing then)."""
        with self._cond:
            while self.in_flight >= self.limit:
                if stopping():
                    return False
                self._cond.wait(_WAIT_S)
            if stopping():
                return False
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        self._say()
        return True

    def release(self) -> None:
        with self._cond:
            self.in_flight = max(0, self.in_flight - 1)
            self._cond.notify_all()
        self._say()

    def set_in_flight(self, n: int) -> int:
        """The episodes in flight as someone else counts them (a Ray replica's, by the driver);
        the limit now."""
        with self._cond:
            self.in_flight = n
            self.peak = max(self.peak, n)
            return self.limit

    # ---- the scraper's side ----------------------------------------------------------------------
    def watch(self, endpoint: ModelEndpoint) -> bool:
        """Follow ``endpoint``'s scrapes (False: it has none to follow)."""
        if not isinstance(endpoint, LoadSource):
            return False
        self._server_pids = getattr(endpoint, "server_pids", None)
        self._unwatch = endpoint.watch_load(self.observe)
        return self._unwatch is not None

    def observe(self, sample: MetricsSample | None) -> None:
        """One scrape (from the scraper's thread): the KV usage shown, the controller's decision on
        the server's scrape and a look at this host."""
        host = None
        if self.controller is not None and sample is not None:
            host = self._probe(sample.t, self._server_pids)
        with self._cond:
            self.kv = sample.kv_cache_usage if sample is not None else self.kv
            if self.controller is not None:
                load = (
                    None
                    if sample is None
                    else LoadSample(
                        t=sample.t,
                        running=sample.running,
                        waiting=sample.waiting,
                        kv_cache_usage=sample.kv_cache_usage,
                        preemptions=sample.preemptions,
                        turns=sample.ttft_buckets.get("+Inf"),
                    )
                )
                decision = self.controller.decide(self.in_flight, load, t=time.time(), host=host)
                self.resource = decision.resource or self.resource
                self.limit = decision.limit
                self._cond.notify_all()
            else:
                decision = None
        if decision is not None:
            self._record(decision)
        self._say()

    def close(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    # ---- what it shows ---------------------------------------------------------------------------
    def line(self) -> str:
        """The progress line's part: episodes in flight, the limit (auto), the KV cache."""
        text = f"{self.in_flight} in flight"
        if self.controller is not None:
            text += f" (auto, limit {self.limit}" + (f": {self.resource}" if self.resource else "") + ")"
        if self.kv is not None:
            text += f", KV {100 * self.kv:.0f}%"
        return text

    def _say(self) -> None:
        with contextlib.suppress(Exception):  # the display never stops an episode
            self._status(self.line())

    def _record(self, decision: Decision) -> None:
        if self.path is None:
            return
        line = AdmissionRecord(**decision.model_dump(), server=self.server).model_dump_json(exclude_none=True)
        with contextlib.suppress(OSError), self.path.open("a") as fh:  # a full disk: the run goes on
            fh.write(line + "\n")


def planned_start(
    endpoint: ModelEndpoint, *, cpus: float, memory_gib: float, max_concurrency: int | None
) -> AutoStart:
    """Where ``--concurrency auto`` starts for ``endpoint`` and how far it may go, on this host.

    A server the harness runs and scrapes: the plan and the sandboxes' memory limits set the start,
    and the controller measures the server and the host from there (a sandbox's ``cpus`` counts
    nothing: start.py). A server it cannot follow (a replay script, ``--base-url``): nothing will
    be measured, so the start stays the limit, and it is the sandboxes the host holds at their
    limits, CPUs included: the cautious number."""
    if isinstance(endpoint, LoadSource):
        sandboxes, why = memory_room(host_room(), memory_gib)
        full, seqs = endpoint.planned_sequences()
    else:
        sandboxes, why = sandbox_capacity(host_room(), cpus, memory_gib)
        full, seqs = None, None
    start = auto_start(
        sandboxes=sandboxes,
        sandbox_why=why,
        full_sequences=full,
        max_num_seqs=seqs,
        max_concurrency=max_concurrency,
    )
    if not isinstance(endpoint, LoadSource):  # nothing to grow by: the start is the most
        start = start.model_copy(update={"cap": start.start})
    return start


def admission_for(
    config: "EvalConfig",
    endpoint: ModelEndpoint,
    run_dir: Path,
    status: Callable[[str], None] = lambda _: None,
) -> Admission:
    """The gate for the episodes of ``endpoint``'s server: fixed, or auto (watching its scrapes
    where it has any, else the start, said once); auto's decisions go to run_dir/admission.jsonl."""
    if config.concurrency != "auto":
        gate = Admission(endpoint.name, fixed=config.concurrency, status=status)
        gate.watch(endpoint)  # only to show the KV cache
        return gate
    return auto_admission(
        endpoint,
        planned_start(
            endpoint,
            cpus=config.sandbox.cpus,
            memory_gib=config.sandbox.memory_gib,
            max_concurrency=config.max_concurrency,
        ),
        run_dir / ADMISSION_FILE,
        status,
    )


def auto_admission(
    endpoint: ModelEndpoint, start: AutoStart, path: Path, status: Callable[[str], None] = lambda _: None
) -> Admission:
    """An auto gate for ``endpoint``'s server, following its scrapes (or keeping the start when it
    has none); what it starts from is said once."""
    name = endpoint.name
    gate = Admission(name, auto=start, path=path, status=status)
    if gate.watch(endpoint):
        console.print(
            markup(
                f"concurrency auto for {name}: starting at {start.start}, at most {start.cap} ({start.why})"
            ),
            highlight=False,
        )
    else:
        gate.controller = None  # nothing to follow: the start is the limit
        console.print(
            markup(
                f"concurrency auto for {name}: its server has no /metrics to follow (replay, --base-url or "
                f"--metrics-interval 0): {start.start} episodes at a time ({start.why})"
            ),
            highlight=False,
        )
    return gate
