"""GPU preflight (issue 13, item 4): free memory against what vLLM will ask for, who holds it,
orphaned vLLM engines, and CUDA_VISIBLE_DEVICES as indices, UUIDs, MIG ids, empty or out of range.

The unit tests run everywhere on a fake NVML (the module's ``_nvml`` swapped), with real
processes standing in for the ones that hold memory. ``test_preflight_on_this_gpu`` runs the same
checks against the real NVML and a real allocation; it is marked ``gpu`` and skipped where no GPU
is visible.
"""

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.server.gpu as gpu
from harness.cli import main
from harness.errors import HarnessError
from harness.server.gpu import CUDA_RESERVED_BYTES, GiB, parse_visible_devices, selected_gpu_indices
from harness.server.preflight import check_free_memory, tensor_parallel_size
from harness.server.registry import DeviceLock, device_key
from tests.conftest import DATA, REPO
from tests.helpers.waiting import wait_for

H100_NVML_TOTAL = 85_520_809_984  # measured on a lent H100 (DESIGN.md, GPU facts)
UUIDS = ("GPU-8f3a0c1e-1111-2222-3333-444455556666", "GPU-8f3b9d2a-aaaa-bbbb-cccc-ddddeeeeffff")
QWEN = DATA / "configs" / "qwen2.5-7b-instruct"
TEMPLATE = REPO / "scaffolds" / "chat-templates" / "chatml-hermes.jinja"


class FakeNvml:
    """The pynvml calls gpu.py makes, over a list of GPUs: (name, total, free, uuid, [(pid, used)])."""

    def __init__(self, gpus: list[dict]) -> None:
        self.gpus = gpus

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise ValueError("NVML_ERROR_INVALID_ARGUMENT")
        return index

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        g = self.gpus[h]
        return SimpleNamespace(total=g["total"], free=g["free"], used=g["total"] - g["free"])

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.gpus[h]["name"]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h]["uuid"]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[h].get("procs", [])]


def h100(index: int, free: int | None = None, procs: list[tuple[int, int]] | None = None) -> dict:
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "total": H100_NVML_TOTAL,
        "free": H100_NVML_TOTAL - int(0.5 * GiB) if free is None else free,
        "uuid": UUIDS[index],
        "procs": procs or [],
    }


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeNvml:
    fake = FakeNvml([h100(0), h100(1)])
    monkeypatch.setattr(gpu, "_nvml", lambda: fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))  # DeviceLock files
    return fake


