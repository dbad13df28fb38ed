"""The harness's runtime patches of third-party libraries (harness/episodes/openhands/_patching.py):
each acts only for the OpenHands runner's episodes, and each refuses a library version it was not
written for, in one line naming both versions.

Real episodes against the replay server, real SDK tool resolution, the container's tool server
started as in a container. The one stand-in: the installed-version lookup, for versions that
cannot be installed beside the real ones in a test.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import harness.episodes.openhands.sdk  # noqa: F401  sets the SDK's environment first
from harness.episodes.openhands import _patching
from harness.episodes.openhands._patching import PINS, PatchVersionError, episode_scope, episodes_running
from harness.errors import HarnessError
from tests.conftest import REPO


def test_the_pins_the_patches_check_are_pyproject_s_and_installed() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for dist, spec in PINS.items():
        assert f"{dist}{spec}" in deps
        assert _patching.require(dist, "x") == spec.removeprefix("==")


# -- (a) active in an OpenHands episode's context, the library's own behaviour everywhere else --


@pytest.fixture
def episode_running(tmp_path: Path) -> Iterator[threading.Thread]:
    """A real OpenHands episode (replay server, 0.4 s a response) in another thread, past its first
    model call (its agent built: the patches installed)."""
    from harness.episodes.openhands.driver import run_sdk_episode
    from harness.episodes.scaffold import load_scaffold
    from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse

    thoughts = [
        ScriptedResponse(tool_calls=[ScriptedCall(name="think", arguments={"thought": f"step {i}"})])
        for i in range(12)
    ]
    done = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
    script = ReplayScript(model="m", responses=[*thoughts, done], delay=0.4)
    (tmp_path / "ws").mkdir()
    outcome: list[Any] = []
    with ReplayServer(script) as server:
        episode = threading.Thread(
            target=lambda: outcome.append(
                run_sdk_episode(
                    instruction="Think.",
                    workspace=tmp_path / "ws",
                    base_url=server.base_url,
                    model="m",
                    api_key="x",
                    scaffold=load_scaffold("openhands-codeact"),
                    out_dir=tmp_path / "out",
                    stop_on_loop=False,  # twelve thoughts in a row: a loop, which is not the point here
                    sdk_stuck_detection=False,
                )
            )
        )
        episode.start()
        try:
            while server.served < 1:
                assert episode.is_alive(), outcome
                episode.join(0.01)
            yield episode
        finally:
            episode.join(60)
        assert outcome and outcome[0].status == "finished" and server.served == 13


def _walked(transform: Callable[[object, object], Any]) -> bool:
    """Whether ``transform`` ran openai's type-driven walk (it rebuilds every list) on a body."""
    from openai.types.chat import completion_create_params as params

    body = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}
    out = transform(body, params.CompletionCreateParamsNonStreaming)
    assert out == body
    return out["messages"] is not body["messages"]


@pytest.mark.slow
def test_while_an_episode_runs_other_threads_get_the_libraries_own_functions(
    episode_running: threading.Thread, tmp_path: Path
) -> None:
    import openai.resources.chat.completions.completions as chat_completions
    from openhands.sdk import Action, Agent, LocalConversation, Tool
    from openhands.tools.terminal.impl import TerminalExecutor

    from harness.episodes.openhands.sdk import build_llm
    from harness.episodes.openhands.sdk_tuning import ReadyTerminalExecutor
    from harness.episodes.scaffold import load_scaffold

    class Probe(Action):
        seen: int

    assert episode_running.is_alive() and episodes_running()
    # openai's maybe_transform: installed (the episode built its agent), the walk for this thread
    assert chat_completions.maybe_transform.harness_patch  # type: ignore[attr-defined]
    assert _walked(chat_completions.maybe_transform)
    # the SDK's tool schemas: built afresh, nothing cached for this thread's class
    assert Probe.to_mcp_schema() == Probe.to_mcp_schema()
    assert Probe not in Probe.to_mcp_schema.__func__.cache  # type: ignore[attr-defined]
    # the SDK's tool registry: a spec of someone else's resolves to the SDK's own terminal
    scaffold = load_scaffold("openhands-codeact")
    llm = build_llm(base_url="http://127.0.0.1:9/v1", model="m", api_key="k", scaffold=scaffold)
    agent = Agent(llm=llm, tools=[Tool(name="terminal", params={"terminal_type": "subprocess"})])
    (tmp_path / "mine").mkdir()
    conv = LocalConversation(agent=agent, workspace=str(tmp_path / "mine"), visualizer=None)
    try:
        conv._ensure_agent_ready()
        executor = conv.agent.tools_map["terminal"].executor
        assert type(executor) is TerminalExecutor and not isinstance(executor, ReadyTerminalExecutor)
    finally:
        conv.close()
    assert episode_running.is_alive()  # all of the above happened while it ran

    # and the same calls in an episode's context take the patched paths
    with episode_scope():
        assert not _walked(chat_completions.maybe_transform)
        Probe.to_mcp_schema()
        assert Probe in Probe.to_mcp_schema.__func__.cache  # type: ignore[attr-defined]


