"""`harness proxy`: agents the harness does not run, watched from the model-call boundary.

The real command in a subprocess, a replay server as the model, and real agents in front of it:
mini-swe-agent's own `mini` CLI (unmodified, configured only by its flags), a plain openai client
script and the official anthropic client. Each episode lands in the proxy's run directory, which
`harness loops`, `show` and `report` read.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from harness.proxy import read_records
from harness.proxy.records import Exchange
from harness.proxy.standalone import episode_name
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from tests.conftest import run_harness
from tests.helpers.proxy_command import harness_proxy, records
from tests.helpers.proxying import TERMINAL

KEY = "upstream-secret-77c1"  # the upstream's key: in the proxy's environment only


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` in this process (an interpreter start and the imports were 1-2 s a call, four
    calls in a test, and none of these tests is about the process)."""
    return run_harness(*args, env={**os.environ, "COLUMNS": "400"})


def _bash(command: str, thought: str) -> ScriptedResponse:
    return ScriptedResponse(
        content=f"THOUGHT: {thought}", tool_calls=[ScriptedCall(name="bash", arguments={"command": command})]
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mini_swe_agents_own_cli_through_the_proxy_is_recorded_and_its_loop_stopped(tmp_path: Path) -> None:
    workspace, run = tmp_path / "ws", tmp_path / "run"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\n")
    script = ReplayScript(
        model="scripted",
        pick="by_turn",
        when_exhausted="repeat_last",  # the same command, the same output, for ever
        responses=[_bash("ls", "Look first."), _bash("cat notes.txt", "Read the notes.")],
    )
    traj = tmp_path / "mini.traj.json"
    with (
        ReplayServer(script, api_key=KEY) as replay,
        harness_proxy(
            "--upstream",
            replay.base_url,
            "--api-key-env",
            "UPSTREAM_KEY",
            "--run-dir",
            str(run),
            "--stop-loops",
            "--agent",
            "mini-swe-agent",
            env={"UPSTREAM_KEY": KEY},
        ) as proxy,
    ):
        mini = Path(sys.executable).with_name("mini")
        done = subprocess.run(
            [
                str(mini),
                "-m",
                "openai/scripted",
                "-t",
                "Read the notes.",
                "--yolo",
                "--exit-immediately",
                "-o",
                str(traj),
                "-c",
                "mini.yaml",
                "-c",
                f"model.model_kwargs.api_base={proxy.url}/ep/read-notes/v1",
                "-c",
                f"model.model_kwargs.api_key={proxy.key}",
            ],
            cwd=workspace,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=240,
            env={
                **os.environ,
                "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mini-config"),
                "MSWEA_CONFIGURED": "true",  # no first-run set-up wizard
                "MSWEA_COST_TRACKING": "ignore_errors",  # a scripted model has no price
            },
        )
        proxy.wait_for(r"read-notes \(seed 1\): repeat_call loop from turn 1, certain at turn 4 \(stopped\)")
        served = replay.served
    # the agent surfaced the proxy's final message and stopped at once (no retries)
    saved = json.loads(traj.read_text())
    assert saved["info"]["exit_status"] == "NotFoundError", (saved["info"], done.stdout[-2000:])
    exit_message = saved["messages"][-1]
    assert exit_message["role"] == "exit"
    assert "harness proxy stopped this episode: the model is in a loop" in exit_message["content"]
    assert "repeat_call from turn 1" in exit_message["content"]
    assert served == 5  # the sixth request was answered by the proxy, not forwarded
    assert "1 episode(s) recorded" in proxy.output()

    (rec,) = records(run)
    assert (rec["task_id"], rec["seed"], rec["model"], rec["scaffold"]) == (
        "read-notes",
        1,
        "scripted",
        "mini-swe-agent",
    )
    assert rec["status"] == "loop_stopped" and rec["turns"] == 5 and rec["tool_calls"] == 5
    assert (rec["loop"]["kind"], rec["loop"]["start_turn"], rec["loop"]["detected_at"]) == (
        "repeat_call",
        1,
        4,
    )
    calls = run / "episodes" / "scripted" / "read-notes" / "seed1" / "model_calls.jsonl"
    exchanges = [r for r in read_records(calls) if isinstance(r, Exchange)]
    assert [e.status for e in exchanges] == [200] * 5 + [404]
    assert exchanges[-1].answered_by == "proxy"
    assert KEY not in "".join(p.read_text() for p in run.rglob("*") if p.is_file())

    # harness loops on the run directory and on mini-swe-agent's own trajectory: the same loop
    for source in (run, traj):
        out = _harness("loops", str(source), "--json")
        assert out.returncode == 0, out.stderr
        (row,) = json.loads(out.stdout)["rows"]
        assert (row["loop_kind"], row["start_turn"]) == ("repeat_call", 1), source
    shown = _harness("show", str(run), "read-notes")
    assert shown.returncode == 0 and "repeat_call from turn 1" in shown.stdout, shown.stderr
    report = _harness("report", str(run))
    assert report.returncode == 0, report.stderr
    page = (run / "report.md").read_text()
    assert "recorded by harness proxy: no tests ran" in page and "not verified yet" not in page
    assert "`scripted/read-notes/seed1`: repeat_call from turn 1" in page


