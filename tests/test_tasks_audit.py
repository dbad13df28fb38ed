"""``harness tasks audit``: every scripted cheat (harness/tasks/cheats.py) played on a task in
its runtime, then the task verified as an episode is. The built-in suites hold against all of
them; a task whose test compares a returned value with a bare ``==`` is flagged, the cheat named,
exit 1. Real sandboxes and verifications (--runtime local here; the container runtime in the
slow tier)."""

import json
import shutil
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
    table = run_harness("tasks", "audit", str(weak_task(tmp_path / "again")), "--runtime", "local")
    assert table.returncode == 1
    assert "always-equal" in table.stdout and "1 of 1 passable without solving them" in table.stdout, (
        table.stdout
    )


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["smoke", "medium", "pybugs"])
def test_the_built_in_suites_hold_against_every_cheat_locally(suite: str) -> None:
    done = run_harness("tasks", "audit", suite, "--runtime", "local", "--concurrency", "2", "--json")
    report = json.loads(done.stdout)
    passed = {a["task_id"]: [r for r in a["results"] if r["outcome"] != "held"] for a in report["audits"]}
    assert done.returncode == 0, {k: v for k, v in passed.items() if any(r["outcome"] == "passed" for r in v)}
    assert not any(r["outcome"] == "error" for v in passed.values() for r in v), passed
    # stale-bytecode and always-equal apply to every built-in task (each has Python modules)
    assert (
        all(
            r["outcome"] == "held"
            for a in report["audits"]
            for r in a["results"]
            if r["cheat"] in ("stale-bytecode", "always-equal")
        )
        or suite == "smoke"
    ), passed


def test_an_unknown_cheat_is_one_line(tmp_path: Path) -> None:
    done = run_harness("tasks", "audit", "smoke", "--runtime", "local", "--cheat", "nope")
    assert done.returncode == 2
    assert "--cheat nope: no such cheat; one of: nothing, delete-tests" in done.stderr
    assert "Traceback" not in done.stderr