def test_the_runner_s_specs_get_the_harness_s_tools_and_others_the_sdk_s(tmp_path: Path) -> None:
    from openhands.sdk import Agent, LocalConversation, Tool
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.terminal import TerminalTool

    from harness.episodes.openhands.sdk import build_agent, build_llm
    from harness.episodes.openhands.sdk_tuning import ReadyTerminalExecutor
    from harness.episodes.scaffold import load_scaffold

    scaffold = load_scaffold("openhands-codeact")
    llm = build_llm(base_url="http://127.0.0.1:9/v1", model="m", api_key="k", scaffold=scaffold)

    def resolved(agent: Any, name: str) -> dict[str, Any]:
        work = tmp_path / name
        work.mkdir()
        conv = LocalConversation(
            agent=agent, workspace=str(work / "ws"), persistence_dir=str(work / "conv"), visualizer=None
        )
        try:
            conv._ensure_agent_ready()
            return dict(conv.agent.tools_map)
        finally:
            conv.close()

    ours = resolved(build_agent(scaffold, llm), "ours")
    sdk = resolved(
        Agent(
            llm=llm,
            tools=[Tool(name="terminal", params={"terminal_type": "subprocess"}), Tool(name="file_editor")],
        ),
        "sdk",
    )
    for tools in (ours, sdk):  # the SDK's tool classes either way
        assert type(tools["terminal"]) is TerminalTool and type(tools["file_editor"]) is FileEditorTool
    assert isinstance(ours["terminal"].executor, ReadyTerminalExecutor)
    assert not isinstance(sdk["terminal"].executor, ReadyTerminalExecutor)
    # the editor's undo history: in the episode's conversation directory for ours, the SDK's own
    # /tmp/oh_editor_history_* folder for the other
    history = [t["file_editor"].executor.editor._history_manager.cache.directory for t in (ours, sdk)]
    try:
        assert str(history[0]).startswith(str(tmp_path / "ours" / "conv"))
        assert not str(history[1]).startswith(str(tmp_path)) and "oh_editor_history" in str(history[1])
    finally:
        shutil.rmtree(history[1], ignore_errors=True)


def test_the_cost_warning_is_silenced_only_from_the_sdk_s_telemetry() -> None:
    import warnings

    from harness.episodes.openhands.sdk import quiet_expected_sdk_errors

    with warnings.catch_warnings(record=True) as caught:
        quiet_expected_sdk_errors()
        for line, module in enumerate(("openhands.sdk.llm.utils.telemetry", "someone.else"), 1):
            warnings.warn_explicit(
                "Cost calculation failed: no price", UserWarning, "f.py", line, module=module, registry={}
            )
    assert [w.lineno for w in caught] == [2]


# -- (b) another installed version: refused, in one line naming both ----------------------------


@pytest.fixture
def installed_as(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str | None], None]:
    """Make the version lookup report ``version`` for ``dist`` (the real package stays)."""

    def fake(dist: str, version: str | None) -> None:
        real = _patching.installed
        monkeypatch.setattr(_patching, "installed", lambda d: version if d == dist else real(d))

    return fake


def _episode_file_store(tmp_path: Path) -> None:
    from harness.episodes.openhands.sdk_tuning import EpisodeFileStore

    EpisodeFileStore(str(tmp_path / "conv"))


def _runner(_tmp_path: Path) -> None:
    from harness.episodes.openhands.runner import OpenHandsRunner
    from harness.episodes.scaffold import load_scaffold

    OpenHandsRunner(load_scaffold("openhands-codeact"))


