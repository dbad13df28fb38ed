"""What a seed varies: the sampling sent and recorded, the warning for greedy seeds, and the report's
count of identical seeds with the power statement that follows from it (replay server as the model)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.evaluate import EvalConfig, run_eval
from harness.monitor import ToolCall, Turn
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from tests.conftest import REPO, run_harness
from tests.helpers.runs import record, write_run

pytestmark = pytest.mark.timeout(300)

FINISH = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
WRITE = ScriptedResponse(
    content="Writing.",
    tool_calls=[ScriptedCall(name="terminal", arguments={"command": "echo 'Hello, world!' > hello.txt"})],
)


def test_temperature_reaches_the_model_and_run_json_and_a_resume_must_match(tmp_path: Path) -> None:
    """--temperature was dropped on its way to the SDK: every request said 0.0 whatever was asked."""
    run = tmp_path / "run"
    hello = str(REPO / "tasks" / "smoke" / "hello-file")
    with ReplayServer(ReplayScript(model="scripted", responses=[WRITE, FINISH])) as server:
        config = EvalConfig(
            runtime="local",
            models=("scripted",),
            tasks=hello,
            base_url=server.base_url,
            run_dir=run,
            temperature=0.7,
        )
        run_eval(config)
    sent = [
        json.loads(f.read_text())["kwargs"] for f in (run / "episodes").rglob("completions/*.json")
    ]  # the SDK's log of each request
    assert len(sent) == 2 and all(k["temperature"] == 0.7 and k["top_p"] == 1.0 for k in sent)
    sampling = json.loads((run / "run.json").read_text())["sampling"]
    assert sampling == {
        "temperature": 0.7,
        "top_p": 1.0,
        "max_output_tokens": 1024,
        "seed": "the episode's seed",
        "source": "--temperature",
    }
    with pytest.raises(
        HarnessError, match=r"sampled with temperature 0.7, this command with 0.0 .*another --run-dir"
    ):
        run_eval(config.model_copy(update={"temperature": None, "seeds": 2}))


@pytest.mark.slow
def test_greedy_seeds_are_warned_about_counted_identical_and_said_to_buy_nothing(tmp_path: Path) -> None:
    """Three seeds at the default temperature 0 on two tasks: a warning before the first episode;
    identical trajectories counted per task in the report; the headline's power statement says
    more seeds buy nothing and what would."""
    script = tmp_path / "script.json"
    script.write_text(
        ReplayScript(model="scripted", responses=[WRITE, FINISH], pick="by_turn").model_dump_json()
    )
    tasks = tmp_path / "tasks"
    for name in ("hello-file", "count-lines"):  # one solved by the script, one not: a CI to project
        shutil.copytree(REPO / "tasks" / "smoke" / name, tasks / name)
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = run_harness(
        "eval",
        "--model",
        f"replay:{script}",
        "--tasks",
        str(tasks),
        "--seeds",
        "3",
        "--run-dir",
        str(run),
        env=env,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    warning = "warning: temperature 0 with 3 seeds: decoding is greedy, so the seeds differ only through"
    assert done.stderr.index(warning) < done.stderr.index("seed 1: rollout done")
    headline = next(x for x in done.stdout.splitlines() if x.startswith("scripted: resolved"))
    assert "seeds identical on 2 of 2 tasks (3 seeds each; temperature 0)" in headline
    assert "between-seed variance of the score 0 (0 of 2 tasks scored differently across seeds)" in headline
    assert "every task's seeds gave identical episodes, so more seeds buy nothing" in headline
    assert (
        "with 4 tasks about" in headline
        and "for seeds that vary, sample at a temperature above 0" in headline
    )
    assert "with 6 seeds" not in headline
    report = run_harness("report", str(run), env=env)
    assert report.returncode == 0, report.stderr
    md = (run / "report.md").read_text()
    assert "| scripted | count-lines | 3 | 3 of 3 | 1 | 0 0 0 |" in md
    assert "| scripted | hello-file | 3 | 3 of 3 | 1 | 1 1 1 |" in md
    assert "seed_identical_tasks" in (run / "metrics.csv").read_text().splitlines()[0]


def turns_saying(*texts: str) -> list[Turn]:
    calls = (ToolCall(name="terminal", arguments='{"command": "ls"}'),)
    return [Turn(index=i, text=t, tool_calls=calls, observation="ok") for i, t in enumerate(texts)]


def test_seeds_that_differ_are_counted_with_the_variance_observed(tmp_path: Path) -> None:
    """Per task: the largest group of identical seeds, the distinct trajectories, and the mean
    within-task variance of the score across seeds; seeds that differ leave the projection alone."""
    from harness.results.metrics import headline, model_metrics
    from harness.results.runs import load_run
    from harness.results.seeds import seed_variation

    recs = [record("t1", s, reward=r) for s, r in ((1, 1.0), (2, 0.0), (3, 1.0))]
    recs += [record("t2", s, reward=0.0) for s in (1, 2, 3)]
    recs += [record("t3", s, reward=1.0) for s in (1, 2, 3)]
    run = write_run(tmp_path / "run", [])
    from harness.results.store import RunStore

    store = RunStore(run)
    texts = {("t1", 1): "a", ("t1", 2): "b", ("t1", 3): "a", ("t2", 1): "x", ("t2", 2): "y", ("t2", 3): "z"}
    for r in recs:
        rel = store.write_trajectory(
            store.trajectory_path(r.model, r.task_id, r.seed),
            turns_saying(texts.get((r.task_id, r.seed), "same")),
        )
        store.append(r.model_copy(update={"trajectory": rel}))
    manifest = json.loads((run / "run.json").read_text())
    manifest |= {
        "tasks": ["t1", "t2", "t3"],
        "seeds": [1, 2, 3],
        "models": ["m"],
        "sampling": {"temperature": 0.7},
    }
    (run / "run.json").write_text(json.dumps(manifest))
    data = load_run(run)
    v = seed_variation(run, data.episodes, 0.7)
    assert [(t.task_id, t.identical, t.distinct) for t in v.tasks] == [
        ("t1", 2, 2),
        ("t2", 1, 3),
        ("t3", 3, 1),
    ]
    assert v.identical_tasks == 1 and not v.all_identical and v.no_gain() is None
    assert v.score_variance == pytest.approx((1 / 3 + 0 + 0) / 3) and v.outcome_differs == 1
    (m,) = model_metrics(data)
    line = headline(m)
    assert "seeds identical on 1 of 3 tasks (3 seeds each; temperature 0.7)" in line
    assert "more seeds buy nothing" not in line and "; with 6 seeds " in line
