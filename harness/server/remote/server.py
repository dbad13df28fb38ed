"""A vLLM server on a GPU host reached over SSH, with everything a local one has.

The checkpoint is inspected and planned here from its metadata (shadow.py), the preflight reads
the host's GPUs and processes, vLLM starts there under a keeper that ends it when the lease this
process renews goes stale (hostside.py), and a tunnel on this machine's 127.0.0.1 makes its
/v1, /health, /metrics and /load look local: the idle watchdog, the /metrics timeline and the
admission gate are the local server's own.
"""

import contextlib
import secrets
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Self

from harness.errors import HarnessError, ServerClosed
from harness.progress import console
from harness.server.bundled import BUNDLED
from harness.server.checkpoint import Checkpoint
from harness.server.config import ServerConfig
from harness.server.environment import CPU_SPEC, CUDA_SPEC
from harness.server.launch import build_launch
from harness.server.memory import GiB, plan_memory
from harness.server.process import VLLMServer, new_api_key
from harness.server.remote.push import push_checkpoint
from harness.server.remote.shadow import remote_checkpoint
from harness.server.remote.ssh import SSHHost

_STOP_WAIT_S = 40.0


def host_gpu(facts: dict[str, Any]) -> str:
    """The host's device as the memory planner's --gpu takes it: cpu, or its first GPU's GiB."""
    gpus = facts.get("gpus") or []
    return f"{gpus[0]['total_bytes'] / GiB:.2f}" if gpus else "cpu"


def checkpoint_on_host(
    ssh: SSHHost, cfg: ServerConfig, run_dir: Path
) -> tuple[dict[str, Any], Checkpoint, Checkpoint]:
    """(the host's facts, the checkpoint with the host's paths, the same with its shadow's here)."""
    ssh.connect()
    facts = ssh.hostside("facts", CUDA_SPEC.name, CPU_SPEC.name)
    if cfg.push and cfg.model not in BUNDLED:  # a bundled name is prepared there by server setup
        cfg = cfg.model_copy(update={"model": push_checkpoint(ssh, Path(cfg.model), cache=facts["cache"])})
    checkpoint, shadow = remote_checkpoint(ssh, cfg, cache=facts["cache"], run_dir=run_dir)
    return facts, checkpoint, shadow


