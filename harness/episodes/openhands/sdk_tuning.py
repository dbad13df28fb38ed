"""SDK parts swapped for versions that do the same work with less waiting.

An episode runs the same shell, sends the same requests and writes the same files; only time
that nothing needs goes away:

- Terminal start-up. The SDK's PTY bash (``SubprocessTerminal.initialize`` in
  openhands/tools/terminal/terminal/subprocess_terminal.py) writes its set-up command and then
  sleeps a blind 1 s before the first model call. ``ReadyTerminal`` starts the same bash with the
  same set-up command, waits for the prompt bash prints after it (as long as that takes, never a
  fixed time), and does that wait alongside the first model call: the first command blocks until
  the shell is ready. It lives in ready_terminal.py: a container's tool server runs it too.
  ``create_local_terminal`` puts it behind the SDK's ``TerminalTool``.
- Persistence. The SDK's ``LocalFileStore`` fsyncs every event file, event-count marker and
  base_state.json as it writes it (about five fsyncs a turn). ``EpisodeFileStore`` writes the same
  files atomically (temporary file + rename, as the SDK does) and fsyncs them once, when the
  episode ends, before its record is stored.
- Request building. The openai client that litellm calls re-walks every request body against its
  TypedDict annotations (``openai._utils._transform.maybe_transform``) to apply key aliases and
  value formats. The chat-completion parameter types have neither, so for a body of plain JSON
  values the walk only copies it; it cost ~10 ms of GIL-held CPU per call at turn 30 and grows
  with the conversation. ``use_fast_request_transform`` returns such a body without the walk,
  dropping the omitted parameters as the walk does, and keeps the walk for anything else (a
  type with an alias or format, a value that is not plain JSON).
- Tool schemas. Every model call rebuilds each tool's JSON schema from its pydantic action class
  (``Schema.to_mcp_schema`` -> ``model_json_schema``), ~0.5 ms per tool per call, for classes
  that never change. ``use_cached_tool_schemas`` builds each once per class and hands out copies
  (callers reorder and extend what they get).
- Nothing outside the run directory. The SDK's file editor keeps its undo history in a fresh
  ``/tmp/oh_editor_history_*`` folder per episode that nothing removes, and its interactive bash
  appends the agent's commands to the user's ``~/.bash_history`` (and reads it in). The editor's
  history goes into the episode's conversation directory (``create_local_file_editor``) and the
  shell's into a file there (``HISTFILE``, set again after ``~/.bashrc`` may have changed it).
- Garbage collection. Importing the SDK (litellm, openai, pydantic models) leaves ~450k objects
  that live as long as the process; each full collection (one every few episodes, set off by the
  objects every turn allocates) rescanned them all, ~0.3 s each. ``freeze_imports`` moves them out
  of the collector's sight once per process.

Each part acts only for the OpenHands runner's episodes and refuses a library version it was not
written for (_patching.py); its docstring says how it is scoped. The registry entries that route
the scaffold's ``terminal`` and ``file_editor`` specs here are in tool_specs.py.

The SDK is imported at module level here: import this module only inside functions.
"""

import copy
import gc
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness.episodes.openhands._sdk_env  # noqa: F401  sets the SDK's environment variables before it is imported

# isort: split
from openhands.sdk.io import LocalFileStore
from openhands.sdk.tool import ToolExecutor
from openhands.sdk.tool.schema import Schema
from openhands.tools.terminal import TerminalTool

from harness.episodes.openhands._patching import in_episode, require
from harness.episodes.openhands.ready_terminal import ReadyTerminal, ReadyTerminalExecutor

__all__ = ["ReadyTerminal", "ReadyTerminalExecutor"]  # re-exported: their home is ready_terminal.py

if TYPE_CHECKING:
    from openhands.sdk.conversation.state import ConversationState


