"""--gpu-host: vLLM on another host over a real SSH connection (Debian's sshd on 127.0.0.1, a
host key and a user key made here, an ssh config alias), started, watched and stopped there,
and never left running: the harness killed, the connection lost, the host unreachable.

The "host" is this machine reached through sshd: its vLLM environment and bundled model are the
host's. Its processes carry this test session's mark (SetEnv/AcceptEnv), so the session's
vLLM checks see them.
"""

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from harness.paths import cache_dir
from harness.results.store import RunStore
from tests.conftest import HARNESS, REPO, SESSION, vllm_processes
from tests.helpers.sshd import TestSSHD
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]
# --lease-grace: the host ends vLLM this many seconds after the last renewal. 8 s went stale under
# CI load (a renewal is an ssh round trip and a python3 start on the host): not what is tested here
GRACE = "20"
SHORT = ["--max-iterations", "2", "--max-output-tokens", "32"]


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestSSHD]:
    with TestSSHD(tmp_path_factory.mktemp("sshd"), host_env={"HARNESS_TEST_SESSION": SESSION}) as sshd:
        yield sshd


def host_flags(sshd: TestSSHD) -> list[str]:
    return ["--gpu-host", sshd.alias, "--ssh-config", str(sshd.config), "--lease-grace", GRACE]


def start(args: list[str], log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*HARNESS, *args],
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "250"},
    )


def wait_ready(proc: subprocess.Popen[str], log: Path) -> dict[str, str]:
    """serve's URL and key, once it prints them (the server is ready then)."""
    found: dict[str, str] = {}

    def printed() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        text = log.read_text()
        url, key = re.search(r"base URL : (\S+)", text), re.search(r"API key  : (\S+)", text)
        if url and key:
            found.update(url=url.group(1), key=key.group(1))
        return bool(found)

    wait_for(printed, timeout=300, what="serve --gpu-host ready", interval=0.5)
    return found


def host_runs() -> list[Path]:
    root = cache_dir() / "remote" / "runs"
    return sorted(root.iterdir(), key=lambda p: p.stat().st_mtime) if root.is_dir() else []


def ended(run: Path) -> dict[str, object] | None:
    path = run / "ended"
    return json.loads(path.read_text()) if path.is_file() else None


def files_holding(secret: str, *roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def chat(url: str, key: str, model: str) -> str:
    client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hi"}], max_tokens=4, temperature=0
    )
    return reply.choices[0].message.content or ""


