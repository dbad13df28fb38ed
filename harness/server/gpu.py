"""GPU facts from NVML (nvidia-ml-py): presence, memory, and which processes hold memory."""

import os
from functools import cache

import psutil
from pydantic import BaseModel, ConfigDict


class GpuProcess(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    name: str
    used_bytes: int | None


class GpuInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    processes: tuple[GpuProcess, ...]


@cache
def _nvml() -> object | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no library, no device: all mean "no CUDA here"
        return None


def has_cuda() -> bool:
    nvml = _nvml()
    if nvml is None:
        return False
    try:
        return bool(nvml.nvmlDeviceGetCount())  # type: ignore[attr-defined]
    except Exception:
        return False


def selected_gpu_indices() -> list[int]:
    """Physical indices visible to a child process (CUDA_VISIBLE_DEVICES, else all)."""
    nvml = _nvml()
    if nvml is None:
        return []
    count = int(nvml.nvmlDeviceGetCount())  # type: ignore[attr-defined]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    return [int(v) for v in visible.split(",") if v.strip().isdigit() and int(v) < count]


def _process_name(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        return " ".join(proc.cmdline()[:4]) or proc.name()
    except (psutil.Error, OSError):
        return "?"


def gpu_info(index: int) -> GpuInfo | None:
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)  # type: ignore[attr-defined]
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)  # type: ignore[attr-defined]
        name = nvml.nvmlDeviceGetName(handle)  # type: ignore[attr-defined]
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)  # type: ignore[attr-defined]
    except Exception:
        return None
    return GpuInfo(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        total_bytes=int(mem.total),
        free_bytes=int(mem.free),
        processes=tuple(
            GpuProcess(pid=p.pid, name=_process_name(p.pid), used_bytes=getattr(p, "usedGpuMemory", None))
            for p in procs
        ),
    )


def describe_holders(info: GpuInfo) -> str:
    """One line naming the processes that hold memory on a GPU."""
    if not info.processes:
        return f"GPU {info.index} ({info.name}) has {info.free_bytes / 2**30:.1f} GiB free of {info.total_bytes / 2**30:.1f} GiB; no process listed (another container?)"
    held = ", ".join(
        f"PID {p.pid} ({p.name}, {p.used_bytes / 2**30:.1f} GiB)"
        if p.used_bytes
        else f"PID {p.pid} ({p.name})"
        for p in info.processes
    )
    return f"GPU {info.index} ({info.name}) memory is held by {held}"
