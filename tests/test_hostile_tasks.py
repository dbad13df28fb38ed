"""Issue 20, item 5: `harness tasks verify` (and task loading) against hostile or odd task
directories and a stop signal. One bad task is that task's row, never the end of the command;
a stop ends the command within seconds with its sandboxes gone.
"""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO

WIDE = {**os.environ, "COLUMNS": "400"}  # table cells on one line each
STOP_EXIT_S = 8.0  # as tests/test_faults.py: a stop ends the process within seconds


def native_task(root: Path, name: str, test_sh: str, toml: str = "") -> Path:
    """A native task whose reference solution does nothing and whose tests are ``test_sh``."""
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "instruction.md").write_text("Do nothing.\n")
    (task / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "task.toml").write_text(toml or "[limits]\nverify_timeout_s = 120\n")
    return task


def _marked(text: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def _wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["docker", "local"])
def test_sigterm_to_tasks_verify_stops_within_seconds_and_ends_the_tests(
    tmp_path: Path, runtime: str
) -> None:
    """Two tasks whose tests sleep 120 s, checked two at a time: SIGTERM ends the command within
    seconds (before: it waited for the tests, ~120 s), exit 143, one line, and the tests (and
    their containers) are gone."""
    mark = f"harness-slow-{uuid.uuid4().hex[:8]}"
    suite = tmp_path / "suite"
    names = [f"{mark}-{i}" for i in range(2)]
    for name in names:
        native_task(suite, name, f"#!/usr/bin/env bash\nexec -a {mark} sleep 120\n")

    def ours() -> list[object]:
        from harness.runtime.container import LABEL
        from harness.runtime.engine import docker_client

        client = docker_client()
        return [
            c
            for name in names
            for role in ("reference", "untouched")
            for c in client.containers.list(all=True, filters={"label": f"{LABEL}=verify/{name}/{role}"})
        ]

    if runtime == "docker":
        from harness.runtime.engine import docker_client
        from harness.runtime.images import ensure_sandbox_image

        ensure_sandbox_image(docker_client())
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "tasks", "verify", str(suite), "--runtime", runtime,
         "--concurrency", "2"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        # the tests themselves (`exec -a MARK sleep`), not a runner whose arguments name the task's
        # path (which holds the mark too): one check alone could count twice, and a signal sent
        # while the other was still starting raced it
        _wait_for(
            lambda: sum(1 for p in _marked(mark) if (p.info["cmdline"] or [""])[0] == mark) >= 2,
            180,
            "both tasks' tests running",
        )
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=150)
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
    assert took < STOP_EXIT_S, f"exit took {took:.1f} s after SIGTERM"
    assert proc.returncode == 143, err
    said = [ln for ln in err.splitlines() if ln.startswith("harness:")]  # after the runtime's banner
    assert "Traceback" not in err and len(said) == 1 and err.rstrip().endswith(said[0]), err
    assert said[0].startswith("harness: stopped by SIGTERM: 2 running task check(s) stopped"), err
    if runtime == "docker":
        assert ours() == [], "a container outlived the stop"
    _wait_for(lambda: not _marked(mark), 10, "the tests' processes to end")


