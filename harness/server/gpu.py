"""GPU facts from NVML (nvidia-ml-py): presence, memory, which processes hold memory, and the
devices ``CUDA_VISIBLE_DEVICES`` hands to a child process.

Everything here reads NVML through ``_nvml()``, so tests swap in a fake NVML (see
tests/test_gpu_preflight.py) and the same code runs for real on a GPU machine.
"""

import os
from functools import cache
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError

GiB = 2**30
# CUDA reports a device's total ~0.47 GiB below NVML's (memory the driver reserves); vLLM plans
# and checks on CUDA's total: free >= gpu_memory_utilization x CUDA total at start-up.
CUDA_RESERVED_BYTES = int(0.47 * GiB)


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

    @property
    def cuda_total_bytes(self) -> int:
        """The total vLLM sees through CUDA (NVML's less what the driver keeps)."""
        return max(self.total_bytes - CUDA_RESERVED_BYTES, 0)

    @property
    def held_bytes(self) -> int:
        return max(self.total_bytes - self.free_bytes, 0)


@cache
def _nvml() -> object | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no library, no device: all mean "no CUDA here"
        return None


def gpu_facts() -> dict[str, Any]:
    """The GPUs (name, memory), driver and CUDA version as NVML says; empty without NVML."""
    facts: dict[str, Any] = {"gpus": [], "driver": None, "cuda": None}
    nvml: Any = _nvml()
    if nvml is None:
        return facts
    try:
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            facts["gpus"].append(
                {
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_bytes": int(mem.total),
                }
            )
        driver = nvml.nvmlSystemGetDriverVersion()
        facts["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
        facts["cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception:  # an NVML without one of these calls: what was read stays
        pass
    return facts


def _count() -> int:
    nvml = _nvml()
    if nvml is None:
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())  # type: ignore[attr-defined]
    except Exception:
        return 0


def has_cuda() -> bool:
    return _count() > 0


def _uuid(index: int) -> str:
    nvml = _nvml()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)  # type: ignore[attr-defined]
        uuid = nvml.nvmlDeviceGetUUID(handle)  # type: ignore[attr-defined]
    except Exception:
        return ""
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def parse_visible_devices(visible: str, count: int) -> list[int]:
    """Physical indices that ``CUDA_VISIBLE_DEVICES=visible`` names among ``count`` GPUs.

    Understood: indices (``0,2``) and GPU UUIDs or their unique prefixes (``GPU-8f3a...``), as CUDA
    reads them. Refused with a HarnessError saying what to do, where CUDA would quietly use fewer
    devices or none (and vLLM would then fail late, or a plan would come out for the CPU): an empty
    value, an index out of range, an unknown or ambiguous UUID, a duplicate, and MIG instances
    (``MIG-...``), whose memory this planner cannot read.
    """
    label = f"CUDA_VISIBLE_DEVICES={visible!r}"
    entries = [e.strip() for e in visible.split(",")]
    if not any(entries):
        raise HarnessError(
            f"{label} hides all {count} GPUs of this machine: vLLM would find no GPU. Unset it, or "
            f"name the GPU to use (0..{count - 1} or its UUID from nvidia-smi -L)"
        )
    uuids: list[str] | None = None
    found: list[int] = []
    for entry in entries:
        if entry.upper().startswith("MIG-"):
            raise HarnessError(
                f"{label}: {entry} is a MIG instance; the harness plans memory for whole GPUs only. "
                "Name a whole GPU (index or GPU-UUID), or run vLLM yourself and pass --base-url"
            )
        if entry.lstrip("-").isdigit():
            index = int(entry)
            if not 0 <= index < count:
                raise HarnessError(
                    f"{label}: GPU {index} does not exist; this machine has {count} "
                    f"(0..{count - 1}; nvidia-smi -L lists them)"
                )
        elif entry.upper().startswith("GPU-"):
            if uuids is None:
                uuids = [_uuid(i).upper() for i in range(count)]
            matches = [i for i, u in enumerate(uuids) if u and u.startswith(entry.upper())]
            if len(matches) != 1:
                why = "matches no GPU of this machine" if not matches else "matches several GPUs"
                raise HarnessError(f"{label}: {entry} {why}; nvidia-smi -L lists their UUIDs")
            index = matches[0]
        else:
            raise HarnessError(
                f"{label}: {entry!r} is neither a GPU index nor a GPU UUID (0..{count - 1}, GPU-...)"
            )
        if index in found:
            raise HarnessError(f"{label}: GPU {index} is named twice")
        found.append(index)
    return found


def selected_gpu_indices() -> list[int]:
    """Physical indices visible to a child process (CUDA_VISIBLE_DEVICES, else all); [] without
    CUDA. A value CUDA would read as fewer or no GPUs is refused (``parse_visible_devices``)."""
    count = _count()
    if count == 0:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    return parse_visible_devices(visible, count)


def process_command(pid: int) -> str:
    """A process's command line (its title for vLLM's renamed processes), shortened; '?' if gone."""
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
            GpuProcess(pid=p.pid, name=process_command(p.pid), used_bytes=getattr(p, "usedGpuMemory", None))
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
