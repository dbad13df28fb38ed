"""The SDK parts the harness swaps in behave as the SDK's own, minus the idle waiting.

Real shells and real files: the SDK's terminal and ours run the same commands side by side.
"""

import os
import re
import select
import signal
import stat
import time
from pathlib import Path

import pytest

import harness.episodes.openhands.sdk  # noqa: F401  sets the SDK's environment first
from harness.episodes.openhands._patching import episode_scope
from harness.episodes.openhands.sdk_tuning import EpisodeFileStore, ReadyTerminal
from tests.helpers.waiting import wait_for

COMMANDS = [
    "echo hello",
    "pwd",
    "mkdir -p sub && cd sub && pwd",
    "false",
    "printf 'a\\nb\\n' | wc -l",
    "cat <<'EOF'\nheredoc line\nEOF",
    "export X=42",
    "echo $X",
    "cd .. && ls",
]


def _session(terminal: object) -> object:
    from openhands.tools.terminal.terminal.terminal_session import TerminalSession

    return TerminalSession(terminal)  # type: ignore[arg-type]


def _run(session: object, commands: list[str]) -> list[tuple[str, int | None]]:
    out = []
    for cmd in commands:
        obs = session.execute(_action(cmd))  # type: ignore[attr-defined]
        out.append((obs.text, obs.exit_code))
    return out


def _action(command: str) -> object:
    from openhands.tools.terminal.definition import TerminalAction

    return TerminalAction(command=command)


# What each of COMMANDS shows (its escapes and any echo of the typed command taken off), and its code.
SHOWN = [
    ("hello", 0),
    ("{ws}", 0),
    ("{ws}/sub", 0),
    ("", 1),
    ("2", 0),
    ("heredoc line", 0),
    ("", 0),
    ("42", 0),
    ("sub", 0),
]
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _shown(observation: str, command: str) -> str:
    """An observation as a reader sees it: whether a pty echoes the typed command depends on when
    bash's readline takes the terminal back (timing under load), not on what the command did."""
    # Blank lines before it too: an Enter's empty prompt line echoed late (fresh3, under load: the
    # observation was "\n\necho line-0\nline-0", its own output, on time).
    text = _ESCAPES.sub("", observation).lstrip("\n")
    return text.removeprefix(command + "\n").strip()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ready_terminal_gives_the_sdk_terminal_s_observations_without_its_start_up_sleep(
    tmp_path: Path,
) -> None:
    """Ours starts without the SDK's 1 s sleep and each command's observation is the command's
    output in the SDK's own form (its bracketed-paste escapes). Not compared turn by turn with a
    live SDK terminal: that one reads its screen after a fixed wait, and under load it lagged a
    command behind (a CI failure), which is the sleep this terminal exists to drop."""
    from openhands.tools.terminal.terminal.subprocess_terminal import SubprocessTerminal

    (tmp_path / "sdk").mkdir()
    (tmp_path / "ours").mkdir()
    sdk = _session(SubprocessTerminal(str(tmp_path / "sdk")))
    ours = _session(ReadyTerminal(str(tmp_path / "ours")))
    try:
        t0 = time.monotonic()
        sdk.initialize()  # type: ignore[attr-defined]
        sdk_start = time.monotonic() - t0
        t0 = time.monotonic()
        ours.initialize()  # type: ignore[attr-defined]
        ours_start = time.monotonic() - t0
        assert sdk_start >= 1.0 and ours_start < sdk_start  # the SDK sleeps 1 s; ours starts bash meanwhile
        seen = _run(ours, COMMANDS)
        assert [(_shown(text, cmd), code) for (text, code), cmd in zip(seen, COMMANDS, strict=True)] == [
            (text.format(ws=tmp_path / "ours"), code) for text, code in SHOWN
        ]
        assert all(text.endswith("\x1b[?2004h") for text, _ in seen)  # the SDK's form: the prompt is back
    finally:
        sdk.close()  # type: ignore[attr-defined]
        ours.close()  # type: ignore[attr-defined]


