"""vLLM server lifecycle: environment, checkpoint inspection, memory planning, launch and watch."""

from harness.server.checkpoint import Checkpoint, inspect_checkpoint
from harness.server.config import ServerConfig, build_config
from harness.server.memory import MemoryPlan, plan_memory
from harness.server.process import VLLMServer

__all__ = [
    "Checkpoint",
    "MemoryPlan",
    "ServerConfig",
    "VLLMServer",
    "build_config",
    "inspect_checkpoint",
    "plan_memory",
]
