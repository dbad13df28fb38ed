"""A task's ``${VAR}`` takes this machine's value only for the variables ``--task-env`` names (a
downloaded task copied any host variable, an API key, into the agent's container unasked), and
the named values are masked in the run's files. Pure logic and real files, no sandbox."""

from pathlib import Path

import pytest

from harness.results.masking import mask_run
from harness.tasks import load_suite
from harness.tasks.harbor_config import host_vars_allowed, resolve_env
from harness.tasks.loader import unnamed_host_var

SECRET = "sk-test-" + "7" * 24


def harbor_task(root: Path) -> Path:
    task = root / "suite" / "env-task"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(
        'version = "1.0"\n[environment]\n'
        'env = { TOKEN = "${HARNESS_T_SECRET}", MODE = "${HARNESS_T_MODE:-quiet}", PLAIN = "x" }\n'
    )
    (task / "instruction.md").write_text("Do it.\n")
    (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text("exit 0\n")
    return task.parent


def test_an_unnamed_host_variable_refuses_the_task_and_a_named_one_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_T_SECRET", SECRET)
    monkeypatch.setenv("HARNESS_T_MODE", "from-the-host")
    tasks = load_suite(str(harbor_task(tmp_path)), images=True).tasks
    said = unnamed_host_var(tasks, [])
    assert said is not None and "TOKEN = ${HARNESS_T_SECRET} asks for this machine's HARNESS_T_SECRET" in said
    assert "--task-env HARNESS_T_SECRET" in said and "\n" not in said
    assert unnamed_host_var(tasks, ["HARNESS_T_SECRET"]) is None
    env = tasks[0].harbor.env  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="pass it with --task-env HARNESS_T_SECRET"):
        resolve_env(env)  # outside a run nothing of this machine is given
    with host_vars_allowed(["HARNESS_T_SECRET"]):
        # the default where a variable is not named, although this machine has it
        assert resolve_env(env) == {"TOKEN": SECRET, "MODE": "quiet", "PLAIN": "x"}
    with host_vars_allowed(["HARNESS_T_SECRET", "HARNESS_T_MODE"]):
        assert resolve_env(env)["MODE"] == "from-the-host"


def test_named_values_are_masked_in_the_run_s_files_but_not_in_the_agent_s_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_T_SECRET", SECRET)
    run = tmp_path / "run"
    ep = run / "episodes" / "m" / "t" / "seed1"
    (ep / "workspace").mkdir(parents=True)
    (ep / "conversation.json").write_text(f'{{"observation": "TOKEN={SECRET}"}}')
    (ep / "verifier.log").write_text(f"printed {SECRET} twice: {SECRET}\n")
    (ep / "workspace" / "out.txt").write_text(SECRET)  # the agent's own file: its output
    (run / "harness.log").write_text("nothing here\n")
    assert mask_run(run) == 0  # not named: nothing to mask
    with host_vars_allowed(["HARNESS_T_SECRET"]):
        assert mask_run(run) == 2
        from harness.results.store import RunStore

        store = RunStore(run)
        from harness.monitor import Turn

        rel = store.write_trajectory(store.trajectory_path("m", "t", 1), [Turn(index=0, observation=SECRET)])
    assert SECRET not in (ep / "conversation.json").read_text() + (ep / "verifier.log").read_text()
    assert (ep / "verifier.log").read_text() == "printed *** twice: ***\n"
    assert (ep / "workspace" / "out.txt").read_text() == SECRET
    assert SECRET not in (run / rel).read_text()
