"""A container's files at a checkpoint, taken by a watcher inside it (checkpointd.py).

An exec costs ~100 ms with podman and a copy out as much again: per turn that was fifteen times
the harness's own overhead. The watcher is started once, holds the last walk in memory and writes
each generation into the directory the host shares with the container (the channel): a checkpoint
is one request on its socket and a read of a local file.

Without a Python in the image (or when the watcher cannot start) the episode's checkpoints go
through the sandbox's verbs instead (files.SandboxFiles). A watcher lost mid-episode (a root
image's agent can kill it) is started again and its first generation holds every path; if it
cannot be, the verbs take over with one full generation. Either way no change is lost.
"""

import contextlib
import json
import os
import socket
import stat
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.resume.checkpointd import FAILED_NOTE
from harness.resume.files import STAMP, CheckpointUnusable, Generation, SandboxFiles, append_part
from harness.runtime.export_caps import ExportLimits, over_cap

if TYPE_CHECKING:
    from harness.runtime.container import ContainerSandbox

_HERE = Path(__file__).resolve().parent
# copied into the channel under these names (the watcher imports harness_tree from its directory)
_FILES = ((_HERE / "checkpointd.py", "checkpointd.py"), (_HERE / "tree.py", "harness_tree.py"))
SOCKET = "checkpoint.sock"
_START_TIMEOUT_S = 120.0  # its baseline walk of a very large tree
# One exec: the image's Python (the agent tools' first), the watcher started in the background as
# root, isolated (-I: the shared directory is not first on its import path, no PYTHON* variables);
# no Python 3.6 or later at all -> 3.
_LAUNCH = """
py=""
for c in "$HARNESS_AGENT_PYTHON" "$1" python3 python; do
  if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 &&
     "$c" -I -c 'import sys; sys.exit(sys.version_info < (3, 6))' >/dev/null 2>&1; then
    py=$(command -v "$c"); break
  fi
done
[ -n "$py" ] || exit 3
shift
"$py" -I -B "$@" </dev/null >/dev/null 2>&1 &
"""


