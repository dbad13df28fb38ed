"""harness: evaluate fine-tuned language models as coding agents.

Public API: the server lifecycle (`VLLMServer`, `ServerConfig`), checkpoint inspection and
memory planning, and evaluation (`EvalConfig`, `run_eval`). The command line (`harness ...`) is
a thin layer over these. Names load on first use: `harness plan` should not pay for the HTTP stack.
"""

from harness._lazy import lazy_getattr

_EXPORTS = {
    "Checkpoint": "harness.server.checkpoint",
    "MemoryPlan": "harness.server.memory",
    "ServerConfig": "harness.server.config",
    "VLLMServer": "harness.server.process",
    "inspect_checkpoint": "harness.server.checkpoint",
    "plan_memory": "harness.server.memory",
    "HarnessError": "harness.errors",
    "ServerCrashed": "harness.errors",
    "EvalConfig": "harness.evaluate",
    "run_eval": "harness.evaluate",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr("harness", _EXPORTS)
