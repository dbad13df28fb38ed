"""vLLM server lifecycle: environment, checkpoint inspection, memory planning, launch and watch."""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Checkpoint": "harness.server.checkpoint",
    "inspect_checkpoint": "harness.server.checkpoint",
    "ServerConfig": "harness.server.config",
    "build_config": "harness.server.config",
    "MemoryPlan": "harness.server.memory",
    "plan_memory": "harness.server.memory",
    "VLLMServer": "harness.server.process",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness.server' has no attribute {name!r}")
