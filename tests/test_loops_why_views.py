"""A finding's why reaches the user: `harness loops`, `harness show` and the report print it.

Records written before findings had a why still load and show as before.
"""

import json
from pathlib import Path

import pytest

from harness.monitor import LoopFinding, ToolCall, Turn, detect_loops
from tests.conftest import run_harness
from tests.helpers.runs import record, write_run

WIDE = {"COLUMNS": "200", "PATH": "/usr/bin:/bin"}


def clicking_in_place() -> list[Turn]:
    """click -> read the page, again and again; the page renumbers its elements every time."""
    turns = [Turn(index=0, tool_calls=(ToolCall(name="browser_navigate", arguments='{"url": "http://a"}'),))]
    for k in range(4):
        state = json.dumps(
            {
                "title": "Orders",
                "elements": [{"index": 40 + 9 * k + j, "text": t} for j, t in enumerate("ab")],
            }
        )
        turns += [
            Turn(
                index=len(turns),
                tool_calls=(ToolCall(name="browser_click", arguments='{"index": 12}'),),
                observation="Clicked element 12",
            ),
            Turn(
                index=len(turns) + 1,
                tool_calls=(ToolCall(name="browser_get_state", arguments="{}"),),
                observation=state,
            ),
        ]
    return turns


@pytest.mark.slow
def test_why_in_loops_show_and_report(tmp_path: Path) -> None:
    turns = clicking_in_place()
    finding = detect_loops(turns)
    assert finding is not None and finding.why and "element indices" in finding.why
    looping = record("orders", reward=0.0, turns=len(turns)).model_copy(
        update={"loop": finding, "status": "loop_stopped"}
    )
    old = record("legacy", reward=0.0, loop="repeat_call")  # a finding without why, as older runs have
    assert old.loop is not None and old.loop.why is None
    run = write_run(tmp_path / "run", [looping, old], turns={"orders": turns})

    rows = {r["episode"]: r for r in json.loads(run_harness("loops", str(run), "--json").stdout)["rows"]}
    assert rows["m/orders/seed1"]["why"] == finding.why
    shown = run_harness("show", str(run), "orders/seed1", env=WIDE)
    assert shown.returncode == 0, shown.stderr
    assert "why: a block of 2 steps replayed with the same results" in " ".join(shown.stdout.split())
    legacy = run_harness("show", str(run), "legacy/seed1", env=WIDE)
    assert legacy.returncode == 0 and "why:" not in legacy.stdout

    done = run_harness("report", str(run), "--out", str(tmp_path / "report"), timeout=300)
    assert done.returncode == 0, done.stderr
    assert finding.why in (tmp_path / "report" / "report.md").read_text()
    assert f"why: {finding.why}" in (tmp_path / "report" / "report.html").read_text()


def test_records_without_why_load() -> None:
    old = {"kind": "cycle", "start_turn": 3, "period": 2, "repeats": 3, "unit": "a -> b", "detected_at": 8}
    assert LoopFinding.model_validate(old).why is None