def _chat(c: openai.OpenAI, messages: list[dict[str, Any]], *, stream: bool = False) -> dict[str, Any]:
    """One turn of a tool-calling agent: the assistant message it appends."""
    if stream:
        chunks = list(
            c.chat.completions.create(model="any", messages=messages, tools=[TERMINAL], stream=True)
        )  # type: ignore[arg-type, list-item]
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        calls = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.function.name, "arguments": tc.function.arguments},
            }
            for ch in chunks
            if ch.choices
            for tc in ch.choices[0].delta.tool_calls or ()
        ]
    else:
        message = (
            c.chat.completions.create(model="any", messages=messages, tools=[TERMINAL]).choices[0].message
        )  # type: ignore[arg-type, list-item]
        text, calls = message.content or "", [tc.model_dump() for tc in message.tool_calls or ()]
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


def _answer(messages: list[dict[str, Any]], output: str) -> None:
    for call in messages[-1].get("tool_calls", ()):
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_plain_clients_episodes_by_path_header_and_conversation_and_the_anthropic_dialect(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    script = ReplayScript(
        model="scripted",
        pick="by_turn",
        responses=[
            ScriptedResponse(
                content="Let me look.",
                tool_calls=[ScriptedCall(name="terminal", arguments={"command": "ls"}, id="call_ls")],
                prompt_tokens=40,
                completion_tokens=6,
            ),
            ScriptedResponse(content="All done.", prompt_tokens=60, completion_tokens=3),
        ],
    )
    with (
        ReplayServer(script) as replay,
        harness_proxy("--upstream", replay.base_url, "--run-dir", str(run), "--agent", "scripts") as proxy,
    ):
        plain = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=proxy.key, max_retries=0)
        # two conversations interleaved on one client, no names: told apart by their messages
        a = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task A"}]
        b = [{"role": "system", "content": "agent"}, {"role": "user", "content": "task B"}]
        a.append(_chat(plain, a))
        b.append(_chat(plain, b, stream=True))
        _answer(a, "a.txt")
        _answer(b, "b.txt")
        a.append(_chat(plain, a, stream=True))
        b.append(_chat(plain, b))
        assert a[-1]["content"] == b[-1]["content"] == "All done."
        # an episode named by a header
        named = openai.OpenAI(
            base_url=f"{proxy.url}/v1",
            api_key=proxy.key,
            max_retries=0,
            default_headers={"X-Harness-Episode": "header task"},
        )
        h = [{"role": "user", "content": "task H"}]
        h.append(_chat(named, h))
        # the Anthropic Messages dialect, by path, with a tool round trip; streamed the second time
        claude = anthropic.Anthropic(base_url=f"{proxy.url}/ep/claude-task", api_key=proxy.key, max_retries=0)
        tool = {
            "name": "terminal",
            "description": "Run a shell command.",
            "input_schema": TERMINAL["function"]["parameters"],  # type: ignore[index]
        }
        first = claude.messages.create(
            model="claude-any",
            max_tokens=100,
            system="You are an agent.",
            tools=[tool],  # type: ignore[list-item]
            messages=[{"role": "user", "content": "task C"}],
        )
        assert first.stop_reason == "tool_use" and first.model == "claude-any"
        assert [b.type for b in first.content] == ["text", "tool_use"]
        use = first.content[1]
        assert use.type == "tool_use" and use.name == "terminal" and use.input == {"command": "ls"}
        assert (first.usage.input_tokens, first.usage.output_tokens) == (40, 6)
        history: list[Any] = [
            {"role": "user", "content": "task C"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "c.txt"}]},
        ]
        with claude.messages.stream(
            model="claude-any",
            max_tokens=100,
            system="You are an agent.",
            tools=[tool],
            messages=history,  # type: ignore[list-item]
        ) as events:
            second = events.get_final_message()
        assert second.stop_reason == "end_turn" and [b.type for b in second.content] == ["text"]
        assert second.content[0].text == "All done."  # type: ignore[union-attr]
        # a request the proxy cannot translate is the agent's to fix: 400 in Anthropic's shape
        with pytest.raises(anthropic.BadRequestError, match="messages"):
            claude.messages.create(model="claude-any", max_tokens=10, messages="hi")  # type: ignore[arg-type]

    got = {r["task_id"]: r for r in records(run)}
    # "header task" is no name a path can carry: kept apart from "header_task" by a digest
    header = episode_name("header task")
    assert header.startswith("header_task-") and header != episode_name("header_task")
    assert sorted(got) == ["claude-task", "conversation-1", "conversation-2", header]
    for name, observed in (
        ("conversation-1", "a.txt"),
        ("conversation-2", "b.txt"),
        ("claude-task", "c.txt"),
    ):
        rec = got[name]
        assert rec["turns"] == 2 and rec["loop"] is None and rec["status"] == "unresolved", name
        turns = [json.loads(line) for line in (run / rec["trajectory"]).read_text().splitlines()]
        assert turns[0]["tool_calls"][0]["arguments"] == '{"command": "ls"}', name
        assert turns[0]["observation"] == observed and turns[1]["text"] == "All done.", name
        assert (rec["prompt_tokens"], rec["completion_tokens"]) == (100, 9), name
    assert got[header]["turns"] == 1
    # each episode is recorded under the model its agent named (none named upstream here)
    assert {r["model"] for r in got.values()} == {"any", "claude-any"}
    calls = run / "episodes" / "claude-any" / "claude-task" / "seed1" / "model_calls.jsonl"
    exchanges = [r for r in read_records(calls, full=True) if isinstance(r, Exchange)]
    assert [e.dialect for e in exchanges] == ["anthropic"] * 3
    assert exchanges[1].request is not None and exchanges[1].request["messages"][0] == {
        "role": "system",
        "content": "You are an agent.",
    }
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["kind"] == "proxy" and manifest["scaffold"] == "scripts"
    out = _harness("loops", str(run), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["totals"]["episodes"] == 4, out.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_idle_episode_is_recorded_while_the_proxy_runs_and_a_loop_left_running_is_recorded(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    script = ReplayScript(
        model="scripted",
        when_exhausted="repeat_last",
        responses=[ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": "ls"})])],
    )
    with (
        ReplayServer(script) as replay,
        harness_proxy("--upstream", replay.base_url, "--run-dir", str(run), "--episode-idle", "1") as proxy,
    ):
        c = openai.OpenAI(base_url=f"{proxy.url}/ep/poll/v1", api_key=proxy.key, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for _ in range(6):  # no --stop-loops: the loop is recorded, every request answered
            messages.append(_chat(c, messages))
            _answer(messages, "same")
        proxy.wait_for(r"poll \(seed 1\) recorded: 6 turns, repeat_call loop from turn 0")
        assert records(run)[0]["status"] == "unresolved"  # recorded while the proxy still runs
        messages = [{"role": "user", "content": "go"}]
        messages.append(_chat(c, messages))  # the same name again: its next attempt
        time.sleep(0.2)
    first, second = records(run)
    assert (first["seed"], first["turns"], first["loop"]["kind"]) == (1, 6, "repeat_call")
    assert (second["seed"], second["turns"], second["loop"]) == (2, 1, None)


@pytest.mark.slow
def test_the_commands_mistakes_are_one_line(tmp_path: Path) -> None:
    neither = _harness("proxy", "--run-dir", str(tmp_path / "r"))
    assert (
        neither.returncode != 0 and "--upstream URL" in neither.stderr and "Traceback" not in neither.stderr
    )
    unset = _harness("proxy", "--upstream", "http://127.0.0.1:9/v1", "--api-key-env", "NO_SUCH_VAR_X1")
    assert unset.returncode != 0 and "NO_SUCH_VAR_X1" in unset.stderr and "Traceback" not in unset.stderr
    bad = _harness("proxy", "--upstream", "http://127.0.0.1:9/v1", "--episode-idle", "0")
    assert bad.returncode != 0 and "--episode-idle" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tool_calls_are_checked_against_the_tools_each_request_declares(tmp_path: Path) -> None:
    run = tmp_path / "run"
    script = ReplayScript(
        model="scripted",
        responses=[
            ScriptedResponse(tool_calls=[ScriptedCall(name="trmall", arguments={"command": "ls"})]),
            ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"cmd": "ls"})]),
            ScriptedResponse(content="<tool_call>{}</tool_call>"),
        ],
    )
    with (
        ReplayServer(script) as replay,
        harness_proxy("--upstream", replay.base_url, "--run-dir", str(run)) as proxy,
    ):
        c = openai.OpenAI(base_url=f"{proxy.url}/ep/checked/v1", api_key=proxy.key, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for _ in range(3):
            messages.append(_chat(c, messages))
            _answer(messages, "error: no such tool")
    (rec,) = records(run)
    assert rec["format_errors"] == {
        "unknown_tool": 1,
        "missing_required": 1,
        "unexpected_param": 1,
        "tool_call_in_content": 1,
    }, rec["format_errors"]
