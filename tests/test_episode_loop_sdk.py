"""A real OpenHands SDK episode in a local workspace, driven by the replay server.

The scripted model repeats one call with different thought text each time: the SDK's stuck
detector compares the thought too, so it lets the loop run; our monitor stops it at the right turn.
"""

from pathlib import Path

import pytest

from harness.episodes.openhands.driver import run_sdk_episode
from harness.episodes.scaffold import load_scaffold
from harness.monitor import LoopKind
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse

THOUGHTS = [
    "Let me check the directory.",
    "I should look at the files again.",
    "Maybe listing once more helps.",
    "Let me verify the listing.",
    "Checking the directory contents.",
    "One more look at the files.",
    "Listing again to be sure.",
    "Let me see what is there.",
]


def looping_script() -> ReplayScript:
    first = ScriptedResponse(
        content="First I read the task file.",
        tool_calls=[
            ScriptedCall(
                name="terminal",
                arguments={"command": "cat task.txt", "summary": "read task", "security_risk": "LOW"},
            )
        ],
    )
    loop = [
        ScriptedResponse(
            content=t,
            tool_calls=[
                ScriptedCall(
                    name="terminal",
                    arguments={"command": "ls", "summary": f"list files ({i})", "security_risk": "LOW"},
                )
            ],
        )
        for i, t in enumerate(THOUGHTS)
    ]
    done = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
    return ReplayScript(model="looper", responses=[first, *loop, done])


def run(tmp_path: Path, *, stop_on_loop: bool) -> tuple[object, int]:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True)
    (ws / "task.txt").write_text("fix the bug")
    with ReplayServer(looping_script()) as server:
        outcome = run_sdk_episode(
            instruction="Fix the bug described in task.txt.",
            workspace=ws,
            base_url=server.base_url,
            model="looper",
            api_key="k",
            scaffold=load_scaffold(),
            out_dir=tmp_path / "out",
            seed=1,
            stop_on_loop=stop_on_loop,
        )
        return outcome, server.served


@pytest.mark.timeout(300)
def test_monitor_stops_loop_that_sdk_stuck_detection_misses(tmp_path: Path) -> None:
    outcome, served = run(tmp_path / "watched", stop_on_loop=True)
    assert outcome.status == "loop_stopped"  # type: ignore[attr-defined]
    loop = outcome.loop  # type: ignore[attr-defined]
    assert (loop.kind, loop.start_turn, loop.detected_at, loop.repeats) == (LoopKind.repeat_call, 1, 4, 4)
    assert served == 5  # no model call after the loop was certain
    assert [t.text for t in outcome.turns[1:5]] == THOUGHTS[:4]  # type: ignore[attr-defined]

    # The same episode with only the SDK's stuck detection runs every repeat and calls it finished.
    unwatched, served = run(tmp_path / "sdk-only", stop_on_loop=False)
    assert unwatched.details["sdk_status"] == "finished" and served == len(THOUGHTS) + 2  # type: ignore[attr-defined]
    assert unwatched.loop.repeats == len(THOUGHTS)  # type: ignore[attr-defined]


@pytest.mark.timeout(300)
def test_recorded_completions_replay_the_episode_through_the_scaffold(tmp_path: Path) -> None:
    from harness.replay import load_script

    first, _ = run(tmp_path / "original", stop_on_loop=False)
    script = load_script(tmp_path / "original" / "out" / "completions")
    assert len(script.responses) == len(THOUGHTS) + 2
    ws = tmp_path / "again" / "ws"
    ws.mkdir(parents=True)
    (ws / "task.txt").write_text("fix the bug")
    with ReplayServer(script) as server:
        again = run_sdk_episode(
            instruction="Fix the bug described in task.txt.",
            workspace=ws,
            base_url=server.base_url,
            model="looper",
            api_key="k",
            scaffold=load_scaffold(),
            out_dir=tmp_path / "again" / "out",
            seed=1,
        )
    assert again.status == "loop_stopped"
    assert again.loop == first.loop.model_copy(update={"repeats": 4})  # type: ignore[attr-defined]
    same = [(t.text, [(c.name, c.arguments) for c in t.tool_calls]) for t in again.turns]
    orig = [(t.text, [(c.name, c.arguments) for c in t.tool_calls]) for t in first.turns[: len(again.turns)]]  # type: ignore[attr-defined]
    assert same == orig
