"""The SDK's ``terminal`` and ``file_editor`` registry entries, as the OpenHands runner needs them.

An agent's tool spec (``Tool(name="terminal", params=...)``) is resolved through the SDK's
process-wide tool registry. The harness's episodes need other executors behind the same tools:
local ones (a terminal ready at its prompt without the SDK's blind 1 s sleep, history files and
the editor's undo history inside the episode: sdk_tuning.py) and container ones (the tool server,
remote_tools.py). So one entry per tool name replaces the SDK's, once per process, and routes by a
spec parameter that only the OpenHands runner's ``build_agent`` sets:

    harness = "local"            the harness's local executors
    harness = "sandbox:<id>"     inside that container sandbox
    (no ``harness`` parameter)   the SDK's own ``create``, unchanged

Scope: by parameter, not by context. The SDK resolves specs in a thread pool of its own
(AgentBase._initialize), where neither a thread-local nor the episode's ContextVar is visible,
and the registry has no per-conversation entries; a spec without the parameter (any other caller
of the SDK in this process) gets exactly the SDK's tool. The tools created are always the SDK's
own ``TerminalTool`` / ``FileEditorTool`` (same schema, description and recorded kind); only the
executor differs. Checked: openhands-sdk (the registry calls ``create(conv_state=..., **params)``)
and openhands-tools (the executors reach into private state), before the entries are installed.

The SDK is imported at module level here: import this module only inside functions.
"""

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import harness.episodes.openhands._sdk_env  # noqa: F401  before any openhands import

# isort: split
from openhands.sdk.tool import register_tool
from openhands.sdk.tool.registry import registered_tool_class
from openhands.tools.file_editor import FileEditorTool
from openhands.tools.terminal import TerminalTool

from harness.episodes.openhands._patching import require
from harness.episodes.openhands.remote_tools import create_remote_file_editor, create_remote_terminal
from harness.episodes.openhands.sdk_tuning import create_local_file_editor, create_local_terminal

if TYPE_CHECKING:
    from openhands.sdk.conversation.state import ConversationState

PARAM = "harness"
LOCAL = "local"
SANDBOX = "sandbox:"
TOOLS = ("terminal", "file_editor")  # the tools that take PARAM


def _sandbox(where: str) -> str | None:
    """The sandbox id a PARAM value names; None for a local one."""
    if where == LOCAL:
        return None
    if where.startswith(SANDBOX):
        return where.removeprefix(SANDBOX)
    raise ValueError(f"tool spec parameter {PARAM}={where!r}: expected {LOCAL!r} or '{SANDBOX}<id>'")


class _Terminal(TerminalTool):
    """Registry entry for ``terminal``; never instantiated: ``create`` returns ``TerminalTool``s."""

    name = "terminal"

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: "ConversationState", harness: str | None = None, **params: Any
    ) -> Sequence[TerminalTool]:
        if harness is None:  # not the OpenHands runner's spec: the SDK's tool as it is
            return TerminalTool.create(conv_state, **params)
        sandbox = _sandbox(harness)
        if sandbox is None:
            return create_local_terminal(conv_state, **params)
        return create_remote_terminal(conv_state, sandbox)  # the container's server picks its type


class _FileEditor(FileEditorTool):
    """Registry entry for ``file_editor``; ``create`` returns ``FileEditorTool``s."""

    name = "file_editor"

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: "ConversationState", harness: str | None = None, **params: Any
    ) -> Sequence[FileEditorTool]:
        if harness is None:
            return FileEditorTool.create(conv_state, **params)
        sandbox = _sandbox(harness)
        if sandbox is None:
            return create_local_file_editor(conv_state, confine_to=params.get("confine_to"))
        return create_remote_file_editor(conv_state, sandbox)


_ENTRIES: dict[str, type] = {"terminal": _Terminal, "file_editor": _FileEditor}
_once = threading.Lock()


class _OwnDuplicateNotice(logging.Filter):
    """Drops the registry's "Duplicate tool name registered" line for this thread's replacement
    (replacing is the point here); every other line, and other threads' lines, pass."""

    def __init__(self) -> None:
        super().__init__()
        self._thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.thread == self._thread
        return not (own and str(record.msg).startswith("Duplicate tool name registered"))


def use_harness_tools() -> None:
    """Install the entries above over the SDK's (idempotent; again if something replaced them)."""
    require("openhands-sdk", "the tool registry's terminal and file_editor entries (tool_specs.py)")
    require("openhands-tools", "TerminalTool / FileEditorTool's executors (sdk_tuning.py, remote_tools.py)")
    with _once:
        missing = {n: f for n, f in _ENTRIES.items() if registered_tool_class(n) is not f}
        if not missing:
            return
        registry_log = logging.getLogger("openhands.sdk.tool.registry")
        notice = _OwnDuplicateNotice()
        registry_log.addFilter(notice)
        try:
            for name, factory in missing.items():
                register_tool(name, factory)
        finally:
            registry_log.removeFilter(notice)