def create_local_terminal(conv_state: "ConversationState", **params: Any) -> Sequence[TerminalTool]:
    """The SDK's ``TerminalTool.create``, over a ReadyTerminalExecutor for the subprocess terminal
    (the scaffold's); any other set-up gets the SDK's executor. The tool itself is the SDK's
    ``TerminalTool``: same schema, description and recorded kind.

    ``confine`` (a command prefix) and ``history_dir``: a sandbox that confines its processes
    (runtime/bwrap.py) starts the shell under its prefix, its history in a directory the prefix
    lets it write; without them the shell gets a PID namespace of its own (procs.py).

    Reached only through tool_specs.py's entry for a spec of the OpenHands runner's.
    """
    confine = params.pop("confine", None)
    history_dir = params.pop("history_dir", None)
    if params.get("terminal_type") != "subprocess" or len(params) > 1:  # other set-ups: the SDK's tool
        return TerminalTool.create(conv_state, **params)
    require("openhands-tools", "TerminalExecutor's private state (ReadyTerminalExecutor, ready_terminal.py)")
    from harness.runtime.procs import own_pid_namespace

    prefix = tuple(confine) if confine else own_pid_namespace()  # its kills reach only what it started
    executor = ReadyTerminalExecutor(
        conv_state.workspace.working_dir,
        full_output_save_dir=conv_state.env_observation_persistence_dir,
        history_file=str(Path(history_dir) / "bash_history")
        if history_dir
        else _in_episode(conv_state, "bash_history"),
        confine=_confined_with_terminal(prefix),
    )
    return TerminalTool.create(conv_state, executor=executor)


def _confined_with_terminal(confine: tuple[str, ...]) -> tuple[str, ...]:
    """``confine`` with the shell made the leader of a session whose controlling terminal is its PTY.

    In its own PID namespace the shell is process 1 of a process group that began outside, with no
    controlling terminal: the PTY's Ctrl-C (the SDK's ``C-c``) reached nothing and an interrupted
    ``sleep 30`` ran to its end, and bash ran without job control. ``setsid --ctty`` (util-linux,
    beside ``unshare``) gives it the terminal the SDK's own unconfined shell has. Without ``setsid``
    the shell stays as it was.
    """
    setsid = shutil.which("setsid")
    return (*confine, setsid, "--ctty") if confine and setsid else confine


def _in_episode(conv_state: "ConversationState", name: str) -> str | None:
    """A path in the conversation's persistence directory (inside the run's episode directory)."""
    root = getattr(conv_state, "persistence_dir", None)
    return str(Path(root) / name) if root else None


class WorkspaceOnlyEditor(ToolExecutor):  # type: ignore[type-arg]
    """The file editor of a confined sandbox: a path that resolves outside the workspace (a symlink
    followed, ``..``) is refused with an error observation; everything else goes to the SDK's."""

    def __init__(self, inner: Any, root: Path) -> None:
        self.inner = inner
        self.root = Path(os.path.realpath(root))

    def close(self) -> None:
        self.inner.close()

    def __call__(self, action: Any, conversation: Any = None) -> Any:
        from openhands.tools.file_editor.definition import FileEditorObservation

        where = Path(os.path.realpath(str(action.path)))
        if where != self.root and self.root not in where.parents:
            return FileEditorObservation.from_text(
                text=f"{action.path} is outside the workspace ({self.root}): this sandbox confines the "
                "file editor to it",
                command=action.command,
                is_error=True,
            )
        return self.inner(action, conversation)

    def __getattr__(self, name: str) -> Any:  # the SDK reads the editor's own attributes (editor, close)
        return getattr(self.inner, name)


