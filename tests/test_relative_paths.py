"""Issue 20, item 2: a relative or default run directory works exactly like an absolute one.

Every path the harness hands to a shell, a subprocess or the SDK is absolute: an agent's shell and
a task's tests start in the workspace, podman's service in its own directory, where a relative path
names something else (a relative --run-dir made every local episode's shell hang, then scored it
unresolved).
"""

import json
import os
import sys
from pathlib import Path

import pytest

from harness.paths import cache_dir
from harness.replay import ReplayScript
from harness.tasks import run_tests
from harness.tasks.loader import load_task
from tests.conftest import DATA, run_harness
from tests.test_eval_replay import SOLVE

pytestmark = pytest.mark.timeout(300)


def _statuses(run: Path) -> dict[str, tuple[str, float | None]]:
    last: dict[str, tuple[str, float | None]] = {}
    for line in (run / "episodes.jsonl").read_text().splitlines():
        rec = json.loads(line)
        last[rec["task_id"]] = (rec["status"], rec["reward"])
    return last


@pytest.mark.slow
def test_the_quick_start_with_a_relative_or_default_run_dir_resolves_as_an_absolute_one(
    tmp_path: Path,
) -> None:
    """`harness eval --model replay:SOLVER --tasks smoke --runtime local`, three ways: an absolute
    --run-dir, a relative one, and none (results/<suite>-<time>), each from its own directory."""
    script = tmp_path / "solve.json"
    solver = ReplayScript(
        model="scripted", responses=[*SOLVE["count-lines"], *SOLVE["fix-add"], *SOLVE["hello-file"]]
    )
    script.write_text(solver.model_dump_json())
    quick = ["eval", "--model", f"replay:{script}", "--seeds", "1", "--tasks", "smoke", "--runtime", "local"]
    runs: dict[str, Path] = {}
    for how, extra in (("absolute", [str(tmp_path / "abs")]), ("relative", ["rel/run"]), ("default", [])):
        cwd = tmp_path / f"cwd-{how}"
        cwd.mkdir()
        done = run_harness(*quick, *(["--run-dir", *extra] if extra else []), cwd=cwd, timeout=240)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        if how == "default":
            (runs[how],) = (cwd / "results").iterdir()
        else:
            runs[how] = cwd / extra[0] if how == "relative" else Path(extra[0])
    expected = {task: ("resolved", 1.0) for task in SOLVE}
    assert {how: _statuses(run) for how, run in runs.items()} == {how: expected for how in runs}
    for run in runs.values():  # nothing of the harness's own landed in a workspace
        for ws in run.glob("episodes/*/*/seed1/workspace"):
            assert not {"bash-norc", "bash_history", "completions", "conversation"} & {
                p.name for p in ws.iterdir()
            }


def test_tests_see_an_absolute_workspace_and_python_when_given_relative_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test script starts in the workspace: a relative $WORKSPACE or $PYTHON named nothing there."""
    task_dir = tmp_path / "t"
    (task_dir / "environment" / "workspace").mkdir(parents=True)
    (task_dir / "tests").mkdir()
    (task_dir / "instruction.md").write_text("Nothing.")
    (task_dir / "tests" / "test.sh").write_text(
        '#!/usr/bin/env bash\ncd "$WORKSPACE" && test -f marker && "$PYTHON" -c "import sys; sys.exit(0)"\n'
    )
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "marker").write_text("x")
    os.symlink(sys.executable, tmp_path / "py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_TASK_PYTHON", "./py")
    result = run_tests(load_task(task_dir, suite="s"), Path("ws"))
    assert result.resolved, result.output_tail


def test_a_relative_cache_directory_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """podman's service starts in <cache>/podman with a socket path under it: relative, it doubled."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE", "cache")
    assert cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("HARNESS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "xdg")
    assert cache_dir() == tmp_path / "xdg" / "harness"


def test_the_vllm_command_names_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch line is printed to be rerun by hand, from anywhere."""
    from harness.server.checkpoint import Checkpoint
    from harness.server.config import ServerConfig
    from harness.server.launch import build_launch
    from harness.server.memory import plan_memory

    config = json.loads((DATA / "configs" / "qwen2.5-7b-instruct" / "config.json").read_text())
    ckpt = Checkpoint(
        kind="lora",
        path=Path("adapter"),
        base_path=Path("base"),
        served_name="m",
        adapter_name="a",
        lora_rank=8,
        architecture="Qwen2ForCausalLM",
        model_type="qwen2",
        family="qwen2.5",
        tool_call_parser="hermes",
        chat_template=Path("tmpl.jinja"),
        template_has_tools=True,
        context_length=32768,
        dtype="bfloat16",
        config=config,
    )
    monkeypatch.chdir(tmp_path)
    launch = build_launch(
        python=Path("env/bin/python"),
        checkpoint=ckpt,
        config=ServerConfig(model="m"),
        plan=plan_memory(config, gpu="h100"),
        port=12345,
        on_cpu=False,
    )
    argv = list(launch.argv)
    assert argv[0] == str(tmp_path / "env" / "bin" / "python")
    assert argv[argv.index("--model") + 1] == str(tmp_path / "base")
    assert argv[argv.index("--chat-template") + 1] == str(tmp_path / "tmpl.jinja")
    assert argv[argv.index("--lora-modules") + 1] == f"a={tmp_path / 'adapter'}"


@pytest.mark.slow
def test_the_callers_pytest_settings_never_reach_a_tasks_tests(tmp_path: Path) -> None:
    """A researcher's PYTEST_ADDOPTS (or the pytest session driving the harness, with --basetemp in
    it: a task's own pytest then cleared that directory) does not change how a task's tests run:
    with `-k` selecting nothing, the reference solution would exit 5 and the task be invalid."""
    task = sorted(p.name for p in (Path(__file__).resolve().parent.parent / "tasks" / "pybugs").iterdir())[0]
    env = {**os.environ, "PYTEST_ADDOPTS": "-k no_test_is_named_this -p no:cacheprovider"}
    done = run_harness(
        "tasks", "verify", "pybugs", "--task", task, "--runtime", "local", env=env, cwd=tmp_path, timeout=240
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
