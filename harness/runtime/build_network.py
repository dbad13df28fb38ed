"""A network of its own for the sandbox image's build steps, outside this machine's namespace.

The sandbox image is built on this machine (debootstrap, then pip in a chroot): steps that run
downloaded code. Each runs in a new network (and mount) namespace that slirp4netns connects to
the outside through this machine, with ``--disable-host-loopback``: Debian's mirror and PyPI
answer, services on this machine's loopback do not. DNS inside is slirp4netns's forwarder (its
``nameserver`` line is bind-mounted over /etc/resolv.conf in the step's own mount namespace, and
written into the chroot's), so a resolver on this machine's loopback (systemd-resolved's
127.0.0.53) still serves the build. A proxy on this machine's loopback does not.
"""

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import TextIO

from harness.errors import HarnessError

RESOLV_CONF = "nameserver 10.0.2.3\n"  # slirp4netns's DNS forwarder
_ATTACH_TIMEOUT_S = 10.0
# $1: the resolv.conf to bind over /etc/resolv.conf; then the command. The step waits for its
# network (slirp4netns configures tap0 with a default route), so it never starts without one.
_STEP = """
n=0
until grep -q "^tap0[[:space:]]*00000000" /proc/net/route; do
  n=$((n + 1)); [ "$n" -gt 200 ] && { echo "harness: the build step's network did not come up" >&2; exit 97; }
  sleep 0.05
done
mount --bind "$1" /etc/resolv.conf || exit 98
shift
exec "$@"
"""
TOOLS = {"unshare": "util-linux", "slirp4netns": "slirp4netns"}  # tool: the Debian package holding it


def isolated(cmd: Sequence[str], resolv: str) -> list[str]:
    """``cmd`` in its own network and mount namespaces (start ``attach`` on the process)."""
    return ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c", _STEP, "sh", resolv, *cmd]


def _namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


@contextlib.contextmanager
def attach(proc: "subprocess.Popen[str]", log: TextIO) -> Iterator[None]:
    """slirp4netns for the step ``proc`` (started with ``isolated``), once the step is in its own
    network namespace (never before: it would configure this machine's), until the block ends."""
    ours = _namespace(os.getpid())
    deadline = time.monotonic() + _ATTACH_TIMEOUT_S
    while _namespace(proc.pid) in (ours, None):
        if proc.poll() is not None:  # it failed before its namespace existed: its output says why
            yield
            return
        if time.monotonic() > deadline:
            raise HarnessError(f"the build step (PID {proc.pid}) did not enter its own network namespace")
        time.sleep(0.01)
    slirp = subprocess.Popen(
        ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", str(proc.pid), "tap0"],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        yield
    finally:
        slirp.terminate()
        try:
            slirp.wait(timeout=5)
        except subprocess.TimeoutExpired:
            slirp.kill()
            slirp.wait()
