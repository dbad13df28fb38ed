"""`harness compare --html` when nothing flips but loops and format errors move, between runs with
different seed counts: real episodes from the replay server, the page read back."""

import os
import re
from html import unescape
from pathlib import Path

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from tests.conftest import run_harness

pytestmark = pytest.mark.timeout(300)


def call(name: str, **args: object) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedCall(name=name, arguments=args)])


FINISH = call("finish", message="done")
LS = call("terminal", command="ls")
WRITE = call("terminal", command="echo 'Hello, world!' > hello.txt")
LOOK = call("terminal", command="cat hello.txt")


def evaluate(model: str, responses: list[ScriptedResponse], run: Path, seeds: int) -> None:
    """Smoke tasks in load order (count-lines, fix-add, hello-file), seed by seed, one at a time."""
    with ReplayServer(ReplayScript(model=model, responses=responses)) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=(model,),
                tasks="smoke",
                seeds=seeds,
                base_url=server.base_url,
                run_dir=run,
            )
        )


@pytest.mark.slow
def test_page_shows_tasks_whose_loops_or_format_errors_moved_and_says_what_seed_counts_mean(
    tmp_path: Path,
) -> None:
    """Both solve hello-file and neither the other two: no flip. A (2 seeds) loops on hello-file after
    solving it; B (1 seed) makes a format error on count-lines. Both tasks get their episodes side by
    side, and the different seed counts are said in a sentence, not only as 'seeds 2 / 1'."""
    looping = [WRITE, LOOK, LOOK, LOOK, LOOK]  # stopped at the fourth identical look, file written
    a_script = [LS, FINISH] * 4 + looping * 2
    b_script = [call("run_python", code="print(1)"), FINISH, LS, FINISH, WRITE, FINISH]
    evaluate("base", a_script, tmp_path / "a", seeds=2)
    evaluate("ft", b_script, tmp_path / "b", seeds=1)
    page = tmp_path / "cmp.html"
    done = run_harness(
        "compare",
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--html",
        str(page),
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "flips: 0 fixed, 0 broken" in said
    sentence = (
        "A ran 2 seeds per task and B 1: tasks are paired on their seed-averaged scores, not seed by seed "
        "(A's seeds beyond 1 have no partner), and B's task scores rest on 1 episode against 2"
    )
    assert sentence in said
    assert (
        "loop or format-error outcome changed on 2 other task(s): count-lines (format errors 0% -> 100% of "
        "episodes); hello-file (loops 100% -> 0% of episodes)" in said
    )
    html = page.read_text()
    assert sentence in unescape(html)
    table = re.search(r'<table id="changed">(.*?)</table>', html)
    assert table and 'href="#changed-hello-file"' in table[1] and 'href="#changed-count-lines"' in table[1]
    for task, mark in (("hello-file", "loop-onset"), ("count-lines", "fmt")):
        section = re.search(rf'<section class="flip" id="changed-{task}">(.*?)</section>', html, re.S)
        assert section, f"no side-by-side section for {task}"
        pairs = section[1].split('<div class="pair">')[1:]
        assert len(pairs) == 2  # seeds 1 and 2 of A; B has seed 1 only
        assert all(p.count('<div class="side"') == 2 for p in pairs)
        assert "A a:base seed 1" in pairs[0] and "B b:ft seed 1" in pairs[0] and "no episode" in pairs[1]
        assert re.search(rf'class="[^"]*\b{mark}\b', section[1])  # A's loop onset, B's format error marked
    assert "fix-add" not in re.sub(
        r"<table id=\"paired\">.*?</table>", "", html.split("<h2>Loop or format")[1]
    )
