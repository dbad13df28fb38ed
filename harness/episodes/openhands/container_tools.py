"""The OpenHands tools of an episode in a container: its tool server, and how its loss is judged.

The conversation (and so the model calls and the monitor) stays in the harness process; the
scaffold's ``terminal`` and ``file_editor`` act inside the container, through toolserver.py, which
this module starts in the container's channel directory (a host directory shared with it for
that alone: runtime/container.py) and reaches over a unix socket there (remote_tools.py).

The tool server's supervisor runs as root, out of the agent's reach, and its tools as the agent's
user: the agent's ``kill -9 -1`` cannot end it. Where it ends anyway, ``loss`` decides whose
failure that is, by cause (README, "What the harness guarantees under faults").
"""

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.runtime.container import AGENT_USER, IPC_MOUNT, ContainerSandbox
from harness.runtime.images import AGENT_PYTHON
from harness.runtime.task_images import TaskImageError
from harness.seam import Sandbox

if TYPE_CHECKING:
    from harness.episodes.openhands.remote_tools import ToolClient

_TOOLS_START_TIMEOUT_S = 60.0
# What runs the tools in the container (standard library and openhands only: no harness there).
_HERE = Path(__file__).parent
TOOL_SERVER_FILES = (
    _HERE / "toolserver.py",
    _HERE / "import_stubs.py",
    _HERE / "ready_terminal.py",
    _HERE / "_patching.py",  # the tool server checks the versions it patches before it starts
)
SOCKET = "tools.sock"
# One exec: no agent tools in the image -> 3; else the tool server started in the background.
_LAUNCH = """
test -x "$1" || exit 3
"$@" </dev/null >/dev/null 2>&1 &
"""


def _launched(sandbox: ContainerSandbox) -> bool:
    return sandbox.channel is not None and (sandbox.channel / TOOL_SERVER_FILES[0].name).exists()


class ToolServerPrep:
    """The runner's SandboxPrep: the tool server started in a container sandbox (ahead of its
    episode when the runtime starts sandboxes ahead); nothing to do in a local one."""

    def __init__(self, terminal_type: str) -> None:
        self.terminal_type = terminal_type
        self.key = f"openhands-tools:{terminal_type}"

    def start(self, sandbox: Sandbox) -> None:
        if isinstance(sandbox, ContainerSandbox) and not _launched(sandbox):
            launch_tool_server(sandbox, self.terminal_type)

    def settle(self, sandbox: Sandbox) -> None:
        """Until its tool server answers (its socket appears only once it accepts), or its
        container is gone."""
        if not isinstance(sandbox, ContainerSandbox) or sandbox.channel is None:
            return
        deadline = time.monotonic() + _TOOLS_START_TIMEOUT_S
        next_look = time.monotonic() + 1.0
        while not (sandbox.channel / SOCKET).exists() and time.monotonic() < deadline:
            if time.monotonic() > next_look:
                sandbox.container.reload()  # raises when it was removed: settled all the same
                if sandbox.container.status != "running":
                    return
                next_look = time.monotonic() + 1.0
            time.sleep(0.02)


def launch_tool_server(sandbox: ContainerSandbox, terminal_type: str) -> None:
    """The tool server started in the container (it answers once it has imported the SDK): its
    supervisor as root, out of the agent's reach, the tools as the agent's user (toolserver.py)."""
    import shutil

    channel = sandbox.channel
    if channel is None:
        raise RuntimeError(f"container {sandbox.container.name} has no channel directory for a tool server")
    for source in TOOL_SERVER_FILES:
        shutil.copy(source, channel / source.name)
    user = sandbox.user
    code, _ = sandbox.container.exec_run(
        [
            "sh",
            "-c",
            _LAUNCH,
            "launch",
            AGENT_PYTHON,
            "-B",  # no __pycache__ of ready_terminal.py in the shared directory
            f"{IPC_MOUNT}/toolserver.py",
            "--socket",
            f"{IPC_MOUNT}/{SOCKET}",
            "--workdir",
            sandbox.workdir,
            "--terminal-type",
            terminal_type,
            *(["--user", user] if user != "0" else []),
        ],
        user="0",
        workdir=sandbox.workdir,
        environment={"HOME": "/home/agent", "USER": "agent"} if user == AGENT_USER else {},
    )
    if code == 3:
        raise TaskImageError(
            f"image {sandbox.container.image.tags[0] if sandbox.container.image.tags else sandbox.container.image.id} "
            f"has no agent tools at {AGENT_PYTHON}: build it FROM the harness sandbox image or with "
            "docker/agent-runtime.Dockerfile (docker/README.md)"
        )


