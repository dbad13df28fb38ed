"""The GPU host's keeper (harness/server/remote/hostside.py) on this machine, without SSH or vLLM:
a stand-in server with a child in its process group, the lease renewed or not, stopped or not.
The real server over a real SSH connection: tests/test_gpu_host.py."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.server.remote import hostside
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.slow  # real processes and a lease that must go stale: ~12 s

HOSTSIDE = Path(hostside.__file__)
# A server that starts an "engine" child (titled like vLLM's) in its group and runs until ended.
STAND_IN = """
import os, subprocess, sys, time
print("key given:", bool(os.environ.get("VLLM_API_KEY")), flush=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "EngineCore"])
time.sleep(600)
"""


def call(*args: str, stdin: dict[str, object] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(HOSTSIDE), *args],
        input=json.dumps(stdin) + "\n" if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return dict(json.loads(done.stdout))


def launch(run: Path, grace: float) -> tuple[int, str]:
    key = os.urandom(12).hex()
    spec = {
        "argv": [sys.executable, "-c", STAND_IN],
        "env": {},
        "api_key": key,
        "dir": str(run),
        "grace": grace,
    }
    out = call("launch", stdin=spec)
    return int(str(out["pid"])), key


def group_alive(pgid: int) -> bool:
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, OSError):
            continue
    return False


def ended(run: Path) -> dict[str, object] | None:
    path = run / "ended"
    return json.loads(path.read_text()) if path.is_file() else None


def test_a_lease_left_stale_ends_the_server_and_its_engine_renewals_keep_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    pid, key = launch(run, grace=3)
    try:
        wait_for(
            lambda: "key given: True" in (run / "server.log").read_text(),
            timeout=30,
            what="the stand-in's start",
        )
        wait_for(lambda: call("renew", str(run)).get("engines"), timeout=30, what="the engine seen by renew")
        renewed_until = time.monotonic() + 2 * 3  # renewed as the harness does, for twice the grace
        while time.monotonic() < renewed_until:
            state = call("renew", str(run))
            assert state["running"] and not state["ended"], state
            time.sleep(0.5)  # the renewal interval, not a wait for a condition
        assert group_alive(pid)
        wait_for(lambda: ended(run) is not None, timeout=30, what="the keeper ending a stale lease")
        assert "lease not renewed" in str((ended(run) or {})["reason"])
        assert not group_alive(pid), "the engine outlived its server"
        held = [p for p in run.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
        assert held == []
    finally:
        if group_alive(pid):
            os.killpg(pid, 9)


def test_stop_ends_the_whole_group_and_answers_when_it_is_gone(tmp_path: Path) -> None:
    run = tmp_path / "run"
    pid, _ = launch(run, grace=300)
    try:
        wait_for(lambda: call("renew", str(run)).get("engines"), timeout=30, what="the engine seen by renew")
        out = call("stop", str(run), "30")
        assert out["ended"] and "stopped by the harness" in str(dict(out["ended"])["reason"])  # type: ignore[call-overload]
        assert not group_alive(pid)
        assert call("renew", str(run))["running"] is False
    finally:
        if group_alive(pid):
            os.killpg(pid, 9)
