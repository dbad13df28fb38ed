"""Backends by short name: each kind of the episode seam maps names to ``module:attribute`` paths.

A new backend is a new module plus one line here; nothing that uses the kind changes. The module
is imported only when its name is asked for, so an optional backend's heavy imports (Ray, the
docker SDK, an agent framework) cost nothing to the runs that do not use it. An unknown name is a
one-line error that lists the valid ones.
"""

import importlib
from typing import Any, Literal

from harness.errors import HarnessError

Kind = Literal["runtime", "endpoint", "runner", "executor"]

BACKENDS: dict[Kind, dict[str, str]] = {
    # where an episode's commands run: a factory (SandboxConfig) -> Runtime
    "runtime": {
        "local": "harness.runtime.local:make_runtime",
        "bwrap": "harness.runtime.bwrap:make_runtime",
        "docker": "harness.runtime.container:make_runtime",
    },
    # where an episode's model requests go on this machine: a factory (config, model, run_dir) ->
    # ModelEndpoint (server.endpoint.endpoint_kind picks one by the model's form; the ray executor
    # makes its own, each model's replicas)
    "endpoint": {
        "vllm": "harness.server.endpoint:make_managed",
        "external": "harness.server.endpoint:make_external",
        "replay": "harness.replay.endpoint:make_replay",
    },
    # one scaffold's agent loop (a scaffold.toml's `runner`): a class (scaffold, loop config) whose
    # instances run(spec, sandbox, endpoint, stop)
    "runner": {
        "openhands-sdk": "harness.episodes.openhands.runner:OpenHandsRunner",
        "mini-swe-agent": "harness.episodes.mini_swe_agent:MiniSweAgentRunner",
    },
    # where episodes run: a class (config) -> Executor
    "executor": {
        "threads": "harness.executor:ThreadRollouts",
        "ray": "harness.cluster.executor:RayRollouts",
    },
}


def names(kind: Kind) -> list[str]:
    return sorted(BACKENDS[kind])


def load(kind: Kind, name: str, *, flag: str | None = None) -> Any:
    """The object ``name`` stands for among ``kind``'s backends; ``flag`` names the option in the
    error (``--runtime``), else the kind does."""
    try:
        target = BACKENDS[kind][name]
    except KeyError:
        raise HarnessError(f"{flag or kind} {name}: unknown (known: {', '.join(names(kind))})") from None
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
