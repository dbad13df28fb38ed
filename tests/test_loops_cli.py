"""`harness loops` on trajectories from real OpenHands SDK runs against the replay server."""

import json
from pathlib import Path

import pytest

from harness.episodes.openhands.driver import run_sdk_episode
from harness.episodes.scaffold import load_scaffold
from harness.monitor import ToolCall, Turn
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.loops_report import loops_report
from harness.results.trajectories import read_trajectories
from tests.conftest import run_harness
from tests.test_episode_loop_sdk import THOUGHTS, looping_script


def clean_script() -> ReplayScript:
    return ReplayScript(
        model="solver",
        responses=[
            ScriptedResponse(
                content="Reading the task.",
                tool_calls=[
                    ScriptedCall(
                        name="terminal", arguments={"command": "cat task.txt", "security_risk": "LOW"}
                    )
                ],
            ),
            ScriptedResponse(
                content="Fixing it.",
                tool_calls=[
                    ScriptedCall(
                        name="file_editor",
                        arguments={"command": "create", "path": "fixed.txt", "file_text": "ok\n"},
                    )
                ],
            ),
            ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "fixed"})]),
        ],
    )


@pytest.fixture(scope="module")
def sdk_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real SDK conversations: one loops (SDK stuck detection on, it does not catch it), one solves."""
    root = tmp_path_factory.mktemp("sdk-runs")
    dirs = {}
    for name, script in (("looper", looping_script()), ("solver", clean_script())):
        ws = root / name / "ws"
        ws.mkdir(parents=True)
        (ws / "task.txt").write_text("fix the bug")
        (ws / "fixed.txt").unlink(missing_ok=True)
        with ReplayServer(script) as server:
            outcome = run_sdk_episode(
                instruction="Fix the bug in task.txt.",
                workspace=ws,
                base_url=server.base_url,
                model=script.model,
                api_key="k",
                scaffold=load_scaffold(),
                out_dir=root / name / "out",
                seed=1,
                stop_on_loop=False,
            )
        assert "conversation_dir" in outcome.details
        dirs[name] = Path(outcome.details["conversation_dir"])
    # An OpenHands evaluation output.jsonl (SDK benchmarks shape: history = the conversation's events).
    lines = []
    for name, conv in dirs.items():
        history = [json.loads(p.read_text()) for p in sorted((conv / "events").glob("*.json"))]
        lines.append(
            json.dumps(
                {
                    "instance_id": f"task-{name}",
                    "history": history,
                    "error": None,
                    "test_result": {},
                    "metrics": None,
                }
            )
        )
    output = root / "output.jsonl"
    output.write_text("\n".join(lines) + "\n")
    dirs["output"] = output
    dirs["conversations"] = root
    return dirs


def loops_json(path: Path) -> dict:
    done = run_harness("loops", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_output_jsonl_from_sdk_runs(sdk_runs: dict[str, Path]) -> None:
    report = loops_json(sdk_runs["output"])
    rows = {r["episode"]: r for r in report["rows"]}
    looper, solver = rows["task-looper"], rows["task-solver"]
    assert (looper["loop_kind"], looper["start_turn"], looper["period"], looper["repeats"]) == (
        "repeat_call",
        1,
        1,
        len(THOUGHTS),
    )
    assert looper["turns"] == len(THOUGHTS) + 2 and looper["turns_after_onset"] == len(THOUGHTS) + 1
    assert solver["loop_kind"] is None and solver["turns"] == 3
    assert report["totals"]["looping"] == 1 and report["totals"]["by_kind"] == {"repeat_call": 1}


def test_sdk_conversation_directories(sdk_runs: dict[str, Path]) -> None:
    single = loops_json(sdk_runs["looper"])
    assert single["format"] == "openhands-sdk-conversation"
    row = single["rows"][0]
    assert (row["loop_kind"], row["start_turn"], row["repeats"]) == ("repeat_call", 1, len(THOUGHTS))
    assert row["tokens_after_onset"] and row["tokens_after_onset"] > 0  # from base_state.json usage
    both = loops_json(sdk_runs["conversations"])
    assert sorted(r["loop_kind"] or "-" for r in both["rows"]) == ["-", "repeat_call"]


def test_table_output_has_totals(sdk_runs: dict[str, Path]) -> None:
    done = run_harness("loops", str(sdk_runs["output"]), env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0
    assert "2 episodes, 1 looping (50%: repeat_call 1)" in done.stdout


V0_HISTORY = [
    {"id": 1, "source": "user", "action": "message", "args": {"content": "Fix it"}},
    *[
        e
        for k in range(5)
        for e in (
            {
                "id": 10 + 2 * k,
                "source": "agent",
                "action": "run",
                "message": "Running command: ls",
                "tool_call_metadata": {
                    "function_name": "execute_bash",
                    "tool_call_id": f"toolu_{k}",
                    "model_response": {
                        "id": f"chatcmpl-{k}",
                        "choices": [
                            {
                                "message": {
                                    "content": f"Look again {k}",
                                    "tool_calls": [
                                        {
                                            "id": f"toolu_{k}",
                                            "type": "function",
                                            "function": {
                                                "name": "execute_bash",
                                                "arguments": '{"command": "ls", "is_input": "false"}',
                                            },
                                        }
                                    ],
                                },
                                "finish_reason": "tool_calls",
                            }
                        ],
                        "usage": {"prompt_tokens": 1000 + k, "completion_tokens": 20},
                    },
                    "total_calls_in_response": 1,
                },
                "args": {"command": "ls", "is_input": False, "thought": f"Look again {k}"},
            },
            {
                "id": 11 + 2 * k,
                "source": "agent",
                "cause": 10 + 2 * k,
                "observation": "run",
                "content": "a.py\nb.py",
                "extras": {"command": "ls", "metadata": {"exit_code": 0, "pid": 100 + k}},
            },
        )
    ],
]


def test_openhands_v0_output_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "output.jsonl"
    pairs = [[V0_HISTORY[i], V0_HISTORY[i + 1]] for i in range(1, len(V0_HISTORY), 2)]
    path.write_text(
        json.dumps({"instance_id": "flat", "history": V0_HISTORY, "error": None})
        + "\n"
        + json.dumps({"instance_id": "pairs", "history": pairs, "error": None})
        + "\n"
        + json.dumps({"instance_id": "failed", "history": [], "error": "RuntimeError: sandbox died"})
        + "\n"
    )
    rows = {r["episode"]: r for r in loops_json(path)["rows"]}
    for name in ("flat", "pairs"):
        r = rows[name]
        assert (r["loop_kind"], r["start_turn"], r["repeats"], r["turns"]) == ("repeat_call", 0, 5, 5)
        assert r["tokens_after_onset"] == sum(1000 + k + 20 for k in range(5))
    assert rows["failed"]["turns"] == 0 and rows["failed"]["error"] == "RuntimeError: sandbox died"


def test_truncated_lines_are_counted_warnings(sdk_runs: dict[str, Path], tmp_path: Path) -> None:
    text = sdk_runs["output"].read_text()
    bad = tmp_path / "output.jsonl"
    bad.write_text(text + text.splitlines()[0][:500] + "\n" + "[1, 2]\n")
    done = run_harness("loops", str(bad), "--json")
    report = json.loads(done.stdout)
    assert report["totals"]["episodes"] == 2 and report["totals"]["skipped_lines"] == 2
    assert any(":3: truncated JSON" in w for w in report["warnings"]), report["warnings"]
    assert any(":4: a JSON list" in w for w in report["warnings"])


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "empty file"),
        (b"\n\n", "empty file"),
        (b'{"foo": 1}\n', "unknown format"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary data"),
        (b"\xff\xfe\xfa garbage" * 20, "not UTF-8"),
        (b'{"history": [{"kind": "Act', "no readable episode"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "output.jsonl"
    path.write_bytes(content)
    done = run_harness("loops", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and needle in lines[0], done.stderr


def test_unknown_directory_and_missing_path(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "nope"):
        done = run_harness("loops", str(path))
        assert done.returncode == 2 and "Traceback" not in done.stderr


def test_ten_megabyte_single_output(tmp_path: Path) -> None:
    huge = "my_project/" * (10_000_000 // 11)
    event = {
        "kind": "MessageEvent",
        "source": "agent",
        "llm_message": {"role": "assistant", "content": [{"type": "text", "text": huge}]},
    }
    path = tmp_path / "output.jsonl"
    path.write_text(json.dumps({"instance_id": "huge", "history": [event]}) + "\n")
    report = loops_json(path)
    assert report["rows"][0]["loop_kind"] == "degenerate_text"


def test_run_directory_read_as_it_streams(tmp_path: Path) -> None:
    """A run directory, its episodes.jsonl, and that index under another name read the same.

    The last case switches readers mid-file (episodes are analysed as they are read): what was
    read of the file before the first index record must not count.
    """
    looping = [
        Turn(
            index=i,
            tool_calls=(ToolCall(name="terminal", arguments='{"command": "ls"}'),),
            observation="a.py",
        )
        for i in range(5)
    ]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.jsonl").write_text(
        "".join(t.model_dump_json() + "\n" for t in looping) + '{"index": "x"}\n'
    )
    records = [
        {"model": "m", "task_id": "a", "seed": 1, "trajectory": "t/a.jsonl", "error": None},
        {
            "model": "m",
            "task_id": "b",
            "seed": 1,
            "trajectory": "t/missing.jsonl",
            "error": {"message": "died"},
        },
    ]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "renamed.jsonl").write_text(
        json.dumps({"instance_id": "x", "history": []})
        + "\n[1]\n"
        + (tmp_path / "episodes.jsonl").read_text()
    )
    reports = [loops_report(p) for p in (tmp_path, tmp_path / "episodes.jsonl", tmp_path / "renamed.jsonl")]
    for report in reports:
        assert report == reports[0]
    report = reports[0]
    assert report.format == "harness-run" and report.totals.skipped_lines == 1
    assert [(r.episode, r.loop_kind, r.repeats, r.error) for r in report.rows] == [
        ("m/a/seed1", "repeat_call", 5, None),
        ("m/b/seed1", None, None, "died"),
    ]
    assert [w.removeprefix(f"{tmp_path}/") for w in report.warnings] == [
        "t/a.jsonl:6: not a Turn (Input should be a valid integer, unable to parse string as an integer); line skipped",
        "episodes.jsonl:2: trajectory t/missing.jsonl is missing",
    ]
    read = read_trajectories(tmp_path)
    assert [t.episode for t in read.trajectories] == [
        "m/a/seed1",
        "m/b/seed1",
    ] and read.warnings == report.warnings