def create_local_file_editor(conv_state: "ConversationState", confine_to: str | None = None) -> Sequence[Any]:
    """The SDK's ``FileEditorTool.create``, with the editor's undo history inside the episode.

    The SDK's editor makes a ``/tmp/oh_editor_history_*`` folder of its own on creation, which
    nothing removes (hundreds piled up); it is removed at once and the history kept in the
    conversation directory instead (a temporary folder removed with the editor when the
    conversation persists nothing).

    Reached only through tool_specs.py's entry for a spec of the OpenHands runner's.
    """
    require("openhands-tools", "the file editor's private history manager (create_local_file_editor)")
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.file_editor.utils.history import FileHistoryManager

    tools = FileEditorTool.create(conv_state)
    for tool in tools:
        editor = getattr(tool.executor, "editor", None)
        manager = getattr(editor, "_history_manager", None)
        if editor is None or manager is None:
            continue
        where = _in_episode(conv_state, "editor_history")
        history = Path(where) if where else Path(tempfile.mkdtemp(prefix="harness-editor-history-"))
        if where is None:
            weakref.finalize(editor, shutil.rmtree, history, True)
        editor._history_manager = FileHistoryManager(
            max_history_per_file=manager.max_history_per_file, history_dir=history
        )
        shutil.rmtree(manager.cache.directory, ignore_errors=True)
    if confine_to is not None:
        return [tool.set_executor(WorkspaceOnlyEditor(tool.executor, Path(confine_to))) for tool in tools]
    return tools


_once = threading.Lock()


_JSON_LEAVES = (str, int, float, bool, type(None))


