"""`harness loops` on mini-swe-agent (`*.traj.json`) and SWE-agent (`*.traj`) trajectories.

The documents are written here as those agents save them (mini-swe-agent's "Output files" page:
`info`, `messages` in the chat format with an `extra` field, `trajectory_format`; v1 puts one
fenced bash block in each response and answers with `<returncode>`/`<output>`, v2 uses tool calls
and `tool` messages; SWE-agent's: a `trajectory` list of response/thought/action/observation steps,
`history`, `info`).
"""

import json
from pathlib import Path
from typing import Any

from harness.results.trajectories import read_trajectories
from tests.conftest import run_harness

FORMAT_ERROR = (
    "Please always provide EXACTLY ONE action in triple backticks, found {n} actions.\n\n"
    "Please format your action in triple backticks as shown in <response_example>."
)


def observation(code: int, output: str) -> str:
    return f"<returncode>{code}</returncode>\n<output>\n{output}</output>"


def response(content: str, usage: tuple[int, int] = (1000, 50)) -> dict[str, Any]:
    return {
        "response": {
            "choices": [{"finish_reason": "stop", "message": {"content": content, "role": "assistant"}}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
        }
    }


def mini_v1(instance_id: str | None, steps: list[tuple[str, str]]) -> dict[str, Any]:
    """A mini-swe-agent v1 document: (assistant content, the user message that answered it) pairs."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer shell."},
        {"role": "user", "content": "<pr_description>Fix the parser.</pr_description>"},
    ]
    for content, answer in steps:
        messages += [
            {"role": "assistant", "content": content, "extra": response(content)},
            {"role": "user", "content": answer},
        ]
    doc: dict[str, Any] = {
        "info": {
            "exit_status": "LimitsExceeded",
            "submission": "",
            "model_stats": {"instance_cost": 0.0, "api_calls": len(steps)},
            "mini_version": "1.17.0",
            "config": {"agent": {"step_limit": 50}},
        },
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1",
    }
    if instance_id:
        doc["instance_id"] = instance_id
    return doc


def bash_block(thought: str, command: str) -> str:
    return f"THOUGHT: {thought}\n\n```bash\n{command}\n```"


def looping_v1() -> dict[str, Any]:
    steps = [
        (bash_block("Look around.", "ls"), observation(0, "setup.py\nsrc\n")),
        (bash_block("Read the parser.", "cat src/parse.py"), observation(0, "def parse(x):\n    return x\n")),
        # the same failing command, reasoned differently each time
        *[
            (bash_block(t, "python -m pytest tests/test_parse.py"), observation(4, "ERROR: file not found"))
            for t in ("Run the tests.", "Run the tests again.", "Maybe now the tests run.")
        ],
        ("I am done with the task.", FORMAT_ERROR.format(n=0)),
    ]
    return mini_v1("acme__parser-12", steps)


def format_failing_v1() -> dict[str, Any]:
    steps = [
        (bash_block("Look around.", "ls"), observation(0, "setup.py\nsrc\n")),
        (bash_block("Fix it.", "sed -i 's/x/y/' src/parse.py"), observation(0, "")),
        ("The task is complete, nothing more to do.", FORMAT_ERROR.format(n=0)),
        ("Okay. I have finished the task as requested.", FORMAT_ERROR.format(n=0)),
        (bash_block("One", "ls") + "\n" + bash_block("Two", "pwd"), FORMAT_ERROR.format(n=2)),
        ("I confirm the task is finished.", FORMAT_ERROR.format(n=0)),
    ]
    return mini_v1(None, steps)


def mini_v2(steps: list[tuple[str, str, int]]) -> dict[str, Any]:
    """A mini-swe-agent v2 (tool calls) document: (thought, command, return code) per step; '' = no call."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for i, (thought, command, code) in enumerate(steps):
        if not command:
            messages += [
                {"role": "assistant", "content": thought, "extra": response(thought)},
                {
                    "role": "user",
                    "content": "No tool calls found in the response. Every response MUST include at least one tool call.",
                    "extra": {"interrupt_type": "FormatError"},
                },
            ]
            continue
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})},
        }
        messages += [
            {
                "role": "assistant",
                "content": thought,
                "tool_calls": [call],
                "extra": {
                    "actions": [{"command": command, "tool_call_id": f"call_{i}"}],
                    **response(thought),
                },
            },
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": observation(code, f"output of {command}\n"),
                "extra": {"raw_output": f"output of {command}\n", "returncode": code, "timestamp": 1.0 + i},
            },
        ]
    messages.append({"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": ""}})
    return {
        "info": {
            "exit_status": "Submitted",
            "submission": "",
            "mini_version": "2.2.7",
            "config": {"agent": {}},
        },
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": "acme__cli-7",
    }


