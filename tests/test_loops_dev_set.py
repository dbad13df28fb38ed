"""Loop detection on real agents' trajectories: the labelled development set in ../shared, scored
by its own scorer through the `harness loops` command (a labelled set, not tuning data)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DEV_SET = REPO.parent / "shared" / "real-trajectories"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dev_set_loops_caught_false_alarms_and_onsets() -> None:
    assert (DEV_SET / "score.py").is_file(), f"{DEV_SET} is missing: CI runs with ../shared beside the clone"
    harness = Path(sys.executable).with_name("harness")
    done = subprocess.run(
        [sys.executable, str(DEV_SET / "score.py"), "--harness", str(harness)],
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "unreadable:" not in done.stdout, done.stdout  # every file is read
    line = next(x for x in done.stdout.splitlines() if x.startswith("all:"))
    m = re.search(
        r"loops caught (\d+)/(\d+); false alarms (\d+)/(\d+); onset \|error\| mean [\d.na]+ max (\d+); "
        r"episodes not reported (\d+)",
        line,
    )
    assert m, line
    caught, loops, alarms, oks, onset_max, missing = map(int, m.groups())
    assert (loops, oks) == (8, 57), line
    assert caught >= 7 and alarms <= 1 and onset_max <= 1 and missing == 0, line
