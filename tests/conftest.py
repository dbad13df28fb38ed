"""Shared fixtures. Real components only: the real vLLM environment and the bundled model.

The vLLM environment and the bundled model live in the harness cache (set up by the README's
test command through scripts/bootstrap); a missing one fails the tests loudly instead of skipping.
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
HARNESS = [sys.executable, "-m", "harness.cli"]
# Tests that do not name a runtime run episodes locally; the container tests pass runtime="docker".
os.environ.setdefault("HARNESS_CONFIG", str(DATA / "config" / "local-runtime.toml"))
# Task fixtures carry their own hidden tests (test_*.py that read /app): data, not this suite.
collect_ignore = ["data"]


# Every process this test session starts inherits this mark (vLLM's servers through the harness's
# launch environment): the vLLM checks below see this session's processes only, never another
# run's on the same machine (a second checkout's tests, a user's own server).
SESSION = f"{os.getpid()}-{os.urandom(4).hex()}"
os.environ["HARNESS_TEST_SESSION"] = SESSION


def _ours(proc: psutil.Process) -> bool:
    try:
        return proc.environ().get("HARNESS_TEST_SESSION") == SESSION
    except (psutil.Error, OSError):  # gone, or another user's: not ours
        return False


def vllm_processes() -> list[psutil.Process]:
    """Every vLLM server, engine or worker process this test session started."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        if proc.info.get("status") == psutil.STATUS_ZOMBIE:  # dead; only its exit code is left
            continue
        if not _ours(proc):
            continue
        cmd = " ".join(proc.info.get("cmdline") or [])
        if (
            "vllm.entrypoints" in cmd
            or (proc.info.get("name") or "").startswith("VLLM::")
            or cmd.startswith("VLLM::")
        ):
            found.append(proc)
    return found


@pytest.fixture(scope="session")
def server_python() -> Path:
    from harness.errors import HarnessError
    from harness.server.environment import server_python as find

    try:
        return find()
    except HarnessError as exc:
        pytest.fail(f"{exc} (the README's test command runs scripts/bootstrap, which does it)")


@pytest.fixture(scope="session")
def bundled_model(server_python: Path) -> Path:
    from harness.server.bundled import ensure_bundled_model

    return ensure_bundled_model("smollm2-135m")


@pytest.fixture(scope="session")
def lora_adapter(server_python: Path, bundled_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lora") / "smol-lora-r8"
    subprocess.run(
        [
            str(server_python),
            str(REPO / "tests" / "helpers" / "make_lora.py"),
            str(bundled_model),
            str(out),
            "8",
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture
def no_vllm_left() -> Iterator[None]:
    """Fails a test that leaves any vLLM process behind (after a short grace for exits)."""
    yield
    deadline = psutil.time.time() + 20
    while vllm_processes() and psutil.time.time() < deadline:
        psutil.time.sleep(0.5)
    left = vllm_processes()
    for p in left:
        p.kill()
    assert not left, f"vLLM processes left behind: {[p.pid for p in left]}"


def run_harness(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HARNESS, *args], capture_output=True, text=True, timeout=timeout, cwd=kw.pop("cwd", REPO), **kw
    )  # type: ignore[call-overload]
