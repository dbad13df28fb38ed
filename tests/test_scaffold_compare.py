"""Is it the model or the scaffold? One replay script, two scaffolds in one run, then `harness compare`
by scaffold, `harness report` and `harness show` on it.

One script serves both scaffolds, as one checkpoint would: each response holds a text action (a
```mswea_bash_command block, all mini-swe-agent reads) and a native tool call (all OpenHands runs).
A script whose tool calls repeat while its blocks move on loops only under the tool-calling scaffold:
the sentence must blame the scaffold. A script whose block and call both repeat loops under both:
it must blame the model."""

import json
import os
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse
from harness.results.arms import pairings
from harness.results.compare import compare
from harness.results.runs import load_run
from tests.conftest import run_harness
from tests.helpers.runs import record, write_run

pytestmark = pytest.mark.timeout(600)

OH, MSWEA = "openhands-codeact", "mini-swe-agent"
LS = [ScriptedCall(name="terminal", arguments={"command": "ls"})]
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
WIDE = {**os.environ, "COLUMNS": "400"}


def block(command: str) -> str:
    return f"THOUGHT: next step.\n\n```mswea_bash_command\n{command}\n```"


# The tool calls repeat `ls` (OpenHands loops); the blocks fix calc.py and submit (mini-swe-agent
# resolves fix-add and ends the other two tasks without a loop).
TOOL_CALLS_LOOP = [
    ScriptedResponse(content=block("sed -i 's/return a - b/return a + b/' calc.py"), tool_calls=LS),
    ScriptedResponse(content=block(SUBMIT), tool_calls=LS),
    ScriptedResponse(content="Looking again.", tool_calls=LS),
]
# Block and call both repeat `ls`: the model loops whatever the scaffold.
BOTH_LOOP = [ScriptedResponse(content=block("ls"), tool_calls=LS)]


