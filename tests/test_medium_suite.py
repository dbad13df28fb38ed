"""The built-in `medium` suite: every task's reference solution passes and its untouched workspace
fails, in both runtimes; and it stays small enough for the bundled 135M model on 2 CPU cores
(bench/first_number.py times that run)."""

import tomllib

import pytest

from harness.tasks import load_tasks
from tests.conftest import REPO, run_harness

pytestmark = pytest.mark.timeout(600)
SUITE = REPO / "tasks" / "medium"


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["local", "docker"])
def test_every_medium_task_is_valid(runtime: str) -> None:
    done = run_harness("tasks", "verify", "medium", "--runtime", runtime, "--concurrency", "2", timeout=600)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout + done.stderr
    n = len(load_tasks("medium"))
    assert f"reference solution passes {n}/{n} (100%); untouched workspace passes 0/{n} (0%)" in text


def test_medium_tasks_stay_small_for_a_weak_model_on_cpu() -> None:
    """Short instructions, one small file, few turns: the prompt stays near the scaffold's own and
    an episode costs a few model calls (the suite must run in minutes on the bundled model)."""
    tasks = load_tasks("medium")
    assert 8 <= len(tasks) <= 10
    for task in tasks:
        root = SUITE / task.id
        assert len((root / "instruction.md").read_text()) <= 400, task.id
        files = [p for p in (root / "environment" / "workspace").rglob("*") if p.is_file()]
        assert len(files) == 1 and files[0].stat().st_size <= 1024, task.id
        limits = tomllib.loads((root / "task.toml").read_text())["limits"]
        assert limits["max_iterations"] <= 6, task.id
