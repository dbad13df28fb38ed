"""A stall (edit/test thrashing: every edit different, the same failure back) is reported where loops
are (`harness loops`, `show`, `report`, `compare`) and is never a loop: not in the loop rate, the
episode not stopped, even with --stop-loops. The thrash is an agent's, through `harness proxy`."""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from harness.monitor import StallFinding
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from tests.conftest import HARNESS, REPO
from tests.helpers.proxy_command import harness_proxy, records
from tests.helpers.proxying import TERMINAL
from tests.helpers.runs import record, write_run

FAILURE = "F\n    assert parse('a,b') == ['a', 'b']\nE   AssertionError: assert ['a'] == ['a', 'b']\n1 failed"


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"},
    )


def _thrash_script(rounds: int) -> ReplayScript:
    responses = []
    for k in range(rounds):
        edit = f'sed -i \'s/split(",")/split(",", {k})/\' parse.py'
        responses += [
            ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": edit})]),
            ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": "pytest -q"})]),
        ]
    responses.append(ScriptedResponse(content="I give up."))
    return ReplayScript(model="scripted", pick="by_turn", responses=responses)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_thrashing_agent_is_a_stall_in_loops_show_and_report_never_a_loop(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with (
        ReplayServer(_thrash_script(6)) as replay,
        harness_proxy("--upstream", replay.base_url, "--run-dir", str(run), "--stop-loops") as proxy,
    ):
        c = openai.OpenAI(base_url=f"{proxy.url}/ep/parse-bug/v1", api_key=proxy.key, max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix parse."}]
        for _ in range(13):  # every request answered: a stall stops nothing
            m = c.chat.completions.create(model="m", messages=messages, tools=[TERMINAL]).choices[0].message  # type: ignore[arg-type, list-item]
            calls = [tc.model_dump() for tc in m.tool_calls or ()]
            messages.append(
                {"role": "assistant", "content": m.content or "", **({"tool_calls": calls} if calls else {})}
            )
            for call in calls:
                output = FAILURE if "pytest" in call["function"]["arguments"] else ""
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        assert messages[-1]["content"] == "I give up."
    (rec,) = records(run)
    assert rec["loop"] is None and rec["status"] == "unresolved" and rec["turns"] == 13
    stall = StallFinding.model_validate(rec["stall"])
    assert (stall.start_turn, stall.repeats, stall.attempts) == (1, 6, 6)

    out = _harness("loops", str(run), "--json")
    report = json.loads(out.stdout)
    (row,) = report["rows"]
    assert row["loop_kind"] is None and row["stall"]["start_turn"] == 1 and row["stall"]["repeats"] == 6
    assert (report["totals"]["looping"], report["totals"]["stalled"]) == (0, 1)
    table = _harness("loops", str(run))
    assert "from 1, x6" in table.stdout and "1 stalled" in table.stdout and "0 looping" in table.stdout
    listed = _harness("show", str(run))
    assert "(stall @ turn 1, x6)" in listed.stdout, listed.stdout
    shown = _harness("show", str(run), "parse-bug")
    assert "stall (not a loop): from turn 1, the same failure x6 to 6 different attempts" in shown.stdout
    done = _harness("report", str(run))
    assert done.returncode == 0, done.stderr
    page = (run / "report.md").read_text()
    assert "## Stalls (not loops)" in page and "the same failure x6 from turn 1" in page
    assert "| 0.0% (none) |" in page  # the loop rate


@pytest.mark.slow
def test_compare_shows_the_stall_rate_beside_the_loop_rate(tmp_path: Path) -> None:
    stall = StallFinding(start_turn=2, repeats=5, attempts=5, unit="1 failed", detected_at=8)
    a = [record(f"t{i}", reward=1.0 if i < 3 else 0.0) for i in range(6)]
    b = [
        record(f"t{i}", reward=1.0 if i < 2 else 0.0).model_copy(update={"stall": stall if i >= 3 else None})
        for i in range(6)
    ]
    write_run(tmp_path / "a", a)
    write_run(tmp_path / "b", b)
    out = _harness("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert out.returncode == 0, out.stderr
    c = json.loads(out.stdout)
    assert c["stall_rate"] == {"a": 0.0, "b": 0.5, "diff": 0.5}
    assert c["loop_rate"]["b"] == 0.0
    table = _harness("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert "stalls (not loops)" in table.stdout and "+50.0" in table.stdout
