"""The server's own timeline: its Prometheus /metrics scraped every few seconds into a jsonl file.

While a vLLM server is up, a daemon thread appends one `MetricsSample` per scrape to
``run_dir/server_metrics.jsonl`` (requests running and waiting, KV cache usage, the token,
prefix-cache and preemption counters), framed by `ServerEvent` lines: ``start`` (the process was
launched), ``ready``, ``stop`` (with the reason: rollouts done, idle shutdown, crash, restart) and
``scrape_stopped`` (the endpoint went away; the run itself goes on). The report turns the file into
the timeline plot, the busy fraction and the GPU-hours.

A scrape is one HTTP GET of ~56 KB on loopback and a line scan of it (about 1 ms of CPU), so the
thread costs well under 1% of a core at the 2 s default (bench/scrape_overhead.py).
"""

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
from rich.markup import escape

from harness.progress import console
from harness.server.metrics import scan_metrics, scan_ttft
from harness.server.metrics_records import METRICS_FILE, EventName, MetricsSample, ServerEvent

__all__ = ["METRICS_FILE", "MetricsSample", "MetricsScraper", "ServerEvent"]

# Consecutive failed scrapes before giving up: a busy CPU server can miss one or two.
MAX_FAILURES = 3


class MetricsScraper:
    """Scrapes one server's /metrics on a daemon thread; `stop()` ends it and records why."""

    def __init__(
        self,
        url: str,
        run_dir: Path,
        server: str,
        interval: float = 2.0,
        listeners: Sequence[Callable[[MetricsSample], None]] = (),
    ) -> None:
        """``listeners``: called with every sample, on the scraper's thread (the admission gate);
        read at each scrape, so a list the caller changes later counts from then on."""
        if interval <= 0:
            raise ValueError(f"scrape interval must be positive, got {interval}")
        self.url = url
        self.path = Path(run_dir) / METRICS_FILE
        self.server = server
        self.interval = interval
        self.samples = 0
        self.listeners = listeners
        # Busy seconds by the timeline's own rule (results/timeline.py): a sample's interval is busy
        # when a request runs or waits at it, or tokens were generated since the one before.
        self.busy_s = 0.0
        self._previous: MetricsSample | None = None
        self.stopped_note: str | None = None
        self._halt = threading.Event()
        self._stop_written = False
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _write(self, line: MetricsSample | ServerEvent) -> None:
        with self._write_lock, self.path.open("a") as fh:
            fh.write(line.model_dump_json() + "\n")

    def event(self, event: EventName, note: str = "", t: float | None = None) -> None:
        self._write(
            ServerEvent(t=time.time() if t is None else t, server=self.server, event=event, note=note)
        )

    def start(self, launched_s_ago: float, max_num_seqs: int | None = None) -> None:
        """Record the launch (``launched_s_ago`` seconds back) and readiness (with the server's
        ``--max-num-seqs``), then scrape until stopped."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        now = time.time()
        self.event("start", t=now - launched_s_ago)
        self._write(ServerEvent(t=now, server=self.server, event="ready", max_num_seqs=max_num_seqs))
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        """Stop scraping (before the server is terminated, so its dying endpoint is not a failure)."""
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def stopping(self, reason: str) -> None:
        """The server's stop begins: scraping ends now (its dying endpoint is not a failure) and
        the moment is recorded; the process may take its grace to exit (``stop`` records that)."""
        self.halt()
        self.event("stopping", note=reason)

    def stop(self, reason: str) -> None:
        """Stop scraping and record the server's stop (once); safe from any thread."""
        self.halt()
        if not self._stop_written:
            self._stop_written = True
            self.event("stop", note=reason)

    def _count_busy(self, sample: MetricsSample) -> None:
        before = self._previous
        if before is not None and (
            sample.running + sample.waiting > 0 or sample.generation_tokens != before.generation_tokens
        ):
            self.busy_s += sample.t - before.t
        self._previous = sample

    def _run(self) -> None:
        failures = 0
        last_error = ""
        # at least a second: a loaded host answers a short interval's scrape late, not never
        with httpx.Client(timeout=min(5.0, max(1.0, 2 * self.interval))) as http:
            while not self._halt.is_set():
                t = time.time()
                try:
                    response = http.get(self.url)
                    response.raise_for_status()
                    values = scan_metrics(response.text)
                    ttft = scan_ttft(response.text)
                except httpx.HTTPError as exc:
                    failures += 1
                    last_error = f"{type(exc).__name__}: {str(exc)[:160]}"
                else:
                    failures = 0
                    if not self._halt.is_set():  # a scrape that straddled stop() belongs to no timeline
                        sample = MetricsSample(t=t, server=self.server, ttft_buckets=ttft, **values)
                        self._write(sample)
                        self._count_busy(sample)
                        self.samples += 1
                        for listener in list(self.listeners):
                            with contextlib.suppress(Exception):  # a listener never stops the timeline
                                listener(sample)
                if failures >= MAX_FAILURES:
                    if self._halt.is_set():
                        return
                    self.stopped_note = (
                        f"{self.url} failed {failures} times running ({last_error}): server timeline "
                        f"stops here, after {self.samples} samples; the run goes on"
                    )
                    self.event("scrape_stopped", note=self.stopped_note)
                    console.print(f"[yellow]note:[/] {escape(self.stopped_note)}", highlight=False)
                    return
                self._halt.wait(max(0.0, self.interval - (time.time() - t)))
