"""Issue 20, item 5: `harness tasks verify` (and task loading) against hostile or odd task
directories and a stop signal. One bad task is that task's row, never the end of the command;
a stop ends the command within seconds with its sandboxes gone.
"""

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from tests.conftest import REPO

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


def test_sigterm_to_tasks_verify_in_containers_stops_within_seconds_and_removes_them(tmp_path: Path) -> None:
    """Two tasks whose tests sleep 120 s, checked two at a time in containers: SIGTERM ends the
    command within seconds (before: it waited for the tests, ~120 s), exit 143, one line, and the
    containers and their tests are gone."""
    from harness.runtime.container import LABEL
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    client = docker_client()
    ensure_sandbox_image(client)
    mark = f"harness-slow-{uuid.uuid4().hex[:8]}"
    suite = tmp_path / "suite"
    names = [f"{mark}-{i}" for i in range(2)]
    for name in names:
        native_task(suite, name, f"#!/usr/bin/env bash\nexec -a {mark} sleep 120\n")

    def ours() -> list[object]:
        return [
            c
            for name in names
            for role in ("reference", "untouched")
            for c in client.containers.list(all=True, filters={"label": f"{LABEL}=verify/{name}/{role}"})
        ]

    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "tasks", "verify", str(suite), "--runtime", "docker",
         "--concurrency", "2"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: len(_marked(mark)) >= 2, 180, "both tasks' tests running in their containers")
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
    assert ours() == [], "a container outlived the stop"
    _wait_for(lambda: not _marked(mark), 10, "the tests' processes to end with their containers")