def _entry(module: str, name: str) -> Callable[[Path], None]:
    def install(_tmp_path: Path) -> None:
        import importlib

        getattr(importlib.import_module(module), name)()

    return install


TUNING = "harness.episodes.openhands.sdk_tuning"
CASES = [
    ("openai", _entry(TUNING, "use_fast_request_transform"), "openai.resources.chat.completions"),
    ("openhands-sdk", _entry(TUNING, "use_cached_tool_schemas"), "Schema.to_mcp_schema"),
    ("openhands-sdk", _entry("harness.episodes.openhands.tool_specs", "use_harness_tools"), "registry"),
    ("openhands-tools", _entry("harness.episodes.openhands.tool_specs", "use_harness_tools"), "executors"),
    ("openhands-sdk", _entry("harness.episodes.openhands.sdk", "quiet_expected_sdk_errors"), "log lines"),
    ("openhands-sdk", _episode_file_store, "LocalFileStore.write"),
    ("openai", _runner, "maybe_transform"),
    ("pydantic", _runner, "tool server"),
]


@pytest.mark.parametrize(("dist", "install", "names"), CASES)
def test_a_patch_refuses_another_version_of_what_it_patches(
    dist: str, install: Callable[[Path], None], names: str, installed_as: Any, tmp_path: Path
) -> None:
    written_for = PINS[dist]
    installed_as(dist, "99.0.1")
    with pytest.raises(PatchVersionError) as refused:
        install(tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{dist} 99.0.1 is installed; harness patches ")
    assert f"written for {written_for}: pin it or update the patch" in message and names in message
    assert "\n" not in message and isinstance(refused.value, HarnessError)  # the CLI's one line
    installed_as(dist, None)
    with pytest.raises(PatchVersionError, match=rf"^{dist} is not installed; .* pip install '{dist}=="):
        install(tmp_path)


@pytest.mark.slow
def test_the_fast_transform_is_not_installed_over_another_openai() -> None:
    code = f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        import harness.episodes.openhands.sdk
        from harness.episodes.openhands import _patching, sdk_tuning
        import openai.resources.chat.completions.completions as chat_completions
        _patching.installed = lambda d: "2.99.0" if d == "openai" else None
        original = chat_completions.maybe_transform
        try:
            sdk_tuning.use_fast_request_transform()
        except _patching.PatchVersionError as exc:
            print(chat_completions.maybe_transform is original, exc)
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.startswith("True openai 2.99.0 is installed;"), done.stderr[-2000:]


def test_the_container_s_tool_server_refuses_another_pydantic_and_the_host_says_why(tmp_path: Path) -> None:
    from harness.episodes.openhands.container_tools import SOCKET, TOOL_SERVER_FILES
    from harness.episodes.openhands.remote_tools import SandboxLost, ToolClient

    lib, ipc, ws = tmp_path / "lib", tmp_path / "ipc", tmp_path / "ws"
    for d in (lib, ipc, ws):
        d.mkdir()
    for f in TOOL_SERVER_FILES:  # laid out as in a container: these files alone, no harness package
        shutil.copy(f, lib / f.name)
    code = f"""
        import sys
        sys.path.insert(0, {str(lib)!r})
        import _patching
        real = _patching.installed
        _patching.installed = lambda d: "2.13.0" if d == "pydantic" else real(d)
        import toolserver
        sys.argv = ["toolserver.py", "--socket", {str(ipc / SOCKET)!r}, "--workdir", {str(ws)!r}]
        toolserver.main()
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode != 0 and not (ipc / SOCKET).exists()
    client = ToolClient(
        ipc / SOCKET, lambda: SandboxLost("gone"), "1 GiB", probe=lambda: None, call_limit_s=10
    )
    with pytest.raises(SandboxLost) as lost:
        client.connect(timeout=10, alive=lambda: True)
    assert str(lost.value) == (
        "the tool server did not start: _patching.PatchVersionError: pydantic 2.13.0 is installed in "
        "this sandbox's agent-tools Python; harness patches pydantic._internal._config.config_defaults"
        "['defer_build'] while the tools import written for ==2.14.4: build the image with the "
        "harness's versions (docker/README.md) or update the patch"
    )
    json.dumps(str(lost.value))  # one line, as the record keeps it