def test_close_stops_the_pty_reader_before_it_shuts_the_pty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's close shut the PTY while its reader thread could still select() on it: under load
    that logged "PTY reader thread error: Bad file descriptor" with a traceback after every stop
    (fresh18). Ours ends the shell and waits for the reader first."""
    terminal = ReadyTerminal(str(tmp_path))
    terminal.initialize()
    terminal.send_keys("echo up")
    wait_for(lambda: "up" in terminal.read_screen(), timeout=30, what="the shell's answer")
    fd, reader = terminal._pty_master_fd, terminal.reader_thread
    assert fd is not None and reader is not None and reader.is_alive()
    real_close, reader_alive_at_close = os.close, []
    real_select = select.select

    def spy(n: int) -> None:
        if n == fd:
            reader_alive_at_close.append(reader.is_alive())
        real_close(n)

    def preempted(rlist: list, *args: object) -> object:  # the reader held between its checks, as under load
        if rlist == [fd]:
            time.sleep(1.0)
        return real_select(rlist, *args)

    monkeypatch.setattr(select, "select", preempted)
    monkeypatch.setattr(os, "close", spy)
    terminal.close()
    assert reader_alive_at_close == [False]
    assert terminal.process is None and not reader.is_alive()


def test_terminal_spec_resolves_to_the_sdk_tool_over_a_ready_terminal(tmp_path: Path) -> None:
    from openhands.sdk import LocalConversation
    from openhands.tools.terminal import TerminalTool

    from harness.episodes.openhands.sdk import build_agent, build_llm
    from harness.episodes.openhands.sdk_tuning import ReadyTerminalExecutor
    from harness.episodes.openhands.tool_specs import use_harness_tools
    from harness.episodes.scaffold import load_scaffold

    use_harness_tools()
    use_harness_tools()  # idempotent
    scaffold = load_scaffold()
    llm = build_llm(base_url="http://127.0.0.1:9/v1", model="m", api_key="k", scaffold=scaffold)
    conv = LocalConversation(agent=build_agent(scaffold, llm), workspace=str(tmp_path), visualizer=None)
    try:
        conv._ensure_agent_ready()
        tool = conv.agent.tools_map["terminal"]
        assert type(tool) is TerminalTool  # same schema, description and recorded kind as the SDK's
        assert isinstance(tool.executor, ReadyTerminalExecutor)
        assert tool.executor.working_dir == str(tmp_path)
    finally:
        conv.close()


def test_episode_file_store_writes_atomically_and_syncs_what_is_left(tmp_path: Path) -> None:
    store = EpisodeFileStore(str(tmp_path / "conv"))
    store.write("base_state.json", '{"a": 1}')
    store.write("events/event-00000-x.json", "{}")
    store.write("events/.count-1", "")
    store.delete("events/.count-1")  # the SDK replaces its count marker on every event
    store.write("base_state.json", '{"a": 2}')

    root = tmp_path / "conv"
    assert (root / "base_state.json").read_text() == '{"a": 2}'
    assert store.read("base_state.json") == '{"a": 2}'
    assert stat.S_IMODE(os.stat(root / "base_state.json").st_mode) == 0o600  # as the SDK writes them
    assert sorted(p.name for p in root.rglob("*")) == ["base_state.json", "event-00000-x.json", "events"]
    store.sync()  # a deleted file is skipped, not an error
    store.sync()


def _compare_with_openai_walk(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Route chat-completion bodies through both transforms; record whether the fast path was taken."""
    import openai.resources.chat.completions.completions as chat_completions
    from openai._utils import maybe_transform

    from harness.episodes.openhands import sdk_tuning

    fast = sdk_tuning.fast_maybe_transform(lambda data, t: None)  # None: the walk was needed
    took_fast: list[bool] = []

    def checked(data: object, expected_type: object) -> object:
        expected = maybe_transform(data, expected_type)
        got = fast(data, expected_type)
        took_fast.append(got is not None)
        if got is not None:
            assert got == expected and type(got) is dict
        return expected

    checked.harness_patch = True  # type: ignore[attr-defined]  # keeps use_fast_request_transform out
    monkeypatch.setattr(chat_completions, "maybe_transform", checked)
    return took_fast


def test_fast_request_transform_equals_openai_s_walk_on_real_sdk_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.episodes.openhands.driver import run_sdk_episode
    from harness.episodes.scaffold import load_scaffold
    from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse

    took_fast = _compare_with_openai_walk(monkeypatch)
    script = [
        ScriptedResponse(
            content="Look.", tool_calls=[ScriptedCall(name="terminal", arguments={"command": "ls -la"})]
        ),
        ScriptedResponse(
            content="Think.", tool_calls=[ScriptedCall(name="think", arguments={"thought": 'ü "q" \\n'})]
        ),
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
    ]
    (tmp_path / "ws").mkdir()
    with ReplayServer(ReplayScript(model="m", responses=script)) as server:
        out = run_sdk_episode(
            instruction="List the files.",
            workspace=tmp_path / "ws",
            base_url=server.base_url,
            model="m",
            api_key="x",
            scaffold=load_scaffold("openhands-codeact"),
            out_dir=tmp_path / "out",
        )
    assert out.status == "finished" and len(out.turns) == 3
    # Every request the SDK built was plain JSON: the fast path served each, equal to the walk.
    assert took_fast == [True, True, True]


