"""`--task PATTERN` (repeatable glob on task ids) and `--limit N` on every command that takes a suite
or a run (eval, tasks verify, report, compare, show), and no argparse abbreviations anywhere."""

import argparse
import csv
import json
from pathlib import Path

import pytest

from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from tests.conftest import run_harness
from tests.helpers.runs import record, write_run

pytestmark = pytest.mark.timeout(300)


def _one_line(done: object, *needles: str) -> str:
    err = done.stderr.strip()  # type: ignore[attr-defined]
    assert done.returncode != 0 and len(err.splitlines()) == 1, err  # type: ignore[attr-defined]
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return str(err)


def _finish_script(path: Path) -> str:
    """Every episode: one turn that finishes (nothing solved); a model served on demand."""
    script = ReplayScript(
        model="scripted",
        pick="by_turn",
        when_exhausted="repeat_last",
        responses=[ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])],
    )
    path.write_text(script.model_dump_json())
    return f"replay:{path}"


def test_every_parser_refuses_abbreviations() -> None:
    from harness.cli import build_parser

    parsers, todo = [], [build_parser()]
    while todo:
        p = todo.pop()
        parsers.append(p)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    assert len(parsers) > 15
    assert [p.prog for p in parsers if p.allow_abbrev] == []


def test_a_mistyped_or_shortened_flag_is_an_error_not_another_flag(tmp_path: Path) -> None:
    # `--task` was taken for `--tasks` (the suite), `--seed` for `--seeds`: both now one-line errors.
    _one_line(run_harness("eval", "--model", "x", "--seed", "2"), "unrecognized arguments: --seed 2")
    _one_line(run_harness("tasks", "verify", "smoke", "--run", "local"), "unrecognized arguments: --run")
    run = write_run(tmp_path / "run", [record("t1")])
    _one_line(run_harness("show", str(run), "--stat", "resolved"), "unrecognized arguments: --stat")


@pytest.mark.slow
def test_eval_runs_only_the_selected_tasks(tmp_path: Path) -> None:
    model = _finish_script(tmp_path / "script.json")
    common = ("eval", "--model", model, "--tasks", "smoke", "--runtime", "local")
    done = run_harness(*common, "--task", "fix-*", "--task", "hello-file", "--run-dir", str(tmp_path / "a"))
    assert done.returncode == 0, done.stderr
    assert sorted(k[1] for k in RunStore(tmp_path / "a").records()) == ["fix-add", "hello-file"]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["tasks"] == ["fix-add", "hello-file"]

    done = run_harness(*common, "--limit", "1", "--run-dir", str(tmp_path / "b"))
    assert done.returncode == 0, done.stderr
    assert [k[1] for k in RunStore(tmp_path / "b").records()] == ["count-lines"]  # the first id

    err = _one_line(
        run_harness(*common, "--task", "fix-*", "--task", "fix_add", "--run-dir", str(tmp_path / "c")),
        "--task fix_add: matches no task of smoke",
    )
    assert "count-lines, fix-add, hello-file" in err  # the ids, so the fix is one look away
    assert not (tmp_path / "c").exists()  # refused before anything started
    _one_line(run_harness(*common, "--limit", "0"), "--limit")


def test_tasks_verify_checks_only_the_selected_tasks() -> None:
    done = run_harness("tasks", "verify", "smoke", "--runtime", "local", "--task", "*-*", "--limit", "2")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "count-lines" in text and "fix-add" in text and "hello-file" not in text
    assert "reference solution passes 2/2" in text
    _one_line(
        run_harness("tasks", "verify", "smoke", "--runtime", "local", "--task", "nope"),
        "--task nope: matches no task of smoke; its task ids are count-lines, fix-add, hello-file",
    )


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    """A and B on t1..t4: B fixes t1 and t2 and breaks t3."""
    a = write_run(
        tmp_path / "a", [record(t, reward=r) for t, r in (("t1", 0), ("t2", 0), ("t3", 1), ("t4", 1))]
    )
    b = write_run(
        tmp_path / "b", [record(t, reward=r) for t, r in (("t1", 1), ("t2", 1), ("t3", 0), ("t4", 1))]
    )
    return a, b


def test_compare_on_the_selected_tasks(tmp_path: Path) -> None:
    a, b = _runs(tmp_path)
    whole = json.loads(run_harness("compare", str(a), str(b), "--json").stdout)
    assert whole["tasks"] == 4 and len(whole["fixed"]) == 2 and len(whole["broken"]) == 1
    done = run_harness("compare", str(a), str(b), "--json", "--task", "t1", "--task", "t3")
    assert done.returncode == 0, done.stderr
    part = json.loads(done.stdout)
    assert part["tasks"] == 2
    assert [f["task_id"] for f in part["fixed"]] == ["t1"] and [f["task_id"] for f in part["broken"]] == [
        "t3"
    ]
    assert any("2 of 4 tasks (--task t1 --task t3)" in n for n in part["notes"])
    limited = json.loads(run_harness("compare", str(a), str(b), "--json", "--limit", "2").stdout)
    assert limited["tasks"] == 2 and [f["task_id"] for f in limited["fixed"]] == ["t1", "t2"]
    _one_line(run_harness("compare", str(a), str(b), "--task", "t9"), "--task t9: matches no task of the run")


def test_report_on_the_selected_tasks(tmp_path: Path) -> None:
    a, _ = _runs(tmp_path)
    done = run_harness("report", str(a), "--task", "t[34]", "--out", str(tmp_path / "rep"))
    assert done.returncode == 0, done.stderr
    assert "tasks: 2 of 4 tasks (--task t[34])" in " ".join(done.stdout.split())
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Tasks: 2 of 4 tasks" in md and "Partial" not in md  # a subset is not a partial run
    with (tmp_path / "rep" / "metrics.csv").open() as fh:
        overall = next(r for r in csv.DictReader(fh) if r["seed"] == "all")
    assert (overall["episodes"], overall["resolve_rate"]) == ("2", "1.0")  # t3, t4: both resolved in A
    limited = run_harness("report", str(a), "--limit", "1", "--out", str(tmp_path / "one"))
    assert limited.returncode == 0 and "1 of 4 tasks (--limit 1)" in " ".join(limited.stdout.split())


def test_show_takes_globs_too(tmp_path: Path) -> None:
    a, _ = _runs(tmp_path)
    done = run_harness("show", str(a), "--task", "t[12]", "--task", "t4")
    assert done.returncode == 0, done.stderr
    assert "m/t1/seed1" in done.stdout and "m/t4/seed1" in done.stdout and "m/t3/" not in done.stdout
    _one_line(run_harness("show", str(a), "--task", "x*"), "--task x*: matches no task")
