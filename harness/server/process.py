"""The vLLM server process: launch, readiness, idle shutdown, crash detection, clean stop."""

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import psutil

from harness.children import popen_tied, stop_signals_held
from harness.errors import HarnessError, ServerClosed, ServerCrashed, ServerStartError
from harness.leader import Leader, started
from harness.paths import absolute
from harness.progress import console, spinner
from harness.server.checkpoint import Checkpoint, inspect_checkpoint
from harness.server.config import ServerConfig
from harness.server.diagnose import diagnose, last_exception, log_tail
from harness.server.environment import server_python
from harness.server.gpu import has_cuda
from harness.server.launch import Launch, build_launch
from harness.server.memory import MemoryPlan, plan_memory
from harness.server.metrics import IdleTracker, parse_metrics
from harness.server.metrics_records import MetricsSample
from harness.server.preflight import check_free_memory, tensor_parallel_size
from harness.server.registry import DeviceLock, device_key
from harness.server.scraper import MetricsScraper

_TERM_GRACE_S = 15.0
# A server that never became ready has no requests to finish, and vLLM ignores SIGTERM for much
# of its start-up: waiting the full grace only delays Ctrl-C.
_STARTING_GRACE_S = 3.0
_CRASH_SETTLE_S = 15.0
_HEALTH_TIMEOUT_S = 5.0  # per /health try (three tries)
_ENGINE_MARK = "EngineCore"  # vLLM v1's engine process titles itself VLLM::EngineCore_<n>


def _requests_in_flight(http: httpx.Client, base_url: str) -> int:
    """The requests the server's HTTP layer has taken and not answered (vLLM's ``/load`` with
    ``--enable-server-load-tracking``); 0 where it does not say."""
    try:
        load = http.get(f"{base_url}/load").json().get("server_load")
    except (httpx.HTTPError, ValueError, AttributeError):
        return 0
    return int(load) if isinstance(load, int | float) else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_api_key() -> str:
    """A random key for one server start. Hex: a key that starts with "-" (a token_urlsafe one
    does, 1 in 32) is taken by argparse for a flag when a user passes it on to `--api-key`."""
    return secrets.token_hex(24)


