"""`harness analyze`: a judge's answers checked against the rubric (one retry, then unjudged), and
its agreement with human labels, against a hand computation. The judge is the replay server."""

import json
import os
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.judge import agreement, load_labels, load_rubric, parse_answer
from harness.monitor.failure import Failure
from harness.replay import ReplayScript, ReplayServer, ScriptedResponse
from harness.results.store import EpisodeRecord
from tests.conftest import run_harness

RUBRIC = load_rubric(None)


def test_an_answer_is_the_first_json_object_naming_a_class() -> None:
    fenced = 'Sure.\n```json\n{"label": "Wrong fix", "reason": "the  edit\\nflips the sign"}\n```'
    answer = parse_answer(fenced, RUBRIC)
    assert (answer.label, answer.reason) == ("wrong_fix", "the edit flips the sign")
    assert parse_answer('{"x": {"y": 1}} {"label": "no-progress"}', RUBRIC).label == "no_progress"
    for bad, why in (
        ("It looped.", "no JSON object"),
        ('{"reason": "x"}', 'no "label" string'),
        ('{"label": "lazy", "reason": "x"}', "label 'lazy' is not one of misread_task"),
        ('{"label": "incomplete", "reason": 3}', '"reason" is not a string'),
    ):
        with pytest.raises(ValueError, match=why):
            parse_answer(bad, RUBRIC)


def test_a_bad_rubric_is_one_line_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "rubric.toml"
    bad.write_text('name = "r"\ninstructions = "x"\n[[classes]]\nname = "Bad Name"\ndescription = "d"\n')
    with pytest.raises(HarnessError, match=r"--rubric .*rubric.toml: classes.0.name: String should match"):
        load_rubric(bad)
    bad.write_text('name = "r"\ninstructions = "x"\n[[classes]]\nname = "a"\ndescription = "d"\n' * 1)
    with pytest.raises(HarnessError, match=r"classes: .*at least 2"):
        load_rubric(bad)
    bad.write_text("name = ")
    with pytest.raises(HarnessError, match="not valid TOML"):
        load_rubric(bad)


def test_agreement_is_the_hand_computation() -> None:
    """10 episodes. Humans: a x5, b x3, c x2; the judge agrees on 4 a, 2 b and 1 c.
    observed = 7/10; judge's counts: a 6 (4 right + 1 b + 1 c), b 3 (2 right + 1 a), c 1.
    expected = (5*6 + 3*3 + 2*1) / 100 = 0.41; kappa = (0.7 - 0.41) / 0.59."""
    pairs = [("a", "a")] * 4 + [("a", "b")] + [("b", "b")] * 2 + [("b", "a")] + [("c", "c"), ("c", "a")]
    got = agreement(pairs)
    assert got.n == 10 and got.observed == pytest.approx(0.7) and got.expected == pytest.approx(0.41)
    assert got.kappa == pytest.approx(0.29 / 0.59)
    scores = {c.label: (c.support, c.predicted, c.precision, c.recall) for c in got.classes}
    assert scores == {
        "a": (5, 6, pytest.approx(4 / 6), pytest.approx(4 / 5)),
        "b": (3, 3, pytest.approx(2 / 3), pytest.approx(2 / 3)),
        "c": (2, 1, 1.0, 0.5),
    }
    assert agreement([("a", "a"), ("a", "a")]).kappa is None  # chance agreement is 1: undefined


def test_labels_files(tmp_path: Path) -> None:
    csv = tmp_path / "labels.csv"
    csv.write_text("episode,label\nm/t1/seed1,wrong_fix\nm/t2/seed1, incomplete\n")
    assert load_labels(csv) == {"m/t1/seed1": "wrong_fix", "m/t2/seed1": "incomplete"}
    jsonl = tmp_path / "labels.jsonl"
    jsonl.write_text('{"episode": "m/t1/seed1", "label": "wrong_fix"}\n\n')
    assert load_labels(jsonl) == {"m/t1/seed1": "wrong_fix"}
    csv.write_text("id,class\nx,y\n")
    with pytest.raises(HarnessError, match="needs the columns episode and label"):
        load_labels(csv)
    jsonl.write_text('{"episode": "m/t1/seed1"}\n')
    with pytest.raises(HarnessError, match="row 1 needs an episode and a label"):
        load_labels(jsonl)


