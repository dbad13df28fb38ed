"""Loading task directories as found in public task repositories: nested suites, one bad task
among good ones, Harbor's [environment] limits. No engine needed: tasks load without images."""

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.tasks import TaskRefused, load_suite, load_tasks
from harness.tasks.loader import load_task

GOOD = {
    "instruction.md": "Do it.\n",
    "tests/test.sh": "exit 1\n",
    "solution/solve.sh": "true\n",
}


def task(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_nested_suites_are_found_and_names_found_twice_take_their_path(tmp_path: Path) -> None:
    task(tmp_path / "suite" / "easy" / "sort", GOOD)
    task(tmp_path / "suite" / "hard" / "sort", GOOD)
    task(tmp_path / "suite" / "hard" / "graph", GOOD)
    task(tmp_path / "suite" / "top", GOOD)
    (tmp_path / "suite" / "docs").mkdir()  # not a task, holds none
    ids = sorted(t.id for t in load_tasks(str(tmp_path / "suite")))
    assert ids == ["easy-sort", "graph", "hard-sort", "top"]


def test_one_bad_task_is_listed_with_its_reason_and_the_rest_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite"
    task(suite / "a-good", GOOD)
    task(suite / "b-toml", {**GOOD, "task.toml": "[agent\ntimeout_sec = 1\n"})
    task(suite / "c-no-tests", {"instruction.md": "x"})
    task(suite / "d-tb1", {"task.yaml": "instruction: x\n"})
    task(suite / "e-steps", {"task.toml": '[[steps]]\nname = "one"\n', "steps/one/instruction.md": "x"})
    task(suite / "f-memory", {**GOOD, "task.toml": '[environment]\nmemory = "lots"\n'})
    loaded = load_suite(str(suite))
    assert [t.id for t in loaded.tasks] == ["a-good"]
    reasons = {s.id: s.reason for s in loaded.skipped}
    assert "malformed TOML" in reasons["b-toml"]
    assert "missing tests/test.sh" in reasons["c-no-tests"]
    assert "Terminal-Bench 1" in reasons["d-tb1"] and "harbor tasks migrate" in reasons["d-tb1"]
    # a step without tests of its own or the task's: named (multi-step tasks run: test_harbor_steps.py)
    assert "steps/one/tests/test.sh: missing, and no tests/test.sh of the task" in reasons["e-steps"]
    assert "memory = 'lots'" in reasons["f-memory"] and 'memory = "4G"' in reasons["f-memory"]
    # load_tasks (what eval uses) runs the good one and says which were skipped and why.
    assert [t.id for t in load_tasks(str(suite))] == ["a-good"]
    err = " ".join(capsys.readouterr().err.split())
    assert "skipped 5 of 6 task directories that cannot be run" in err and "missing tests/test.sh" in err


def test_a_directory_of_only_bad_tasks_errors_with_the_first_reason(tmp_path: Path) -> None:
    task(tmp_path / "suite" / "a", {"instruction.md": "x"})
    with pytest.raises(
        HarnessError, match=r"none of its 1 task directories can be run, e.g. .*missing tests"
    ):
        load_tasks(str(tmp_path / "suite"))


def test_environment_cpus_and_memory_in_harbor_s_spellings(tmp_path: Path) -> None:
    cases = {
        'cpus = 2\nmemory = "4G"': (2.0, 4.0),
        "cpus = 1\nmemory_mb = 2048": (1.0, 2.0),
        'memory = "512M"': (None, 0.5),
        "": (None, None),
    }
    for i, (env, want) in enumerate(cases.items()):
        d = task(tmp_path / f"t{i}", {**GOOD, "task.toml": f"[environment]\n{env}\n"})
        limits = load_task(d, "s").limits
        assert (limits.cpus, limits.memory_gib) == want, env
    bad = task(tmp_path / "bad", {**GOOD, "task.toml": "[environment]\ncpus = 0\n"})
    with pytest.raises(TaskRefused, match=r"\[environment\] cpus = 0: a positive number"):
        load_task(bad, "s")