class VLLMServer:
    """One on-demand vLLM server for one checkpoint (and its LoRA adapter).

    Use as a context manager: ``with VLLMServer(cfg, run_dir=...) as srv: srv.chat(...)``.
    The server binds 127.0.0.1 on a free port with a random API key, writes its log to
    ``run_dir/server.log``, stops itself after ``idle_timeout`` idle seconds, and is stopped
    (process group SIGTERM, then SIGKILL) on exit, Ctrl-C or an exception.
    """

    def __init__(self, config: ServerConfig, *, run_dir: Path) -> None:
        self.config = config
        self.run_dir = absolute(run_dir)  # server.log's path goes into messages and commands
        self.log_path = self.run_dir / "server.log"
        self.api_key = new_api_key()
        self.on_cpu = not has_cuda()
        self.checkpoint: Checkpoint | None = None
        self.plan: MemoryPlan | None = None
        self.launch: Launch | None = None
        self.stop_reason: str | None = None
        self.up_seconds = 0.0
        self.ready_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._leader: Leader | None = None
        self._lock = DeviceLock(device_key())
        self._tracker: IdleTracker | None = None
        self._stopped = threading.Event()
        self._stop_guard = threading.Lock()
        self._closed: str | None = None  # why, once close() released it for good
        self._watchdog: threading.Thread | None = None
        self._scraper: MetricsScraper | None = None
        self._scraped_busy = 0.0  # busy seconds of the earlier starts' timelines
        self._started_at = 0.0
        self._engines: list[psutil.Process] = []
        # Called with every scrape of every start's scraper (the admission gate follows the KV cache).
        self.load_listeners: list[Callable[[MetricsSample], None]] = []

    # ---- preflight -------------------------------------------------------------------------
    def prepare(self) -> None:
        """Inspect the checkpoint and plan memory; raises HarnessError before anything starts."""
        cfg = self.config
        self.checkpoint = inspect_checkpoint(
            cfg.model,
            base_model=cfg.base_model,
            served_name=cfg.served_name,
            tool_call_parser=cfg.tool_call_parser,
            chat_template=cfg.chat_template,
        )
        self.plan = plan_memory(
            self.checkpoint.config,
            model_dir=self.checkpoint.base_path,
            gpu="cpu" if self.on_cpu else None,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            concurrency=cfg.max_num_seqs,
            cpu_kv_cache_gib=cfg.cpu_kv_cache_gib,
            tensor_parallel=tensor_parallel_size(cfg.extra_args),  # the replica's GPUs, not one
            dtype=cfg.dtype,
        )
        if not self.plan.fits:
            raise HarnessError(f"memory plan for {cfg.model} on {self.plan.device}: {self.plan.advice}")
        if not self.on_cpu:  # what vLLM would refuse a minute into start-up, refused now with who holds it
            check_free_memory(cfg.gpu_memory_utilization, tensor_parallel_size(cfg.extra_args))

    # ---- properties ------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self.launch is not None, "server not started"
        return f"http://127.0.0.1:{self.launch.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def served_names(self) -> list[str]:
        assert self.checkpoint is not None
        names = [self.checkpoint.served_name]
        return names + ([self.checkpoint.adapter_name] if self.checkpoint.adapter_name else [])

    def launched(self) -> bool:
        """Whether a server process was started (and not forgotten by a restart)."""
        return self._proc is not None

    def exit_code(self) -> int | None:
        """The server process's exit status; None while it runs or before it was started."""
        return self._proc.poll() if self._proc is not None else None

    def is_running(self) -> bool:
        return self.launched() and self.exit_code() is None

    def serving(self) -> bool:
        """Up and not being stopped: what a caller about to send it a request needs. False from the
        moment a stop begins (an idle stop, a crash's), whatever the process's state then: while the
        stop waits for the process, ``Popen.poll()`` from another thread says nothing (it answers
        None when a wait holds the process), and a proxy sent requests to the port it was freeing."""
        return not self._stopped.is_set() and self.is_running()

    def how_it_ended(self) -> str:
        """Why the server process is gone, for the stop reason: its exit code here."""
        return f"exit code {self.exit_code()}"

    def local_pids(self) -> set[int]:
        """The server's processes on this machine (the API server and its children): empty while
        it is down, and for a server on another host."""
        if self._proc is None or self._proc.poll() is not None:
            return set()
        try:
            return {self._proc.pid, *(c.pid for c in psutil.Process(self._proc.pid).children(recursive=True))}
        except psutil.Error:
            return set()

    def environment_python(self) -> str:
        """The interpreter of the environment that runs vLLM (for the manifest)."""
        return str(server_python(self.config.vllm_python))

    def describe_checkpoint(self) -> dict[str, Any]:
        """The checkpoint's identity, template and parser in force (for the manifest)."""
        from harness.provenance import describe_checkpoint

        assert self.checkpoint is not None
        return describe_checkpoint(self.checkpoint)

    def environment_versions(self) -> dict[str, Any]:
        """vLLM's, torch's and transformers' versions there (for the manifest)."""
        from harness.provenance import server_versions

        return server_versions(self.environment_python())

    def host_facts(self) -> dict[str, Any] | None:
        """The machine the server runs on, where it is not this one (the manifest's server facts)."""
        return None

    def _find_engines(self) -> list[psutil.Process]:
        """The engine processes under the API server (vLLM v1 runs the model in a child titled
        ``VLLM::EngineCore``); none for a vLLM that serves from one process."""
        if self._proc is None:
            return []
        try:
            children = psutil.Process(self._proc.pid).children(recursive=True)
        except psutil.Error:
            return []
        found = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                if _ENGINE_MARK in child.name() or _ENGINE_MARK in " ".join(child.cmdline()[:1]):
                    found.append(child)
        return found

    @staticmethod
    def _group_members(pgid: int) -> list[psutil.Process]:
        """Live (not zombie) processes of process group ``pgid``."""
        members = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    members.append(p)
        return members

    def engine_alive(self) -> bool:
        """Whether the engine seen at start-up still runs: a killed engine core leaves the API
        process up, answering 500 to everything, so a live API process alone proves nothing."""
        for engine in self._engines:
            try:
                if not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE:
                    return False
            except psutil.Error:
                return False
        return True

    def healthy(self) -> bool:
        """The server can serve: its process and engine alive and ``/health`` answering 200 (a few
        tries: a busy server on a small machine may be slow to answer), or not answering in time
        while both are alive: busy, not dead. vLLM answers ``/health`` through the engine's queue,
        and on a CPU one engine step of long prompts takes minutes; a restart then threw away the
        step and every request in it, and the next start met the same prompts: a run on a 2-core
        box restarted its server every 3 minutes and finished no episode. A dead process or
        engine, a refused connection or an error status is unhealthy at once."""
        if not self.is_running() or not self.engine_alive() or self.launch is None:
            return False
        slow = 0
        with httpx.Client(timeout=_HEALTH_TIMEOUT_S) as http:
            for _ in range(3):
                try:
                    if http.get(f"{self.base_url}/health").status_code == 200:
                        return True
                except httpx.TimeoutException:
                    slow += 1
                except httpx.HTTPError:
                    pass
                if not self.is_running() or not self.engine_alive():
                    return False
                time.sleep(0.5)
        return slow == 3

    def client(self, timeout: float = 600.0) -> Any:
        """An OpenAI client for this server; retries are the caller's decision (max_retries=0)."""
        import openai  # deferred: a third of a second at import, not needed to start a server

        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key=self.api_key, max_retries=0, timeout=timeout
        )

    # ---- start -----------------------------------------------------------------------------
    def start(self) -> Self:
        if self.is_running():
            return self
        if self._closed:
            raise ServerClosed(self._closed)
        if self.checkpoint is None:
            self.prepare()
        assert self.checkpoint is not None and self.plan is not None
        python = server_python(self.config.vllm_python)
        self._lock.acquire(port=self.config.port)
        try:
            port = self.config.port or _free_port()
            self.launch = build_launch(
                python=python,
                checkpoint=self.checkpoint,
                config=self.config,
                plan=self.plan,
                port=port,
                on_cpu=self.on_cpu,
            )
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._stopped.clear()
            self.stop_reason = None
            with self.log_path.open("ab") as log:
                log.write(f"\n# harness: {self.launch.shell_line()}\n".encode())
                log.flush()
                # under the stop guard: a close() either sees this process or this start sees it
                with self._stop_guard, stop_signals_held():
                    if self._closed:
                        raise ServerClosed(self._closed)
                    self._proc = popen_tied(
                        self.launch.argv,
                        env=self.launch.environment(self.api_key),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
            self._leader = Leader.of(self._proc.pid)  # its group's number, while the child holds it
            self._started_at = time.monotonic()
            self._lock.record(
                server_pid=self._proc.pid,
                port=port,
                model=self.checkpoint.request_model,
                log=str(self.log_path),
            )
            self._wait_ready()
        except BaseException:
            self._terminate(grace=_STARTING_GRACE_S)
            self._lock.release()
            raise
        return self._start_watching()

    def _start_watching(self) -> Self:
        """Once ready: the idle tracker, the /metrics scraper and the watchdog thread."""
        assert self.plan is not None
        self._tracker = IdleTracker(time.monotonic())
        if self.config.metrics_interval:
            self._scraper = MetricsScraper(
                f"{self.base_url}/metrics",
                self.run_dir,
                "+".join(self.served_names),
                self.config.metrics_interval,
                self.load_listeners,
            )
            self._scraper.start(
                launched_s_ago=time.monotonic() - self._started_at,
                max_num_seqs=self.config.max_num_seqs or self.plan.recommended_max_num_seqs,
            )
        self._watchdog = threading.Thread(target=self._watch, name="vllm-watchdog", daemon=True)
        self._watchdog.start()
        return self

    def _fail_start(self, what: str) -> ServerStartError:
        assert self.launch is not None
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        cause = diagnose(text) or last_exception(text)
        tail = log_tail(self.log_path, 1)
        detail = cause or (tail[-1][:300] if tail else "no output")
        return ServerStartError(
            f"vLLM {what}: {detail}\n  log: {self.log_path}\n  command: {self.launch.shell_line()}"
        )

    def _wait_ready(self) -> None:
        assert self.launched() and self.checkpoint is not None
        deadline = self._started_at + self.config.startup_timeout
        name = self.checkpoint.request_model
        # A slow spinner: on a 2-core box every redraw competes with vLLM's own start-up.
        with (
            spinner(f"Starting vLLM for {name}", refresh_per_second=2) as spin,
            httpx.Client(timeout=2.0) as http,
        ):
            while True:
                code = self.exit_code()
                if code is not None:
                    raise self._fail_start(f"exited with code {code} before it was ready")
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{self.base_url}/health").status_code == 200:
                        break
                now = time.monotonic()
                if now > deadline:
                    raise self._fail_start(f"not ready after {self.config.startup_timeout:.0f} s")
                last = log_tail(self.log_path, 1)
                hint = last[-1][-90:] if last else ""
                spin.update(f"Starting vLLM for {name} ({now - self._started_at:.0f} s) [dim]{hint}[/]")
                time.sleep(0.25)
        self.ready_seconds = time.monotonic() - self._started_at
        self._engines = self._find_engines()
        plan = self.plan
        served = (
            f"; served in {plan.dtype}: {plan.dtype_source}"
            if plan is not None and plan.dtype != self.checkpoint.dtype
            else ""
        )
        console.print(
            f"[green]✓[/] vLLM ready for {name} at {self.base_url} ({self.ready_seconds:.0f} s){served}"
        )

    # ---- watching --------------------------------------------------------------------------
    def _watch(self) -> None:
        idle_timeout = self.config.idle_timeout
        interval = min(2.0, max(0.5, idle_timeout / 4)) if idle_timeout else 2.0
        with httpx.Client(timeout=5.0) as http:
            # The process and engine are checked every half second whatever the idle interval:
            # a dead engine must be noticed within seconds, not at the next idle check.
            last_scrape = 0.0
            while not self._stopped.wait(0.5):
                if not self.is_running():
                    self.stop(reason=f"crashed ({self.how_it_ended()})")
                    return
                if not self.engine_alive():
                    self.stop(reason="crashed (its engine core process died)")
                    return
                if time.monotonic() - last_scrape < interval:
                    continue
                last_scrape = time.monotonic()
                try:
                    snap = parse_metrics(http.get(f"{self.base_url}/metrics").text)
                except (httpx.HTTPError, ValueError):
                    continue  # a scrape can fail under load; the process check above decides death
                assert self._tracker is not None
                now = time.monotonic()
                self._tracker.observe(snap, now)
                if _requests_in_flight(http, self.base_url):
                    # /metrics is written between engine steps: during one long step (minutes of a
                    # CPU prefill) it said nothing ran, and the watchdog stopped a server mid-request
                    # every idle timeout (the next start met the same prompts: no episode ended)
                    self._tracker.touch(now)
                if idle_timeout and self._tracker.idle_for(now) >= idle_timeout:
                    console.print(f"vLLM idle for {idle_timeout:g} s: stopping it")
                    self.stop(reason=f"idle for {idle_timeout:g} s")
                    return

    @property
    def busy_seconds(self) -> float:
        """Busy seconds over every start: from the timeline's own samples when /metrics is scraped
        (server_stats.jsonl and the report's timeline are then one measure, not two samplers that
        each misplace every busy edge by up to an interval), else the idle watchdog's."""
        if self.config.metrics_interval:
            return self._scraped_busy + (self._scraper.busy_s if self._scraper else 0.0)
        return self._tracker.busy_seconds if self._tracker else 0.0

    def check_alive(self) -> None:
        """Raise ServerCrashed (with the log's last error) if the server died on its own."""
        if self.is_running() and not self.engine_alive():
            self.stop(reason="crashed (its engine core process died)")
        if not self.launched() or self.is_running():
            return
        if self.stop_reason is None or self.stop_reason.startswith("crashed"):
            raise self._crashed()

    def _crashed(self) -> ServerCrashed:
        if self.stop_reason == "crashed (its engine core process died)":
            return ServerCrashed(f"vLLM's engine core process died; log: {self.log_path}")
        code = self.exit_code()
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        cause = last_exception(text[-20000:]) or "no error in the log"
        return ServerCrashed(f"vLLM server died (exit code {code}): {cause}; log: {self.log_path}")

    def chat(self, **kwargs: Any) -> Any:
        """chat.completions.create on this server; a dead server raises ServerCrashed, never hangs."""
        import openai

        assert self.checkpoint is not None
        kwargs.setdefault("model", self.checkpoint.request_model)
        if self._tracker:
            self._tracker.touch(time.monotonic())
        try:
            return self.client().chat.completions.create(**kwargs)
        except (openai.APIConnectionError, openai.InternalServerError, openai.APITimeoutError):
            if self._dies_within(_CRASH_SETTLE_S):
                raise self._crashed() from None
            raise

    def _dies_within(self, seconds: float) -> bool:
        """After a failed request: a crashed engine takes its server down within seconds."""
        if not self.launched():
            return True
        deadline = time.monotonic() + seconds
        while self.exit_code() is None:
            if not self.engine_alive():  # the API process lives on without it, answering 500
                self.stop(reason="crashed (its engine core process died)")
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.25)
        self.stop(reason=f"crashed ({self.how_it_ended()})")
        return True

    # ---- stopping --------------------------------------------------------------------------
    def _terminate(self, grace: float = _TERM_GRACE_S) -> None:
        proc = self._proc
        if proc is None:
            return
        leader = self._leader
        if leader is None or leader.pid != proc.pid:  # stopped between the launch and its record
            leader = Leader(proc.pid, started(proc.pid) if proc.returncode is None else None)

        def signal_group(signo: int) -> None:
            # Once the API process is reaped and the group empty, its number is free for another
            # process's group: never signalled then (harness/leader.py).
            if not leader.reused():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(leader.pid, signo)

        signal_group(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        # The engine and worker processes share the group; make sure none outlives the server.
        signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        # ... and is gone before this returns: a restart right after a crash otherwise met the
        # dying engine or worker and was refused as a second server on the device.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not leader.reused() and self._group_members(leader.pid):
            time.sleep(0.05)

    def stop(self, reason: str = "stopped", grace: float = _TERM_GRACE_S) -> None:
        """Stop the server and everything it spawned; idempotent and safe from any thread.
        ``grace``: seconds between SIGTERM and SIGKILL (shorter when a run is being stopped)."""
        with self._stop_guard:
            if self._stopped.is_set() and not self.is_running():
                return
            self.stop_reason = self.stop_reason or reason
            self._stopped.set()
            if self._scraper:
                self._scraper.stopping(self.stop_reason)  # its refused scrapes are not an outage
            self._terminate(grace)
            if self._started_at:
                self.up_seconds += time.monotonic() - self._started_at
                self._started_at = 0.0
            if self._scraper:
                self._scraper.stop(self.stop_reason)
                self._scraped_busy += self._scraper.busy_s
                self._scraper = None
            self._lock.release()
        if self._watchdog and self._watchdog is not threading.current_thread():
            self._watchdog.join(timeout=10)

    def close(self, reason: str = "stopped", grace: float = _TERM_GRACE_S) -> None:
        """Stop it for good: a start from any thread after this raises ServerClosed. The run's
        end calls it, so that an episode thread or a model call through the run's proxy that
        finds the server down cannot start another one that nothing would ever stop."""
        with self._stop_guard:
            self._closed = self._closed or reason
        self.stop(reason=reason, grace=grace)

    def restart(self) -> Self:
        """Start a fresh server process (after a crash, for instance) with the same checkpoint."""
        self.stop(reason="restart")
        self.stop_reason = None
        self._stopped.clear()
        self._proc = self._leader = None
        self.api_key = new_api_key()
        return self.start()

    def wait(self) -> str:
        """Block until the server stops (idle shutdown or crash); return why."""
        while not self._stopped.wait(0.5):
            pass
        return self.stop_reason or "stopped"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(reason="exited" if et is None else f"{et.__name__}")
