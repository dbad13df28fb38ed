"""Why an unresolved episode failed (harness/monitor/failure.py): one cause per episode, by the
documented precedence. Pure logic, hand-made record fields."""

import os
from pathlib import Path
from typing import Any

import pytest

from harness.monitor import LoopFinding, LoopKind, StallFinding
from harness.monitor.failure import CAUSES, failure_cause, verifier_detail

LOOP = LoopFinding(kind=LoopKind.repeat_call, start_turn=4, period=1, repeats=5, unit="ls", detected_at=7)
STALL = StallFinding(start_turn=2, repeats=4, attempts=3, unit="ImportError: calc", detected_at=5)
PYTEST_LOG = """\
tests/test_calc.py::test_add PASSED
tests/test_calc.py::test_sub FAILED
=========================== short test summary info ============================
FAILED tests/test_calc.py::test_sub - AssertionError: assert -1 == 1
FAILED tests/test_calc.py::test_mul - TypeError: unsupported operand
2 failed, 1 passed in 0.03s
"""


def cause(**fields: Any) -> str | None:
    base: dict[str, Any] = {
        "status": "unresolved",
        "reward": 0.0,
        "tool_calls": 6,
        "format_errors": {},
        "loop": None,
        "stall": None,
        "error_type": None,
        "error_message": None,
    }
    found = failure_cause(**{**base, **fields})
    return None if found is None else found.cause


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        (
            {
                "status": "error",
                "error_type": "BadRequestError",
                "error_message": "This model's maximum context length is 8192 tokens.",
            },
            "context_overflow",
        ),
        ({"status": "error", "error_type": "TimeLimit", "error_message": "1800 s"}, "time_limit"),
        ({"status": "error", "error_type": "BadRequestError", "error_message": "bad grammar"}, "model_error"),
        ({"status": "error", "error_type": "SandboxDestroyed", "error_message": "killed"}, "sandbox_error"),
        ({"status": "loop_stopped", "loop": LOOP}, "loop"),
        ({"status": "max_iterations"}, "turn_limit"),
        ({"tool_calls": 0, "format_errors": {"no_tool_call": 12}}, "no_tool_call"),
        ({"tool_calls": 0, "format_errors": {"tool_call_in_content": 9, "no_tool_call": 3}}, "format_error"),
        ({"tool_calls": 4, "format_errors": {"invalid_json_arguments": 2}}, "format_error"),
        ({"stall": STALL}, "stall"),
        ({"verifier_log": PYTEST_LOG}, "tests_failed"),
    ],
)
def test_each_cause(fields: dict[str, Any], want: str) -> None:
    assert cause(**fields) == want


def test_every_cause_is_tested_above() -> None:
    assert len(CAUSES) == 10


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        # what ended the episode before what was seen in it
        ({"status": "error", "error_type": "TimeLimit", "error_message": "", "loop": LOOP}, "time_limit"),
        ({"status": "max_iterations", "loop": LOOP}, "loop"),  # a loop that ran into the limit
        ({"status": "max_iterations", "stall": STALL}, "turn_limit"),
        ({"loop": LOOP, "format_errors": {"unknown_tool": 9}}, "loop"),
        ({"format_errors": {"unknown_tool": 3}, "stall": STALL}, "format_error"),
        ({"format_errors": {"unknown_tool": 1}, "stall": STALL}, "stall"),  # 1 of 6 calls: not the cause
    ],
)
def test_precedence(fields: dict[str, Any], want: str) -> None:
    assert cause(**fields) == want


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "resolved", "reward": 1.0},
        {"status": "infra_error", "reward": None, "error_type": "ServerCrashed", "error_message": "x"},
        {"status": "unresolved", "reward": None},  # not verified yet
    ],
)
def test_no_cause_for_a_solve_an_infrastructure_failure_or_an_unverified_episode(
    fields: dict[str, Any],
) -> None:
    assert cause(**fields) is None


def test_the_tests_detail_names_the_failing_tests_and_the_exception() -> None:
    assert (
        verifier_detail(PYTEST_LOG)
        == "tests/test_calc.py::test_sub, tests/test_calc.py::test_mul: AssertionError"
    )
    assert verifier_detail("Traceback ...\n  File x\nValueError: bad\n") == "ValueError"
    assert verifier_detail("hello.txt is missing\n") == ""


def test_replayed_episodes_are_recorded_with_their_cause_shown_and_counted_in_the_report(
    tmp_path: Path,
) -> None:
    """Smoke's three tasks in load order (one episode at a time): count-lines meets a context
    overflow (the server's 400), fix-add finishes untouched (its tests fail: the detail names the
    exception), hello-file answers in prose without a tool call."""
    from harness.replay import ScriptedCall, ScriptedResponse
    from harness.results.store import RunStore
    from tests.conftest import run_harness
    from tests.test_eval_replay import evaluate

    script = [
        ScriptedResponse(status=400, error="This model's maximum context length is 2048 tokens."),
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
        ScriptedResponse(content="I would write the file with echo."),
    ]
    run = tmp_path / "run"
    evaluate(script, run)  # smoke, local, one episode at a time
    recs = {k[1]: r for k, r in RunStore(run).records().items()}
    causes = {t: (r.failure.cause if r.failure else None) for t, r in recs.items()}
    assert causes == {
        "count-lines": "context_overflow",
        "fix-add": "tests_failed",
        "hello-file": "no_tool_call",
    }
    assert "AssertionError" in (recs["fix-add"].failure.detail if recs["fix-add"].failure else "")
    report = run_harness("report", str(run), env={**os.environ, "COLUMNS": "400"})
    assert report.returncode == 0, report.stderr
    markdown = (run / "report.md").read_text()
    assert "## Why episodes failed" in markdown
    for row in ("| context overflow | 1/3 |", "| tests failed | 1/3 |", "| no tool call | 1/3 |"):
        assert row in markdown, markdown
    shown = run_harness("show", str(run), "fix-add/seed1", env={**os.environ, "COLUMNS": "400"})
    assert "why it failed: tests failed: AssertionError" in shown.stdout, shown.stdout