def test_a_check_whose_tests_the_stop_ends_is_counted_as_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop kills the running tests first; a check whose tests end leaves its sandbox at once.
    It was stopped all the same: counted after the kill, it was missed now and then (a CI run said
    "1 running task check(s) stopped" of two). Here its check always leaves before the count."""
    from types import SimpleNamespace

    from harness.tasks import oracle

    sandboxes = oracle._OpenSandboxes()
    inside, ended, left = threading.Event(), threading.Event(), threading.Event()

    class Box:  # a sandbox: hashable, as the open ones are kept in a set
        def close(self) -> None:
            pass

    runtime = SimpleNamespace(open=lambda *a, **k: Box())

    def check() -> None:
        with sandboxes.open(runtime, SimpleNamespace(id="t"), Path("work"), "reference"):  # type: ignore[arg-type]
            inside.set()
            ended.wait(10)
        left.set()

    def kill() -> None:  # its tests end, and it has left before the stop looks again
        ended.set()
        assert left.wait(10)

    monkeypatch.setattr(oracle, "kill_running_tests", kill)
    worker = threading.Thread(target=check)
    worker.start()
    assert inside.wait(10)
    assert sandboxes.halt() == 1
    worker.join(10)


def harbor_task(root: Path, name: str, test_sh: str, toml: str = 'version = "1.0"\n') -> Path:
    """A Harbor task that runs without its image (COPY into WORKDIR only): solve.sh writes
    done.txt; ``test_sh`` runs with /app, /logs mapped to local directories."""
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "instruction.md").write_text("Write done.txt in /app.\n")
    (task / "task.toml").write_text(toml)
    (task / "environment" / "Dockerfile").write_text("FROM debian\nWORKDIR /app\nCOPY start.txt .\n")
    (task / "environment" / "start.txt").write_text("start\n")
    (task / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\necho done > /app/done.txt\n")
    (task / "tests" / "test.sh").write_text(test_sh)
    return task


GRADED = "#!/usr/bin/env bash\nif [ -f /app/done.txt ]; then r={good}; else r=0; fi\n"


@pytest.mark.slow
def test_a_reward_outside_0_1_nan_inf_or_true_is_an_error_in_its_task_s_row(tmp_path: Path) -> None:
    """Before: 5.0 and inf were clamped to 1 (the task valid), NaN scored as NaN, `true` in
    reward.json scored 1, and `true` in reward.txt fell back to the exit code."""
    from harness.tasks.oracle import verify_suite

    NOT = ", not a reward (a number from 0 to 1)"
    suite = tmp_path / "suite"
    txt = GRADED + "echo $r > /logs/verifier/reward.txt\n"
    js = GRADED + 'echo "{\\"reward\\": $r}" > /logs/verifier/reward.json\n'
    harbor_task(suite, "ok", txt.replace("{good}", "1"))
    bad = {
        "five": (txt.replace("{good}", "5.0"), "reward.txt holds 5.0" + NOT),
        "nan": (txt.replace("{good}", "nan"), "reward.txt holds nan" + NOT),
        "inf": (txt.replace("{good}", "inf"), "reward.txt holds inf" + NOT),
        "minus": (txt.replace("{good}", "-0.5"), "reward.txt holds -0.5" + NOT),
        "true-txt": (txt.replace("{good}", "true"), "reward.txt holds 'true'" + NOT),
        "true-json": (js.replace("{good}", "true"), "reward.json's 'reward' holds True" + NOT),
        "json-five": (js.replace("{good}", "5"), "reward.json's 'reward' holds 5" + NOT),
        "json-text": (
            "#!/usr/bin/env bash\necho '[[[' > /logs/verifier/reward.json\n",
            "reward.json is not JSON",
        ),
    }
    for name, (script, _) in bad.items():
        harbor_task(suite, name, script)
    checks = {c.task_id: c for c in verify_suite(str(suite), runtime="local").checks}
    assert checks["ok"].status == "valid", checks["ok"]
    for name, (_, reason) in bad.items():
        check = checks[name]
        assert check.status == "error", (name, check)
        assert reason in check.detail, (name, check.detail)


@pytest.mark.slow
def test_an_episode_whose_tests_write_reward_5_scores_0_with_the_reason_in_its_record(tmp_path: Path) -> None:
    from harness.evaluate import EvalConfig, run_eval
    from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
    from harness.results.store import RunStore

    suite = tmp_path / "suite"
    harbor_task(suite, "five", "#!/usr/bin/env bash\necho 5.0 > /logs/verifier/reward.txt\n")
    finish = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="scripted", responses=[finish])) as server:
        run_eval(EvalConfig(runtime="local", models=("scripted",), tasks=str(suite), base_url=server.base_url,
                            run_dir=run))  # fmt: skip
    (rec,) = RunStore(run).records().values()
    assert rec.reward == 0.0 and rec.status != "resolved", rec
    assert rec.error is not None and "reward.txt holds 5.0, not a reward" in rec.error.message, rec.error


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ("[environment]\nmemory_mb = 0.5\n", "memory_mb = 0.5"),  # was "0m": no limit at all
        ("[environment]\nmemory_mb = inf\n", "memory_mb = inf"),  # was an OverflowError
        ("[environment]\nmemory_mb = nan\n", "memory_mb = nan"),
        ('[environment]\nmemory = "0.001G"\n', "memory = '0.001G'"),
        ("[environment]\ncpus = inf\n", "cpus = inf"),
        ("[environment]\ncpus = nan\n", "cpus = nan"),
        ("[environment]\ncpus = 1e-12\n", "cpus = 1e-12"),  # was nano_cpus 0: no limit
        ("[environment]\nstorage_mb = -1\n", "storage_mb = -1"),
        ("[environment]\nstorage_mb = inf\n", "storage_mb = inf"),
        ("[environment]\nbuild_timeout_sec = inf\n", "build_timeout_sec = inf"),
        ("[agent]\ntimeout_sec = true\n", "agent_timeout_s"),  # was 1 s
        ('[verifier]\ntimeout_sec = "600"\n', "verify_timeout_s"),
    ],
)
def test_impossible_limits_are_an_error_in_that_task_s_row(tmp_path: Path, table: str, needle: str) -> None:
    from harness.tasks.loader import load_suite

    suite = tmp_path / "suite"
    harbor_task(suite, "ok", "exit 0\n", 'version = "1.0"\n[environment]\ncpus = 1\nmemory_mb = 1536\n')
    harbor_task(suite, "odd", "exit 0\n", table)
    loaded = load_suite(str(suite))
    assert [t.id for t in loaded.tasks] == ["ok"]
    assert loaded.tasks[0].limits.memory_gib == 1.5 and loaded.tasks[0].limits.cpus == 1.0
    (skipped,) = loaded.skipped
    assert skipped.id == "odd" and needle in skipped.reason, skipped.reason


def test_one_hostile_task_directory_is_listed_with_its_reason_and_the_others_are_verified(
    tmp_path: Path,
) -> None:
    """A 5,000-deep task.toml (RecursionError), `limits = 5` (TypeError), `metadata = 5` (a
    ValidationError), an instruction that is no text: each was a traceback that ended the whole
    `tasks verify` (and eval's load); now each is its own row, and the good task is verified."""
    from harness.tasks import load_tasks
    from tests.conftest import run_harness

    suite = tmp_path / "suite"
    harbor_task(suite, "good", GRADED.replace("{good}", "1") + "echo $r > /logs/verifier/reward.txt\n")
    odd = {
        "deep": "x = " + "[" * 5000 + "]" * 5000 + "\n",
        "limits-int": "limits = 5\n",
        "metadata-int": "metadata = 5\n",
        "binary": 'version = "1.0"\n',
    }
    for name, toml in odd.items():
        harbor_task(suite, name, "exit 0\n", toml)
    (suite / "binary" / "instruction.md").write_bytes(b"\xff\xfe\x00bad")
    done = run_harness("tasks", "verify", str(suite), "--runtime", "local", env=WIDE)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr  # the good task is valid
    rows = {ln.split("│")[1].strip(): ln for ln in done.stdout.splitlines() if ln.count("│") >= 4}
    assert "pass" in rows["good"] and "fails" in rows["good"]
    for name, reason in [
        ("deep", "RecursionError"),
        ("limits-int", "TypeError"),
        ("metadata-int", "metadata: Input should be a valid dictionary"),  # as Harbor's model says
        ("binary", "UnicodeDecodeError"),
    ]:
        assert "skipped" in rows[name] and reason in rows[name], rows.get(name)
    # eval's load: the same four listed, the good task runs
    assert [t.id for t in load_tasks(str(suite))] == ["good"]


@pytest.mark.slow
def test_a_task_whose_image_name_breaks_the_engine_call_is_its_own_row_in_containers(tmp_path: Path) -> None:
    """`docker_image = "../../../etc/passwd"`: the engine's client raised NotFound for the API
    path /etc/passwd/json through `tasks verify`, a traceback for the whole suite; now that task's
    row says so and the other task is verified."""
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image
    from harness.tasks.oracle import verify_suite

    ensure_sandbox_image(docker_client())
    suite = tmp_path / "suite"
    native_task(suite, "good", "#!/usr/bin/env bash\n[ -f done ]\n", "[limits]\nverify_timeout_s = 60\n")
    (suite / "good" / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\ntouch done\n")
    evil = native_task(suite, "evil", "exit 0\n", '[environment]\ndocker_image = "../../../etc/passwd"\n')
    for sub in ("tests", "solution"):
        assert (evil / sub).is_dir()
    result = verify_suite(str(suite), runtime="docker")
    checks = {c.task_id: c for c in result.checks}
    assert checks["good"].status == "valid", checks["good"]
    # Refused when the task loads (the image name is not a reference), or at the engine call: its own row.
    rows = {
        **{s.id: s.reason for s in result.skipped},
        **{c.task_id: c.detail for c in result.checks if c.task_id == "evil"},
    }
    assert "../../../etc/passwd" in rows["evil"], rows
    assert "evil" not in checks or checks["evil"].status == "error", checks["evil"]
