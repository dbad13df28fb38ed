"""harness: evaluate fine-tuned language models as coding agents.

Public API: the server lifecycle (`VLLMServer`, `ServerConfig`), checkpoint inspection and
memory planning. The command line (`harness ...`) is a thin layer over these.
"""

from harness.errors import HarnessError, ServerCrashed
from harness.server import (
    Checkpoint,
    MemoryPlan,
    ServerConfig,
    VLLMServer,
    inspect_checkpoint,
    plan_memory,
)

__all__ = [
    "Checkpoint",
    "HarnessError",
    "MemoryPlan",
    "ServerConfig",
    "ServerCrashed",
    "VLLMServer",
    "inspect_checkpoint",
    "plan_memory",
]