class ContainerTools:
    """An episode's tools in ``sandbox`` from the conversation's side: the tool server's client,
    the parameters that point the scaffold's tools at it, and what broke it."""

    def __init__(self, sandbox: ContainerSandbox, terminal_type: str) -> None:
        self.sandbox = sandbox
        self.terminal_type = terminal_type
        self._id = uuid.uuid4().hex
        self._client: ToolClient | None = None

    def params(self) -> dict[str, dict[str, Any]]:
        """The scaffold's tool spec parameters that route its tools into this sandbox."""
        from harness.episodes.openhands import tool_specs

        return {name: {tool_specs.PARAM: f"{tool_specs.SANDBOX}{self._id}"} for name in tool_specs.TOOLS}

    def start(self) -> None:
        """Before the conversation: the tool server (already starting when the sandbox was started
        ahead); the first tool call waits for it to answer."""
        from harness.episodes.openhands.remote_tools import ToolClient, attach

        sandbox = self.sandbox
        assert sandbox.channel is not None
        if not _launched(sandbox):
            launch_tool_server(sandbox, self.terminal_type)
        client = ToolClient(
            sandbox.channel / SOCKET,
            self.loss,
            f"{sandbox.limits.memory_gib:g} GiB",
            probe=self.probe,
            call_limit_s=sandbox.task.limits.agent_timeout_s,
        )
        client.connect_later(_TOOLS_START_TIMEOUT_S, alive=self._running)
        self._client = client
        attach(self._id, client, sandbox.workdir)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One tool call answered by the tool server (what the scaffold's tools do per action)."""
        assert self._client is not None, "start() first"
        reply: dict[str, Any] = self._client.call(tool, arguments)
        return reply

    def close(self) -> None:
        from harness.episodes.openhands.remote_tools import detach

        detach(self._id)
        if self._client is not None:
            self._client.close()

    def failure(self) -> BaseException | None:
        return self._client.failure if self._client is not None else None

    def _running(self) -> bool:
        from docker.errors import NotFound

        try:
            self.sandbox.container.reload()
        except NotFound:
            return False
        except Exception:  # a slow or busy engine is not a dead container: the deadline decides
            return True
        return bool(self.sandbox.container.status == "running")

    def probe(self) -> RuntimeError | None:
        """The container seen from outside while a tool call is pending: gone, or at its process limit."""
        from harness.episodes.openhands.remote_tools import SandboxLimit

        container = self.sandbox.container
        try:
            stats = container.stats(stream=False, one_shot=True)
            container.reload()
        except Exception:
            return self.loss()
        if container.status != "running":
            return self.loss()
        pids = (stats.get("pids_stats") or {}).get("current")
        limit = self.sandbox.limits.pids
        if isinstance(pids, int) and pids >= limit - 2:
            return SandboxLimit(f"the container reached its limit of {limit} processes ({pids} running)")
        return None

    def loss(self) -> RuntimeError:
        """Why the tools stopped answering, decided by cause: the container gone or stopped from
        outside, or the tool server failing on its own, is the infrastructure's (SandboxLost: retried,
        never scored); a memory limit the agent's commands hit (SandboxLimit) and a tool server the
        agent killed (SandboxDestroyed) are the model's outcome. The agent can kill it only where it
        runs as root (an image without the user ``agent``): elsewhere the server is root's and the
        agent's processes are not (toolserver.py)."""
        from harness.episodes.openhands.remote_tools import (
            FAILED_NOTE,
            SandboxDestroyed,
            SandboxLimit,
            SandboxLost,
        )

        sandbox = self.sandbox
        container = sandbox.container
        name = container.name
        try:
            container.reload()
        except Exception:
            return SandboxLost(f"container {name} is gone (removed or the engine restarted)")
        state = container.attrs.get("State") or {}
        memory = f"{sandbox.limits.memory_gib:g} GiB"
        oom = "the kernel killed a process out of memory"
        if state.get("OOMKilled") or (container.status == "running" and (oom := self._oom_kills())):
            return SandboxLimit(f"the container's memory limit ({memory}) was exceeded: {oom}")
        if container.status != "running":
            return SandboxLost(
                f"container {name} stopped ({container.status}, exit code {state.get('ExitCode')})"
            )
        note = sandbox.channel / FAILED_NOTE if sandbox.channel is not None else None
        if note is not None and note.exists():
            tail = " ".join(note.read_text(errors="replace").strip().splitlines()[-1:])
            return SandboxLost(f"the tool server in container {name} failed: {tail}")
        if sandbox.user != "0":
            return SandboxLost(
                f"the tool server in container {name} exited (it runs as root: the agent's commands cannot end it)"
            )
        return SandboxDestroyed(
            f"the agent's commands killed the tool server in container {name} (e.g. kill -9 -1 or pkill python: "
            "the task's image has no user `agent`, so the agent runs as root and can end any process there); "
            "the container still runs and hit no limit: the model's outcome, scored 0"
        )

    def _oom_kills(self) -> str:
        """The container's out-of-memory kills as words ("" when none), read from its cgroup."""
        from harness.runtime.container_exec import exec_capped

        try:  # an exec whose output is sure to come back (container_exec.py): a lost one read as none
            _, out, _ = exec_capped(
                self.sandbox.container,
                ["cat", "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"],
                user="0",
                workdir="/",
                env={},
            )
        except Exception:
            return ""
        for line in (out or b"").decode(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                return f"the kernel killed {int(value)} process(es) out of memory"
        return ""
