"""One server per device: a lock held for the server's lifetime, plus a scan for foreign vLLMs.

A forgotten second vLLM process on the same GPU once made a whole evaluation fail with
out-of-memory errors, so a second server for a device (or port) is refused, naming the PID.
The scan finds API servers by their command line and engines and workers by the title vLLM v1
gives them (``VLLM::EngineCore``, ``VLLM::Worker...``): an engine can outlive its API server
after a crash or a kill and keep its GPU memory; the refusal then gives the kill to run.
"""

import fcntl
import json
import os
import threading
import time
from typing import IO

import psutil

from harness.errors import HarnessError
from harness.paths import cache_dir

_VLLM_MARKERS = ("vllm.entrypoints.openai.api_server", "vllm serve", "vllm/entrypoints")


def device_key() -> str:
    """'cpu', or 'cuda:<visible devices>' for the GPUs a child process would use."""
    from harness.server.gpu import has_cuda, selected_gpu_indices

    if not has_cuda():
        return "cpu"
    return "cuda:" + ",".join(map(str, selected_gpu_indices()))


def _vllm_processes() -> list[psutil.Process]:
    """vLLM API servers (command line) and orphaned engines / workers (process title) but ours.

    An engine under a live API server is that server's business (the server is named); one whose
    server is gone is named itself.
    """
    from harness.server.preflight import VLLM_TITLE, is_orphan

    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        if proc.info.get("status") == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        argv = proc.info.get("cmdline") or []
        cmd = " ".join(argv)
        title = (proc.info.get("name") or "").startswith(VLLM_TITLE) or cmd.startswith(VLLM_TITLE)
        if any(m in cmd for m in _VLLM_MARKERS) or (title and is_orphan(proc)):
            found.append(proc)
    return found


def _describe(proc: psutil.Process) -> str:
    from harness.server.preflight import VLLM_TITLE

    try:
        name = proc.name()
        cmd = " ".join(proc.cmdline()[:6]) or name
    except (psutil.Error, OSError):
        name = cmd = "?"
    if cmd.startswith(VLLM_TITLE) or name.startswith(VLLM_TITLE):
        return f"an orphaned vLLM engine, PID {proc.pid} ({cmd}), whose API server is gone"
    return f"a vLLM server not started by this harness, PID {proc.pid} ({cmd})"


def _shares_device(proc: psutil.Process, device: str) -> bool:
    """Whether a running vLLM process uses (some of) the same device."""
    if device == "cpu":
        return True
    try:
        visible = proc.environ().get("CUDA_VISIBLE_DEVICES")
    except (psutil.Error, OSError):
        return True  # cannot tell: assume the worst, the message names the PID anyway
    if visible is None:
        return True
    from harness.server.gpu import _count, parse_visible_devices

    try:  # indices or UUIDs: compared as the physical GPUs they name
        theirs = {str(i) for i in parse_visible_devices(visible, _count())}
    except HarnessError:
        return True  # an odd value: cannot tell, assume the worst (the PID is named)
    return bool(set(device.removeprefix("cuda:").split(",")) & theirs)


def port_holder(port: int) -> int | None:
    """PID listening on 127.0.0.1/any:port, or None (0 when the port is taken but the PID is hidden)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
            return c.pid or 0
    return None


class DeviceLock:
    """Exclusive claim on a device by one harness-managed server; released on stop or death."""

    def __init__(self, device: str) -> None:
        self.device = device
        root = cache_dir() / "servers"
        root.mkdir(parents=True, exist_ok=True)
        safe = device.replace(":", "_").replace(",", "-")
        self.lock_path = root / f"{safe}.lock"
        self.info_path = root / f"{safe}.json"
        self._fh: IO[str] | None = None
        self._release_guard = threading.Lock()

    def acquire(self, *, port: int | None) -> None:
        fh = open(self.lock_path, "a+")  # noqa: SIM115 - held open for the server's lifetime
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise HarnessError(self._held_message()) from None
        self._fh = fh
        if holders := [p for p in _vllm_processes() if _shares_device(p, self.device)]:
            self.release()
            pids = " ".join(str(p.pid) for p in holders)
            raise HarnessError(
                f"{'; '.join(_describe(p) for p in holders)}: already on {self.device}. "
                f"Stop it first: kill {pids}   (kill -9 {pids} if it stays)"
            )
        if port is not None and (pid := port_holder(port)) is not None:
            self.release()
            who = f"PID {pid}" if pid else "another process"
            raise HarnessError(f"--port {port}: already in use by {who}; pass another --port or leave it out")

    def record(self, **info: object) -> None:
        self.info_path.write_text(json.dumps({"harness_pid": os.getpid(), "since": time.time(), **info}))

    def _held_message(self) -> str:
        try:
            info = json.loads(self.info_path.read_text())
        except (OSError, json.JSONDecodeError):
            info = {}
        server = info.get("server_pid", "?")
        owner = info.get("harness_pid", "?")
        where = f" on port {info['port']}" if info.get("port") else ""
        model = f" serving {info['model']}" if info.get("model") else ""
        return (
            f"a harness vLLM server already holds {self.device}: PID {server}{where}{model} "
            f"(started by harness PID {owner}); stop it (kill {owner}) or wait for its idle shutdown"
        )

    def release(self) -> None:
        """Idempotent and safe from any thread: a close during a start releases from the closing
        thread while the failed start releases from its own (both once read ``_fh`` as open, and
        the second unlocked None: a TypeError instead of the start's error)."""
        with self._release_guard:
            fh, self._fh = self._fh, None
        if fh is not None:
            try:
                self.info_path.unlink(missing_ok=True)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
                fh.close()

    @property
    def held(self) -> bool:
        return self._fh is not None
