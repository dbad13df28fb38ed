"""Harbor's multi-step tasks (``[[steps]]``, tests/data/harbor-fields/multi-step) on the real engine:
`harness eval` with a scripted model (the replay server) under mini-swe-agent, a new agent run per
step in the one container, each step verified there before the next; the trial's reward as
Harbor's multi_step_reward_strategy gives it; a failed ``min_reward`` step ends the trial before
the next step's agent makes a single request.

The fixture is built FROM ubuntu:24.04 mapped to the small busybox + bash image of
test_harbor_fields.py (mini-swe-agent needs only ``bash`` in the container).
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedResponse
from harness.results.store import EpisodeRecord, RunStore
from harness.runtime.base import SandboxConfig
from tests.conftest import run_harness
from tests.helpers.registry import import_image
from tests.test_harbor_fields import BUSYBOX, FIELDS

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    """The engine, with the sandbox image and test_harbor_fields.py's busybox + bash image."""
    from docker.errors import NotFound

    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)
    try:
        c.images.get(BUSYBOX)
    except NotFound:
        import_image(c, BUSYBOX, {}, workdir="/")
    return c


TASK = FIELDS / "multi-step"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def say(command: str) -> ScriptedResponse:
    return ScriptedResponse(content=f"THOUGHT: next.\n\n```mswea_bash_command\n{command}\n```")


def evaluate(task: Path, script: list[ScriptedResponse], run: Path) -> tuple[ReplayServer, EpisodeRecord]:
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="docker",
                models=("scripted",),
                scaffolds=("mini-swe-agent",),
                tasks=str(task),
                base_url=server.base_url,
                run_dir=run,
                sandbox=SandboxConfig(image_map=(f"ubuntu:24.04={BUSYBOX}",)),
            )
        )
    (rec,) = RunStore(run).records().values()
    return server, rec


# Step 1 done right (and a look at /tests: the tests of a step arrive only after its agent);
# step 2 done wrong (the word, but on the first line's end, so two lines are never there).
SOLVES_ONE = [
    say("echo tests=$(ls -A /tests 2>/dev/null | wc -l | tr -d ' '); echo Hello > /app/greeting.txt"),
    say(SUBMIT),
    say(
        "echo tests=$(ls -A /tests | wc -l | tr -d ' '); cat /app/.setup-done; printf World >> /app/greeting.txt"
    ),
    say(SUBMIT),
]


