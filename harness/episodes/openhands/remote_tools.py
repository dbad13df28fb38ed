"""The host's end of a container sandbox's tools: the SDK's tool definitions, executed inside.

The agent, its conversation and the loop monitor run in the harness process; only the tool
calls cross into the container (toolserver.py, over a unix socket). The tools are built by the
SDK's own ``TerminalTool.create`` / ``FileEditorTool.create``, so their names, schemas and
descriptions are the SDK's (the file editor's names the container's working directory); only
the executor differs. A tool spec carries ``harness="sandbox:<id>"`` to be resolved this way
(tool_specs.py).

The SDK is imported at module level here: import this module only inside functions.
"""

import json
import shutil
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import harness.episodes.openhands._sdk_env  # noqa: F401  before any openhands import

# isort: split
import contextlib

from openhands.sdk.tool import ToolExecutor
from openhands.tools.file_editor import FileEditorTool
from openhands.tools.file_editor.definition import FileEditorObservation
from openhands.tools.terminal import TerminalTool
from openhands.tools.terminal.definition import TerminalObservation

if TYPE_CHECKING:
    from openhands.sdk.conversation.state import ConversationState


_POLL_S = 5.0  # how often a pending tool call looks at its container from outside
_ALIVE_EVERY_S = 1.0  # how often a wait for the tool server's socket looks at its container


class SandboxLost(RuntimeError):
    """The container (or the tool server in it) went away during an episode."""


class SandboxLimit(RuntimeError):
    """The episode hit one of its container's limits (processes, memory)."""


class SandboxDestroyed(RuntimeError):
    """The agent's own commands took its sandbox's tools away (killed the tool server as root, or
    every fresh shell): the model's outcome, scored, never retried (faults.py)."""


FAILED_NOTE = "toolserver.failed"  # toolserver.py's note beside its socket: why it ended


