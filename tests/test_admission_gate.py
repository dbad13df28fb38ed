"""The admission gate with the real thread executor and the real scraper: episodes start only while
the limit allows, a lowered limit stops none, every decision is on disk; a server without /metrics
(the replay server) keeps auto's start and says so once."""

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.admission.gate import ADMISSION_FILE, Admission, AdmissionRecord
from harness.admission.start import AutoStart
from harness.executor import ThreadExecutor
from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse
from harness.server.metrics_records import MetricsSample
from harness.server.scraper import MetricsScraper
from tests.conftest import run_harness
from tests.test_server_scraper import REAL, with_values

pytestmark = pytest.mark.timeout(300)


def scrape(kv: float, waiting: float = 0, preemptions: float = 0) -> MetricsSample:
    return MetricsSample(
        t=time.time(),
        server="m",
        running=1,
        waiting=waiting,
        kv_cache_usage=kv,
        generation_tokens=0,
        prompt_tokens=0,
        prefix_cache_queries=0,
        prefix_cache_hits=0,
        preemptions=preemptions,
    )


def until(check: object, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)
    assert check(), what  # type: ignore[operator]


def test_the_executor_starts_episodes_as_the_gate_allows_and_stops_none(tmp_path: Path) -> None:
    # the host pinned to one with room: what is tested is the server's side, not this machine's load
    gate = Admission(
        "m",
        auto=AutoStart(start=1, cap=4, why="test"),
        path=tmp_path / ADMISSION_FILE,
        probe=lambda t, _: None,
    )
    release = {i: threading.Event() for i in range(7)}
    started: list[int] = []
    running: set[int] = set()
    lock = threading.Lock()

    def episode(i: int) -> int:
        with lock:
            started.append(i)
            running.add(i)
        release[i].wait(30)
        with lock:
            running.discard(i)
        return i

    stop = threading.Event()
    results: list[int] = []
    driver = threading.Thread(
        target=lambda: results.extend(ThreadExecutor().run(episode, list(range(7)), gate, stop)), daemon=True
    )
    driver.start()
    until(lambda: len(started) == 1, "one episode at the start")
    time.sleep(0.3)
    assert len(started) == 1  # the limit holds the other six back
    for n in (2, 3, 4):  # room in the cache, nothing waits, every slot taken: one more each scrape
        gate.observe(scrape(0.1))
        until(lambda n=n: len(started) == n, f"{n} episodes after a grow")
    gate.observe(scrape(0.1))  # at the cap (4): no fifth
    time.sleep(0.3)
    assert len(started) == 4 and gate.limit == 4
    gate.observe(scrape(0.97, waiting=2, preemptions=3))  # preempted: shed below the 4 in flight
    assert gate.limit == 3
    assert running == {0, 1, 2, 3}  # none of the running episodes was stopped
    release[0].set()
    time.sleep(0.3)
    assert len(started) == 4  # 3 in flight at a limit of 3: nothing starts while it drains
    release[1].set()
    until(lambda: len(started) == 5, "a slot under the limit is taken")
    for i in release:
        release[i].set()
    driver.join(10)
    assert sorted(results) == list(range(7))
    lines = [
        AdmissionRecord.model_validate_json(x) for x in (tmp_path / ADMISSION_FILE).read_text().splitlines()
    ]
    assert [(r.action, r.limit) for r in lines] == [
        ("start", 1),
        ("grow", 2),
        ("grow", 3),
        ("grow", 4),
        ("hold", 4),
        ("shed", 3),
    ]
    assert lines[-1].preemptions == 3 and lines[-1].admitted == 4 and lines[-1].server == "m"
    assert "in flight (auto, limit 3: preemptions), KV 97%" in gate.line()  # what decided it, named


class _Pages(BaseHTTPRequestHandler):
    kv = 0.25

    def do_GET(self) -> None:
        body = with_values(REAL, kv_cache_usage_perc=self.kv, num_requests_running=2).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()


