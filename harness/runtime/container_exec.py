"""A command in a running container, its output read only once its stream is known to work.

Podman's Docker API (4.3, Debian 12's) loses the whole attached output of some execs under load:
the command runs and exits as it should, and not one byte of what it printed arrives. Measured on a
busy 2-core box (bench/container_exec.py: three threads, three containers, two busy cores): 8 to
12 of every 240 short execs came back empty, exit code 0; so with ``stream`` on or off, a TTY, and
with the command kept alive 0.2 s after it printed. A mini-swe-agent episode then read an empty
observation for a command that had printed, and nothing said so. Running the command again to get
its output is no remedy: it has run.

So every exec starts with a handshake: a POSIX ``sh`` prints a marker on stdout and waits for a
line on its stdin; only once the marker has come back through the stream does this process send
that line, and only then does the command run (``exec``, stdin /dev/null as before). A stream that
brings no marker in time is a broken attach: it is closed, its ``sh`` gets end-of-file (or, where
no stdin was connected either, gives up after 120 s) and ends without running anything, and a
fresh exec is made (three in all). The command runs once. The same bench: 0 of 960 lost, 91-123 ms
an exec against 61-101 ms.
"""

import contextlib
import socket
import time
from typing import TYPE_CHECKING, Any

from harness.tasks.fresh import CappedBytes

if TYPE_CHECKING:
    from docker.models.containers import Container

STDOUT_CAP = 64 << 20  # stdout bytes kept (a verifier's log directory comes back as a tar there)
_READY = b"\036harness-exec-ready\n"
_NOT_RUN = b"\036harness-exec-not-run\n"
# $0 is a name; "$@" the command. The line is waited for a bounded time where `timeout` exists (a
# broken attach connects no stdin either: its `read` would wait for ever, holding a process).
_HANDSHAKE = (
    "printf '\\036harness-exec-ready\\n'; "
    "if command -v timeout >/dev/null 2>&1; then go=$(timeout 120 head -n 1); else read -r go; fi; "
    "[ \"$go\" = go ] || { printf '\\036harness-exec-not-run\\n'; exit 255; }; "
    'exec "$@" </dev/null'
)
# Seconds for the marker to come back, per attempt: ~0.1 s here under load (p99 0.14 s, 300 execs
# from three threads beside two busy cores); a broken attach never brings it.
_READY_WITHIN_S = (2.0, 5.0, 30.0)


class ExecUnattached(RuntimeError):
    """The engine never connected a command's output, three times: nothing ran."""


def exec_capped(
    container: "Container", cmd: list[str], *, user: str, workdir: str, env: dict[str, str]
) -> tuple[int, bytes, CappedBytes]:
    """Run ``cmd`` in ``container``: (exit status, stdout up to STDOUT_CAP (b"" past it), stderr
    capped). Read as a stream: a command that prints without end never fills this process's memory."""
    seen: list[str] = []
    for within in _READY_WITHIN_S:
        done = _attempt(container, cmd, within, seen, user=user, workdir=workdir, env=env)
        if done is not None:
            return done
    raise ExecUnattached(
        f"container {container.name}: the engine connected no output to {len(_READY_WITHIN_S)} execs of {cmd[:1]} "
        f"(nothing ran; {'; '.join(seen)})"
    )


def _attempt(
    container: "Container",
    cmd: list[str],
    within: float,
    seen: list[str],
    *,
    user: str,
    workdir: str,
    env: dict[str, str],
) -> tuple[int, bytes, CappedBytes] | None:
    """One exec; None when its stream never brought the handshake's marker (the command did not run),
    with what the engine said of it appended to ``seen``."""
    api = container.client.api
    argv = ["sh", "-c", _HANDSHAKE, "harness-exec", *cmd]
    exec_id = api.exec_create(container.id, argv, stdin=True, user=user, workdir=workdir, environment=env)[
        "Id"
    ]
    conn = api.exec_start(exec_id, socket=True)
    raw: Any = getattr(conn, "_sock", conn)  # the socket under docker-py's SocketIO wrapper
    out, err = bytearray(), CappedBytes()
    ready, over, ended = False, False, "the stream ended"
    try:
        raw.settimeout(within)
        while (frame := _frame(raw)) is not None:
            stream, data = frame
            if stream == 2:
                err.add(data)
            elif ready:
                if not over:
                    out += data
                    over = len(out) > STDOUT_CAP
            else:
                out += data
                if len(out) < len(_READY):
                    continue
                if not out.startswith(_READY):  # something else spoke first: not our handshake
                    return None
                ready = True
                del out[: len(_READY)]
                raw.settimeout(None)  # the command's own time limit bounds it from here
                raw.sendall(b"go\n")
                with contextlib.suppress(OSError):
                    raw.shutdown(socket.SHUT_WR)  # its stdin ends: the engine ends the stream with it
    except OSError as exc:  # TimeoutError included
        if ready:
            raise
        ended = (
            f"no marker in {within:g} s" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        )
    finally:
        with contextlib.suppress(OSError):
            conn.close()
    if not ready or out.startswith(_NOT_RUN):  # the line never reached it: it did not run
        # closing the connection ends its sh unrun; what the engine says of it names the failure
        # the next time (an exec that failed to start is not a lost attach)
        seen.append(
            f"{ended}, {_state(api, container, exec_id)}, {len(out)} stdout bytes, stderr {err.text()[-200:]!r}"
        )
        return None
    return _exit_code(api, exec_id), (b"" if over else bytes(out)), err


def _state(api: Any, container: "Container", exec_id: str) -> str:
    try:
        info = api.exec_inspect(exec_id)
        container.reload()
    except Exception as exc:  # the engine's own failure is the answer
        return f"inspect failed ({type(exc).__name__})"
    return f"exec running={info.get('Running')} exit={info.get('ExitCode')}, container {container.status}"


def _frame(raw: Any) -> tuple[int, bytes] | None:
    """The next frame of the exec's multiplexed stream (1 stdout, 2 stderr), None at its end."""
    head = _exactly(raw, 8)
    if head is None:
        return None
    size = int.from_bytes(head[4:], "big")
    data = _exactly(raw, size) if size else b""
    return None if data is None else (head[0], data)


def _exactly(raw: Any, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = raw.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _exit_code(api: Any, exec_id: str) -> int:
    """The exec's exit status; the engine may report the end a moment after the stream closed."""
    deadline = time.monotonic() + 10
    while True:
        info = api.exec_inspect(exec_id)
        if not info.get("Running") or time.monotonic() > deadline:
            code = info.get("ExitCode")
            return code if isinstance(code, int) else -1
        time.sleep(0.01)
