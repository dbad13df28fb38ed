"""A task one run lost (infra_error, unverified, never run) is never dropped from a comparison
unseen: `harness compare` lists it, and its gate cannot PASS on the tasks that are left."""

import json
from pathlib import Path

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedResponse
from tests.conftest import run_harness
from tests.helpers.runs import record, write_run
from tests.test_compare_gate_page import WIDE
from tests.test_eval_replay import SOLVE

ERROR_500 = ScriptedResponse(status=500, error="EngineCore encountered an issue")


def eval_local(script: list[ScriptedResponse], run: Path) -> None:
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="local", models=("scripted",), tasks="smoke", base_url=server.base_url, run_dir=run
            )
        )


@pytest.mark.slow
def test_a_task_one_run_lost_to_the_infrastructure_is_reported_and_the_gate_warns(tmp_path: Path) -> None:
    """Real runs: B's fix-add fails three times on the server (infra_error, unscored). Before, it
    was left out with a side note and nothing in the verdict or the gate said so."""
    a, b = tmp_path / "a", tmp_path / "b"
    eval_local([*SOLVE["count-lines"], *SOLVE["fix-add"], *SOLVE["hello-file"]], a)
    eval_local([*SOLVE["count-lines"], ERROR_500, ERROR_500, ERROR_500, *SOLVE["hello-file"]], b)
    res = run_harness("compare", str(a), str(b), "--max-drop", "5", "--strict", env=WIDE)
    assert res.returncode == 2, res.stderr  # WARN
    out = " ".join(res.stdout.split())
    assert "1 task(s) one-sided, scored in one run only: fix-add (B: infra_error)" in out, out
    assert "WARN: " in out and "fix-add (B: infra_error)" in out.split("WARN: ", 1)[1]
    assert "1 task(s) left out" in out  # in the verdict sentence too
    res = run_harness("compare", str(a), str(b), "--max-drop", "5", "--json", env=WIDE)
    c = json.loads(res.stdout)
    assert c["one_sided"] == [{"task_id": "fix-add", "a": 1.0, "b": None, "why": "B: infra_error"}]
    assert c["tasks"] == 2 and c["gate"]["verdict"] == "WARN"


def test_a_pass_on_the_tasks_both_runs_scored_is_a_warn_when_one_run_lost_some(tmp_path: Path) -> None:
    """30 tasks, B fixes 2 (a PASS on its own: tests/test_compare_gate_page.py); B's records of two
    more are infra_error and one task never ran in A."""
    tasks = [f"t{i:02d}" for i in range(31)]
    a = [record(t, reward=float(i < 15), model="base") for i, t in enumerate(tasks) if t != "t30"]
    b = [
        record(t, reward=None, status="infra_error", model="ft")
        if t in ("t20", "t21")
        else record(t, reward=float(i < 17), model="ft")
        for i, t in enumerate(tasks)
    ]
    ra, rb = write_run(tmp_path / "a", a, tasks=tasks), write_run(tmp_path / "b", b, tasks=tasks)
    res = run_harness("compare", str(ra), str(rb), "--max-drop", "5", "--strict", "--json", env=WIDE)
    c = json.loads(res.stdout)
    assert res.returncode == 2 and c["gate"]["verdict"] == "WARN", c["gate"]
    assert (
        "B is non-inferior" in c["gate"]["reason"]
        and "only on the tasks both runs scored" in c["gate"]["reason"]
    )
    assert [(o["task_id"], o["why"]) for o in c["one_sided"]] == [
        ("t20", "B: infra_error"),
        ("t21", "B: infra_error"),
        ("t30", "A: no episode"),
    ]
    assert c["tasks"] == 28
    # A BLOCK stands: the scored tasks alone establish the drop.
    b = [
        record(t, reward=None, status="infra_error", model="ft")
        if t == "t20"
        else record(t, reward=0.0, model="ft")
        for t in tasks
    ]
    rb = write_run(tmp_path / "b2", b, tasks=tasks)
    res = run_harness("compare", str(ra), str(rb), "--max-drop", "5", "--strict", env=WIDE)
    assert res.returncode == 1 and "BLOCK: " in res.stdout