def _run(root: Path) -> Path:
    """A run of four episodes (no trajectories on disk: the judge reads the records): three failed
    with the harness's causes, one resolved."""
    root.mkdir()
    tasks = ["t1", "t2", "t3", "t4"]
    manifest = {
        "run_id": "r",
        "models": ["m"],
        "tasks": tasks,
        "seeds": [1],
        "scaffold": "s",
        "scaffold_hash": "h",
    }
    (root / "run.json").write_text(json.dumps(manifest))
    causes: dict[str, Failure | None] = {
        "t1": Failure(cause="tests_failed", detail="test_calc.py::test_add: AssertionError"),
        "t2": Failure(cause="loop", detail="repeat_call from turn 2 (stopped): ls"),
        "t3": Failure(cause="no_tool_call"),
        "t4": None,
    }
    with (root / "episodes.jsonl").open("w") as fh:
        for task, failure in causes.items():
            rec = EpisodeRecord(
                run_id="r", model="m", model_path="/ckpt", task_id=task, suite="s", seed=1,
                status="resolved" if failure is None else "unresolved", reward=0.0 if failure else 1.0,
                turns=3, tool_calls=3, format_errors={}, loop=None, failure=failure, prompt_tokens=1,
                completion_tokens=1, wall_s=1.0, llm_s=1.0, error=None,
                trajectory=f"trajectories/m/{task}/seed1.jsonl", verified=True,
            )  # fmt: skip
            fh.write(rec.model_dump_json() + "\n")
    return root


def test_analyze_with_a_replay_judge_retries_once_then_records_unjudged(tmp_path: Path) -> None:
    """One episode at a time, in the run's order: t1's first answer is prose (asked again, saying
    why; the second is valid), t2's is valid at once, t3's is bad twice (unjudged, the fault
    kept). The labels file labels all three and t4 (resolved: never judged): agreement over t1 and
    t2 only, as computed by hand."""
    run = _run(tmp_path / "run")
    answers = [
        ScriptedResponse(content="The agent looped, I think."),
        ScriptedResponse(content='{"label": "wrong_fix", "reason": "the sign is still wrong"}'),
        ScriptedResponse(content='{"label": "no_progress", "reason": "ls again and again"}'),
        ScriptedResponse(content='{"label": "lazy"}'),
        ScriptedResponse(content="no idea"),
    ]
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "episode,label\nm/t1/seed1,wrong_fix\nm/t2/seed1,incomplete\nm/t3/seed1,tool_misuse\nm/t4/seed1,x\n"
    )
    with ReplayServer(ReplayScript(model="judge", responses=answers)) as server:
        done = run_harness(
            "analyze", str(run), "--judge", server.base_url, "--labels", str(labels), "--concurrency", "1",
            env={**os.environ, "COLUMNS": "300"},
        )  # fmt: skip
        asked = server.requests
    assert done.returncode == 0, done.stderr
    assert len(asked) == 5
    retry = asked[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "The agent looped, I think."}
    assert "That answer is not valid: it holds no JSON object" in retry[-1]["content"]
    assert "test_calc.py::test_add: AssertionError" in asked[0]["messages"][1]["content"]  # the cause, given
    judged = {
        j["episode"]: j
        for j in map(json.loads, (run / "analysis" / "judgments.jsonl").read_text().splitlines())
    }
    assert {e: (j["status"], j["label"], j["attempts"]) for e, j in judged.items()} == {
        "m/t1/seed1": ("judged", "wrong_fix", 2),
        "m/t2/seed1": ("judged", "no_progress", 1),
        "m/t3/seed1": ("unjudged", None, 2),
    }
    assert judged["m/t3/seed1"]["problem"] == "the answer is not valid: it holds no JSON object"
    assert judged["m/t3/seed1"]["raw"] == "no idea"
    said = " ".join(done.stdout.split())
    # t1 agrees, t2 does not: observed 1/2; human a=wrong_fix, incomplete; judge wrong_fix, no_progress:
    # expected = (1*1 + 0 + 0) / 4 = 0.25; kappa = (0.5 - 0.25) / 0.75 = 0.33
    assert "judge vs human labels on 2 episodes: 50% agree, Cohen's kappa 0.33 (chance agreement 25%)" in said
    assert "2 labelled episode(s) have no judgment" in said
    assert "unjudged m/t3/seed1: the answer is not valid" in said
    assert "judged 2 of 3 failed episodes" in said


def test_a_judge_url_the_client_cannot_use_is_refused_in_one_line(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    done = run_harness("analyze", str(run), "--judge", "http://127.0.0.1:9/v1?token=x")
    assert done.returncode == 2 and "an endpoint's base URL ends in /v1 and has no query" in done.stderr