def _put(path: Path, data: bytes) -> None:
    """``data`` as the file ``path`` of the shared directory, made anew: a link a root agent left
    there in its place is replaced, never written through to a file of this machine."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class DaemonFiles:
    """A container's working directory, through its watcher (the seam's FileSnapshots)."""

    def __init__(self, sandbox: "ContainerSandbox", limits: ExportLimits | None = None) -> None:
        assert sandbox.channel is not None
        self.sandbox = sandbox
        self.limits = limits or ExportLimits()
        self.channel: Path = sandbox.channel
        self._verbs: SandboxFiles | None = None  # the fallback, once the watcher could not be had
        self._stream: Any = None  # the socket's buffered file
        self._sock: socket.socket | None = None
        self._full = False  # the next generation must hold every path (a generation was lost)
        self._n = 0

    def _start(self) -> bool:
        """The watcher started (its baseline taken); False when it cannot run in this container."""
        from harness.runtime.images import AGENT_PYTHON

        self._disconnect()
        for name in (SOCKET, FAILED_NOTE):
            with contextlib.suppress(FileNotFoundError):
                (self.channel / name).unlink()
        for src, name in _FILES:
            _put(self.channel / name, src.read_bytes())
        from harness.runtime.container import IPC_MOUNT

        code, _ = self.sandbox.container.exec_run(
            ["sh", "-c", _LAUNCH, "launch", AGENT_PYTHON, f"{IPC_MOUNT}/checkpointd.py",
             "--socket", f"{IPC_MOUNT}/{SOCKET}", "--root", self.sandbox.workdir],
            user="0",
            workdir="/",
        )  # fmt: skip
        if code != 0:
            return False
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                # a socket, not a link a root agent put there to some socket of this machine
                if stat.S_ISSOCK((self.channel / SOCKET).lstat().st_mode):
                    return self._connect()
            if (self.channel / FAILED_NOTE).exists():
                return False
            time.sleep(0.005)
        return False

    def _connect(self) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.channel / SOCKET))
        except OSError:
            sock.close()
            return False
        sock.settimeout(600)  # a walk of a very large tree
        self._sock, self._stream = sock, sock.makefile("rwb")
        return True

    def _disconnect(self) -> None:
        for closing in (self._stream, self._sock):
            with contextlib.suppress(OSError):
                if closing is not None:
                    closing.close()
        self._stream = self._sock = None

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._stream is None:
            raise ConnectionError("the watcher is not connected")
        self._stream.write(json.dumps(request).encode() + b"\n")
        self._stream.flush()
        line = self._stream.readline()
        if not line:
            raise ConnectionError("the watcher ended")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ConnectionError("the watcher answered nonsense")
        return reply

    def baseline(self) -> None:
        self._full = False
        if not self._start():
            self._verbs = SandboxFiles(self.sandbox, self.limits)
            self._verbs.baseline()

    def snapshot(self, root: Path, turn: int) -> Generation:
        if self._verbs is not None:
            return self._verbs.snapshot(root, turn)
        self._n += 1
        request = {
            "op": "snapshot",
            "name": f"gen-{turn}-{self._n}",
            "max_bytes": self.limits.max_bytes,
            "max_files": self.limits.max_files,
            "full": self._full,
        }
        try:
            reply = self._ask(request)
        except (OSError, ValueError):
            # the watcher is gone: a new one knows nothing of what was saved, so it saves everything
            if not self._start():
                # the verbs, with no stamp in there (the agent may have made one): every path, once
                self.sandbox.exec(f"rm -f {STAMP}", user="root", timeout=60)
                self._verbs = SandboxFiles(self.sandbox, self.limits)
                return self._verbs.snapshot(root, turn)
            self._full = True
            reply = self._ask({**request, "full": True})
        if "over" in reply:
            raise over_cap(self.limits, f"{reply['over']}, counted in the sandbox")
        if "error" in reply:
            self._full = True
            raise CheckpointUnusable(f"the sandbox's watcher failed: {str(reply['error'])[-300:]}")
        made = [n for n in (reply.get("tar"), reply.get("paths")) if n]
        try:
            # names the watcher chose are plain names in the channel, nothing else
            if any("/" in str(n) or str(n).startswith(".") for n in made):
                raise CheckpointUnusable(f"the sandbox's watcher named {made!r}")
            tar = self._take(root, str(reply["tar"])) if reply.get("tar") else None
            paths = self._take(root, str(reply["paths"])) if reply.get("paths") else None
        except BaseException:
            self._full = True  # the watcher moved on; this generation never reached the checkpoint
            raise
        finally:
            for n in made:
                with contextlib.suppress(OSError):
                    (self.channel / str(n)).unlink()
        self._full = False
        return Generation(tar, paths)

    def _take(self, root: Path, name: str) -> str:
        """A file the watcher wrote, appended to the checkpoint. Read as a regular file of the channel
        and no larger than the caps allow (a root image's agent can write in the channel too: a link
        to a file of this machine, or a file without end, must not reach the checkpoint)."""
        try:
            fd = os.open(self.channel / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise CheckpointUnusable(f"the watcher's {name} could not be read ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as src:
            st = os.fstat(fd)
            # a tar of files within the caps: their bytes, a 512-byte header and padding for each
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.limits.max_bytes + 1024 * (
                self.limits.max_files + 20
            ):
                raise CheckpointUnusable(f"the watcher's {name} is not a file within the export caps")
            return append_part(root, src, st.st_size)  # what it held when looked at, no more

    def restore(self, root: Path, tars: list[str], paths: str | None) -> None:
        SandboxFiles(self.sandbox, self.limits).put_back(root, tars, paths)
        self.baseline()

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError, ConnectionError):
            self._ask({"op": "close"})
        self._disconnect()
