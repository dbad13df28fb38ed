"""vLLM server lifecycle: environment, checkpoint inspection, memory planning, launch and watch."""

from harness._lazy import lazy_getattr

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


__getattr__ = lazy_getattr("harness.server", _EXPORTS)