@pytest.mark.slow
def test_eval_runs_each_step_in_the_one_container_and_rewards_the_mean_of_the_steps(
    client,
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    server, rec = evaluate(TASK, SOLVES_ONE, tmp_path / "run")
    assert server.served == 4  # two requests per step: one run of the agent each
    assert (rec.status, rec.reward) == ("unresolved", 0.5), rec  # Harbor's mean of 1 and 0
    assert rec.steps is not None
    assert [(s.name, s.rewards, s.first_turn, s.turns) for s in rec.steps] == [
        ("create-file", {"reward": 1.0}, 0, 2),
        ("append-content", {"reward": 0.0}, 2, 2),
    ]
    run = tmp_path / "run"
    turns = [json.loads(line) for line in (run / rec.trajectory).read_text().splitlines()]
    assert [t["index"] for t in turns] == [0, 1, 2, 3]  # the steps' turns one after the other
    # the step's tests were never in the container while its agent ran; the later step's agent saw
    # the earlier step's verifier gone, its own workdir/setup.sh run, the file step 1 made still there
    assert "tests=0" in turns[0]["observation"]
    assert "setup ran" in turns[2]["observation"] and "tests=0" in turns[2]["observation"]
    edir = RunStore(run).episode_dir("scripted", "multi-step", 1)
    log = (edir / "verifier.log").read_text()
    assert "==== step create-file: reward 1" in log and "==== step append-content: reward 0" in log
    assert "greeting.txt: Hello|" in log and "mean: reward 0.5" in log
    shown = run_harness("show", str(run), "scripted/multi-step/seed1", env={**os.environ, "COLUMNS": "200"})
    assert (
        "── step create-file: reward 1" in shown.stdout and "── step append-content: reward 0" in shown.stdout
    )
    for step in ("create-file", "append-content"):  # each run of the agent wrote its own files
        assert (edir / "steps" / step / "mini-swe-agent.traj.json").is_file()


@pytest.mark.slow
def test_final_strategy_takes_the_last_step_and_a_failed_min_reward_step_ends_the_trial(
    client,
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    final = tmp_path / "final" / "multi-step"
    shutil.copytree(TASK, final)
    toml = final / "task.toml"
    toml.write_text('multi_step_reward_strategy = "final"\n' + toml.read_text())
    server, rec = evaluate(final, SOLVES_ONE, tmp_path / "run-final")
    assert server.served == 4 and (rec.status, rec.reward) == ("unresolved", 0.0), rec

    # Step 1 wrong: its min_reward = 1.0 fails, so step 2's agent never runs (no request of it).
    wrong_first = [say("echo Bye > /app/greeting.txt"), say(SUBMIT), say("echo never"), say(SUBMIT)]
    server, rec = evaluate(TASK, wrong_first, tmp_path / "run-abort")
    assert server.served == 2, server.requests
    assert rec.reward == 0.0 and rec.steps is not None and [s.name for s in rec.steps] == ["create-file"]
    assert "below min_reward 1: the remaining steps are not run" in (rec.steps[0].note or "")


@pytest.mark.slow
def test_tasks_verify_runs_each_step_s_solution_before_its_tests(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.container import ContainerRuntime
    from harness.runtime.task_images import parse_image_map
    from harness.tasks import load_tasks
    from harness.tasks.oracle import check_task

    (task,) = load_tasks(str(TASK), images=True)
    runtime = ContainerRuntime(client, image_map=parse_image_map([f"ubuntu:24.04={BUSYBOX}"]))
    runtime.prepare(tmp_path / "run", [task])
    check = check_task(runtime, task, tmp_path / "work")
    assert check.status == "valid", check
    assert check.reference is not None and check.reference.reward == 1.0
    assert check.untouched is not None and check.untouched.reward == 0.0
    assert "1 of 2 steps run" in check.untouched.output  # step 1 failed its min_reward


@pytest.mark.slow
def test_a_step_whose_healthcheck_never_passes_ends_the_reference_run_naming_it(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.container import ContainerRuntime
    from harness.runtime.task_images import parse_image_map
    from harness.tasks import load_tasks
    from harness.tasks.oracle import check_task

    broken = tmp_path / "suite" / "multi-step"
    shutil.copytree(TASK, broken)
    toml = broken / "task.toml"
    toml.write_text(toml.read_text().replace("test -f /app/.setup-done", "test -f /app/.never"))
    (task,) = load_tasks(str(broken), images=True)
    runtime = ContainerRuntime(client, image_map=parse_image_map([f"ubuntu:24.04={BUSYBOX}"]))
    runtime.prepare(tmp_path / "run", [task])
    check = check_task(runtime, task, tmp_path / "work")
    assert check.status == "invalid" and check.reference is None, check
    assert (
        "step 'append-content'" in check.detail and "[[steps]] 'append-content' healthcheck" in check.detail
    )


def test_harbor_s_reward_strategies_and_min_reward_tables() -> None:
    from harness.tasks.steps import StepResult, min_reward_failure, scalar, trial_rewards

    steps = [
        StepResult(name="a", rewards={"reward": 1.0, "style": 0.5}),
        StepResult(name="b", rewards=None, note="verification failed"),  # no result: not counted
        StepResult(name="c", rewards={"reward": 0.0}),  # no 'style': counted 0
    ]
    assert trial_rewards("mean", steps) == {"reward": 0.5, "style": 0.25}
    assert trial_rewards("final", steps) == {"reward": 0.0}
    assert trial_rewards("final", steps[:2]) is None and scalar(None) == 0.0
    assert scalar({"style": 0.5, "speed": 1.0}) == 0.75  # no 'reward': their mean, as for one step
    assert min_reward_failure({"reward": 1.0}, 1.0) is None
    assert "style=0.5 below min_reward 0.8" in (
        min_reward_failure({"reward": 1.0, "style": 0.5}, {"style": 0.8}) or ""
    )
    assert "speed=-inf below" in (min_reward_failure({"reward": 1.0}, {"speed": 0.1}) or "")  # missing: -inf


@pytest.mark.slow
def test_a_loop_in_the_second_step_is_stopped_there_located_in_the_episode_s_turns(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # step 2 repeats one command: the proxy (a watch per step's run) answers the 5th request
    # with mini-swe-agent's submit; the step is verified as it stands and the episode is loop_stopped
    script = [say("echo Hello > /app/greeting.txt"), say(SUBMIT)] + [say("cat /app/greeting.txt")] * 4
    server, rec = evaluate(TASK, script, tmp_path / "run")
    assert server.served == 6, server.requests
    assert (rec.status, rec.reward) == ("loop_stopped", 0.5), rec
    assert rec.loop is not None and (rec.loop.kind.value, rec.loop.start_turn) == ("repeat_call", 2), rec.loop
    assert rec.steps is not None and [(s.name, s.first_turn) for s in rec.steps] == [
        ("create-file", 0),
        ("append-content", 2),
    ]