def swe_agent(steps: list[tuple[str, str]]) -> dict[str, Any]:
    """A SWE-agent .traj document: (action, observation) per step; an empty action was not parsed."""
    return {
        "environment": "swe_main",
        "trajectory": [
            {
                "response": f"DISCUSSION\nStep {i}.\n\n```\n{action}\n```"
                if action
                else "I think we are done.",
                "thought": f"Step {i}.",
                "action": f"{action}\n" if action else "",
                "observation": obs,
                "state": '{"open_file": "/repo/big.py", "working_dir": "/repo"}',
                "execution_time": 0.1,
                "query": [],
            }
            for i, (action, obs) in enumerate(steps)
        ],
        "history": [],
        "info": {"exit_status": "exit_cost", "submission": None, "model_stats": {"api_calls": len(steps)}},
    }


def loops_json(path: Path) -> dict[str, Any]:
    done = run_harness("loops", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_mini_swe_agent_v1_text_trajectory(tmp_path: Path) -> None:
    path = tmp_path / "acme__parser-12.traj.json"
    path.write_text(json.dumps(looping_v1(), indent=2))  # written pretty, as mini-swe-agent does
    report = loops_json(path)
    assert report["format"] == "mini-swe-agent"
    (row,) = report["rows"]
    assert (row["episode"], row["turns"], row["loop_kind"], row["start_turn"], row["repeats"]) == (
        "acme__parser-12",
        6,
        "repeat_error",
        2,
        3,
    )
    assert row["tokens_after_onset"] == 4 * 1050 and "same failing call" in row["why"]
    turns = read_trajectories(path).trajectories[0].turns
    assert json.loads(turns[2].tool_calls[0].arguments) == {"command": "python -m pytest tests/test_parse.py"}
    assert turns[2].observation_is_error and not turns[1].observation_is_error
    assert not turns[5].tool_calls and turns[5].observation_is_error  # no command: the format error


def test_mini_swe_agent_v1_responses_without_a_command(tmp_path: Path) -> None:
    path = tmp_path / "unnamed.traj.json"
    path.write_text(json.dumps(format_failing_v1()))
    (row,) = loops_json(path)["rows"]
    # two fenced blocks run nothing either: four responses running fail to give one command
    assert (row["episode"], row["loop_kind"], row["start_turn"], row["repeats"]) == (
        "unnamed",
        "repeat_error",
        2,
        4,
    )
    assert row["unit"].startswith("no tool call => Please always provide")


def test_mini_swe_agent_v2_tool_calls(tmp_path: Path) -> None:
    steps = [
        ("Look.", "ls", 0),
        ("Test.", "pytest -q", 1),
        *[step for _ in range(3) for step in (("Edit.", "cat src/cli.py", 0), ("Test.", "pytest -q", 1))],
        ("Done.", "", 0),
    ]
    path = tmp_path / "acme__cli-7.traj.json"
    path.write_text(json.dumps(mini_v2(steps)))
    (row,) = loops_json(path)["rows"]
    assert (row["turns"], row["loop_kind"], row["start_turn"], row["period"]) == (9, "cycle", 1, 2)
    turns = read_trajectories(path).trajectories[0].turns
    assert turns[1].tool_calls[0].id == "call_1" and turns[1].observation_is_error  # return code 1
    assert not turns[8].tool_calls and turns[8].observation_is_error  # FormatError interrupt
    assert turns[0].prompt_tokens == 1000 and turns[0].completion_tokens == 50


def test_swe_agent_traj(tmp_path: Path) -> None:
    window = "[File: /repo/big.py (400 lines total)]\n(390 more lines above)\n391:    return x\n"
    steps = [
        ("find_file big.py", 'Found 1 matches for "big.py" in /repo:\n/repo/big.py'),
        ("open big.py 380", window.replace("390 more", "379 more")),
        *[("scroll_down", window) for _ in range(4)],
        ("", ""),
        ("", ""),
        ("", ""),
    ]
    path = tmp_path / "acme__big-3.traj"
    path.write_text(json.dumps(swe_agent(steps), indent=2))
    report = loops_json(path)
    assert report["format"] == "swe-agent"
    (row,) = report["rows"]
    assert (row["episode"], row["turns"], row["loop_kind"], row["start_turn"], row["repeats"]) == (
        "acme__big-3",
        9,
        "repeat_call",
        2,
        4,
    )
    assert row["tokens_after_onset"] is None  # SWE-agent keeps no per-step usage
    turns = read_trajectories(path).trajectories[0].turns
    assert json.loads(turns[2].tool_calls[0].arguments) == {"command": "scroll_down"}
    assert not turns[6].tool_calls and turns[6].observation_is_error  # a response SWE-agent could not parse


def test_swe_agent_responses_it_could_not_parse(tmp_path: Path) -> None:
    path = tmp_path / "acme__x-1.traj"
    path.write_text(json.dumps(swe_agent([("ls", "big.py"), ("", ""), ("", ""), ("", "")])))
    (row,) = loops_json(path)["rows"]
    assert (row["loop_kind"], row["start_turn"], row["repeats"]) == ("repeat_error", 1, 3)


def test_batch_output_directories(tmp_path: Path) -> None:
    mini = tmp_path / "mini-run"
    for name, doc in (("acme__parser-12", looping_v1()), ("acme__cli-7", mini_v2([("Look.", "ls", 0)]))):
        (mini / name).mkdir(parents=True)
        (mini / name / f"{name}.traj.json").write_text(json.dumps(doc))
    (mini / "preds.json").write_text("{}")
    report = loops_json(mini)
    assert report["format"] == "mini-swe-agent"
    assert sorted((r["episode"], r["loop_kind"]) for r in report["rows"]) == [
        ("acme__cli-7", None),
        ("acme__parser-12", "repeat_error"),
    ]
    sweep = tmp_path / "swe-run"
    (sweep / "acme__x-1").mkdir(parents=True)
    (sweep / "acme__x-1" / "acme__x-1.traj").write_text(json.dumps(swe_agent([("ls", "a")])))
    (sweep / "acme__x-1" / "acme__x-1.config.yaml").write_text("agent: {}\n")
    assert loops_json(sweep)["rows"][0]["episode"] == "acme__x-1"


def test_table_shows_why(tmp_path: Path) -> None:
    path = tmp_path / "acme__parser-12.traj.json"
    path.write_text(json.dumps(looping_v1()))
    done = run_harness("loops", str(path), env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and "why: the same failing call" in done.stdout


def test_bad_trajectory_documents(tmp_path: Path) -> None:
    good = tmp_path / "run" / "ok" / "ok.traj.json"
    good.parent.mkdir(parents=True)
    good.write_text(json.dumps(looping_v1()))
    cut = tmp_path / "run" / "cut" / "cut.traj.json"
    cut.parent.mkdir()
    cut.write_text(json.dumps(looping_v1())[:300])
    other = tmp_path / "run" / "other" / "other.traj"
    other.parent.mkdir()
    other.write_text(json.dumps({"foo": 1}))
    report = loops_json(tmp_path / "run")
    assert [r["episode"] for r in report["rows"]] == ["acme__parser-12"]
    assert report["totals"]["skipped_lines"] == 2
    assert any("cut.traj.json: not one JSON document" in w for w in report["warnings"])
    assert any("other.traj: unknown format" in w for w in report["warnings"])
    for path, needle in ((cut, "no readable episode"), (other, "no readable episode")):
        done = run_harness("loops", str(path))
        assert done.returncode == 2 and "Traceback" not in done.stderr and needle in done.stderr, done.stderr


def swe_agent_history(steps: list[tuple[str, str]]) -> dict[str, Any]:
    """A SWE-agent .traj that kept only its `history` (chat messages; an empty action was not parsed)."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "SETTING: you are an autonomous programmer.", "agent": "primary"},
        {"role": "user", "content": "Demonstration: ls", "agent": "primary", "is_demo": True},
        {"role": "assistant", "content": "demo", "action": "ls", "agent": "primary", "is_demo": True},
        {"role": "user", "content": "ISSUE: the parser drops a field.", "agent": "primary"},
    ]
    for i, (action, obs) in enumerate(steps):
        history += [
            {
                "role": "assistant",
                "content": f"DISCUSSION\nStep {i}.\n\n```\n{action}\n```" if action else "No idea.",
                "thought": f"Step {i}.",
                "action": f"{action}\n",
                "agent": "primary",
                "message_type": "action",
            },
            {"role": "user", "content": obs, "agent": "primary", "message_type": "observation"},
        ]
    return {"environment": "swe_main", "history": history, "info": {"exit_status": "exit_cost"}}


def test_swe_agent_history_only_and_documents_that_yield_nothing_are_named(tmp_path: Path) -> None:
    failing = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'parser'"
    folder = tmp_path / "swe-run"
    docs: dict[str, str] = {
        "hist": json.dumps(swe_agent_history([("ls", "parser.py"), *[("python reproduce.py", failing)] * 3])),
        "nothing": json.dumps({"trajectory": [], "history": [], "info": {}}),
        "empty": "",
        "odd": json.dumps({"steps": [{"act": "ls"}]}),
    }
    for name, text in docs.items():
        (folder / name).mkdir(parents=True)
        (folder / name / f"{name}.traj").write_text(text)
    report = loops_json(folder)
    assert report["format"] == "swe-agent"
    rows = {r["episode"]: r for r in report["rows"]}
    assert sorted(rows) == ["hist", "nothing"]
    hist = rows["hist"]
    assert (hist["turns"], hist["loop_kind"], hist["start_turn"]) == (4, "repeat_error", 1)
    turns = read_trajectories(folder / "hist" / "hist.traj").trajectories[0].turns
    assert json.loads(turns[0].tool_calls[0].arguments) == {"command": "ls"}
    assert turns[0].observation == "parser.py" and turns[0].text == "Step 0."  # demonstrations left out
    warnings = report["warnings"]
    assert report["totals"]["warnings"] == len(warnings) == 3
    assert any(
        "nothing.traj: no turn read: expected steps in `trajectory` or assistant messages in `history`" in w
        for w in warnings
    )
    assert any("empty.traj: empty file" in w for w in warnings)
    assert any("odd.traj: unknown format: expected" in w for w in warnings)
    # each alone: read, or an error naming it and what was expected (never 0 turns and exit 0)
    assert loops_json(folder / "hist" / "hist.traj")["rows"][0]["turns"] == 4
    for name, needle in (
        ("nothing", "no turn read from its 1 episode(s)"),
        ("empty", "empty file"),
        ("odd", "unknown format"),
    ):
        done = run_harness("loops", str(folder / name / f"{name}.traj"))
        assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert f"{name}.traj" in done.stderr


def test_openhands_output_lines_without_turns_and_the_early_flat_event_form(tmp_path: Path) -> None:
    task = {"content": "Fix the issue.", "wait_for_response": False, "action": "message"}
    run = lambda cmd: {"command": cmd, "thought": f"Run {cmd}.", "action": "run", "is_confirmed": "confirmed"}  # noqa: E731
    seen = lambda cmd, out: {"content": out, "command": cmd, "exit_code": 0, "observation": "run"}  # noqa: E731
    early = [
        task,
        run("ls"),
        seen("ls", "a.py"),
        run("cat a.py"),
        seen("cat a.py", "x = 1"),
        {"action": "finish"},
    ]
    path = tmp_path / "output.jsonl"
    path.write_text(
        json.dumps({"instance_id": "early-1", "history": early})
        + "\n"
        + json.dumps({"instance_id": "blank-2", "history": [], "error": "agent crashed"})
        + "\n"
    )
    report = loops_json(path)
    rows = {r["episode"]: r for r in report["rows"]}
    assert (rows["early-1"]["turns"], rows["blank-2"]["turns"]) == (3, 0)
    turns = read_trajectories(path).trajectories[0].turns
    assert [json.loads(t.tool_calls[0].arguments) for t in turns[:2]] == [
        {"command": "ls"},
        {"command": "cat a.py"},
    ]
    assert turns[1].observation == "x = 1" and turns[0].text == "Run ls."
    (warning,) = report["warnings"]
    assert f"{path}:2: no turn read: expected agent actions in `history`" in warning