def both_scaffolds(tmp_path: Path, responses: list[ScriptedResponse], *args: str, name: str = "run") -> Path:
    """`harness eval` of the replay model under both scaffolds (local runtime unless args say)."""
    script = tmp_path / f"{name}.json"
    script.write_text(
        ReplayScript(responses=responses, pick="by_turn", when_exhausted="repeat_last").model_dump_json()
    )
    run = tmp_path / name
    done = run_harness(
        "eval", "--model", f"replay:{script}", "--scaffold", OH, "--scaffold", MSWEA, "--run-dir", str(run),
        *(args or ("--tasks", "smoke")), timeout=540,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def compare_json(*args: str) -> Any:
    done = run_harness("compare", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def said(done: Any) -> str:
    return " ".join(done.stdout.split())


@pytest.mark.slow
def test_loops_only_with_tool_calls_blame_the_scaffold_and_report_and_show_read_the_run(
    tmp_path: Path,
) -> None:
    run = both_scaffolds(tmp_path, TOOL_CALLS_LOOP)
    # compare RUN: a run of two arms of one model compares its scaffolds, no flag needed
    page = tmp_path / "cmp.html"
    done = run_harness("compare", str(run), "--html", str(page), env=WIDE)
    assert done.returncode == 0, done.stderr
    text = said(done)
    assert f"A = run:replay@{OH} vs B = run:replay@{MSWEA} (3 tasks; seeds 1 / 1)" in text
    assert "│ loop rate │ 100.0% │ 0.0% │ -100.0 │" in text  # the paired table
    assert "flips: 1 fixed, 0 broken" in text  # fix-add: solved through the text action only
    sentence = (
        f"model or scaffold: The loops point to the scaffold ({OH}), not the model: 100% of {OH}'s episodes "
        f"loop against 0% of {MSWEA}'s (same model, same 3 tasks; -100 points, p = 0.25, McNemar exact); "
        f"under {MSWEA} the model does not loop: check {OH}'s tool-call orchestration (chat template, "
        "tool-call parser, tool schemas); but 3 tasks cannot establish it"
    )
    assert sentence in text, text
    # the text-action turns are the blocks mini-swe-agent ran, not the tool calls beside them
    assert "replay makes no format errors under either scaffold (same 3 tasks)." in text
    html = unescape(page.read_text())
    found = re.search(r'<p id="attribution"[^>]*>(.*?)</p>', html, re.S)
    assert found and f"The loops point to the scaffold ({OH})" in found[1]

    c = compare_json(str(run))
    assert (c["scaffold_a"], c["scaffold_b"]) == (OH, MSWEA)
    loops = c["attribution"]["loops"]
    assert (loops["cause"], loops["scaffold"], loops["established"]) == ("scaffold", OH, False)
    assert (loops["rate_a"], loops["rate_b"], loops["tasks"]) == (1.0, 0.0, 3)
    assert c["attribution"]["format_errors"]["cause"] == "neither"
    # the other way round: the same cause, the difference's sign flipped
    c = compare_json(str(run), "--scaffold-a", MSWEA, "--scaffold-b", OH)
    assert c["attribution"]["loops"]["scaffold"] == OH and c["attribution"]["loops"]["diff"] == 1.0

    # harness report: a table row per arm, the section with the sentence, turns checked per scaffold
    done = run_harness("report", str(run))
    assert done.returncode == 0, done.stderr
    md = (run / "report.md").read_text()
    assert f"| replay@{OH} | 3 (3 scored) |" in md and f"| replay@{MSWEA} | 3 (3 scored) |" in md
    section = md.split("## Model or scaffold?", 1)[1].split("##", 1)[0]
    assert f"replay, {OH} vs {MSWEA}: The loops point to the scaffold ({OH})" in section
    assert "scaffold schemas unavailable" not in (run / "report.html").read_text()

    # harness show: --model is the model (both arms) or one arm; --scaffold narrows
    done = run_harness("show", str(run), "--model", "replay", env=WIDE)
    assert done.returncode == 0 and done.stdout.count("replay@") == 6 + 1, done.stdout  # + the hint line
    done = run_harness("show", str(run), "--model", "replay", "--scaffold", MSWEA, env=WIDE)
    rows = re.findall(r"replay@[\w-]+/[\w-]+/seed1", done.stdout)
    assert sorted(set(rows)) == [
        f"replay@{MSWEA}/{t}/seed1" for t in ("count-lines", "fix-add", "hello-file")
    ]
    done = run_harness("show", str(run), "--model", "nope")
    assert done.returncode != 0 and "--model nope: not in this run" in done.stderr
    done = run_harness("show", str(run), f"replay@{MSWEA}/fix-add/seed1", env=WIDE)
    assert done.returncode == 0, done.stderr
    assert f"scaffold {MSWEA}  status resolved" in done.stdout
    assert '→ bash {"command": "sed -i \'s/return a - b/return a + b/\' calc.py"}' in done.stdout
    assert "✗" not in done.stdout and "scaffold schemas unavailable" not in done.stdout
    assert (
        f"{MSWEA}'s own trajectory: {run}/episodes/replay_{MSWEA}/fix-add/seed1/mini-swe-agent.traj.json"
        in (said(done))
    )


@pytest.mark.slow
def test_enough_tasks_establish_that_the_loops_follow_the_scaffold(tmp_path: Path) -> None:
    """8 tasks that all loop under OpenHands and none under mini-swe-agent (it submits at once):
    p = 2 / 2^8, so the sentence says the loops follow the scaffold, with no caveat."""
    submit_then_loop = [
        ScriptedResponse(content=block(SUBMIT), tool_calls=LS),
        ScriptedResponse(content="Looking again.", tool_calls=LS),
    ]
    run = both_scaffolds(tmp_path, submit_then_loop, "--tasks", "medium")
    done = run_harness("compare", str(run), env=WIDE)
    assert done.returncode == 0, done.stderr
    text = said(done)
    records = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    lost = [r for r in records if r["status"] in ("error", "infra_error")]
    # On a loaded machine an episode can end in an error of its own (a time limit): the sentence then
    # pairs fewer tasks; the claim itself must hold.
    claim = f"model or scaffold: The loops follow the scaffold ({OH}), not the model"
    assert claim in text, (text[-3000:], lost)
    if not lost:
        assert (
            f"{claim}: 100% of {OH}'s episodes loop against 0% of {MSWEA}'s "
            "(same model, same 8 tasks; -100 points, p = 0.0078, McNemar exact)"
        ) in text, text[-3000:]
    assert "cannot establish" not in text


@pytest.mark.slow
def test_loops_under_both_scaffolds_blame_the_model_and_show_opens_at_the_onset(tmp_path: Path) -> None:
    run = both_scaffolds(tmp_path, BOTH_LOOP)
    done = run_harness("compare", str(run), env=WIDE)
    assert done.returncode == 0, done.stderr
    text = said(done)
    assert (
        "model or scaffold: The loops follow the model, not the scaffold: the model loops under both scaffolds "
        f"(100% of {OH}'s episodes loop, 100% of {MSWEA}'s; same model, same 3 tasks; no significant "
        "difference: +0 points, p = 1, McNemar exact); but on 3 tasks a scaffold effect up to 71 points "
        "could go unseen"
    ) in text, text
    c = compare_json(str(run))
    assert c["attribution"]["loops"]["cause"] == "model" and c["attribution"]["loops"]["scaffold"] is None
    # mini-swe-agent's loop, caught by the proxy: onset at turn 0, shown from there
    done = run_harness("show", str(run), f"replay@{MSWEA}/count-lines/seed1", env=WIDE)
    assert done.returncode == 0, done.stderr
    assert "loop: repeat_call from turn 0, period 1, x4, certain at turn 3" in done.stdout
    assert done.stdout.index("▶ the loop starts here") < done.stdout.index("turn 1 · loop")
    assert "mini-swe-agent.traj.json" in done.stdout


@pytest.mark.slow
def test_two_runs_of_single_scaffolds_are_compared_as_scaffolds(tmp_path: Path) -> None:
    """One run per scaffold, the same model and tasks: compare A B pairs them by scaffold (it used
    to refuse them as 'scaffold differs'), and the records' scaffold field names them."""
    script = tmp_path / "s.json"
    script.write_text(
        ReplayScript(
            responses=TOOL_CALLS_LOOP, pick="by_turn", when_exhausted="repeat_last"
        ).model_dump_json()
    )
    for scaffold in (OH, MSWEA):
        done = run_harness(
            "eval", "--model", f"replay:{script}", "--scaffold", scaffold, "--tasks", "smoke",
            "--run-dir", str(tmp_path / scaffold), timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    c = compare_json(str(tmp_path / OH), str(tmp_path / MSWEA))
    assert (c["a"], c["b"], c["scaffold_a"], c["scaffold_b"]) == (
        f"{OH}:replay",
        f"{MSWEA}:replay",
        OH,
        MSWEA,
    )
    assert c["attribution"]["loops"]["scaffold"] == OH and not any("forced" in n for n in c["notes"])


@pytest.mark.slow
def test_docker_run_of_both_scaffolds_blames_the_scaffold(tmp_path: Path) -> None:
    run = both_scaffolds(
        tmp_path, TOOL_CALLS_LOOP, "--tasks", "smoke", "--task", "fix-add", "--runtime", "docker"
    )
    c = compare_json(str(run))
    assert (c["rate_a"], c["rate_b"]) == (0.0, 1.0)  # resolved in its container through the text action
    loops = c["attribution"]["loops"]
    assert (loops["cause"], loops["scaffold"], loops["tasks"]) == ("scaffold", OH, 1)
    assert "1 task cannot establish it" in c["attribution"]["sentence"]


# ---- hand-made runs: the other causes, several models, mistakes ----------------------------------------
def arm(task: str, scaffold: str, seed: int = 1, *, model: str = "m", **kw: Any) -> Any:
    return record(task, seed, model=f"{model}@{scaffold}", **kw).model_copy(
        update={"scaffold": scaffold, "model_path": model}
    )


def two_scaffold_run(root: Path, recs: list[Any]) -> Path:
    write_run(root, recs)
    manifest = json.loads((root / "run.json").read_text())
    manifest |= {"models": sorted({r.model_path for r in recs}), "scaffold": f"{OH},{MSWEA}"}
    (root / "run.json").write_text(json.dumps(manifest))
    return root


TASKS = [f"t{i}" for i in range(8)]


def test_format_errors_under_one_scaffold_and_loops_under_both(tmp_path: Path) -> None:
    """Format errors in every OpenHands episode and none under mini-swe-agent (8 tasks): they follow
    OpenHands; loops in 6 and 5 of 8 tasks' episodes: no significant difference, the model."""
    recs = [
        arm(t, OH, reward=0.0, format_errors={"unknown_tool": 2}, loop="repeat_call" if i < 6 else None)
        for i, t in enumerate(TASKS)
    ] + [arm(t, MSWEA, reward=0.0, loop="repeat_call" if i < 5 else None) for i, t in enumerate(TASKS)]
    run = load_run(two_scaffold_run(tmp_path / "r", recs))
    (plan,) = pairings(run, run)
    c = compare(run, run, plan.label_a, plan.label_b, scaffolds=plan.scaffolds)
    assert c.attribution is not None
    fmt, loops = c.attribution.format_errors, c.attribution.loops
    assert (fmt.cause, fmt.scaffold, fmt.established) == ("scaffold", OH, True)
    assert "the format errors follow the scaffold (openhands-codeact), not the model: 100% of" in fmt.clause
    assert "under mini-swe-agent the model makes no format errors" in fmt.clause
    assert (loops.cause, loops.established) == ("model", False)
    assert (loops.rate_a, loops.rate_b) == (0.75, 0.625)
    assert c.attribution.sentence.startswith("The loops follow the model, not the scaffold: the model loops")


def test_significantly_more_loops_under_one_scaffold_that_both_show_is_both(tmp_path: Path) -> None:
    """Two seeds: every task loops in both OpenHands episodes and in one of mini-swe-agent's two:
    the model loops under both, and OpenHands adds to it (p = 2/256, sign-flip)."""
    recs = [arm(t, OH, s, reward=0.0, loop="repeat_call") for t in TASKS for s in (1, 2)] + [
        arm(t, MSWEA, s, reward=0.0, loop="repeat_call" if s == 1 else None) for t in TASKS for s in (1, 2)
    ]
    run = load_run(two_scaffold_run(tmp_path / "r", recs))
    (plan,) = pairings(run, run, scaffold_a=OH)
    attribution = compare(run, run, plan.label_a, plan.label_b, scaffolds=plan.scaffolds).attribution
    assert attribution is not None and attribution.loops.cause == "both"
    assert attribution.loops.scaffold == OH and attribution.loops.test.startswith("sign-flip")
    assert attribution.sentence.startswith(
        "The loops follow the model, and the scaffold openhands-codeact adds to them"
    )


def test_neither_scaffold_loops_or_errs(tmp_path: Path) -> None:
    recs = [arm(t, s) for t in TASKS[:3] for s in (OH, MSWEA)]
    run = load_run(two_scaffold_run(tmp_path / "r", recs))
    (plan,) = pairings(run, run)
    attribution = compare(run, run, plan.label_a, plan.label_b, scaffolds=plan.scaffolds).attribution
    assert attribution is not None
    assert attribution.sentence == (
        f"m neither loops nor makes format errors under {OH} or {MSWEA} (same 3 tasks): nothing to attribute "
        "to the model or the scaffold."
    )


def test_several_models_are_compared_in_turn_and_mistakes_are_one_line(tmp_path: Path) -> None:
    recs = [
        arm(t, s, model=model, reward=0.0, loop="repeat_call" if s == OH else None)
        for model in ("base", "ft")
        for t in TASKS[:3]
        for s in (OH, MSWEA)
    ]
    root = two_scaffold_run(tmp_path / "r", recs)
    both = compare_json(str(root), "--scaffold-a", OH, "--scaffold-b", MSWEA)
    assert [c["attribution"]["model"] for c in both] == ["base", "ft"]
    (one,) = [compare_json(str(root), "--scaffold-a", OH, "--model", "ft")]
    assert one["a"] == f"r:ft@{OH}" and one["b"] == f"r:ft@{MSWEA}"
    page = tmp_path / "cmp.html"
    done = run_harness("compare", str(root), "--scaffold-b", MSWEA, "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cmp-base.html").exists() and (tmp_path / "cmp-ft.html").exists()
    assert done.stdout.count("model or scaffold:") == 2
    for args, error in (
        (("--scaffold-a", "nope"), f"--scaffold-a nope: not in {root} (scaffolds there: {OH}, {MSWEA})"),
        (("--scaffold-a", OH, "--model-a", "base"), "--model-a/--model-b pair two models"),
        (("--scaffold-a", OH, "--model", "nope"), "--model nope: did not run under both"),
        (("--scaffold-a", OH, "--scaffold-b", OH), f"--scaffold-a and --scaffold-b are both {OH}"),
        ((), "pass --model-a to choose one; or compare its scaffolds with --scaffold-a/--scaffold-b"),
    ):
        done = run_harness("compare", str(root), *args)
        assert done.returncode != 0, done
        assert error in done.stderr and "Traceback" not in done.stderr, done.stderr
    with pytest.raises(HarnessError, match="no model ran under both"):
        only = load_run(
            two_scaffold_run(tmp_path / "o", [arm("t0", OH, model="base"), arm("t0", MSWEA, model="ft")])
        )
        pairings(only, only, scaffold_a=OH)
