"""mini-swe-agent (PyPI ``mini-swe-agent`` 2.4.6) as the seam's second scaffold runner.

Scaffolds ``mini-swe-agent`` (text actions: one fenced bash block per response, no tool-call parser
involved) and ``mini-swe-agent-tools`` (its tool-calling mode) both run through
``MiniSweAgentRunner``; their data lives in scaffolds/<name>/.
"""

from harness.episodes.mini_swe_agent.config import (
    MiniSweAgentConfig,
    MiniSweAgentScaffold,
    load_mini_swe_agent,
)
from harness.episodes.mini_swe_agent.runner import TRAJECTORY, MiniSweAgentRunner

__all__ = [
    "TRAJECTORY",
    "MiniSweAgentConfig",
    "MiniSweAgentRunner",
    "MiniSweAgentScaffold",
    "load_mini_swe_agent",
]
