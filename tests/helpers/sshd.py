"""A real OpenSSH server on 127.0.0.1 for the --gpu-host tests: its own port, host key, user key,
authorized_keys and an ssh config with one alias, all in the test's directory.

sshd clears its environment, so the host side finds its cache through ``SetEnv`` on the client
and ``AcceptEnv`` here (a GPU host of the tests with its own cache, where the test says so).
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestSSHD:
    """``with TestSSHD(tmp) as host: ssh -F host.config host.alias ...``"""

    __test__ = False  # not a test class for pytest

    def __init__(self, root: Path, *, alias: str = "gpubox", host_env: dict[str, str] | None = None) -> None:
        self.root = root
        self.alias = alias
        # the test session's OpenMP wait policy (tests/conftest.py) for the host's vLLM too
        passed = {k: os.environ[k] for k in ("OMP_WAIT_POLICY",) if k in os.environ}
        self.host_env = {**passed, **(host_env or {})}
        self.port = _free_port()
        self.config = root / "ssh_config"
        self._proc: subprocess.Popen[bytes] | None = None
        self._children: list[int] = []

    def __enter__(self) -> Self:
        assert SSHD.is_file(), "the --gpu-host tests need Debian's openssh-server (scripts/bootstrap --tests)"
        r = self.root
        r.mkdir(parents=True, exist_ok=True)
        for key in ("host_key", "user_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(r / key)], check=True)
        shutil.copy(r / "user_key.pub", r / "authorized_keys")
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        (r / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {r / 'host_key'}\n"
            f"AuthorizedKeysFile {r / 'authorized_keys'}\nPidFile {r / 'sshd.pid'}\n"
            "StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "PermitRootLogin prohibit-password\nAllowTcpForwarding yes\nAcceptEnv HARNESS_* OMP_WAIT_POLICY\n"
            "MaxSessions 50\nMaxStartups 50\n"
        )
        # one SetEnv line: ssh keeps the first SetEnv directive it reads and ignores the others
        pairs = " ".join(f"{k}={v}" for k, v in self.host_env.items())
        set_env = f"  SetEnv {pairs}\n" if pairs else ""
        self.config.write_text(
            f"Host {self.alias}\n  HostName 127.0.0.1\n  Port {self.port}\n  User root\n"
            f"  IdentityFile {r / 'user_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {r / 'known_hosts'}\n  StrictHostKeyChecking accept-new\n{set_env}"
        )
        self._proc = subprocess.Popen(
            [str(SSHD), "-f", str(r / "sshd_config"), "-D", "-e"],
            stdout=(r / "sshd.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            assert self._proc.poll() is None, (r / "sshd.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "sshd did not listen within 30 s"
                time.sleep(0.05)
        return self

    def stop_listening(self) -> None:
        """The listener gone (no new login), the connections it made left as they are."""
        assert self._proc is not None
        self._children = self.session_pids()
        self._proc.terminate()
        self._proc.wait(timeout=10)

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener): killing one drops that
        client's connection as a network failure would."""
        assert self._proc is not None
        import psutil

        if self._proc.poll() is not None:
            return [pid for pid in self._children if psutil.pid_exists(pid)]
        # each connection: a privileged monitor and its unprivileged child, which holds the socket.
        # Only those: the commands they run lose their connection as on a network failure and end
        # on their own. Killed with them, a login shell's start-up was cut mid-way (pyenv's rehash
        # in root's .bashrc left its lock behind, and every later shell of the machine waited 60 s
        # on it: four --gpu-host tests and three terminal tests failed after it).
        found = []
        for child in psutil.Process(self._proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.name() == "sshd" or " ".join(child.cmdline()[:1]).startswith("sshd"):
                    found.append(child.pid)
        return found

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is not None:
            import psutil

            # what the connections still run: ended with SIGTERM, which lets a shell's EXIT traps
            # (pyenv's lock) run, once their sshd is gone (by design it outlives its listener)
            commands = []
            if self._proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    commands = psutil.Process(self._proc.pid).children(recursive=True)
            for pid in self.session_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for proc in commands:
                with contextlib.suppress(psutil.Error):
                    if proc.name() != "sshd":
                        proc.terminate()
            if self._proc.poll() is None:
                self._proc.terminate()
                self._proc.wait(timeout=10)
