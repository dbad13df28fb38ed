"""Deterministic `harness eval` runs: real OpenHands episodes on the smoke suite, driven by the replay server."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from tests.conftest import REPO, run_harness

pytestmark = pytest.mark.timeout(300)


def call(name: str, **args: object) -> ScriptedCall:
    return ScriptedCall(name=name, arguments=args)


FINISH = ScriptedResponse(tool_calls=[call("finish", message="done")])
# Smoke tasks in load order: count-lines, fix-add, hello-file.
SOLVE = {
    "count-lines": [
        ScriptedResponse(
            content="Counting.", tool_calls=[call("terminal", command="wc -l < data.txt > count.txt")]
        ),
        FINISH,
    ],
    "fix-add": [
        ScriptedResponse(
            content="Fixing.", tool_calls=[call("terminal", command="sed -i 's/a - b/a + b/' calc.py")]
        ),
        FINISH,
    ],
    "hello-file": [
        ScriptedResponse(
            content="Writing.", tool_calls=[call("terminal", command="echo 'Hello, world!' > hello.txt")]
        ),
        FINISH,
    ],
}


def evaluate(script: list[ScriptedResponse], run_dir: Path, tasks: str = "smoke", **kw: object) -> list[dict]:
    # One script played in arrival order: episodes one at a time, whatever --concurrency auto
    # would pick on this machine's cores.
    kw.setdefault("concurrency", 1)
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=("scripted",),
                tasks=tasks,
                base_url=server.base_url,
                run_dir=run_dir,
                **kw,
            )
        )  # type: ignore[arg-type]
    return [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]


def latest(run_dir: Path) -> dict[str, dict]:
    return {k[1]: r.model_dump() for k, r in RunStore(run_dir).records().items()}


@pytest.mark.slow
def test_scripted_solutions_resolve_and_a_rerun_adds_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    evaluate([*SOLVE["count-lines"], *SOLVE["fix-add"], *SOLVE["hello-file"]], run)
    recs = latest(run)
    assert {k: (r["status"], r["reward"], r["verified"]) for k, r in recs.items()} == {
        t: ("resolved", 1.0, True) for t in SOLVE
    }
    assert all(r["turns"] == 2 and r["tool_calls"] == 2 and r["format_errors"] == {} for r in recs.values())
    lines = (run / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 6  # one record at episode end, one after verification, per episode
    traj = run / recs["fix-add"]["trajectory"]
    assert json.loads(traj.read_text().splitlines()[0])["tool_calls"][0]["name"] == "terminal"
    # Running the same command again resumes: nothing left to do, no request made, no line added.
    with ReplayServer(ReplayScript(model="scripted", responses=[FINISH])) as server:
        summary = run_eval(
            EvalConfig(
                runtime="local", models=("scripted",), tasks="smoke", base_url=server.base_url, run_dir=run
            )
        )
        assert server.served == 0
    assert summary.new_episodes == 0 and summary.models[0].resolved == 3
    assert (run / "episodes.jsonl").read_text().splitlines() == lines


def test_malformed_calls_are_counted_and_unresolved(tmp_path: Path) -> None:
    script = [
        ScriptedResponse(
            content='<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"\n</tool_call>',
            tool_calls=[ScriptedCall(name="terminal", arguments='{"command": "ls"')],
        ),
        ScriptedResponse(tool_calls=[call("run_python", code="print(1)")]),
        ScriptedResponse(tool_calls=[call("terminal", cmd="ls")]),
        ScriptedResponse(tool_calls=[call("execute_bash", command="ls")]),
        FINISH,
    ]
    evaluate(script, tmp_path / "run", tasks=str(REPO / "tasks" / "smoke" / "hello-file"))
    rec = latest(tmp_path / "run")["hello-file"]
    assert rec["status"] == "unresolved" and rec["reward"] == 0.0
    errors = rec["format_errors"]
    assert errors["tool_call_in_content"] == 1 and errors["unknown_tool"] == 1
    assert errors["missing_required"] == 1 and errors["unexpected_param"] == 1
    assert errors.get("invalid_json_arguments", 0) == 1
    assert rec["repairs"] == {"execute_bash->terminal": 1}


def test_scripted_loop_is_stopped_at_the_right_turn(tmp_path: Path) -> None:
    script = [
        ScriptedResponse(
            content=f"Look again, attempt {i}.", tool_calls=[call("terminal", command="cat calc.py")]
        )
        for i in range(10)
    ]
    evaluate(script, tmp_path / "run", tasks=str(REPO / "tasks" / "smoke" / "fix-add"))
    rec = latest(tmp_path / "run")["fix-add"]
    assert rec["status"] == "loop_stopped" and rec["reward"] == 0.0
    assert (
        rec["loop"]["kind"] == "repeat_call"
        and rec["loop"]["start_turn"] == 0
        and rec["loop"]["detected_at"] == 3
    )
    assert rec["turns"] == 4


def test_context_overflow_mid_episode_is_an_error_and_the_run_goes_on(tmp_path: Path) -> None:
    overflow = ScriptedResponse(
        status=400,
        error="This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.",
    )
    script = [
        ScriptedResponse(content="Look.", tool_calls=[call("terminal", command="ls")]),
        overflow,
        *SOLVE["fix-add"],
        *SOLVE["hello-file"],
    ]
    evaluate(script, tmp_path / "run")
    recs = latest(tmp_path / "run")
    bad = recs["count-lines"]
    assert bad["status"] == "error" and bad["reward"] == 0.0 and bad["turns"] == 1
    assert "maximum context length" in bad["error"]["message"]
    assert recs["fix-add"]["status"] == recs["hello-file"]["status"] == "resolved"


def make_task(root: Path, name: str, test_sh: str, toml: str | None = None) -> Path:
    d = root / name
    (d / "environment" / "workspace").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "instruction.md").write_text("Do nothing.")
    (d / "tests" / "test.sh").write_text(test_sh)
    if toml is not None:
        (d / "task.toml").write_text(toml)
    return d


@pytest.mark.slow
def test_task_whose_tests_hang_is_cut_at_the_time_limit(tmp_path: Path) -> None:
    tasks = tmp_path / "suite"
    make_task(tasks, "hangs", "#!/usr/bin/env bash\nsleep 600\n", "[limits]\nverify_timeout_s = 2\n")
    t0 = time.monotonic()
    evaluate([FINISH], tmp_path / "run", tasks=str(tasks))
    assert time.monotonic() - t0 < 60
    rec = latest(tmp_path / "run")["hangs"]
    assert rec["status"] == "unresolved" and rec["reward"] == 0.0 and rec["verified"]


def test_verification_runs_as_many_at_once_as_the_episodes(tmp_path: Path) -> None:
    """Each task's tests pass only while the other's run too (a rendezvous, never a timing): one
    verification at a time would fail both. ~5 s."""
    meet = tmp_path / "meet"
    meet.mkdir()
    tasks = tmp_path / "suite"
    for me, other in (("a", "b"), ("b", "a")):
        make_task(
            tasks,
            me,
            f"#!/usr/bin/env bash\ntouch {meet}/{me}\n"
            f"for _ in $(seq 300); do [ -e {meet}/{other} ] && exit 0; sleep 0.1; done\nexit 1\n",
        )
    evaluate([FINISH, FINISH], tmp_path / "run", tasks=str(tasks), concurrency=2)
    recs = latest(tmp_path / "run")
    assert recs["a"]["status"] == recs["b"]["status"] == "resolved"


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("unknown_suite", "no such suite or directory (built-in suites: "),
        ("bad_toml", "task.toml: malformed TOML"),
        ("missing_tests", "missing tests/test.sh"),
        ("bad_limits", "limits.verify_timeout_s"),
    ],
)
def test_bad_task_input_is_one_clear_line(tmp_path: Path, setup: str, needle: str) -> None:
    tasks = tmp_path / "suite"
    tasks.mkdir()
    arg = str(tasks)
    if setup == "unknown_suite":
        arg = "no-such-suite"
    elif setup == "bad_toml":
        make_task(tasks, "t", "exit 0\n", "[limits\nagent_timeout_s = ")
    elif setup == "missing_tests":
        make_task(tasks, "t", "exit 0\n")
        (tasks / "t" / "tests" / "test.sh").unlink()
    elif setup == "bad_limits":
        make_task(tasks, "t", "exit 0\n", "[limits]\nverify_timeout_s = -1\n")
    with pytest.raises(HarnessError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        run_eval(
            EvalConfig(
                runtime="local",
                models=("m",),
                tasks=arg,
                base_url="http://127.0.0.1:9/v1",
                run_dir=tmp_path / "run",
            )
        )
    done = run_harness(
        "eval",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--tasks",
        arg,
        "--run-dir",
        str(tmp_path / "run2"),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and needle in done.stderr


@pytest.mark.slow
def test_killed_run_resumes_without_duplicates(tmp_path: Path) -> None:
    run = tmp_path / "run"
    slow = [ScriptedResponse(content="Working.", delay=60, tool_calls=[call("terminal", command="ls")])]
    with ReplayServer(ReplayScript(model="scripted", responses=[*SOLVE["count-lines"], *slow])) as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "eval",
                "--model",
                "scripted",
                "--base-url",
                server.base_url,
                "--tasks",
                "smoke",
                "--concurrency",
                "1",  # one in-order script: one episode at a time, whatever auto picks on these cores
                "--run-dir",
                str(run),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ},
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.served < 3:
            time.sleep(0.2)  # count-lines done, fix-add's first call hanging in the server
        assert server.served >= 3
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    recs = latest(run)
    assert set(recs) == {"count-lines"}  # the finished episode is on disk; fix-add was in flight
    assert (run / "episodes" / "scripted" / "fix-add").exists()
    evaluate([*SOLVE["fix-add"], *SOLVE["hello-file"]], run)
    recs = latest(run)
    assert {k: r["status"] for k, r in recs.items()} == {t: "resolved" for t in SOLVE}
    keys = [
        (r["task_id"], r["seed"])
        for r in map(json.loads, (run / "episodes.jsonl").read_text().splitlines())
        if not r["verified"]
    ]
    assert sorted(keys) == sorted({(t, 1) for t in SOLVE})  # exactly one episode per (task, seed)
    shutil.rmtree(run)


@pytest.mark.parametrize("scaffold", ["openhands-codeact", "mini-swe-agent"])
def test_max_output_tokens_caps_every_request_and_is_the_run_s_sampling(
    tmp_path: Path, scaffold: str
) -> None:
    """--max-output-tokens reaches every request of either scaffold as max_tokens, and run.json's
    sampling records it with its source; without it, the scaffold's 1024."""
    fix_add = str(REPO / "tasks" / "smoke" / "fix-add")
    answer = (
        ScriptedResponse(content="```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
        if scaffold == "mini-swe-agent"
        else FINISH
    )
    for run, cap in ((tmp_path / "capped", 48), (tmp_path / "default", None)):
        with ReplayServer(ReplayScript(model="scripted", responses=[answer])) as server:
            run_eval(
                EvalConfig(
                    runtime="local", models=("scripted",), tasks=fix_add, scaffolds=(scaffold,),
                    base_url=server.base_url, run_dir=run, concurrency=1, max_output_tokens=cap,
                )
            )  # fmt: skip
            asked = {r.get("max_tokens", r.get("max_completion_tokens")) for r in server.requests}
        sampling = json.loads((run / "run.json").read_text())["sampling"]
        assert asked == {cap or 1024}, server.requests[0]
        assert sampling["max_output_tokens"] == (cap or 1024)
        assert sampling["source"] == ("--max-output-tokens" if cap else f"the {scaffold} scaffold's default")


def test_base_and_lora_adapter_share_one_server(
    toolcall_lora: Path, bundled_model: Path, tmp_path: Path
) -> None:
    from harness.executor import ThreadRollouts
    from harness.server.endpoint import ManagedEndpoint, group_by_server, share_servers

    config = EvalConfig(runtime="local", models=(str(toolcall_lora), "smollm2-135m"), run_dir=tmp_path)
    endpoints = [ThreadRollouts(config).endpoint(config, m, tmp_path) for m in config.models]
    assert all(isinstance(e, ManagedEndpoint) for e in endpoints)
    assert endpoints[0].server is not endpoints[1].server  # type: ignore[attr-defined]
    assert endpoints[0].server_id != endpoints[1].server_id
    share_servers(endpoints)
    groups = group_by_server(endpoints)
    assert len(groups) == 1 and endpoints[0].server is endpoints[1].server  # type: ignore[attr-defined]
    assert [e.name for e in endpoints] == [toolcall_lora.name, "smollm2-135m"]
    assert endpoints[0].server.served_names == ["smollm2-135m", toolcall_lora.name]  # type: ignore[attr-defined]


def test_export_preds_gives_a_patch_that_applies(tmp_path: Path) -> None:
    run = tmp_path / "run"
    evaluate([*SOLVE["fix-add"]], run, tasks=str(REPO / "tasks" / "smoke" / "fix-add"))
    done = run_harness("export-preds", str(run), "--out", str(tmp_path / "preds.jsonl"))
    assert done.returncode == 0, done.stderr
    (pred,) = [json.loads(x) for x in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert (pred["instance_id"], pred["model_name_or_path"]) == ("fix-add", "scripted")
    patch = pred["model_patch"]
    assert "diff --git a/calc.py b/calc.py" in patch and "+    return a + b" in patch
    fresh = tmp_path / "fresh"
    shutil.copytree(REPO / "tasks" / "smoke" / "fix-add" / "environment" / "workspace", fresh)
    subprocess.run(["git", "init", "-q"], cwd=fresh, check=True)
    applied = subprocess.run(["git", "apply", "-"], cwd=fresh, input=patch, text=True, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert "return a + b" in (fresh / "calc.py").read_text()
