"""One multiplexed OpenSSH connection to a GPU host: commands and tunnels over a single login.

The system's ``ssh`` client does the SSH: whatever ``ssh HOST`` accepts works (aliases, ports,
keys, the agent, ProxyJump from the user's config, or ``--ssh-config FILE``). The master
connection is a child of the harness that gets SIGTERM when the harness dies (even by SIGKILL),
so a killed harness drops the connection and stops renewing the server's lease.
"""

import hashlib
import json
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.children import popen_tied
from harness.errors import HarnessError

_HOSTSIDE = Path(__file__).with_name("hostside.py")
_CONNECT_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


class SSHHost:
    """``ssh HOST`` with one control master; ``with SSHHost("gpu-box") as host: host.run([...])``."""

    def __init__(self, host: str, *, config_file: Path | None = None) -> None:
        if shutil.which("ssh") is None:
            raise HarnessError(
                "--gpu-host: no ssh client on this machine; install OpenSSH (apt-get install openssh-client)"
            )
        if config_file is not None and not Path(config_file).is_file():
            raise HarnessError(f"--ssh-config {config_file}: no such file")
        self.host = host
        self.config_file = config_file
        # The control socket's directory is private: whoever can open the socket uses the login.
        self._dir = Path(tempfile.mkdtemp(prefix="harness-ssh-"))
        self.control = self._dir / "control"
        self._master: subprocess.Popen[bytes] | None = None
        self._hostside: str | None = None
        # connect and close from several threads (the lease's reconnect, a stop, a restart): one
        # close's rmtree of the socket's directory under another's new master loses its socket
        self._lock = threading.RLock()

    # ---- the connection ------------------------------------------------------------------------
    def _ssh(self, *options: str) -> list[str]:
        config = ["-F", str(self.config_file)] if self.config_file is not None else []
        return [
            "ssh",
            *config,
            "-o", f"ControlPath={self.control}",
            "-o", "BatchMode=yes",  # a password prompt would hang an unattended run: refuse instead
            "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3",
            *options,
        ]  # fmt: skip

    def connect(self) -> "SSHHost":
        with self._lock:  # reentrant: a failed connect closes
            if self.alive():
                return self
            self._dir.mkdir(mode=0o700, exist_ok=True)  # again after a close
            # tied to this process, not to the thread that connects (a lease thread reconnecting)
            self._master = popen_tied(
                [
                    *self._ssh("-M", "-N", "-o", "ControlPersist=no", "-o", "ExitOnForwardFailure=yes"),
                    self.host,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C of the terminal is the harness's to handle, not ssh's
            )
            deadline = time.monotonic() + _CONNECT_TIMEOUT_S
            while not self.alive():
                if self._master.poll() is not None:
                    err = self._master.stderr.read().decode(errors="replace") if self._master.stderr else ""
                    raise HarnessError(
                        f"--gpu-host {self.host}: ssh could not connect ({_last_line(err)}); "
                        f"check that `ssh {self.host}` logs in without a prompt"
                    )
                if time.monotonic() > deadline:
                    self.close()
                    raise HarnessError(
                        f"--gpu-host {self.host}: ssh did not connect within {_CONNECT_TIMEOUT_S:.0f} s"
                    )
                time.sleep(0.1)
            return self

    def alive(self) -> bool:
        if self._master is None or self._master.poll() is not None:
            return False
        check = subprocess.run([*self._ssh("-O", "check"), self.host], capture_output=True)
        return check.returncode == 0

    def close(self) -> None:
        with self._lock:
            if self._master is not None and self._master.poll() is None:
                subprocess.run([*self._ssh("-O", "exit"), self.host], capture_output=True, timeout=15)
                try:
                    self._master.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._master.kill()
                    self._master.wait()
            if self._master is not None and self._master.stderr is not None:
                self._master.stderr.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "SSHHost":
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- commands ------------------------------------------------------------------------------
    def run(
        self, argv: list[str], *, input: bytes | None = None, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` on the host (quoted for its shell) over the master connection."""
        cmd = [*self._ssh(), self.host, "--", shlex.join(argv)]
        try:
            done = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HarnessError(
                f"--gpu-host {self.host}: `{shlex.join(argv)[:80]}` did not answer in {timeout:.0f} s"
            ) from None
        if check and done.returncode != 0:
            raise HarnessError(
                f"--gpu-host {self.host}: `{shlex.join(argv)[:80]}` failed (exit {done.returncode}): "
                f"{_last_line(done.stderr.decode(errors='replace'))}"
            )
        return done

    def popen(self, argv: list[str], **kwargs: Any) -> "subprocess.Popen[bytes]":
        return subprocess.Popen([*self._ssh(), self.host, "--", shlex.join(argv)], **kwargs)

    def hostside(
        self,
        *args: str,
        input: dict[str, Any] | None = None,
        timeout: float = 120.0,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """Run a command of hostside.py on the host (installing it there once, under its digest);
        ``progress`` gets each line it says on stderr as it says it."""
        script = self._install_hostside()
        data = (json.dumps(input) + "\n").encode() if input is not None else None
        if progress is None:
            done = self.run(["python3", script, *args], input=data, timeout=timeout)
        else:
            done = self._streamed(["python3", script, *args], data, progress)
        try:
            out = json.loads(done.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise HarnessError(
                f"--gpu-host {self.host}: no answer from the harness's host script "
                f"({_last_line(done.stderr.decode(errors='replace'))})"
            ) from None
        if isinstance(out, dict) and out.get("error"):
            raise HarnessError(f"--gpu-host {self.host}: {out['error']}")
        return dict(out)

    def _streamed(
        self, argv: list[str], data: bytes | None, progress: Callable[[str], None]
    ) -> subprocess.CompletedProcess[bytes]:
        proc = self.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(data or b"")
        proc.stdin.close()
        said: list[str] = []
        for raw in proc.stderr:  # hostside writes its stdout (one JSON line) only at the end
            said.append(raw.decode(errors="replace").rstrip())
            progress(said[-1])
        stdout = proc.stdout.read()
        code = proc.wait()
        if code != 0:
            raise HarnessError(
                f"--gpu-host {self.host}: `{shlex.join(argv)[:80]}` failed (exit {code}): {_last_line(chr(10).join(said))}"
            )
        return subprocess.CompletedProcess(argv, code, stdout, "\n".join(said).encode())

    def _install_hostside(self) -> str:
        if self._hostside is not None:
            return self._hostside
        code = _HOSTSIDE.read_bytes()
        digest = hashlib.sha256(code).hexdigest()[:16]
        probe = self.run(
            [
                "sh",
                "-c",
                'command -v python3 >/dev/null || exit 3; d="${HARNESS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harness}/remote"; echo "$d"',
            ],
            check=False,
        )
        if probe.returncode == 3:
            raise HarnessError(f"--gpu-host {self.host}: no python3 there; install Python 3 on the host")
        if probe.returncode != 0:
            raise HarnessError(f"--gpu-host {self.host}: {_last_line(probe.stderr.decode(errors='replace'))}")
        root = probe.stdout.decode().strip()
        path = f"{root}/hostside-{digest}.py"
        self.run(
            [
                "sh",
                "-c",
                'mkdir -p "$1" && if [ ! -f "$2" ]; then cat > "$2.tmp" && mv -f "$2.tmp" "$2"; fi',
                "sh",
                root,
                path,
            ],
            input=code,
        )
        self._hostside = path
        return path

    # ---- tunnels -------------------------------------------------------------------------------
    def forward(self, remote_port: int, *, local_port: int | None = None) -> int:
        """A port on this machine's 127.0.0.1 (``local_port``, else a free one) that reaches the
        host's 127.0.0.1:remote_port."""
        local = local_port or _free_port()
        spec = f"127.0.0.1:{local}:127.0.0.1:{remote_port}"
        done = subprocess.run([*self._ssh("-O", "forward", "-L", spec), self.host], capture_output=True)
        if done.returncode != 0:
            raise HarnessError(
                f"--gpu-host {self.host}: no tunnel to its port {remote_port} "
                f"({_last_line(done.stderr.decode(errors='replace'))})"
            )
        return local

    def free_remote_port(self) -> int:
        done = self.run(
            [
                "python3",
                "-c",
                "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])",
            ]
        )
        return int(done.stdout.decode().strip())