def _plain_json(value: object) -> bool:
    """Only dicts with str keys, lists, str, int, float, bool and None (exact types) all the way down."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, sub in item.items():  # type: ignore[attr-defined]
                if type(key) is not str:
                    return False
                stack.append(sub)
        elif kind is list:
            stack.extend(item)  # type: ignore[arg-type]
        elif kind not in _JSON_LEAVES:
            return False
    return True


def _rewrites_values(annotation: object, seen: set[int] | None = None) -> bool:
    """Whether openai's transform can change plain JSON under ``annotation``: a PropertyInfo with
    an alias or a format anywhere in the type tree."""
    import typing

    import typing_extensions
    from openai._utils import PropertyInfo

    seen = set() if seen is None else seen
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    if typing.get_origin(annotation) is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        if any(isinstance(m, PropertyInfo) and (m.alias or m.format) for m in metadata):
            return True
        return _rewrites_values(base, seen)
    if typing_extensions.is_typeddict(annotation):
        hints = typing_extensions.get_type_hints(annotation, include_extras=True)
        return any(_rewrites_values(h, seen) for h in hints.values())
    return any(_rewrites_values(arg, seen) for arg in typing.get_args(annotation))


_transform_safe: dict[object, bool] = {}


def fast_maybe_transform(original: Callable[[object, object], Any]) -> Callable[[object, object], Any]:
    """``maybe_transform`` that skips openai's type-driven walk where it could change nothing,
    inside an OpenHands episode (``in_episode``); ``original`` everywhere else."""
    from openai._utils import is_given

    def transform(data: object, expected_type: object) -> Any:
        if not in_episode():  # another scaffold's client, the proxy, any other thread: openai's walk
            return original(data, expected_type)
        safe = _transform_safe.get(expected_type)
        if safe is None:
            safe = _transform_safe[expected_type] = not _rewrites_values(expected_type)
        if safe and type(data) is dict:
            body = {k: v for k, v in data.items() if is_given(v)}
            if _plain_json(body):
                return body
        return original(data, expected_type)

    transform.harness_patch = True  # type: ignore[attr-defined]
    return transform


def use_fast_request_transform() -> None:
    """Install ``fast_maybe_transform`` as openai's chat-completions ``maybe_transform``
    (idempotent).

    Scope: installed process-wide, gated per call. openai's resource module reads the name at
    each call, from every thread: installing it around an episode and removing it after would race
    with the other episodes and clients running meanwhile; the gate (``in_episode``, a ContextVar
    that the OpenHands episode sets in its own thread, where the SDK makes its model calls) gives
    every other caller openai's own function. Checked: openai (the walk it skips, and its private
    ``PropertyInfo`` / ``is_given``).
    """
    require("openai", "openai.resources.chat.completions.completions.maybe_transform")
    import openai.resources.chat.completions.completions as chat_completions

    with _once:
        if not getattr(chat_completions.maybe_transform, "harness_patch", False):
            chat_completions.maybe_transform = fast_maybe_transform(chat_completions.maybe_transform)  # type: ignore[assignment]


SDK_TO_MCP_SCHEMA: Callable[[type], dict[str, Any]] = Schema.to_mcp_schema.__func__  # type: ignore[attr-defined]


def cached_mcp_schema(original: Callable[[type], dict[str, Any]]) -> Callable[[type], dict[str, Any]]:
    """``to_mcp_schema`` computed once per class, each call getting its own deep copy, inside an
    OpenHands episode (``in_episode``); ``original`` everywhere else."""
    cache: dict[type, dict[str, Any]] = {}

    def to_mcp_schema(cls: type) -> dict[str, Any]:
        if not in_episode():
            return original(cls)
        schema = cache.get(cls)
        if schema is None:
            schema = cache[cls] = original(cls)
        return copy.deepcopy(schema)

    to_mcp_schema.harness_patch = True  # type: ignore[attr-defined]
    to_mcp_schema.cache = cache  # type: ignore[attr-defined]  # the classes built in episodes so far
    return to_mcp_schema


def use_cached_tool_schemas() -> None:
    """Install ``cached_mcp_schema`` on the SDK's ``Schema`` (idempotent).

    Scope: installed process-wide, gated per call, as ``use_fast_request_transform`` and for the
    same reason (a class member every thread reads); the SDK builds the schemas for a model call in
    the episode's own thread. Checked: openhands-sdk (``Schema.to_mcp_schema`` is a classmethod
    whose result depends only on the class).
    """
    require("openhands-sdk", "openhands.sdk.tool.schema.Schema.to_mcp_schema")
    with _once:
        if not getattr(Schema.__dict__["to_mcp_schema"].__func__, "harness_patch", False):
            Schema.to_mcp_schema = classmethod(cached_mcp_schema(SDK_TO_MCP_SCHEMA))  # type: ignore[method-assign,assignment]


_frozen = False


def freeze_imports() -> None:
    """Once per process: collect, then exempt everything alive now (the SDK's imports) from GC scans.

    Not a patch of a library, and not scoped: the collector is one per interpreter. What other
    code sees is only that objects alive at the first OpenHands episode (imports, mostly) are no
    longer scanned, so a reference cycle among them that later becomes garbage stays in memory;
    nothing's behaviour changes. Called only by the OpenHands runner's episodes.
    """
    global _frozen
    with _once:
        if not _frozen:
            import openhands.tools.file_editor  # noqa: F401  the rest of what an episode imports

            gc.collect()
            gc.freeze()
            _frozen = True


class EpisodeFileStore(LocalFileStore):
    """``LocalFileStore`` without an fsync per write; ``sync()`` makes the written files durable.

    Scoped by construction: a subclass that only the OpenHands runner's episodes pass to their
    conversation; the SDK's own store is untouched.

    Text files are still written atomically (temporary file, then rename), with the SDK's
    owner-only permissions, so a killed process never leaves a torn event file.
    """

    def __init__(self, root: str, cache_limit_size: int = 500) -> None:
        require("openhands-sdk", "LocalFileStore.write (EpisodeFileStore: its cache and get_full_path)")
        super().__init__(root, cache_limit_size=cache_limit_size)
        self._written: set[str] = set()

    def write(self, path: str, contents: str | bytes) -> None:
        if not isinstance(contents, str):
            super().write(path, contents)
            return
        full_path = self.get_full_path(path)
        target = Path(full_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(contents)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.cache[full_path] = contents
        self._written.add(full_path)

    def sync(self) -> None:
        """fsync every file written that still exists, then the directories that hold them."""
        dirs = {self.root}
        for name in sorted(self._written):
            try:
                fd = os.open(name, os.O_RDONLY)
            except FileNotFoundError:  # an event-count marker, deleted since
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            dirs.add(os.path.dirname(name))
        for d in sorted(dirs):
            fd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._written.clear()
