"""The OpenHands SDK objects for one scaffold: LLM, agent, and the tool list it sends.

Imports of the SDK stay inside functions: it is heavy, and `harness plan` should not pay for it.
"""

import json
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

import harness.episodes.openhands._sdk_env  # noqa: F401  before any openhands import
from harness.episodes.openhands._patching import episodes_running, require
from harness.episodes.scaffold import DEFAULT_SCAFFOLD, Scaffold, load_scaffold


class _DropMaxIterationsError(logging.Filter):
    """The SDK logs reaching max iterations at ERROR; for the harness it is an episode outcome
    (status max_iterations in the record), and the line broke into every progress bar."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not episodes_running():
            return True
        return not str(record.msg).startswith("Agent reached maximum iterations limit")


class _DropSandboxFailure(logging.Filter):
    """A container sandbox that broke (gone, at a limit) ends its episode with that reason in the
    record; the SDK's ERROR line with a traceback for it broke into the progress bars."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not episodes_running():
            return True
        exc = record.exc_info[1] if record.exc_info else None
        return type(exc).__name__ not in ("SandboxLost", "SandboxLimit")


class _DropContextWindowAdvice(logging.Filter):
    """On a context overflow the SDK logs an 80-line WARNING (how to configure a condenser) on
    every overflow; drawn in a narrow terminal that was thousands of lines per run. The episode
    ends as an error whose message names the overflow, which is where the harness reports it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not episodes_running() or "CONTEXT WINDOW EXCEEDED" not in str(record.msg)


def quiet_expected_sdk_errors() -> None:
    """Install the filters above on the SDK's loggers (idempotent), and silence the SDK's warning
    that a self-served model has no price in litellm's cost map.

    Scope: the loggers are the SDK's own, and each filter drops its line only while an OpenHands
    episode runs in this process (``episodes_running``: the SDK logs some of them from threads of
    its own, where the episode's context is not visible); the warning filter matches only the
    SDK's telemetry module. Checked: openhands-sdk (logger names and message texts are its own).
    """
    require("openhands-sdk", "the SDK's log lines and cost warning (quiet_expected_sdk_errors)")
    log = logging.getLogger("openhands.sdk.conversation.impl.local_conversation")
    if not any(isinstance(f, _DropMaxIterationsError) for f in log.filters):
        log.addFilter(_DropMaxIterationsError())
    tools_log = logging.getLogger("openhands.sdk.agent.parallel_executor")
    if not any(isinstance(f, _DropSandboxFailure) for f in tools_log.filters):
        tools_log.addFilter(_DropSandboxFailure())
    agent_log = logging.getLogger("openhands.sdk.agent.agent")
    if not any(isinstance(f, _DropContextWindowAdvice) for f in agent_log.filters):
        agent_log.addFilter(_DropContextWindowAdvice())
    warnings.filterwarnings(
        "ignore",
        message="Cost calculation failed",
        category=UserWarning,
        module=r"openhands\.sdk\.llm\.utils\.telemetry$",
    )


def build_llm(
    *,
    base_url: str,
    model: str,
    api_key: str,
    scaffold: Scaffold,
    seed: int | None = None,
    temperature: float | None = None,
    max_output_tokens: int | None = None,
    completions_dir: Path | None = None,
    timeout: float = 600,
) -> Any:
    from openhands.sdk import LLM
    from pydantic import SecretStr

    return LLM(
        model=f"openai/{model}",
        base_url=base_url,
        api_key=SecretStr(api_key),
        usage_id="agent",
        temperature=scaffold.sampling.temperature if temperature is None else temperature,
        top_p=scaffold.sampling.top_p,
        seed=seed,
        max_output_tokens=max_output_tokens or scaffold.sampling.max_output_tokens,
        num_retries=1,  # tenacity's stop_after_attempt: one attempt; the harness decides retries
        timeout=timeout,
        native_tool_calling=scaffold.native_tool_calling,
        reasoning_effort=None,
        api_mode="chat",
        # Unknown openai/* models are taken for reasoning models: the SDK would silently drop
        # temperature/top_p and send reasoning_effort. Pin sampling instead.
        capability_overrides={
            "supports_sampling_params": True,
            "supports_reasoning_effort": False,
            "supports_prompt_cache_key": False,
        },
        caching_prompt=False,
        log_completions=completions_dir is not None,
        log_completions_folder=str(completions_dir) if completions_dir else "logs/completions",
    )


def build_agent(scaffold: Scaffold, llm: Any, tool_params: dict[str, dict[str, Any]] | None = None) -> Any:
    from openhands.sdk import Agent, Tool
    from openhands.tools.file_editor import FileEditorTool  # noqa: F401  registers file_editor

    from harness.episodes.openhands import tool_specs
    from harness.episodes.openhands.sdk_tuning import use_cached_tool_schemas, use_fast_request_transform

    # terminal / file_editor specs with the `harness` parameter: the harness's executors (a ready
    # terminal, histories in the episode; or a container sandbox's), the SDK's tools otherwise
    tool_specs.use_harness_tools()
    use_fast_request_transform()  # in episodes: request bodies sent as built, without openai's no-op re-walk
    use_cached_tool_schemas()  # in episodes: each tool's schema built once, not on every model call
    quiet_expected_sdk_errors()
    params: dict[str, dict[str, Any]] = {
        name: {tool_specs.PARAM: tool_specs.LOCAL} for name in tool_specs.TOOLS
    }
    params["terminal"]["terminal_type"] = scaffold.terminal_type
    for name, extra in (tool_params or {}).items():
        params[name] = {**params.get(name, {}), **extra}
    tools = [Tool(name=name, params=params.get(name, {})) for name in scaffold.tools]
    return Agent(llm=llm, tools=tools, include_default_tools=list(scaffold.builtin_tools))


def export_tools(scaffold: Scaffold) -> dict[str, Any]:
    """The exact tool list (OpenAI format) the agent sends, plus the SDK's tool-name aliases."""
    from importlib.metadata import version

    from openhands.sdk import Conversation
    from openhands.sdk.agent.utils import TOOL_NAME_ALIASES

    llm = build_llm(base_url="http://127.0.0.1:9/v1", model="export", api_key="x", scaffold=scaffold)
    agent = build_agent(scaffold, llm)
    with tempfile.TemporaryDirectory(prefix="harness-export-") as ws:
        conv = Conversation(agent=agent, workspace=ws, persistence_dir=None, visualizer=None)
        try:
            conv._ensure_agent_ready()  # resolves tool specs without any LLM call
            tools = [
                t.to_openai_tool(add_security_risk_prediction=True) for t in conv.agent.tools_map.values()
            ]
        finally:
            conv.close()
        # file_editor's description names the workspace; keep the snapshot machine-independent.
        tools = json.loads(
            json.dumps(tools, default=str)
            .replace(str(Path(ws).resolve()), "<workspace>")
            .replace(ws, "<workspace>")
        )
    return {
        "scaffold": scaffold.name,
        "openhands_sdk": version("openhands-sdk"),
        "openhands_tools": version("openhands-tools"),
        "tools": tools,
        "aliases": dict(TOOL_NAME_ALIASES),
    }


def export_scaffold(name_or_path: str = DEFAULT_SCAFFOLD) -> Path:
    """Write tools.schema.json for a scaffold from the installed SDK; returns its path."""
    scaffold = load_scaffold(name_or_path)
    scaffold.schema_path.write_text(json.dumps(export_tools(scaffold), indent=2) + "\n")
    return scaffold.schema_path