def test_fast_request_transform_falls_back_to_the_walk_where_it_could_change_something() -> None:
    from typing import Annotated, Required, TypedDict

    import openai
    from openai._utils import PropertyInfo, maybe_transform
    from openai.types.chat import completion_create_params as params

    from harness.episodes.openhands.sdk_tuning import fast_maybe_transform

    fast = episode_scope()(fast_maybe_transform(maybe_transform))  # as inside an episode
    expected_type = params.CompletionCreateParamsNonStreaming
    message = {"role": "user", "content": "hi"}
    bodies: list[dict[str, object]] = [
        {"messages": [message], "model": "m", "temperature": openai.omit, "seed": openai.NOT_GIVEN},
        {"messages": (message,), "model": "m"},  # a tuple: the walk makes it a list
        {"messages": [message], "model": "m", "tools": iter([])},  # an iterable: the walk lists it
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], "model": "m", "n": 2},
        {"messages": [message], "model": "m", "metadata": {"k": openai.omit}},  # nested omit: walk decides
    ]
    for body in bodies:
        copy_for_walk = {k: (list(v) if k == "tools" else v) for k, v in body.items()}
        copy_for_fast = {k: (iter(list(v)) if k == "tools" else v) for k, v in copy_for_walk.items()}
        assert fast(copy_for_fast, expected_type) == maybe_transform(copy_for_walk, expected_type)
    assert "temperature" not in fast(bodies[0], expected_type)

    class Card(TypedDict, total=False):
        card_id: Required[Annotated[str, PropertyInfo(alias="cardID")]]

    assert fast({"card_id": "c1"}, Card) == maybe_transform({"card_id": "c1"}, Card) == {"cardID": "c1"}


def test_max_iterations_error_line_is_dropped_and_other_sdk_errors_are_not() -> None:
    import logging

    from harness.episodes.openhands.sdk import quiet_expected_sdk_errors

    quiet_expected_sdk_errors()
    quiet_expected_sdk_errors()  # idempotent: one filter
    log = logging.getLogger("openhands.sdk.conversation.impl.local_conversation")
    assert len(log.filters) == len({type(f) for f in log.filters})
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    try:
        with episode_scope():  # while an OpenHands episode runs
            log.error("Agent reached maximum iterations limit (4).")
            log.error("Conversation run failed: boom")
        log.error("Agent reached maximum iterations limit (5).")  # none runs: the SDK's line as it is
    finally:
        log.removeHandler(handler)
    assert seen == ["Conversation run failed: boom", "Agent reached maximum iterations limit (5)."]


def test_cached_tool_schemas_equal_the_sdk_s_and_each_caller_gets_its_own_copy() -> None:
    from openhands.sdk.tool.schema import Schema
    from openhands.tools.terminal.definition import TerminalAction

    from harness.episodes.openhands import sdk_tuning
    from harness.episodes.openhands.sdk import export_tools
    from harness.episodes.scaffold import load_scaffold

    scaffold = load_scaffold("openhands-codeact")
    sdk_tools = export_tools(scaffold)["tools"]  # outside an episode: the SDK's own schemas
    assert Schema.to_mcp_schema.__func__.harness_patch  # type: ignore[attr-defined]  # installed by then
    with episode_scope():
        assert export_tools(scaffold)["tools"] == sdk_tools  # first build
        assert export_tools(scaffold)["tools"] == sdk_tools  # from the cache
        first = TerminalAction.to_mcp_schema()
        first["properties"].clear()  # callers reorder and extend what they get
        assert TerminalAction.to_mcp_schema() == sdk_tuning.SDK_TO_MCP_SCHEMA(TerminalAction)


def test_the_agent_s_local_bash_does_not_run_the_user_s_bashrc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openhands.tools.terminal.definition import TerminalAction

    from harness.episodes.openhands.sdk_tuning import ReadyTerminalExecutor

    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "bashrc-ran"
    (home / ".bashrc").write_text(f"touch {marker}\n")
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "ws"
    work.mkdir()
    ex = ReadyTerminalExecutor(str(work), history_file=str(tmp_path / "conv" / "bash_history"))
    try:
        obs = ex(TerminalAction(command="echo hi-from-agent"))
    finally:
        ex.close()
    assert "hi-from-agent" in obs.text
    assert not marker.exists()  # the user's rc file is not the task's


