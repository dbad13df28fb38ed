"""The scaffold's tools, inside an episode's container.

Run by the agent-tools Python of the sandbox image (openhands-sdk and openhands-tools at the
harness's own versions). It serves one client, the harness on the host, over a unix socket in a
directory the host shares with the container: one JSON object per line each way.

    -> {"tool": "terminal", "action": {...TerminalAction...}}
    <- {"observation": {...TerminalObservation...}, "limits": {...}}   or   {"error": "..."}
    -> {"op": "close"}

Two processes, so that nothing the agent types can take the tools away from the episode:

- the supervisor (this file without ``--worker-fd``) runs as root: it holds the host's
  connection and forwards each request to
- the worker (``--worker-fd``), which runs the tools as the agent's user: its shell, its file
  edits, everything they start. The agent can kill it (``pkill -9 python``, ``kill -9 -1``) but
  not the supervisor, which then answers the call with an error the agent reads ("your command
  killed the shell ...") and starts a fresh worker: the episode goes on, as a terminal would after
  its shell died. Only an agent that keeps killing every new worker ends its episode, and that is
  its outcome (``destroyed``). In an image without the user ``agent`` both run as root, and
  the agent can kill both: the host then decides whose fault that was (ContainerSandbox.loss).

The actions are executed by the SDK's own executors, so the tools behave exactly as they do on
the host and the model sees the same schemas; the conversation (and so the loop monitor) stays
on the host, and the container needs no network at all. ``limits`` reports the container's
cgroup counters (processes, forks the process limit refused, out-of-memory kills) so that the
host can end an episode that hit a limit with the reason.

This file is copied into each container with ready_terminal.py, import_stubs.py and
_patching.py: they import only the standard library, packaging and openhands (the supervisor only
the standard library and packaging: it starts in milliseconds).

What the tool server patches (pydantic's build default, stand-ins for unused packages, the SDK
terminal's private state) was written for the versions in _patching.PINS, which the container's
agent-tools Python has when its image was built with the harness's versions: the supervisor checks
them before it starts a worker, and on another version ends at once, its note naming the library
and the versions (the host's episode then fails with that line).
"""