def test_serve_on_the_host_answers_through_the_tunnel_refuses_a_second_survives_a_dropped_connection_and_ends_when_the_host_is_lost(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """A chat through the tunnel (the key in no file of either side); a second serve refused
    naming the first; the SSH connection cut -> reconnected, the same vLLM and URL serving; then
    the host unreachable (the listener gone, the connection cut): nobody renews the lease, the
    host ends vLLM and its engine within 60 s, and serve says it lost the server."""
    log = tmp_path / "serve.log"
    with TestSSHD(tmp_path / "sshd", host_env={"HARNESS_TEST_SESSION": SESSION}) as sshd:
        args = ["serve", *host_flags(sshd), "--model", "smollm2-135m", "--idle-timeout", "300"]
        proc = start([*args, "--run-dir", str(tmp_path / "serve")], log)
        try:
            served = wait_ready(proc, log)
            assert served["url"].startswith("http://127.0.0.1:")  # the tunnel's end on this machine
            assert chat(served["url"], served["key"], "smollm2-135m") is not None
            host_run = host_runs()[-1]
            vllm_pid = int((host_run / "pid").read_text())
            assert files_holding(served["key"], tmp_path / "serve", host_run) == []  # on pipes only

            second = subprocess.run(
                [*HARNESS, *args, "--run-dir", str(tmp_path / "second")],
                cwd=REPO, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert second.returncode == 2  # a user-side refusal
            assert "vLLM already runs on" in second.stderr and str(vllm_pid) in second.stderr, second.stderr

            for pid in sshd.session_pids():  # the connection drops as a network failure would
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: "reconnected to gpubox" in log.read_text(), timeout=60, what="the reconnection")
            assert "vLLM kept running there" in log.read_text()
            assert int((host_run / "pid").read_text()) == vllm_pid and ended(host_run) is None
            assert chat(served["url"], served["key"], "smollm2-135m") is not None  # the same URL serves

            sshd.stop_listening()
            for pid in sshd.session_pids():
                os.kill(pid, signal.SIGKILL)
            lost_at = time.monotonic()
            wait_for(lambda: not vllm_processes(), timeout=60, what="no vLLM on the lost host", interval=0.5)
            assert time.monotonic() - lost_at < 60
            wait_for(lambda: ended(host_run) is not None, timeout=30, what="the keeper's record of why")
            assert "lease not renewed" in str((ended(host_run) or {}).get("reason")), ended(host_run)
            assert proc.wait(timeout=60) == 1  # serve says the server is lost and exits
            assert "lost the connection to gpubox" in log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()


def test_serve_on_the_host_idle_stops_vllm_there_and_leaves_nothing(
    gpu_host: TestSSHD, bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """--idle-timeout over SSH: the watchdog reads /metrics and /load through the tunnel, stops the
    server, the host's keeper ends its whole group, serve exits 0 saying why (the idle shutdown of
    `harness serve`, whichever host its server is on)."""
    log = tmp_path / "serve.log"
    args = ["serve", *host_flags(gpu_host), "--model", "smollm2-135m", "--idle-timeout", "3"]
    proc = start([*args, "--run-dir", str(tmp_path / "serve")], log)
    try:
        assert proc.wait(timeout=300) == 0, log.read_text()[-2000:]
        said = log.read_text()
        assert "vLLM ready" in said and "vLLM idle for 3 s: stopping it" in said, said[-2000:]
        assert "vLLM server stopped: idle for 3 s" in " ".join(said.split())
        host_run = host_runs()[-1]
        assert (ended(host_run) or {}).get("reason") == "stopped by the harness"  # stop waits for it
        assert not vllm_processes()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_eval_on_the_host_killed_leaves_no_vllm_and_resumes_base_and_pushed_adapter_with_the_timeline_and_host_facts(
    gpu_host: TestSSHD, bundled_model: Path, toolcall_lora: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """The bundled model and its LoRA (--push'ed to the host) evaluated there: kill -9 of the eval
    after its first episode -> its SSH master dies with it, the lease goes stale, no vLLM on the
    host within 60 s; the same command again resumes and ends the run: both models recorded,
    run.json's host facts and server versions from the host, the /metrics timeline through the
    tunnel, the pushed bytes as sent, and the last server stopped by the harness."""
    run = tmp_path / "run"
    log = tmp_path / "eval.log"
    args = [
        "eval", *host_flags(gpu_host), "--model", "smollm2-135m", "--model", str(toolcall_lora),
        "--seeds", "1", "--tasks", str(REPO / "tasks" / "smoke" / "fix-add"), "--scaffold", "mini-swe-agent",
        *SHORT, "--concurrency", "1", "--metrics-interval", "1", "--push", "--run-dir", str(run),
    ]  # fmt: skip
    proc = start(args, log)
    try:
        wait_for(
            lambda: proc.poll() is not None or len(RunStore(run).records()) >= 1,
            timeout=600,
            what="the first recorded episode",
            interval=0.2,
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        host_run = host_runs()[-1]
        proc.kill()
        killed_at = time.monotonic()
        wait_for(
            lambda: not vllm_processes(), timeout=60, what="no vLLM on the host after kill -9", interval=0.5
        )
        assert time.monotonic() - killed_at < 60
        wait_for(lambda: ended(host_run) is not None, timeout=30, what="the keeper's record of why")
        assert "lease not renewed" in str((ended(host_run) or {}).get("reason")), ended(host_run)
    finally:
        if proc.poll() is None:
            proc.kill()

    done = subprocess.run(
        [*HARNESS, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = RunStore(run).records()
    assert {model for model, _, _ in records} == {"smollm2-135m", toolcall_lora.name}, sorted(records)
    assert (ended(host_runs()[-1]) or {}).get("reason") == "stopped by the harness"
    manifest = json.loads((run / "run.json").read_text())
    models = list(manifest["model_info"].values())
    hosts = [m.get("host") for m in models]
    assert all(h and h["gpu_host"] == "gpubox" and h["hostname"] for h in hosts), models
    assert all(m["server_env"]["vllm"] for m in models)
    pushed = [m["path"] for m in models if "/pushed/" in m["path"]]
    assert len(pushed) == 1 and pushed[0].endswith("/smollm2-135m-toolcall-lora"), models
    copied = Path(pushed[0]) / "adapter_model.safetensors"  # the host is this machine
    assert copied.read_bytes() == (toolcall_lora / "adapter_model.safetensors").read_bytes()
    samples = [
        json.loads(line) for line in (run / "server_metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    assert samples, "no /metrics timeline through the tunnel"
    assert not vllm_processes()


def test_a_host_without_the_vllm_environment_gets_one_line_naming_server_setup(tmp_path: Path) -> None:
    bare = tmp_path / "bare-cache"
    with TestSSHD(tmp_path / "sshd", host_env={"HARNESS_CACHE": str(bare)}) as sshd:
        done = subprocess.run(
            [*HARNESS, "serve", *host_flags(sshd), "--model", "smollm2-135m", "--run-dir", str(tmp_path / "r")],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "harness server setup --gpu-host gpubox" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_server_setup_on_a_prepared_host_says_it_installed_nothing(gpu_host: TestSSHD) -> None:
    done = subprocess.run(
        [*HARNESS, "server", "setup", "--gpu-host", gpu_host.alias, "--ssh-config", str(gpu_host.config)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "vLLM server environment ready on gpubox" in said and "nothing to install" in said, said


def test_push_resumes_an_interrupted_copy_checks_it_and_copies_nothing_the_second_time(
    gpu_host: TestSSHD, toolcall_lora: Path, tmp_path: Path
) -> None:
    from harness.errors import HarnessError
    from harness.server.remote.push import push_checkpoint
    from harness.server.remote.ssh import SSHHost

    local = tmp_path / "my-adapter"
    local.mkdir()
    for f in toolcall_lora.iterdir():
        if f.is_file():
            (local / f.name).write_bytes(f.read_bytes())
    (local / "salt.txt").write_text(os.urandom(8).hex())  # a digest of its own: a fresh target
    weights = local / "adapter_model.safetensors"
    with SSHHost(gpu_host.alias, config_file=gpu_host.config) as ssh:
        cache = str(cache_dir())
        # an interrupted push left half the weights, and they are wrong: the resume appends the rest,
        # the digest refuses the file, and the next push starts that file over
        target = push_target(local, cache)
        part = Path(target) / f"{weights.name}.part"
        part.parent.mkdir(parents=True)
        part.write_bytes(b"\0" * (weights.stat().st_size // 2))
        with pytest.raises(HarnessError, match="another SHA-256; run again"):
            push_checkpoint(ssh, local, cache=cache)
        assert not part.exists()
        assert push_checkpoint(ssh, local, cache=cache) == target
        assert (Path(target) / weights.name).read_bytes() == weights.read_bytes()
        before = {p.name: p.stat().st_mtime_ns for p in Path(target).iterdir()}
        assert push_checkpoint(ssh, local, cache=cache) == target
        assert {p.name: p.stat().st_mtime_ns for p in Path(target).iterdir()} == before  # nothing copied


def push_target(local: Path, cache: str) -> str:
    import hashlib

    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(local.iterdir())}
    tree = hashlib.sha256("".join(f"{n}\0{d}\n" for n, d in digests.items()).encode()).hexdigest()[:16]
    return f"{cache}/pushed/{tree}/{local.name}"
