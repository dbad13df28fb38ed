"""The model-call proxy: an OpenAI-compatible endpoint in front of any model endpoint that gives
each episode its own base URL, records every exchange, assembles the episode's turns and runs the
loop monitor and tool-call validation on them, whatever the scaffold (see server.py for use)."""

from harness.proxy.app import EXPECTED
from harness.proxy.config import (
    MSWEA_ACTION_REGEX,
    MSWEA_SUBMIT,
    ActionFormat,
    ProxyConfig,
    StopAnswer,
    WatchConfig,
    submit_answer,
)
from harness.proxy.records import Exchange, LoopRecord, TurnRecord, read_records
from harness.proxy.server import EpisodeEndpoint, Proxy, serve_proxy
from harness.proxy.watch import EpisodeWatch

__all__ = [
    "EXPECTED",
    "MSWEA_ACTION_REGEX",
    "MSWEA_SUBMIT",
    "ActionFormat",
    "EpisodeEndpoint",
    "EpisodeWatch",
    "Exchange",
    "LoopRecord",
    "Proxy",
    "ProxyConfig",
    "StopAnswer",
    "TurnRecord",
    "WatchConfig",
    "read_records",
    "serve_proxy",
    "submit_answer",
]