import argparse
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
os.environ.setdefault("LOG_LEVEL", "WARNING")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _oom_kills() -> int | None:
    """The container's out-of-memory kill count (cgroup v2 memory.events, v1 memory.oom_control)."""
    for path in (Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control")):
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
        except OSError:
            continue
    return None


def _forks_refused(base: Path) -> int | None:
    """How many forks the process limit has refused so far (pids.events' ``max``, v1 and v2)."""
    try:
        for line in (base / "pids.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return None


def limits() -> dict[str, int | None]:
    """Process count, limit and refused forks, and OOM kills, as the container's own cgroup
    reports them. The refusals are counted because the count is a sample: a fork bomb that hit the
    limit can be dying out (each process whose forks fail exits) by the time a call ends."""
    for base in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/pids")):
        current = _read_int(base / "pids.current")
        if current is not None:
            return {
                "pids": current,
                "pids_max": _read_int(base / "pids.max"),
                "forks_refused": _forks_refused(base),
                "oom_kills": _oom_kills(),
            }
    return {"pids": None, "pids_max": None, "forks_refused": None, "oom_kills": _oom_kills()}


_IN_CONTAINER = " in this sandbox's agent-tools Python"
_IMAGE_FIX = "build the image with the harness's versions (docker/README.md) or update the patch"


def check_versions() -> None:
    """The libraries the tool server patches are the versions it was written for (_patching.PINS)."""
    import _patching  # copied beside this file

    _patching.require(
        "pydantic",
        "pydantic._internal._config.config_defaults['defer_build'] while the tools import",
        where=_IN_CONTAINER,
        fix=_IMAGE_FIX,
    )
    _patching.require(
        "openhands-sdk",
        "the SDK's imports of its model clients (import_stubs.py's stand-ins)",
        where=_IN_CONTAINER,
        fix=_IMAGE_FIX,
    )
    _patching.require(
        "openhands-tools",
        "TerminalExecutor's private state (ready_terminal.py)",
        where=_IN_CONTAINER,
        fix=_IMAGE_FIX,
    )


def _import_tools() -> tuple[Any, Any, Any, Any, Any]:
    """The SDK's terminal and file_editor executors and actions, imported as cheaply as they can be.

    They cannot be imported without the whole SDK (its packages import one another, and litellm):
    about 3 s of CPU in every episode's container, the bulk of what a container episode costs
    beyond a local one. Two things cut about a third of it without touching what the tools do:

    - pydantic's ``defer_build``: the SDK and litellm define ~2,800 models at import; each one's
      validator is built at its first use instead (the few this server uses), to the same schema;
    - no cyclic garbage collection during the imports (they make millions of objects and no
      garbage worth collecting); what they made is then frozen out of later collections;
    - the model-client packages the SDK imports but the tools never use are stand-ins
      (import_stubs.py): ~3 -> ~0.5 s. Should the stand-ins ever not satisfy an SDK's imports,
      the tools are imported again over the real packages: slower, never different.

    Scope: this process only (the worker, whose one job the tools are), and the build default and
    the import hook only while the tools import; checked first (``check_versions``).
    """
    check_versions()
    from pydantic._internal import _config  # no public switch

    defaults = getattr(_config, "config_defaults", {})
    deferred = defaults.get("defer_build")
    defaults["defer_build"] = True
    import import_stubs  # copied beside this file

    gc.disable()
    try:
        try:
            with import_stubs.stubbed():
                return _tool_classes()
        except Exception:
            import_stubs.forget_stubbed(owners=("openhands", "ready_terminal"))
            return _tool_classes()
    finally:
        defaults["defer_build"] = deferred
        gc.freeze()
        gc.enable()


def _tool_classes() -> tuple[Any, Any, Any, Any, Any]:
    from openhands.tools.file_editor.definition import FileEditorAction
    from openhands.tools.file_editor.impl import FileEditorExecutor
    from openhands.tools.terminal.definition import TerminalAction
    from openhands.tools.terminal.impl import TerminalExecutor
    from ready_terminal import ReadyTerminalExecutor  # copied beside this file

    return FileEditorAction, FileEditorExecutor, TerminalAction, TerminalExecutor, ReadyTerminalExecutor


class Tools:
    def __init__(self, workdir: str, terminal_type: str) -> None:
        FileEditorAction, FileEditorExecutor, TerminalAction, TerminalExecutor, ReadyTerminalExecutor = (
            _import_tools()
        )
        obs_dir = Path("/tmp/harness-observations")
        obs_dir.mkdir(parents=True, exist_ok=True)
        # The subprocess terminal as local episodes run it (the same bash and set-up, ready at its
        # prompt instead of after the SDK's blind 1 s sleep); the image's ~/.bashrc is read, as
        # the SDK's bash would (it is the task's environment here, not a user's), and no history
        # file is kept.
        if terminal_type == "subprocess":
            terminal = ReadyTerminalExecutor(workdir, full_output_save_dir=str(obs_dir))
        else:
            terminal = TerminalExecutor(
                working_dir=workdir,
                terminal_type=terminal_type,  # type: ignore[arg-type]
                full_output_save_dir=str(obs_dir),
            )
        self.executors: dict[str, Any] = {
            "terminal": terminal,
            "file_editor": FileEditorExecutor(workspace_root=workdir),
        }
        self.actions: dict[str, Any] = {"terminal": TerminalAction, "file_editor": FileEditorAction}

    def call(self, tool: str, action: dict[str, Any]) -> dict[str, Any]:
        executor = self.executors.get(tool)
        if executor is None:
            return {"error": f"no tool {tool!r} in this sandbox (tools: {', '.join(self.executors)})"}
        try:
            obs = executor(self.actions[tool].model_validate(action))
        except ValueError as exc:  # the SDK turns these into an error the agent reads
            return {"value_error": str(exc), "limits": limits()}
        return {"observation": obs.model_dump(mode="json"), "limits": limits()}

    def close(self) -> None:
        for executor in self.executors.values():
            with contextlib.suppress(Exception):
                executor.close()


FAILED_NOTE = "toolserver.failed"  # beside the socket: why the supervisor ended (not by a signal)
_READY = b'{"ready": true}\n'
_WORKER_START_S = 120.0  # the worker imports the SDK: seconds, more on a busy machine
_RESTARTS = 2  # fresh workers killed before they were ready, in a row, before the sandbox is lost


def serve_worker(fd: int, tools: Tools) -> None:
    """The worker's loop: requests from the supervisor on ``fd``, one reply line each."""
    with socket.socket(fileno=fd) as conn, conn.makefile("rwb") as stream:
        stream.write(_READY)
        stream.flush()
        for raw in stream:
            try:
                request = json.loads(raw)
            except json.JSONDecodeError as exc:
                reply: dict[str, Any] = {"error": f"bad request: {exc}"}
            else:
                if request.get("op") == "close":
                    break
                try:
                    reply = tools.call(str(request.get("tool")), request.get("action") or {})
                except Exception:
                    reply = {"error": traceback.format_exc(limit=5)[-4000:]}
            stream.write(json.dumps(reply).encode() + b"\n")
            stream.flush()


class Worker:
    """The tools' process, as the agent's user (``user``: uid and gid; None: as this process)."""

    def __init__(self, argv: list[str], user: tuple[int, int] | None, cwd: str) -> None:
        self._argv, self._user, self._cwd = argv, user, cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._stream: Any = None
        self._ready = False

    def start(self) -> None:
        mine, theirs = socket.socketpair()
        ids: dict[str, Any] = {}
        if self._user is not None:  # all three ids: nothing left to regain root with
            ids = {"user": self._user[0], "group": self._user[1], "extra_groups": []}
        with theirs:
            self.proc = subprocess.Popen(
                [*self._argv, "--worker-fd", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                cwd=self._cwd,
                **ids,
            )
        self._sock, self._stream = mine, mine.makefile("rwb")
        self._ready = False

    def ready(self) -> bool:
        """Wait until its tools are up; False when it ended first."""
        if not self._ready:
            line = self._read_line(_WORKER_START_S)
            self._ready = line == _READY
        return self._ready

    def ask(self, raw: bytes) -> bytes:
        """One request, its reply line; b"" when the worker ended instead of answering."""
        try:
            self._stream.write(raw if raw.endswith(b"\n") else raw + b"\n")
            self._stream.flush()
        except OSError:
            return b""
        return self._read_line(None)

    def _read_line(self, timeout: float | None) -> bytes:
        assert self._sock is not None
        try:
            self._sock.settimeout(timeout)
            return bytes(self._stream.readline())
        except OSError:  # a timeout included: the worker is given up
            return b""

    def ended(self) -> int | None:
        """Its exit status once it has ended (negative: the signal that killed it), else None."""
        return None if self.proc is None else self.proc.poll()

    def reap(self) -> int:
        """Its exit status; it is known to have ended or to be ending."""
        assert self.proc is not None
        self._drop()
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def close(self) -> None:
        if self.proc is None:  # never started (the supervisor refused to)
            return
        with contextlib.suppress(OSError):
            self._stream.write(b'{"op": "close"}\n')
            self._stream.flush()
        self._drop()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def _drop(self) -> None:
        for end in (self._stream, self._sock):
            if end is not None:
                with contextlib.suppress(OSError):
                    end.close()


def _killed(code: int) -> str:
    try:
        return f"signal {-code}: {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


class Supervisor:
    """Forwards the host's requests to a worker; replaces a worker the agent killed."""

    def __init__(self, worker: Worker, workdir: str) -> None:
        self.worker, self.workdir = worker, workdir

    def _restart(self) -> dict[str, Any] | None:
        """A fresh worker, ready; None, or the reply that ends the sandbox when none comes up."""
        deaths = 0  # fresh workers killed before they were ready, in a row
        while True:
            self.worker.start()
            if self.worker.ready():
                return None
            code = self.worker.reap()
            deaths += 1
            if code >= 0:  # it failed on its own: not the agent's doing
                return {"lost": f"the tools' process could not be restarted (exit code {code})"}
            if deaths > _RESTARTS:
                return {
                    "destroyed": f"the agent's processes killed every new shell before it was up "
                    f"({deaths} in a row, the last by {_killed(code)}): the sandbox's tools are gone"
                }

    def handle(self, raw: bytes) -> dict[str, Any] | bytes:
        """The reply to one request: the worker's line, or the supervisor's own reply."""
        if (code := self.worker.ended()) is not None:
            self.worker.reap()
            return self._after_death(code, ran=False)
        if not self.worker.ready():  # a fresh worker still importing, and it ended meanwhile
            return self._after_death(self.worker.reap(), ran=False)
        line = self.worker.ask(raw)
        if line:
            return line
        return self._after_death(self.worker.reap(), ran=True)

    def _after_death(self, code: int, *, ran: bool) -> dict[str, Any]:
        if code >= 0:
            reply: dict[str, Any] = {"error": f"the tools' process exited with code {code}"}
        else:
            what = (
                f"the command killed this shell's process ({_killed(code)})"
                if ran
                else f"this shell's process was killed ({_killed(code)}) since the last command, which "
                "therefore did not run"
            )
            reply = {
                "value_error": f"{what}. A new shell was started in {self.workdir}: the old one's "
                "variables, working directory and jobs are gone."
            }
        if (lost := self._restart()) is not None:
            return lost
        return {**reply, "limits": limits()}


def serve(sock_path: str, supervisor: Supervisor) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        tmp = sock_path + ".tmp"
        if os.path.exists(tmp):
            os.unlink(tmp)
        server.bind(tmp)
        os.chmod(tmp, 0o600)
        shared = os.stat(os.path.dirname(sock_path))
        os.chown(tmp, shared.st_uid, shared.st_gid)  # the host's user, who made the directory
        os.rename(tmp, sock_path)  # the socket appears only once it accepts: the host waits for it
        server.listen(1)
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            for raw in stream:
                with contextlib.suppress(json.JSONDecodeError, AttributeError):
                    if json.loads(raw).get("op") == "close":
                        break
                reply = supervisor.handle(raw)
                stream.write(reply if isinstance(reply, bytes) else json.dumps(reply).encode() + b"\n")
                stream.flush()


def _user(spec: str | None) -> tuple[int, int] | None:
    """``--user UID:GID`` as ids to switch to; None when this process runs as that user already."""
    if not spec:
        return None
    uid, _, gid = spec.partition(":")
    ids = (int(uid), int(gid or uid))
    return None if ids == (os.getuid(), os.getgid()) else ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", help="the supervisor's socket (not for the worker)")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--terminal-type", default="subprocess")
    parser.add_argument("--user", help="UID:GID the worker runs the tools as")
    parser.add_argument("--worker-fd", type=int, help="run as the worker, on this socket")
    args = parser.parse_args()
    if args.worker_fd is not None:
        # Before the shell starts: it must not hold this, or the supervisor never saw us die.
        os.set_inheritable(args.worker_fd, False)
        tools = Tools(args.workdir, args.terminal_type)
        try:
            serve_worker(args.worker_fd, tools)
        finally:
            tools.close()
        return 0
    argv = [sys.executable, "-B", os.path.abspath(__file__), "--workdir", args.workdir]
    argv += ["--terminal-type", args.terminal_type]
    worker = Worker(argv, _user(args.user), args.workdir)
    try:
        check_versions()  # here, where a refusal reaches the host (the worker's stderr goes nowhere)
        worker.start()
        if not worker.ready():
            raise RuntimeError(f"the tools did not start (exit code {worker.reap()})")
        serve(args.socket, Supervisor(worker, args.workdir))
    except BaseException:
        with contextlib.suppress(OSError):  # the host reads why, instead of waiting out its deadline
            Path(args.socket).with_name(FAILED_NOTE).write_text(traceback.format_exc(limit=5)[-4000:])
        raise
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
