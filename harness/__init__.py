"""harness: evaluate fine-tuned language models as coding agents.

Public API: the server lifecycle (`VLLMServer`, `ServerConfig`), checkpoint inspection and
memory planning, and evaluation (`EvalConfig`, `run_eval`). The command line (`harness ...`) is
a thin layer over these. Names load on first use: `harness plan` should not pay for the HTTP stack.
"""

from importlib import import_module
from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
