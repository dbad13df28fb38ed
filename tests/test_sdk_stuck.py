"""OpenHands' own stuck detector stopping an episode: recorded as a loop (kind and onset mapped
from the SDK's reason, which is kept), and the SDK's warning lines in the run's log, not the terminal."""

import json
import os
from pathlib import Path

import pytest

from harness.monitor import LoopKind, ToolCall, Turn
from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from tests.conftest import REPO, run_harness

pytestmark = pytest.mark.timeout(300)


def test_stuck_detector_stop_is_a_loop_and_its_warnings_go_to_the_run_log(tmp_path: Path) -> None:
    """Each response calls `cat data.txt` twice: after two turns the SDK has seen the same action and
    observation four times and stops the conversation (STUCK); the harness's monitor, which counts
    turns, needs four. Before: status unresolved, no loop, and the SDK's two WARNING lines printed
    between the progress lines."""
    cat = ScriptedCall(name="terminal", arguments={"command": "cat data.txt"})
    script = tmp_path / "stuck.json"
    script.write_text(
        ReplayScript(
            model="scripted",
            responses=[ScriptedResponse(tool_calls=[cat, cat])],
            when_exhausted="repeat_last",
        ).model_dump_json()
    )
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = run_harness(
        "eval",
        "--model",
        f"replay:{script}",
        "--tasks",
        str(REPO / "tasks" / "smoke" / "count-lines"),
        "--run-dir",
        str(run),
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (rec,) = RunStore(run).records().values()
    assert rec.status == "loop_stopped" and rec.turns == 2 and rec.reward == 0.0
    assert rec.loop is not None
    assert (rec.loop.kind, rec.loop.start_turn, rec.loop.period, rec.loop.repeats, rec.loop.detected_at) == (
        LoopKind.repeat_call,
        0,
        1,
        4,
        1,
    )
    assert rec.loop.scaffold_reason == "Action, Observation loop detected"
    assert rec.loop.unit == 'terminal({"command":"cat data.txt"})'
    assert "OpenHands' stuck detector stopped the episode" in (rec.loop.why or "")
    assert (
        "count-lines seed 1: rollout stopped (2 turns, loop repeat_call@0) — verifying later" in done.stderr
    )
    # The SDK's lines: in the run's log with the episode named, none on the terminal.
    for said in ("Action, Observation loop detected", "Stuck pattern detected"):
        assert said not in done.stderr and said not in done.stdout
    log = (run / "harness.log").read_text()
    assert (
        "WARNING [scripted/count-lines/seed1] openhands.sdk.conversation.stuck_detector: Action, Observation"
        in log
    )
    assert "Stuck pattern detected" in log
    shown = run_harness("show", str(run), "count-lines/seed1", env={**env, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "loop: repeat_call from turn 0" in shown.stdout and "OpenHands' stuck detector" in shown.stdout
    assert json.loads((run / "episodes.jsonl").read_text().splitlines()[-1])["loop"]["scaffold_reason"]


def turn(
    i: int, calls: list[tuple[str, str]], observation: str = "ok", error: bool = False, text: str = ""
) -> Turn:
    return Turn(
        index=i,
        text=text,
        tool_calls=tuple(ToolCall(name=n, arguments=a) for n, a in calls),
        observation=observation,
        observation_is_error=error,
    )


LS = ("terminal", '{"command": "ls"}')
PWD = ("terminal", '{"command":"pwd"}')


def test_each_sdk_reason_maps_to_a_kind_with_its_onset() -> None:
    """The SDK's three logged reasons, and its monologue check (which logs none), located in the turns."""
    from harness.episodes.openhands.sdk_stuck import finding_from_stuck

    alternating = [
        turn(0, [PWD], "/w"),
        *(turn(i, [LS if i % 2 else PWD], "a" if i % 2 else "/w") for i in range(1, 7)),
    ]
    found = finding_from_stuck(alternating, "Alternating Action, Observation loop detected")
    assert found is not None
    assert (found.kind, found.period, found.start_turn, found.repeats, found.detected_at) == (
        LoopKind.cycle,
        2,
        0,
        3,
        6,
    )
    assert found.unit == 'terminal({"command":"pwd"}) -> terminal({"command":"ls"})'

    failing = [turn(0, [PWD], "/w"), *(turn(i, [LS], "Error: no", error=True) for i in range(1, 5))]
    found = finding_from_stuck(failing, "Action, Error loop detected")
    assert found is not None
    assert (found.kind, found.start_turn, found.repeats) == (LoopKind.repeat_error, 1, 4)
    assert found.scaffold_reason == "Action, Error loop detected"

    talking = [turn(0, [LS]), *(turn(i, [], "", text=f"I think, step {i}.") for i in range(1, 4))]
    found = finding_from_stuck(talking, None)
    assert found is not None
    assert (found.kind, found.start_turn, found.repeats) == (LoopKind.repeat_output, 1, 3)
    assert "monologue" in (found.scaffold_reason or "")
    assert finding_from_stuck([], "Action, Observation loop detected") is None
