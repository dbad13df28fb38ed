"""The vLLM server a configuration asks for: on this machine, or on ``--gpu-host`` over SSH."""

from pathlib import Path

from harness.server.config import ServerConfig
from harness.server.process import VLLMServer


def vllm_server(config: ServerConfig, *, run_dir: Path) -> VLLMServer:
    if config.gpu_host:
        from harness.server.remote.server import RemoteVLLMServer  # deferred: ssh only where asked

        return RemoteVLLMServer(config, run_dir=run_dir)
    return VLLMServer(config, run_dir=run_dir)