class ToolClient:
    """One container's tool server connection: one request at a time, a line of JSON each way."""

    def __init__(
        self,
        sock_path: Path,
        loss: Callable[[], RuntimeError],
        memory_desc: str,
        probe: Callable[[], RuntimeError | None],
        call_limit_s: float,
    ) -> None:
        self.sock_path = sock_path
        self._loss = loss  # why the tool server stopped answering, decided by cause
        self._memory_desc = memory_desc
        self._probe = probe  # asked while a call is pending: the container's state from outside
        self._call_limit_s = call_limit_s
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._buf = b""
        self._oom_kills = 0  # a fresh container has had none
        self._forks_refused = 0  # ... and its process limit has refused no fork
        self.failure: RuntimeError | None = None  # what ended the sandbox; the episode ends with it
        self._pending_connect: tuple[float, Callable[[], bool]] | None = None

    def connect_later(self, timeout: float, alive: Callable[[], bool]) -> None:
        """Connect at the first call: the tool server imports the SDK (seconds) while the
        conversation makes its first model call, instead of before it."""
        self._pending_connect = (timeout, alive)

    def connect(self, timeout: float, alive: Callable[[], bool]) -> None:
        """Wait for the tool server's socket (it appears once the SDK tools are up), then connect."""
        deadline = time.monotonic() + timeout
        next_look = time.monotonic() + _ALIVE_EVERY_S
        while not self.sock_path.exists():
            # The container is asked about rarely: each answer costs the engine CPU, which the
            # tool servers' start-ups (and other episodes') need meanwhile.
            if time.monotonic() >= next_look:
                failed = self.sock_path.with_name(FAILED_NOTE)
                if failed.exists():
                    tail = failed.read_text(errors="replace").strip().splitlines()[-1:]
                    raise SandboxLost(f"the tool server did not start: {' '.join(tail)}")
                if not alive():
                    raise SandboxLost(f"the tool server did not start: {self._loss()}")
                next_look = time.monotonic() + _ALIVE_EVERY_S
            if time.monotonic() > deadline:
                raise SandboxLost(f"the tool server did not answer within {timeout:g} s")
            time.sleep(0.02)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(self.sock_path))
        sock.settimeout(_POLL_S)
        self._sock = sock

    def call(self, tool: str, action: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._call(tool, action)
        except (SandboxLost, SandboxLimit, SandboxDestroyed) as exc:
            # The SDK turns a tool's exception into an error the agent reads and goes on; the
            # episode runner looks at ``failure`` after each event and ends the episode instead.
            self.failure = self.failure or exc
            raise

    def _call(self, tool: str, action: dict[str, Any]) -> dict[str, Any]:
        if self.failure is not None:
            raise self.failure
        with self._lock:
            if self._pending_connect is not None:
                timeout, alive = self._pending_connect
                self._pending_connect = None
                self.connect(timeout, alive)
            if self._sock is None:
                raise SandboxLost("the sandbox is closed")
            try:
                self._sock.sendall(json.dumps({"tool": tool, "action": action}).encode() + b"\n")
                line = self._read_line()
            except OSError:
                line = b""
            except RuntimeError:
                self._drop()
                raise
            if not line:
                self._drop()
                raise self._loss()
        reply: dict[str, Any] = json.loads(line)
        self._check_limits(reply.get("limits") or {})
        if "destroyed" in reply:  # the agent kept killing its shell: toolserver.py gave up
            raise SandboxDestroyed(f"the agent's commands destroyed its sandbox: {reply['destroyed']}")
        if "lost" in reply:
            raise SandboxLost(f"the tool server failed: {reply['lost']}")
        return reply

    def _read_line(self) -> bytes:
        """One reply line; while it is pending, the container is looked at from outside every few
        seconds (a shell at its process limit cannot answer at all)."""
        assert self._sock is not None
        deadline = time.monotonic() + self._call_limit_s
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(1 << 16)
            except TimeoutError:
                if (problem := self._probe()) is not None:
                    raise problem from None
                if time.monotonic() > deadline:
                    raise SandboxLimit(
                        f"a tool call ran past the episode's time limit of {self._call_limit_s:g} s"
                    ) from None
                continue
            if not chunk:
                return b""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _check_limits(self, limits: dict[str, Any]) -> None:
        oom = limits.get("oom_kills")
        if isinstance(oom, int) and oom > self._oom_kills:
            raise SandboxLimit(
                f"the container's memory limit ({self._memory_desc}) was exceeded: "
                f"the kernel killed {oom - self._oom_kills} process(es) out of memory"
            )
        pids, pids_max = limits.get("pids"), limits.get("pids_max")
        # A shell left at its process limit cannot run the next command: the episode is over. As
        # for memory, hitting the limit at all ends it (a fork refused), whether or not the count
        # has fallen again by the time the call ends: a fork bomb whose processes exit as their
        # forks fail dies out in moments.
        refused = limits.get("forks_refused")
        if isinstance(refused, int) and refused > self._forks_refused:
            raise SandboxLimit(
                f"the container reached its limit of {pids_max} processes: it refused "
                f"{refused - self._forks_refused} fork(s) of the agent's commands"
            )
        if isinstance(pids, int) and isinstance(pids_max, int) and pids >= pids_max - 2:
            raise SandboxLimit(f"the container reached its limit of {pids_max} processes ({pids} running)")

    def close(self) -> None:
        with self._lock:
            self._pending_connect = None
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.sendall(b'{"op": "close"}\n')
            self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None


class RemoteExecutor(ToolExecutor):  # type: ignore[type-arg]
    def __init__(self, client: ToolClient, tool: str, observation_type: Any) -> None:
        self.client, self.tool, self.observation_type = client, tool, observation_type

    def __call__(self, action: Any, conversation: Any = None) -> Any:
        reply = self.client.call(self.tool, action.model_dump(mode="json"))
        if "value_error" in reply:
            raise ValueError(reply["value_error"])  # the SDK shows it to the agent as an error
        if "error" in reply:
            raise SandboxLost(f"the tool server failed: {reply['error']}")
        return self.observation_type.model_validate(reply["observation"])


_clients: dict[str, tuple[ToolClient, str]] = {}
_clients_lock = threading.Lock()


def attach(sandbox_id: str, client: ToolClient, workdir: str) -> None:
    with _clients_lock:
        _clients[sandbox_id] = (client, workdir)


def detach(sandbox_id: str) -> None:
    with _clients_lock:
        _clients.pop(sandbox_id, None)


def _client(sandbox_id: str) -> tuple[ToolClient, str]:
    with _clients_lock:
        try:
            return _clients[sandbox_id]
        except KeyError:
            raise SandboxLost(f"sandbox {sandbox_id} is not open") from None


def create_remote_terminal(conv_state: "ConversationState", sandbox_id: str) -> Sequence[TerminalTool]:
    """The SDK's ``TerminalTool``, its commands run by sandbox ``sandbox_id``'s tool server."""
    client, _ = _client(sandbox_id)
    return TerminalTool.create(conv_state, executor=RemoteExecutor(client, "terminal", TerminalObservation))


def create_remote_file_editor(conv_state: "ConversationState", sandbox_id: str) -> Sequence[FileEditorTool]:
    """The SDK's ``FileEditorTool`` for sandbox ``sandbox_id``'s working directory, its edits made
    by that sandbox's tool server."""
    client, workdir = _client(sandbox_id)
    # The description names the working directory: the container's, not the host's.
    view = SimpleNamespace(workspace=SimpleNamespace(working_dir=workdir), agent=conv_state.agent)
    tools = FileEditorTool.create(view)  # type: ignore[arg-type]
    remote = RemoteExecutor(client, "file_editor", FileEditorObservation)
    for tool in tools:
        local = tool.executor
        history = getattr(getattr(getattr(local, "editor", None), "_history_manager", None), "cache", None)
        if history is not None:  # the unused host editor's undo history folder
            shutil.rmtree(history.directory, ignore_errors=True)
    return [tool.set_executor(remote) for tool in tools]
