"""OpenAI-compatible replay server: scripted or recorded completions, played deterministically."""

from harness.replay.script import (
    ReplayScript,
    ScriptedCall,
    ScriptedResponse,
    load_recorded_completions,
    load_script,
)
from harness.replay.server import ReplayServer, build_app, serve_forever

__all__ = [
    "ReplayScript",
    "ReplayServer",
    "ScriptedCall",
    "ScriptedResponse",
    "build_app",
    "load_recorded_completions",
    "load_script",
    "serve_forever",
]
