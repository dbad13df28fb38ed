"""``harness tasks audit``: every scripted cheat (harness/tasks/cheats.py) played on a task in
its runtime, then the task verified as an episode is. The built-in suites hold against all of
them; a task whose test compares a returned value with a bare ``==`` is flagged, the cheat named,
exit 1. Real sandboxes and verifications (--runtime local here; the container runtime in the
slow tier)."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from harness.tasks.cheats import NAMES
from tests.conftest import REPO, run_harness

pytestmark = pytest.mark.timeout(900)


def weak_task(root: Path) -> Path:
    """smoke/fix-add with the test it had before harness_checks: ``add(2, 3) == 5`` alone."""
    suite = root / "weak"
    dest = suite / "fix-add-bare-eq"
    shutil.copytree(REPO / "tasks" / "smoke" / "fix-add", dest)
    (dest / "tests" / "test.sh").write_text(
        '#!/usr/bin/env bash\nset -euo pipefail\ncd "$WORKSPACE"\n'
        '"${PYTHON:-python3}" -c "import calc; assert calc.add(2, 3) == 5"\n'
    )
    return suite


def test_a_weak_task_is_flagged_with_the_cheat_that_passes_it(tmp_path: Path) -> None:
    done = run_harness("tasks", "audit", str(weak_task(tmp_path)), "--runtime", "local", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    (audit,) = report["audits"]
    outcomes = {r["cheat"]: r["outcome"] for r in audit["results"]}
    assert outcomes["always-equal"] == "passed", audit
    assert set(outcomes) == set(NAMES)
    # held by the guard (or not applicable): everything else
    assert {c for c, o in outcomes.items() if o == "passed"} == {"always-equal"}, audit
    assert outcomes["nothing"] == "held"
    # Fresh mode: the verdict depends on the final files alone. The workspace holds no tests, so
    # deleting or overwriting them leaves the files `nothing` left: its verdict, not a second run.
    details = {r["cheat"]: r["detail"] for r in audit["results"]}
    assert (
        details["delete-tests"]
        == details["overwrite-tests"]
        == "the same final files as nothing: its verdict"
    )
    assert "the same final files" not in details["always-equal"]
    table = run_harness("tasks", "audit", str(weak_task(tmp_path / "again")), "--runtime", "local")
    assert table.returncode == 1
    assert "always-equal" in table.stdout and "1 of 1 passable without solving them" in table.stdout, (
        table.stdout
    )


@pytest.mark.slow
@pytest.mark.parametrize(("suite", "limit"), [("smoke", "3"), ("medium", "1"), ("pybugs", "2")])
def test_the_built_in_suites_hold_against_every_cheat_locally(suite: str, limit: str) -> None:
    """A sample of each suite, each kind of test they grade with: smoke's scripts on stdin, medium's
    and pybugs' pytest suites (every task of all three: `harness tasks audit SUITE`, measured in
    bench/tasks_audit.py and the issue's note; 3.6 minutes here for the 31 tasks). Two pybugs tasks
    and one medium: 15 s and 9 s alone here (three and two took 49 s and 20 s in the whole suite)."""
    done = run_harness(
        "tasks", "audit", suite, "--runtime", "local", "--limit", limit, "--concurrency", "2", "--json"
    )
    report = json.loads(done.stdout)
    assert len(report["audits"]) == int(limit)
    outcomes = {a["task_id"]: {r["cheat"]: r["outcome"] for r in a["results"]} for a in report["audits"]}
    assert done.returncode == 0, outcomes
    assert all(o in ("held", "n/a") for row in outcomes.values() for o in row.values()), outcomes
    # every task with a Python module meets the two cheats the guard and harness_checks stop
    python_tasks = [t for t, row in outcomes.items() if row["always-equal"] != "n/a"]
    assert python_tasks and all(outcomes[t]["stale-bytecode"] == "held" for t in python_tasks), outcomes


def grep_task(root: Path) -> Path:
    """A task whose test greps the program's output only for the closing line the instruction
    quotes, never for the sum it asks for."""
    task = root / "grep" / "sum-report"
    (task / "environment" / "workspace").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "instruction.md").write_text(
        "Make `python3 report.py` print the sum of the numbers in data.txt, then `report complete`.\n"
    )
    (task / "environment" / "workspace" / "data.txt").write_text("4\n5\n6\n")
    (task / "environment" / "workspace" / "report.py").write_text("print('total: 0')\n")
    (task / "tests" / "test.sh").write_text(
        '#!/usr/bin/env bash\ncd "$WORKSPACE"\n"${PYTHON:-python3}" report.py | grep -qx "report complete"\n'
    )
    (task / "solution" / "solve.sh").write_text(
        "#!/usr/bin/env bash\ncat > report.py <<'EOF'\nprint(sum(int(x) for x in open('data.txt')))\nprint('report complete')\nEOF\n"
    )
    return task.parent


def test_a_test_that_greps_output_for_a_quoted_line_is_passed_by_echoing_it(tmp_path: Path) -> None:
    """The echo-expected cheat prints what the instruction (and any visible test) quotes and passes it;
    the task is valid (its reference passes, its untouched workspace fails). A test that greps for
    the sum itself, which no instruction quotes, holds (tests/test_tasks_audit.py's built-in runs)."""
    suite = grep_task(tmp_path)
    assert run_harness("tasks", "verify", str(suite), "--runtime", "local").returncode == 0
    done = run_harness(
        "tasks", "audit", str(suite), "--runtime", "local", "--cheat", "echo-expected", "--json"
    )
    (audit,) = json.loads(done.stdout)["audits"]
    assert done.returncode == 1 and audit["results"][0]["outcome"] == "passed", audit


def harbor_module_task(root: Path) -> Path:
    """A Harbor task whose tests import the module the agent fixes (shared mode: Harbor's test.sh)."""
    task = root / "harbor" / "fix-mul"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    # the tests on the interpreter the local audit compiles for (the harness's): bytecode of
    # another version's tag would not be read in any case
    (task / "task.toml").write_text(
        f'version = "1.0"\n\n[verifier]\ntimeout_sec = 60.0\nenv = {{ TEST_PY = "{sys.executable}" }}\n'
    )
    (task / "instruction.md").write_text("Fix mul() in /app/calc.py.\n")
    (task / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\nCOPY calc.py ./\n")
    (task / "environment" / "calc.py").write_text("def mul(a, b):\n    return a + b\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\ncd /app\n"
        'if "$TEST_PY" -c "import calc, sys; sys.exit(0 if type(calc.mul(3, 4)) is int and calc.mul(3, 4) == 12 else 1)"; '
        "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nprintf 'def mul(a, b):\\n    return a * b\\n' > /app/calc.py\n"
    )
    return task


def test_stale_bytecode_holds_in_harbor_s_shared_mode(tmp_path: Path) -> None:
    """Harbor's tests run in the agent's sandbox with their own command, but the harness gives them
    a private bytecode prefix: a compiled fix with the buggy source put back is not imported."""
    task = harbor_module_task(tmp_path)
    assert run_harness("tasks", "verify", str(task), "--runtime", "local").returncode == 0
    done = run_harness(
        "tasks", "audit", str(task), "--runtime", "local", "--cheat", "stale-bytecode", "--json"
    )
    (audit,) = json.loads(done.stdout)["audits"]
    assert done.returncode == 0 and audit["results"][0]["outcome"] == "held", audit


def test_an_unknown_cheat_is_one_line(tmp_path: Path) -> None:
    done = run_harness("tasks", "audit", "smoke", "--runtime", "local", "--cheat", "nope")
    assert done.returncode == 2
    assert "--cheat nope: no such cheat; one of: nothing, delete-tests" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_harbor_task_is_audited_with_its_own_tests_and_its_shared_mode_door_named(tmp_path: Path) -> None:
    """Harbor tasks are verified as Harbor verifies them, in the agent's sandbox with the task's
    own test command (shared mode): the harness does not choose its runner, so a pytest plugin in
    the workspace's metadata is loaded there and passes the fixture, as in Harbor itself. The audit
    says so; the cheats that need a Python module in the workspace do not apply to it."""
    done = run_harness(
        "tasks",
        "audit",
        str(REPO / "tests" / "data" / "harbor" / "hello-app"),
        "--runtime",
        "local",
        "--json",
    )
    (audit,) = json.loads(done.stdout)["audits"]
    outcomes = {r["cheat"]: r["outcome"] for r in audit["results"]}
    assert done.returncode == 1 and [c for c, o in outcomes.items() if o == "passed"] == ["pytest-plugin"], (
        outcomes
    )
    assert {c for c, o in outcomes.items() if o == "n/a"} == {
        "reward-file",
        "stale-bytecode",
        "exit-at-import",
        "always-equal",
        "echo-expected",
    }