@pytest.mark.timeout(120)
def test_ctrl_c_interrupts_the_agent_s_confined_shell(tmp_path: Path) -> None:
    """In its own PID namespace the shell had no controlling terminal: the SDK's C-c reached
    nothing and an interrupted ``sleep`` ran to its end. A shell started with Ctrl-C ignored or
    held (the harness in a script's background, a thread that held it) passed that on to the
    sleep: the key timed out (fresh11-13: the echo after it returned nothing after 30 s). Waited
    on as the SDK waits (its soft timeout, then the key), never on a clock of the test's own."""
    from openhands.tools.terminal.definition import TerminalAction

    from harness.episodes.openhands.sdk_tuning import ReadyTerminalExecutor, _confined_with_terminal
    from harness.runtime.procs import own_pid_namespace

    confine = _confined_with_terminal(own_pid_namespace())
    if not confine:
        pytest.skip("this machine gives no PID namespace (no unshare or no user namespaces)")
    work = tmp_path / "ws"
    work.mkdir()
    # Started as a harness in a script's background is (Ctrl-C ignored) from a thread that holds
    # it: neither reaches the agent's shell (held or ignored, the C-c below timed out at the echo).
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ex = ReadyTerminalExecutor(
            str(work), history_file=str(tmp_path / "conv" / "bash_history"), confine=confine
        )
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    mark = f"600.{os.getpid()}{time.monotonic_ns() % 10**6}"  # this test's sleep, found by its argument
    try:
        assert "pts/" in ex(TerminalAction(command="ps -o tty= -p $$")).text  # a terminal of its own
        ex(TerminalAction(command=f"sleep {mark}; echo slept-through", timeout=1))
        # The key once the sleep holds the terminal: a C-c between the shell's fork and its handing
        # the terminal to the new job reaches the shell only, and the sleep runs on (fresh12, under
        # load: the command had not started when the SDK's 1 s timeout ended).
        wait_for(lambda: _foreground(mark), timeout=60, what="the sleep to hold the terminal")
        interrupted = ex(TerminalAction(command="C-c", is_input=True))
        # the key ended the sleep (a sleep that ignored it fails here, said so, not at the echo)
        wait_for(lambda: not _sleeping(mark), timeout=60, what="the interrupted sleep to end")
        after = ex(TerminalAction(command="echo after-interrupt"))
    finally:
        ex.close()
    assert "slept-through" not in interrupted.text and interrupted.exit_code != 0
    assert "after-interrupt" in after.text and after.exit_code == 0


def _sleeping(argument: str) -> bool:
    """A ``sleep ARGUMENT`` is alive (not a zombie)."""
    import psutil

    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] == ["sleep", argument] and proc.info["status"] != psutil.STATUS_ZOMBIE:
            return True
    return False


def _foreground(argument: str) -> bool:
    """A ``sleep ARGUMENT`` runs as its terminal's foreground process group (/proc's stat: pgrp is
    field 5, the terminal's foreground group field 8)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] == ["sleep", argument]:
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            return fields[2] == fields[5]  # after the name: state, ppid, pgrp, session, tty_nr, tpgid
    return False


def test_a_command_returns_with_the_shell_back_at_its_prompt(tmp_path: Path) -> None:
    """The SDK's screen clear presses Enter for a fresh prompt at the end of every command; when
    the next command read the screen before that prompt came (under load), the prompt counted as
    the next command's end: an empty observation, then each command's output one turn late (CI
    failures: a loop found turns late, a root agent's first command seemingly never run). Each
    command now returns only once that prompt is on the screen."""
    from openhands.tools.terminal.definition import TerminalAction

    from harness.episodes.openhands.sdk_tuning import ReadyTerminalExecutor

    work = tmp_path / "ws"
    work.mkdir()
    ex = ReadyTerminalExecutor(str(work), history_file=str(tmp_path / "conv" / "bash_history"))
    terminal = ex._session.terminal  # type: ignore[union-attr]
    screens = []
    try:
        for i in range(5):
            seen = ex(TerminalAction(command=f"echo line-{i}"))
            with terminal.output_lock:  # at once: what the next command's first read would see
                screens.append("".join(terminal.output_buffer).replace("\r", ""))
            assert _shown(seen.text, f"echo line-{i}") == f"line-{i}", seen.text
    finally:
        ex.close()
    assert all(screen.rstrip().endswith("###PS1END###") for screen in screens), screens