def test_the_gate_follows_the_scraper_and_a_failing_listener_stops_no_timeline(
    tmp_path: Path, metrics_url: str
) -> None:
    gate = Admission("m", auto=AutoStart(start=1, cap=2, why="test"), probe=lambda t, _: None)
    seen: list[float] = []

    def broken(_: MetricsSample) -> None:
        raise RuntimeError("a listener's bug")

    listeners = [broken, gate.observe, lambda s: seen.append(s.kv_cache_usage)]
    scraper = MetricsScraper(metrics_url, tmp_path, "m", interval=0.05, listeners=listeners)
    scraper.start(launched_s_ago=0)
    until(lambda: len(seen) >= 3, "samples reach the listeners after the broken one")
    scraper.stop("done")
    assert set(seen) == {0.25} and gate.kv == 0.25
    assert scraper.samples >= 3 and "scrape_stopped" not in (tmp_path / "server_metrics.jsonl").read_text()


def by_turn_script(path: Path) -> Path:
    call = ScriptedCall(name="terminal", arguments={"command": "echo 'Hello, world!' > hello.txt"})
    script = ReplayScript(
        model="scripted",
        pick="by_turn",
        when_exhausted="repeat_last",
        delay=0.3,
        responses=[
            ScriptedResponse(content="Writing.", tool_calls=[call]),
            ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
        ],
    )
    path.write_text(script.model_dump_json())
    return path


@pytest.mark.slow
def test_auto_without_metrics_keeps_the_sandboxes_capacity_and_says_so_once(tmp_path: Path) -> None:
    """The replay server has no /metrics: auto runs as many as the sandboxes allow (a quarter of the
    host's cores each: 4 on any host, capped by --max-concurrency 3), says so once, and the progress
    line counts the episodes in flight."""
    script = by_turn_script(tmp_path / "script.json")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["HARNESS_PROGRESS_INTERVAL"] = "0.2"
    run = tmp_path / "run"
    done = run_harness(
        "eval",
        "--model",
        f"replay:{script}",
        "--tasks",
        "smoke",
        "--seeds",
        "2",
        "--sandbox-cpus",
        str(len(os.sched_getaffinity(0)) / 4),
        "--sandbox-memory-gib",
        "0.5",
        "--max-concurrency",
        "3",
        "--run-dir",
        str(run),
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = [x for x in done.stderr.splitlines() if x.startswith("concurrency auto for scripted")]
    assert len(said) == 1, done.stderr
    assert "has no /metrics to follow" in said[0] and ": 3 episodes at a time" in said[0], said
    assert "--max-concurrency 3" in said[0] and "4 sandboxes fit the host" in said[0], said
    flying = [
        int(n)
        for n in re.findall(r"^rollouts scripted: \d/6 \([0-9:]+; (\d) in flight\)$", done.stderr, re.M)
    ]
    assert flying and max(flying) == 3 and max(flying) <= 3, done.stderr
    lines = [json.loads(x) for x in (run / ADMISSION_FILE).read_text().splitlines()]
    assert [(x["action"], x["limit"]) for x in lines] == [("start", 3)]


def test_plan_says_where_auto_starts_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.server import cpu_dtype

    # A CPU without bf16 instructions (this box's): the bundled bf16 model is served in float32.
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: frozenset({"avx2"}))
    done = run_harness("plan", "--model", "smollm2-135m", "--gpu", "cpu")
    assert done.returncode == 0, done.stderr
    served = next(x for x in done.stdout.splitlines() if "served dtype" in x)
    assert "float32 (this CPU has no" in served, served  # a narrow terminal wraps the rest of the cell
    said = [x for x in done.stdout.splitlines() if x.startswith("concurrency auto")]
    assert len(said) == 1, done.stdout
    # 2 GiB of float32 KV cache: 46,603 tokens (46,080 bytes each), 5 sequences of 8,192 tokens.
    assert "5 full-length sequences fit the KV cache; --max-num-seqs 5;" in said[0], said
    assert re.search(r"starts at \d+ episode\(s\) per server on this host, at most \d+", said[0]), said
    assert re.search(r"GiB free / 4 GiB per sandbox = \d+ at their memory limits", said[0]), said


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--concurrency", "many"], "--concurrency: 'many': give a number of episodes (1 to 64) or auto"),
        (["--concurrency", "3", "--max-concurrency", "2"], "--max-concurrency caps --concurrency auto"),
        (["--max-concurrency", "0"], "--max-concurrency: Input should be greater than or equal to 1"),
    ],
)
def test_concurrency_mistakes_are_one_line(args: list[str], said: str) -> None:
    done = run_harness("eval", "--model", "smollm2-135m", *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
