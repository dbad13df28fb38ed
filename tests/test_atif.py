"""ATIF (Harbor's Agent Trajectory Interchange Format): `harness export-atif` writes a run's episodes
as ATIF, `harness loops` reads ATIF (ours and Harbor's own example) with the same findings."""

import json
from pathlib import Path
from typing import Any

import pytest

from harness.monitor import LoopFinding, StallFinding, ToolCall, Turn, detect_loops, detect_stall
from harness.results.atif import AtifTrajectory
from harness.results.trajectories import read_trajectories
from tests.conftest import DATA, run_harness
from tests.helpers.runs import record, write_run

FIELDS = ("episode", "turns", "loop_kind", "start_turn", "period", "repeats", "unit", "why", "stall")


def loops_json(path: Path) -> dict[str, Any]:
    done = run_harness("loops", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _turn(i: int, command: str, obs: str, *, raw: str | None = None, error: bool = False) -> Turn:
    call = ToolCall(
        name="terminal", arguments=raw if raw is not None else json.dumps({"command": command}), id=f"c{i}"
    )
    return Turn(
        index=i,
        text=f"Step {i}.",
        tool_calls=(call,),
        observation=obs,
        observation_is_error=error,
        finish_reason="tool_calls",
        prompt_tokens=100 + i,
        completion_tokens=7,
    )


def _episodes() -> dict[str, list[Turn]]:
    looping = [_turn(0, "ls", "a.py")] + [_turn(i, "cat a.py", "x = 1") for i in range(1, 6)]
    cycle = [_turn(i, ["git status", "git diff"][i % 2], f"state {i % 2}") for i in range(7)]
    failing = "E   AssertionError: assert 1 == 2\n1 failed"
    thrash = []
    for k in range(5):
        thrash.append(_turn(2 * k, f"sed -i 's/1/{k}/' a.py", ""))
        thrash.append(_turn(2 * k + 1, "pytest -q", failing, error=True))
    odd = [_turn(0, "", "bad call", raw="{'command': ls", error=True), _turn(1, "ls", "a.py")]
    return {"looping": looping, "cycle": cycle, "thrash": thrash, "odd": odd}


def _run(tmp_path: Path) -> Path:
    episodes = _episodes()
    records = []
    for task, turns in episodes.items():
        loop, stall = detect_loops(turns), detect_stall(turns)
        rec = record(task, reward=0.0, turns=len(turns)).model_copy(
            update={
                "loop": loop,
                "stall": stall,
                "status": "loop_stopped" if loop else "unresolved",
                "scaffold": "openhands-codeact",
            }
        )
        records.append(rec)
    return write_run(tmp_path / "run", records, turns=episodes)


def test_export_atif_reads_back_with_the_same_findings(tmp_path: Path) -> None:
    run = _run(tmp_path)
    done = run_harness("export-atif", str(run))
    assert done.returncode == 0, done.stderr
    files = sorted((run / "atif").rglob("*.atif.json"))
    assert [f.relative_to(run / "atif").as_posix() for f in files] == [
        "m/cycle/seed1.atif.json",
        "m/looping/seed1.atif.json",
        "m/odd/seed1.atif.json",
        "m/thrash/seed1.atif.json",
    ]
    original, exported = loops_json(run), loops_json(run / "atif")
    assert exported["format"] == "atif"
    by_episode = {r["episode"]: r for r in exported["rows"]}
    assert len(by_episode) == 4
    for row in original["rows"]:
        assert {k: by_episode[row["episode"]][k] for k in FIELDS} == {k: row[k] for k in FIELDS}, row[
            "episode"
        ]
    kinds = {r["episode"]: (r["loop_kind"], r["stall"] is not None) for r in exported["rows"]}
    assert kinds == {
        "m/looping/seed1": ("repeat_call", False),
        "m/cycle/seed1": ("cycle", False),
        "m/thrash/seed1": (None, True),
        "m/odd/seed1": (None, False),
    }
    # the turns themselves come back: text, calls (an unparseable argument string verbatim), results,
    # the error flag, token counts
    for task, turns in _episodes().items():
        (back,) = read_trajectories(run / "atif" / "m" / task / "seed1.atif.json").trajectories
        assert back.turns == turns, task
    doc = json.loads((run / "atif" / "m" / "looping" / "seed1.atif.json").read_text())
    loop = LoopFinding.model_validate(doc["extra"]["harness"]["loop"])
    assert (loop.kind.value, loop.start_turn) == ("repeat_call", 1)
    assert doc["agent"]["name"] == "openhands-codeact" and doc["agent"]["model_name"] == "m"
    assert doc["final_metrics"]["total_steps"] == 6
    stall = json.loads((run / "atif" / "m" / "thrash" / "seed1.atif.json").read_text())["extra"]["harness"][
        "stall"
    ]
    assert StallFinding.model_validate(stall).repeats == 5


def test_exported_trajectories_validate_against_harbors_own_models(tmp_path: Path) -> None:
    trajectories = pytest.importorskip("harbor.models.trajectories")  # the package that defines ATIF
    run = _run(tmp_path)
    assert run_harness("export-atif", str(run), "--out", str(tmp_path / "out")).returncode == 0
    for path in sorted((tmp_path / "out").rglob("*.atif.json")):
        trajectories.Trajectory.model_validate_json(path.read_text())


def test_harbors_own_example_and_a_harbor_job_directory_are_read(tmp_path: Path) -> None:
    example = DATA / "atif" / "harbor_rfc_example.json"
    report = loops_json(example)
    assert report["format"] == "atif" and report["warnings"] == []
    (row,) = report["rows"]
    assert (row["episode"], row["turns"], row["loop_kind"]) == (
        "025B810F-B3A2-4C67-93C0-FE7A142A947A",
        2,
        None,
    )
    (trajectory,) = read_trajectories(example).trajectories
    first = trajectory.turns[0]
    assert [json.loads(c.arguments) for c in first.tool_calls] == [
        {"ticker": "GOOGL", "metric": "price"},
        {"ticker": "GOOGL", "metric": "volume"},
    ]
    assert first.observation.startswith("GOOGL is currently trading") and first.prompt_tokens == 520
    AtifTrajectory.model_validate_json(example.read_text())
    # a Harbor job: <job>/<trial>/agent/trajectory.json, one looping, the trial named by its directory
    doc = json.loads(example.read_text())
    del doc["session_id"]
    agent_step = doc["steps"][1]
    doc["steps"] = [doc["steps"][0]] + [
        {
            **agent_step,
            "step_id": k + 2,
            "tool_calls": agent_step["tool_calls"][:1],
            "observation": {"results": agent_step["observation"]["results"][:1]},
        }
        for k in range(5)
    ]
    for trial, steps in (("trial-a", doc["steps"]), ("trial-b", doc["steps"][:2])):
        path = tmp_path / "job" / trial / "agent" / "trajectory.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({**doc, "steps": steps}))
    rows = {r["episode"]: r for r in loops_json(tmp_path / "job")["rows"]}
    assert (rows["trial-a"]["loop_kind"], rows["trial-a"]["start_turn"]) == ("repeat_call", 0)
    assert rows["trial-b"]["loop_kind"] is None


def test_export_atif_mistakes_are_one_line(tmp_path: Path) -> None:
    done = run_harness("export-atif", str(tmp_path))
    assert done.returncode != 0 and "no episodes.jsonl" in done.stderr and "Traceback" not in done.stderr