class RemoteVLLMServer(VLLMServer):
    """``VLLMServer`` on ``config.gpu_host``; the same interface, the same records."""

    def __init__(self, config: ServerConfig, *, run_dir: Path) -> None:
        super().__init__(config, run_dir=run_dir)
        assert config.gpu_host is not None
        self.ssh = SSHHost(config.gpu_host, config_file=config.ssh_config)
        self.facts: dict[str, Any] | None = None
        self.shadow: Checkpoint | None = None  # the checkpoint's metadata copied here
        self._remote_dir: str | None = None
        self._remote_pid: int | None = None
        self._local_port: int | None = None
        self._state: dict[str, Any] = {}
        self._first_engines: set[int] = set()
        self._lease: threading.Thread | None = None
        self._lease_stop = threading.Event()
        self._follower: subprocess.Popen[bytes] | None = None
        self._log_base = 0

    @property
    def where(self) -> str:
        return f"--gpu-host {self.config.gpu_host}"

    # ---- preflight -------------------------------------------------------------------------
    def prepare(self) -> None:
        cfg = self.config
        facts, self.checkpoint, self.shadow = checkpoint_on_host(self.ssh, cfg, self.run_dir)
        self.facts = facts
        self.on_cpu = not facts.get("gpus")
        env = facts["environments"][(CPU_SPEC if self.on_cpu else CUDA_SPEC).name]
        if cfg.vllm_python is None and not env.get("ready"):
            raise HarnessError(
                f"{self.where}: no vLLM environment on {facts['hostname']} ({Path(env['python']).parent.parent}); "
                f"run `harness server setup --gpu-host {cfg.gpu_host}` first"
            )
        self.plan = plan_memory(
            self.checkpoint.config,
            model_dir=self.shadow.base_path,
            gpu=host_gpu(facts),
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            concurrency=cfg.max_num_seqs,
            cpu_kv_cache_gib=cfg.cpu_kv_cache_gib,
            dtype=cfg.dtype,
        )
        if not self.plan.fits:
            raise HarnessError(f"memory plan for {cfg.model} on {facts['hostname']}: {self.plan.advice}")
        self._refuse_busy_host(facts)

    def _refuse_busy_host(self, facts: dict[str, Any]) -> None:
        """The local refusals, on the host: another vLLM there, or GPUs with too little free."""
        host = facts["hostname"]
        if procs := facts.get("vllm_processes"):
            pids = " ".join(str(p["pid"]) for p in procs)
            named = "; ".join(f"PID {p['pid']} ({p['cmd'][:80]})" for p in procs)
            raise HarnessError(
                f"{self.where}: vLLM already runs on {host}: {named}. "
                f"Stop it first: ssh {self.config.gpu_host} kill {pids}"
            )
        for gpu in facts.get("gpus") or []:
            total = max(gpu["total_bytes"] - int(0.47 * GiB), 0)
            need = self.config.gpu_memory_utilization * total
            if total and gpu["free_bytes"] < need:
                held = (
                    ", ".join(f"PID {p['pid']} ({p['name']})" for p in gpu.get("processes") or [])
                    or "no process listed"
                )
                raise HarnessError(
                    f"{self.where}: GPU {gpu['index']} ({gpu['name']}) on {host} has {gpu['free_bytes'] / GiB:.1f} GiB free, "
                    f"but --gpu-memory-utilization {self.config.gpu_memory_utilization:g} needs {need / GiB:.1f} GiB; "
                    f"held by {held}"
                )

    # ---- what the base class asks of a server -----------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._local_port is not None, "server not started"
        return f"http://127.0.0.1:{self._local_port}"

    @property
    def pid(self) -> int | None:
        return self._remote_pid

    def launched(self) -> bool:
        return self._remote_pid is not None

    def exit_code(self) -> int | None:
        ended = self._state.get("ended")
        if ended:
            code = ended.get("code")
            return int(code) if code is not None else -1
        return None

    def how_it_ended(self) -> str:
        ended = self._state.get("ended") or {}
        return f"{ended.get('reason', 'gone')} on {self.config.gpu_host}, exit code {self.exit_code()}"

    def is_running(self) -> bool:
        return self.launched() and bool(self._state.get("running", True)) and not self._state.get("ended")

    def engine_alive(self) -> bool:
        engines = set(self._state.get("engines") or [])
        return not self._first_engines or self._first_engines <= engines

    def local_pids(self) -> set[int]:
        return set()  # nothing of it runs on this machine

    def environment_python(self) -> str:
        if self.config.vllm_python is not None:
            return str(self.config.vllm_python)
        assert self.facts is not None
        spec = CPU_SPEC if self.on_cpu else CUDA_SPEC
        return str(self.facts["environments"][spec.name]["python"])

    def environment_versions(self) -> dict[str, Any]:
        assert self.facts is not None
        spec = CPU_SPEC if self.on_cpu else CUDA_SPEC
        env = self.facts["environments"][spec.name]
        return {"python": env["python"], "vllm": env.get("vllm"), "torch": env.get("torch")}

    def describe_checkpoint(self) -> dict[str, Any]:
        """The local description, read from the shadow (weights' data is not sampled: no weight
        crosses the network), with the host's paths."""
        from harness.provenance import describe_checkpoint

        assert self.shadow is not None and self.checkpoint is not None
        facts = describe_checkpoint(self.shadow)
        facts["path"] = str(self.checkpoint.path)
        facts["checkpoint"]["base_path"] = str(self.checkpoint.base_path)
        facts["checkpoint"]["read"] = f"metadata over SSH from {self.config.gpu_host}"
        if self.checkpoint.chat_template is not None:
            facts["chat_template"]["source"] = str(self.checkpoint.chat_template)
        return facts

    def host_facts(self) -> dict[str, Any] | None:
        if self.facts is None:
            return None
        gpus = self.facts.get("gpus") or []
        return {
            "gpu_host": self.config.gpu_host,
            "hostname": self.facts["hostname"],
            "cpus": self.facts.get("cpus"),
            "gpus": [{"name": g["name"], "memory_bytes": g["total_bytes"]} for g in gpus],
            "driver": gpus[0]["driver"] if gpus else None,
        }

    # ---- start -----------------------------------------------------------------------------
    def start(self) -> Self:
        if self.is_running():
            return self
        if self._closed:
            raise ServerClosed(self._closed)
        if self.checkpoint is None:
            self.prepare()
        assert self.checkpoint is not None and self.plan is not None and self.facts is not None
        self.ssh.connect()
        remote_port = self.config.port or self.ssh.free_remote_port()
        self.launch = build_launch(
            python=Path(self.environment_python()),
            checkpoint=self.checkpoint,
            config=self.config,
            plan=self.plan,
            port=remote_port,
            on_cpu=self.on_cpu,
            cpus=self.facts.get("cpus"),
        )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._stopped.clear()
        self.stop_reason = None
        self._state = {}
        self._first_engines = set()
        self._remote_dir = f"{self.facts['cache']}/remote/runs/{secrets.token_hex(8)}"
        try:
            with self.log_path.open("ab") as log:
                log.write(f"\n# harness: on {self.config.gpu_host}: {self.launch.shell_line()}\n".encode())
            launched = self.ssh.hostside(
                "launch",
                input={
                    "argv": list(self.launch.argv),
                    "env": dict(self.launch.env_overrides),
                    "api_key": self.api_key,  # on the pipe to the keeper: no file holds it
                    "dir": self._remote_dir,
                    "grace": self.config.lease_grace,
                },
            )
            self._remote_pid = int(launched["pid"])
            with self._stop_guard:  # closed while it launched: the except below stops it there
                if self._closed:
                    raise ServerClosed(self._closed)
            self._started_at = time.monotonic()
            self._follow_log()
            # a fresh event per start: a lease thread of the last start that outlived its join
            # (stuck in a reconnect) sees its own event set and never stops this server
            self._lease_stop = threading.Event()
            self._renew()
            self._lease = threading.Thread(
                target=self._hold_lease, args=(self._lease_stop,), name="vllm-lease", daemon=True
            )
            self._lease.start()
            self._local_port = (
                self.ssh.forward(remote_port) if self._local_port is None else self._reforward(remote_port)
            )
            self._wait_ready()
        except BaseException:
            self._terminate()
            raise
        self._renew()  # the engine processes as they are now that it serves
        self._first_engines = set(self._state.get("engines") or [])
        return self._start_watching()

    def _reforward(self, remote_port: int) -> int:
        """The same local port again (clients made earlier keep their URL)."""
        assert self._local_port is not None
        try:
            return self.ssh.forward(remote_port, local_port=self._local_port)
        except HarnessError:  # taken meanwhile: another port (the episodes' next requests fail once)
            return self.ssh.forward(remote_port)

    def _follow_log(self, *, resume: bool = False) -> None:
        """The host's server.log copied into the local one as it grows (diagnose() reads it here);
        after a reconnection from the byte where the copy stopped."""
        assert self._remote_dir is not None
        size = self.log_path.stat().st_size if self.log_path.exists() else 0
        if not resume:
            self._log_base = size
        copied = max(size - self._log_base, 0)
        if self._follower is not None:
            self._follower.kill()
            self._follower.wait()
        log = self.log_path.open("ab")
        self._follower = self.ssh.popen(
            # --pid: it ends with the server there, not when its log next grows (that may be never)
            [
                "tail",
                "-c",
                f"+{copied + 1}",
                "-F",
                f"--pid={self._remote_pid}",
                f"{self._remote_dir}/server.log",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    # ---- the lease ---------------------------------------------------------------------------
    def _renew(self) -> None:
        assert self._remote_dir is not None
        self._state = self.ssh.hostside("renew", self._remote_dir, timeout=15)

    def _hold_lease(self, stopped: threading.Event) -> None:
        """Renew the lease every quarter of its grace; a dropped connection is opened again while
        the grace lasts (vLLM kept, and said so), else the host ends vLLM on its own."""
        interval = max(0.5, self.config.lease_grace / 4)
        lost_at: float | None = None
        while not stopped.wait(interval):
            try:
                if not self.ssh.alive():
                    if lost_at is None:
                        lost_at = time.monotonic()
                        console.print(
                            f"[yellow]lost the connection to {self.config.gpu_host}[/]; reconnecting"
                        )
                    self.ssh.connect()
                    if self._local_port is not None and self.launch is not None:
                        self._reforward(self.launch.port)
                self._renew()
            except HarnessError as exc:
                if lost_at is None:
                    lost_at = time.monotonic()
                    console.print(
                        f"[yellow]lost the connection to {self.config.gpu_host}[/] ({exc}); reconnecting"
                    )
                if stopped.is_set():  # this start's server is being stopped or restarted already
                    return
                if time.monotonic() - lost_at > self.config.lease_grace:
                    self._state = {"running": False, "ended": {"reason": "connection lost", "code": None}}
                    self.stop(
                        reason=f"crashed (lost the connection to {self.config.gpu_host} for "
                        f"{self.config.lease_grace:g} s: the host ends vLLM itself)"
                    )
                    return
                continue
            if lost_at is not None:
                console.print(
                    f"[green]✓[/] reconnected to {self.config.gpu_host} after {time.monotonic() - lost_at:.0f} s: "
                    "vLLM kept running there"
                )
                self._follow_log(resume=True)
                lost_at = None
            if self._state.get("ended"):
                return

    # ---- stopping ----------------------------------------------------------------------------
    def _terminate(self, grace: float = 15.0) -> None:
        self._lease_stop.set()
        if self._remote_dir is not None and self._remote_pid is not None and not self._state.get("ended"):
            with contextlib.suppress(HarnessError):
                self.ssh.connect()
                out = self.ssh.hostside(
                    "stop", self._remote_dir, str(_STOP_WAIT_S), timeout=_STOP_WAIT_S + 15
                )
                self._state = {
                    "running": False,
                    "ended": out.get("ended") or {"reason": "stopped", "code": None},
                }
        if self._follower is not None:
            self._follower.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._follower.wait(timeout=5)
            self._follower = None
        if self._lease is not None and self._lease is not threading.current_thread():
            self._lease.join(timeout=10)

    def stop(self, reason: str = "stopped", grace: float = 15.0) -> None:
        super().stop(reason=reason, grace=grace)
        self.ssh.close()

    def restart(self) -> Self:
        self.stop(reason="restart")
        self.stop_reason = None
        self._stopped.clear()
        self._remote_pid = None
        self._state = {}
        self.api_key = new_api_key()
        return self.start()
