"""The SDK parts the harness swaps in behave as the SDK's own, minus the idle waiting.

Real shells and real files: the SDK's terminal and ours run the same commands side by side.
"""

import os
import stat
import time
from pathlib import Path

import pytest

import harness.episodes.sdk  # noqa: F401  sets the SDK's environment first
from harness.episodes.sdk_tuning import EpisodeFileStore, ReadyTerminal, use_ready_terminal

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
    from openhands.tools.terminal.definition import TerminalAction

    out = []
    for cmd in commands:
        obs = session.execute(TerminalAction(command=cmd))  # type: ignore[attr-defined]
        out.append((obs.text, obs.exit_code))
    return out


@pytest.mark.timeout(120)
def test_ready_terminal_gives_the_sdk_terminal_s_observations_without_its_start_up_sleep(
    tmp_path: Path,
) -> None:
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
        assert sdk_start >= 1.0 > ours_start  # the SDK sleeps 1 s; ours returns and starts bash meanwhile
        # The SDK's terminal asks for a fresh prompt as its start-up ends; a command sent before that
        # prompt is in reads an empty screen. In an episode the first model call gives it time.
        time.sleep(0.5)

        expected = [(text.replace("/sdk", "/ours"), code) for text, code in _run(sdk, COMMANDS)]
        assert _run(ours, COMMANDS) == expected
        assert "hello" in expected[0][0] and expected[0][1] == 0 and expected[3][1] == 1
    finally:
        sdk.close()  # type: ignore[attr-defined]
        ours.close()  # type: ignore[attr-defined]


def test_terminal_spec_resolves_to_the_sdk_tool_over_a_ready_terminal(tmp_path: Path) -> None:
    from openhands.sdk import LocalConversation
    from openhands.tools.terminal import TerminalTool

    from harness.episodes.scaffold import load_scaffold
    from harness.episodes.sdk import build_agent, build_llm
    from harness.episodes.sdk_tuning import ReadyTerminalExecutor

    use_ready_terminal()
    use_ready_terminal()  # idempotent
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
