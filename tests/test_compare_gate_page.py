"""harness compare's gate (exit codes, bad input), its comparison page and the report's plots,
opened in headless Chromium. Runs are written from hand-made records (tests/helpers/runs.py)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.monitor import ToolCall, Turn
from tests.conftest import run_harness
from tests.helpers.browser import LAUNCH_ARGS, chromium
from tests.helpers.runs import record, write_run
from tests.test_results_timeline_plots import two_servers, write_metrics

WIDE = {**os.environ, "COLUMNS": "200"}


def pair(root: Path, a_solved: set[int], b_solved: set[int], tasks: int, **kw: object) -> tuple[Path, Path]:
    a = [record(f"t{i:02d}", reward=float(i in a_solved), model="base") for i in range(tasks)]
    b = [record(f"t{i:02d}", reward=float(i in b_solved), model="ft") for i in range(tasks)]
    return write_run(root / "a", a, **kw), write_run(root / "b", b, **kw)  # type: ignore[arg-type]


def compare(*args: str) -> tuple[int, str, str]:
    res = run_harness("compare", *args, env=WIDE)
    return res.returncode, res.stdout, res.stderr


@pytest.mark.parametrize(
    ("a_solved", "b_solved", "tasks", "verdict", "code"),
    [
        # 30 tasks, B fixes 2: diff +6.7, 95% CI -2.8 to +16.1: a 5-point drop is ruled out.
        (set(range(15)), set(range(17)), 30, "PASS", 0),
        # B breaks 20 of the 25 tasks A solved: -66.7 points, the whole CI far below -5.
        (set(range(25)), set(range(5)), 30, "BLOCK", 1),
        # 20 tasks, 2 fixed and 1 broken: +5.0, 95% CI -13.4 to +23.4 straddles -5.
        (set(range(10)), {0, 1, 2, 4, 5, 6, 7, 8, 9, 12, 15}, 20, "WARN", 2),
    ],
)
def test_gate_verdicts_and_strict_exit_codes(
    tmp_path: Path, a_solved: set[int], b_solved: set[int], tasks: int, verdict: str, code: int
) -> None:
    a, b = pair(tmp_path, a_solved, b_solved, tasks)
    rc, out, err = compare(str(a), str(b), "--max-drop", "5", "--strict")
    assert rc == code, err
    assert f"{verdict}: " in out and "--max-drop 5)" in out
    assert "differences under" in out and "points are not detectable" in out  # the power statement
    if code:
        rc, out, _ = compare(str(a), str(b), "--max-drop", "5")
        assert rc == 0 and f"{verdict}: " in out  # without --strict the verdict is printed, the exit is 0
    rc, out, _ = compare(str(a), str(b), "--max-drop", "5", "--strict", "--json")
    c = json.loads(out)
    assert rc == code and c["gate"]["verdict"] == verdict and c["gate"]["threshold"] == 0.05
    assert c["power"]["tasks"] == tasks and c["power"]["mde"] > 0


def test_min_gain_gate(tmp_path: Path) -> None:
    a, b = pair(tmp_path, set(range(5)), set(range(25)), 30)  # +66.7 points
    assert compare(str(a), str(b), "--min-gain", "20", "--strict")[0] == 0
    assert compare(str(a), str(b), "--min-gain", "95", "--strict")[0] == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-drop", "-1"], "--max-drop -1: must be between 0 and 100 points"),
        (["--max-drop", "101"], "--max-drop 101: must be between 0 and 100 points"),
        (["--min-gain", "nan"], "--min-gain nan: must be between 0 and 100 points"),
        (["--max-drop", "5", "--min-gain", "5"], "give one gate at a time"),
        (["--strict"], "--strict: needs a gate"),
    ],
)
def test_bad_gate_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    a, b = pair(tmp_path, {0}, {1}, 3)
    rc, _, err = compare(str(a), str(b), *args)
    assert rc == 2 and needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_runs_with_no_overlap_are_refused(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [record(f"x{i}", model="base") for i in range(3)])
    b = write_run(tmp_path / "b", [record(f"y{i}", model="ft") for i in range(3)])
    rc, _, err = compare(str(a), str(b), "--max-drop", "5", "--strict")
    assert rc == 2 and "task sets differ" in err and "--force" in err
    rc, _, err = compare(str(a), str(b), "--max-drop", "5", "--force")
    assert rc == 2 and "no task has a scored episode in both" in err and "Traceback" not in err


def turns_looping() -> list[Turn]:
    ls = ToolCall(id="c", name="terminal", arguments='{"command": "ls"}')
    return [Turn(index=i, text=f"Checking ({i}).", tool_calls=[ls], observation="calc.py") for i in range(5)]


def turns_solving() -> list[Turn]:
    cmd = ToolCall(id="c", name="terminal", arguments='{"command": "echo hi > hello.txt"}')
    fin = ToolCall(id="d", name="finish", arguments='{"message": "done"}')
    return [
        Turn(index=0, text="<tool_call>{oops", tool_calls=[], observation=""),
        Turn(index=1, text="Write it.", tool_calls=[cmd], observation=""),
        Turn(index=2, text="", tool_calls=[fin], observation=""),
    ]


@pytest.mark.slow
def test_comparison_page_shows_a_flipped_task_side_by_side(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    base = [
        record("t0", reward=1.0, model="base"),
        record("t1", reward=0.0, model="base", loop="repeat_call"),
    ]
    base += [record(f"t{i}", reward=float(i % 2), model="base") for i in range(2, 8)]
    ft = [
        record("t0", reward=1.0, model="ft"),
        record("t1", reward=1.0, model="ft", format_errors={"tool_call_in_content": 1}),
    ]
    ft += [record(f"t{i}", reward=float(i % 2), model="ft") for i in range(2, 8)]
    a = write_run(tmp_path / "a", base, turns={"t1": turns_looping()})
    b = write_run(tmp_path / "b", ft, turns={"t1": turns_solving()})
    page = tmp_path / "cmp.html"
    rc, out, err = compare(str(a), str(b), "--max-drop", "5", "--html", str(page))
    assert rc == 0, err
    assert f"comparison page: {page}" in out
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=LAUNCH_ARGS)
        view = browser.new_page(viewport={"width": 1280, "height": 900})
        view.goto(page.as_uri())
        assert "WARN" in view.locator("#verdict").inner_text()
        assert "not detectable" in view.locator("#power").inner_text()
        view.click("#flips a[href='#flip-t1']")  # the flip table links to the task
        section = view.locator("#flip-t1")
        sides = section.locator(".pair .side")
        assert sides.count() == 2
        left, right = sides.nth(0).bounding_box(), sides.nth(1).bounding_box()
        assert left and right
        assert abs(left["y"] - right["y"]) < 2 and right["x"] >= left["x"] + left["width"]  # side by side
        assert left["width"] > 400 and right["width"] > 400
        # A's loop onset and B's format error are marked, and both are on screen after the link.
        onset = sides.nth(0).locator(".loop-onset")
        assert onset.count() == 1 and "repeat_call" in onset.inner_text()
        assert sides.nth(1).locator(".fmt", has_text="tool_call_in_content").count() == 1
        assert 0 <= section.bounding_box()["y"] < 900  # type: ignore[index]
        assert "A a:base" in sides.nth(0).inner_text() and "B b:ft" in sides.nth(1).inner_text()
        browser.close()


def no_axis_lines(png: Path) -> bool:
    """True when no row or column of the image is mostly dark: nothing like an axis spine is drawn."""
    with Image.open(png) as img:
        dark = np.asarray(img.convert("L")) < 100
    return bool(dark.mean(axis=0).max() < 0.5 and dark.mean(axis=1).max() < 0.5)


@pytest.mark.slow
def test_report_plots_in_a_real_browser(tmp_path: Path) -> None:
    """A run without loops or format errors: those plots say so in words; the turns plot has whole-number
    bins; the server timeline decodes; every plot fits a laptop-wide window."""
    from playwright.sync_api import sync_playwright

    run = write_run(
        tmp_path / "run", [record(f"t{i}", reward=float(i % 2), turns=2 + i % 3) for i in range(6)]
    )
    write_metrics(run, [{**x, "server": "m"} for x in two_servers()])
    res = run_harness("report", str(run), "--gpu-price", "2.5", env=WIDE)
    assert res.returncode == 0, res.stderr
    assert "server mostly idle" in res.stdout
    md = (run / "report.md").read_text()
    assert "GPU-hours = 0.06 at 2.5/hour" in md and "![timeline](plot_timeline.png)" in md
    assert no_axis_lines(run / "plot_loops.png") and no_axis_lines(run / "plot_format_errors.png")
    assert not no_axis_lines(run / "plot_turns.png")  # the check does see axes where there are some
    shot = tmp_path / "plots.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=LAUNCH_ARGS)
        view = browser.new_page(viewport={"width": 1280, "height": 800})
        view.goto((run / "report.html").as_uri())
        sizes = view.eval_on_selector_all(
            "img.plot",
            "imgs => imgs.map(i => [i.id, i.complete ? i.naturalWidth : 0, i.getBoundingClientRect().width])",
        )
        assert [s[0] for s in sizes] == [
            "plot-resolve",
            "plot-loops",
            "plot-format_errors",
            "plot-turns",
            "plot-timeline",
        ]
        assert all(natural > 300 and 0 < shown <= 1280 for _, natural, shown in sizes)
        assert "server up 81 s" in view.locator("#server").inner_text()
        view.locator("#plot-loops").screenshot(path=str(shot))
        browser.close()
    assert no_axis_lines(shot)  # as the browser draws it: "no loops", no empty axes