def _spawn(argv0: str, *args: str) -> subprocess.Popen[str]:
    """A sleeping process whose argv[0] (what ps and psutil show first) is ``argv0``, as vLLM's
    setproctitle leaves it (its command line reads ``argv0 120``); it prints 'up' once running."""
    script = 'echo up; exec -a "$0" sleep 120'
    proc = subprocess.Popen(["bash", "-c", script, argv0, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    _wait_exec(proc.pid, argv0)
    return proc


def _wait_exec(pid: int, argv0: str) -> None:
    """Until bash's ``exec -a`` has happened: process ``pid`` shows ``argv0`` first."""
    import psutil

    def done() -> bool:
        try:
            return psutil.Process(pid).cmdline()[:1] == [argv0]
        except psutil.Error:
            return False

    wait_for(done, timeout=10, what=f"the stand-in {argv0}'s exec", interval=0.02)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


# ---- CUDA_VISIBLE_DEVICES ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("visible", "indices"),
    [("0", [0]), ("1,0", [1, 0]), (UUIDS[1], [1]), ("GPU-8f3a0c1e", [0]), (f"{UUIDS[0]},1", [0, 1])],
)
def test_visible_devices_by_index_or_uuid_are_understood(
    nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, visible: str, indices: list[int]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert selected_gpu_indices() == indices
    assert device_key() == "cuda:" + ",".join(map(str, indices))


@pytest.mark.parametrize(
    ("visible", "message"),
    [
        ("", "hides all 2 GPUs of this machine"),
        (" ", "hides all 2 GPUs of this machine"),
        ("2", "GPU 2 does not exist; this machine has 2"),
        ("0,7", "GPU 7 does not exist"),
        ("-1", "GPU -1 does not exist"),
        ("GPU-8f3", "matches several GPUs"),
        ("GPU-deadbeef", "matches no GPU of this machine"),
        ("MIG-GPU-8f3a0c1e-1111-2222-3333-444455556666/1/0", "is a MIG instance"),
        ("MIG-4f1d2e3c-0000-1111-2222-333344445555", "is a MIG instance"),
        ("0,0", "GPU 0 is named twice"),
        ("cuda:0", "neither a GPU index nor a GPU UUID"),
    ],
)
def test_visible_devices_that_cuda_would_read_as_fewer_gpus_are_refused_clearly(
    nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, visible: str, message: str
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(HarnessError, match="CUDA_VISIBLE_DEVICES=") as err:
        selected_gpu_indices()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_empty_visible_devices_is_never_a_cpu_plan_on_a_gpu_machine(
    nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.server.memory import plan_memory

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(HarnessError, match="hides all 2 GPUs"):
        plan_memory({**__import__("json").loads((QWEN / "config.json").read_text())})
    assert main(["plan", "--model", str(QWEN / "config.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: CUDA_VISIBLE_DEVICES=''") and "Traceback" not in err


def test_without_nvml_there_are_no_gpus_and_no_complaint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_nvml", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert selected_gpu_indices() == [] and device_key() == "cpu"
    assert parse_visible_devices("1", 2) == [1]


# ---- free memory ---------------------------------------------------------------------------------
def test_a_foreign_process_holding_memory_is_refused_before_launch_with_pid_command_and_gib(
    nvml: FakeNvml, processes: list[subprocess.Popen[str]]
) -> None:
    trainer = _spawn("python", "train.py", "--lr", "3e-4")
    processes.append(trainer)
    nvml.gpus[0] = h100(0, free=H100_NVML_TOTAL - 40 * GiB, procs=[(trainer.pid, 40 * GiB)])
    with pytest.raises(HarnessError) as err:
        check_free_memory(0.90)
    msg = str(err.value)
    cuda_total = (H100_NVML_TOTAL - CUDA_RESERVED_BYTES) / GiB
    assert (
        f"GPU 0 (NVIDIA H100 80GB HBM3) has {(H100_NVML_TOTAL - 40 * GiB) / GiB:.1f} GiB free of {cuda_total:.1f}"
        in msg
    )
    assert f"needs {0.9 * cuda_total:.1f} GiB free" in msg
    assert f"PID {trainer.pid} ({gpu.process_command(trainer.pid)}, 40.0 GiB)" in msg
    assert f"kill {trainer.pid}" in msg and "--gpu-memory-utilization 0.4" in msg
    check_free_memory(0.40)  # what it suggests does start
    nvml.gpus[1] = h100(1, free=10 * GiB)  # the second GPU is used only with tensor parallelism
    check_free_memory(0.40, devices=1)
    with pytest.raises(HarnessError, match="GPU 1 "):
        check_free_memory(0.40, devices=2)


def test_the_check_is_vllms_own_on_cudas_total_not_nvmls(nvml: FakeNvml) -> None:
    cuda_total = H100_NVML_TOTAL - CUDA_RESERVED_BYTES
    # free memory between 0.9 x CUDA's total and 0.9 x NVML's: vLLM starts, so must the preflight
    nvml.gpus[0] = h100(0, free=int(0.9 * cuda_total) + 1)
    check_free_memory(0.90)
    nvml.gpus[0] = h100(0, free=int(0.9 * cuda_total) - 2**20)
    with pytest.raises(HarnessError, match="no process NVML can list"):
        check_free_memory(0.90)


def test_tensor_parallel_size_from_extra_args() -> None:
    assert tensor_parallel_size(()) == 1
    assert tensor_parallel_size(("--tensor-parallel-size", "4")) == 4
    assert tensor_parallel_size(("--seed", "1", "-tp=2")) == 2


def test_the_server_refuses_in_prepare_before_any_process_starts(
    nvml: FakeNvml, processes: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harness.server.config import ServerConfig
    from harness.server.process import VLLMServer

    trainer = _spawn("python", "finetune.py")
    processes.append(trainer)
    nvml.gpus[0] = h100(0, free=20 * GiB, procs=[(trainer.pid, 60 * GiB)])
    server = VLLMServer(ServerConfig(model=str(QWEN), chat_template=TEMPLATE), run_dir=tmp_path / "run")
    assert not server.on_cpu
    popen = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: popen.append(a))
    with pytest.raises(HarnessError, match=f"PID {trainer.pid} \\(python[^,]*, 60.0 GiB\\)"):
        server.start()
    assert popen == [] and not (tmp_path / "run" / "server.log").exists()


def test_plan_shows_free_and_held_memory_when_the_gpu_is_in_use(
    nvml: FakeNvml, processes: list[subprocess.Popen[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = _spawn("python", "train.py")
    processes.append(trainer)
    nvml.gpus[0] = h100(0, free=H100_NVML_TOTAL - 30 * GiB, procs=[(trainer.pid, 30 * GiB)])
    assert main(["plan", "--model", str(QWEN / "config.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "free on the GPU now" in out
        and f"PID {trainer.pid} ({gpu.process_command(trainer.pid)}, 30.0 GiB)" in out
    )
    assert "the GPU is in use: vLLM would refuse to start now" in out
    # the device total is CUDA's, as vLLM plans
    assert f"{(H100_NVML_TOTAL - CUDA_RESERVED_BYTES) / GiB:.1f} GiB x 0.90" in out
    nvml.gpus[0] = h100(0)
    assert main(["plan", "--model", str(QWEN / "config.json")]) == 0
    assert "in use" not in capsys.readouterr().out


# ---- orphaned vLLM engines -----------------------------------------------------------------------
@pytest.mark.parametrize("title", ["VLLM::EngineCore", "VLLM::Worker_TP0"])
def test_the_one_server_guard_finds_an_orphaned_engine_and_gives_the_kill(
    nvml: FakeNvml, processes: list[subprocess.Popen[str]], title: str
) -> None:
    engine = _spawn(title)  # its parent (this test) is no vLLM API server: an orphan
    processes.append(engine)
    lock = DeviceLock("cuda:0")
    with pytest.raises(HarnessError) as err:
        lock.acquire(port=None)
    msg = str(err.value)
    assert f"an orphaned vLLM engine, PID {engine.pid} ({title}" in msg
    # the command line to run (other vLLMs on this machine, if any, are listed with it)
    assert re.search(rf"Stop it first: kill [\d ]*\b{engine.pid}\b", msg), msg
    assert not lock.held
    # and the memory preflight names it as what holds the GPU
    nvml.gpus[0] = h100(0, free=5 * GiB, procs=[(engine.pid, 70 * GiB)])
    with pytest.raises(HarnessError, match="an orphaned vLLM engine whose server is gone"):
        check_free_memory(0.9)


def test_an_engine_under_a_live_api_server_is_that_servers_not_an_orphan(
    nvml: FakeNvml, processes: list[subprocess.Popen[str]]
) -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; p = subprocess.Popen(['bash', '-c', 'exec -a VLLM::EngineCore sleep 120']);"
            " print(p.pid, flush=True); p.wait()",
            "-m",
            "vllm.entrypoints.openai.api_server",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    processes.append(server)
    assert server.stdout is not None
    engine_pid = int(server.stdout.readline())
    _wait_exec(engine_pid, "VLLM::EngineCore")  # its pid is printed before bash's exec
    with pytest.raises(HarnessError) as err:
        DeviceLock("cuda:0").acquire(port=None)
    msg = str(err.value)
    assert f"a vLLM server not started by this harness, PID {server.pid}" in msg
    assert f"PID {engine_pid}" not in msg
    import psutil

    psutil.Process(engine_pid).kill()


# ---- the same checks on a real GPU ---------------------------------------------------------------
_ALLOCATE = """
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(sys.argv[1]))) == 0
print("up", flush=True)
time.sleep(300)
"""


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_preflight_on_this_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The unit tests' checks against the real NVML: UUID / empty / out-of-range / MIG values of
    CUDA_VISIBLE_DEVICES, a foreign process holding memory (a real CUDA allocation), an orphaned
    VLLM::EngineCore holding memory, and the plan's free / held rows."""
    if not gpu.has_cuda():
        pytest.skip("no GPU visible to NVML here")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    count = len(selected_gpu_indices())
    uuid = gpu._uuid(0)
    assert parse_visible_devices(uuid, count) == [0] and parse_visible_devices(uuid[:12], count) == [0]
    for bad in ("", str(count), "MIG-" + uuid.removeprefix("GPU-") + "/0/0"):
        with pytest.raises(HarnessError, match="CUDA_VISIBLE_DEVICES="):
            parse_visible_devices(bad, count)

    info = gpu.gpu_info(0)
    assert info is not None and info.total_bytes - info.cuda_total_bytes == CUDA_RESERVED_BYTES
    take = max(int(info.cuda_total_bytes * 0.15), 2 * GiB)
    holders = []
    try:
        for argv0 in ("python", "VLLM::EngineCore"):  # a foreign process, then an orphaned engine
            p = subprocess.Popen(
                ["bash", "-c", f'exec -a {argv0} {sys.executable} -c "$0" {take}', _ALLOCATE],
                stdout=subprocess.PIPE,
                text=True,
            )
            holders.append(p)
            assert p.stdout is not None and p.stdout.readline().strip() == "up"
            with pytest.raises(HarnessError) as err:
                check_free_memory(0.95)
            msg = str(err.value)
            # NVML lists processes by PID unless this runs in a container without the host's PIDs
            assert f"PID {p.pid}" in msg or "no process NVML can list" in msg, msg
            if f"PID {p.pid}" in msg and argv0.startswith("VLLM::"):
                assert "orphaned vLLM engine" in msg
            assert main(["plan", "--model", str(QWEN / "config.json")]) in (0, 2)
            out = " ".join(capsys.readouterr().out.split())
            assert "free on the GPU now" in out
        with pytest.raises(HarnessError, match=f"orphaned vLLM engine, PID {holders[1].pid}"):
            DeviceLock(device_key()).acquire(port=None)
    finally:
        for p in holders:
            p.kill()
            p.wait()
