"""compare / report / show on runs made by real OpenHands episodes against the replay server.

Base (A) and fine-tuned (B) runs of the smoke suite with 2 seeds and known outcomes:
  A: count-lines 1 1, fix-add 1 0 (an unknown tool, then finish), hello-file 0 0 (a loop from turn 1)
  B: every episode solved.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

from harness.replay import ScriptedResponse
from tests.conftest import run_harness
from tests.helpers.runs import record, write_run
from tests.test_eval_replay import FINISH, SOLVE, call, evaluate

pytestmark = pytest.mark.timeout(300)

LOOP_START = 1
WIDE = {**os.environ, "COLUMNS": "200"}
BASE = [
    *SOLVE["count-lines"],
    *SOLVE["count-lines"],
    *SOLVE["fix-add"],
    ScriptedResponse(content="Trying.", tool_calls=[call("bogus_tool", path="calc.py")]),
    FINISH,
    ScriptedResponse(content="Look first.", tool_calls=[call("terminal", command="cat greeting.md")]),
    # The same call with a different thought each time: the SDK's own stuck detector misses it.
    *(
        ScriptedResponse(
            content=f"Let me check the files again ({i}).", tool_calls=[call("terminal", command="ls")]
        )
        for i in range(4)
    ),
    FINISH,
]
FINETUNED = [*(r for task in SOLVE for r in (*SOLVE[task], *SOLVE[task]))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    evaluate(BASE, root / "base", seeds=2)
    evaluate(FINETUNED, root / "ft", seeds=2)
    return root / "base", root / "ft"


@pytest.mark.slow
def test_outcomes_are_the_scripted_ones(runs: tuple[Path, Path]) -> None:
    base, _ = runs
    recs = {
        (r["task_id"], r["seed"]): r
        for r in map(json.loads, (base / "episodes.jsonl").read_text().splitlines())
        if r["verified"]
    }
    assert {k: r["reward"] for k, r in recs.items()} == {
        ("count-lines", 1): 1.0,
        ("count-lines", 2): 1.0,
        ("fix-add", 1): 1.0,
        ("fix-add", 2): 0.0,
        ("hello-file", 1): 0.0,
        ("hello-file", 2): 0.0,
    }
    assert recs[("fix-add", 2)]["format_errors"] == {"unknown_tool": 1}
    assert recs[("hello-file", 1)]["loop"]["start_turn"] == LOOP_START


def test_compare_reports_difference_ci_p_and_flips_exactly(runs: tuple[Path, Path]) -> None:
    base, ft = runs
    res = run_harness("compare", str(base), str(ft), "--json")
    assert res.returncode == 0, res.stderr
    c = json.loads(res.stdout)
    # Per-task means A = [1, .5, 0], B = [1, 1, 1]: d = [0, .5, 1], mean .5, sd .5, SE .5/sqrt(3);
    # t(0.975, df 2) = 4.302653 -> .5 +- 1.242069, the upper end clipped to 1.
    assert (c["tasks"], c["seeds_a"], c["seeds_b"]) == (3, 2, 2)
    assert (c["rate_a"], c["rate_b"], c["diff"]) == pytest.approx((0.5, 1.0, 0.5))
    assert c["se"] == pytest.approx(0.5 / 3**0.5)
    assert (c["ci_low"], c["ci_high"]) == pytest.approx((0.5 - 1.242069, 1.0), abs=1e-6)
    # Nonzero d = .5, 1: sign patterns give sums 1.5, .5, -.5, -1.5; two reach |1.5| -> p = 0.5.
    assert c["p_value"] == pytest.approx(0.5)
    assert c["test"] == "sign-flip permutation (exact)"
    assert [(f["task_id"], f["a"], f["b"]) for f in c["fixed"]] == [
        ("fix-add", 0.5, 1.0),
        ("hello-file", 0.0, 1.0),
    ]
    assert c["broken"] == [] and (c["both_solved"], c["both_failed"]) == (1, 0)
    assert c["loop_rate"] == pytest.approx({"a": 1 / 6, "b": 0.0, "diff": -1 / 6})
    assert c["format_errors_per_turn"]["unknown_tool"]["b"] == 0.0
    text = run_harness("compare", str(base), str(ft))
    assert text.returncode == 0 and "no significant difference: +50.0 points" in text.stdout


def test_compare_one_seed_uses_mcnemar(runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Seed 1 only: A solves count-lines and fix-add, B all three -> 1 discordant pair, p = 1."""
    base, ft = runs
    one = tmp_path / "base1"
    shutil.copytree(base, one)
    lines = [ln for ln in (one / "episodes.jsonl").read_text().splitlines() if json.loads(ln)["seed"] == 1]
    (one / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    manifest = json.loads((one / "run.json").read_text())
    (one / "run.json").write_text(json.dumps({**manifest, "seeds": [1]}))
    c = json.loads(run_harness("compare", str(one), str(ft), "--json").stdout)
    assert c["test"] == "McNemar exact" and c["p_value"] == 1.0
    assert [f["task_id"] for f in c["fixed"]] == ["hello-file"]


def test_show_opens_a_looping_episode_where_the_loop_starts(runs: tuple[Path, Path]) -> None:
    base, _ = runs
    res = run_harness("show", str(base), "hello-file/seed1", env=WIDE)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert f"loop: repeat_call from turn {LOOP_START}" in out
    assert "before the loop hidden" in out and "cat greeting.md" not in out
    assert out.index("▶ the loop starts here") < out.index("Let me check the files again (0)")
    full = run_harness("show", str(base), "hello-file/seed1", "--all", env=WIDE).stdout
    assert "cat greeting.md" in full
    listing = run_harness("show", str(base), "--loop", "repeat_call", env=WIDE).stdout
    assert "scripted/hello-file/seed1" in listing and "count-lines" not in listing
    bad = run_harness("show", str(base), "fix-add")
    assert bad.returncode == 2 and "2 episodes match" in bad.stderr


def chromium() -> str:
    path = os.environ.get("HARNESS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail(
            "no Chromium for the report test: the README's test command (scripts/bootstrap --tests) installs it"
        )
    return path


@pytest.mark.slow
def test_report_html_in_a_real_browser(runs: tuple[Path, Path], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    base, _ = runs
    res = run_harness("report", str(base))
    assert res.returncode == 0, res.stderr
    assert "scripted: resolved 50.0%" in res.stdout
    for name in ("report.md", "report.html", "metrics.csv", "plot_resolve.png", "plot_loops.png"):
        assert (base / name).stat().st_size > 0
    shot = tmp_path / "loop.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium(),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto((base / "report.html").as_uri() + "#ep-scripted-hello-file-seed1")
        # Every plot is embedded and decodes to a real image.
        widths = page.eval_on_selector_all(
            "img.plot", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)"
        )
        assert len(widths) == 4 and all(w > 300 for w in widths)
        onset = page.locator("#ep-scripted-hello-file-seed1 .loop-onset")
        assert onset.count() == 1 and onset.is_visible()  # the anchor opened the episode at the onset
        assert f"turn {LOOP_START}" in onset.inner_text() and "repeat_call" in onset.inner_text()
        assert page.locator("#ep-scripted-hello-file-seed1 .turn.in-loop").count() == 4
        page.screenshot(path=str(shot))
        box = onset.bounding_box()
        assert box is not None and 0 <= box["y"] < 900
        # The onset is drawn highlighted: sample the screenshot inside its box, right of the label.
        with Image.open(shot) as img:
            assert img.convert("RGB").getpixel((int(box["x"] + box["width"] - 20), int(box["y"] + 12))) == (
                0xFF,
                0xD9,
                0xA8,
            )
        # Filters: only the looping episode left.
        page.select_option("#filter-loop", "repeat_call")
        assert page.locator("#shown").inner_text() == "1"
        browser.close()
    assert shot.stat().st_size > 10_000


def test_report_cli_on_bad_runs(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "episodes.jsonl").write_text("")
    res = run_harness("report", str(empty))
    assert res.returncode == 2 and "no episode recorded yet" in res.stderr and "Traceback" not in res.stderr
    res = run_harness("compare", str(empty))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    # Notes in brackets reach the terminal (rich would read "[...]" as markup and drop it).
    zero = write_run(tmp_path / "zero", [record(t, reward=0.0) for t in ("t1", "t2", "t3")])
    res = run_harness("report", str(zero), env=WIDE)
    assert res.returncode == 0 and "exact (Clopper-Pearson) interval over 3 tasks" in " ".join(
        res.stdout.split()
    )
