"""mini-swe-agent's ``Model`` over the official openai client, talking to the episode's endpoint.

What the model is asked and answered is mini-swe-agent's own: its parsers decide what an action is
(``parse_regex_actions`` for text, ``parse_toolcall_actions`` for tool calls) and render its format
error and observation templates. Only the transport is the harness's: the openai client against
``endpoint.openai_url`` with one attempt per request (the harness retries infrastructure failures
per episode, mini-swe-agent's own ten retries would hide a dead server for minutes), the seed and
sampling of the spec and scaffold, and no cost tracking (litellm is never imported).

One change of bookkeeping, not of behaviour: mini-swe-agent drops a response it could not parse
(only its format-error reply enters the history). Here that response is kept in the history too,
marked ``extra.format_error``, so that the trajectory shows what the model said; it is left out of
every request, so the model sees exactly what mini-swe-agent would send.
"""

import threading
import time
from collections.abc import Callable
from typing import Any

import openai
from minisweagent.exceptions import FormatError
from minisweagent.models.utils.actions_text import format_observation_messages, parse_regex_actions
from minisweagent.models.utils.actions_toolcall import (
    BASH_TOOL,
    format_toolcall_observation_messages,
    parse_toolcall_actions,
)
from openai.types.chat import ChatCompletion

from harness.episodes.mini_swe_agent._wait import wait_for
from harness.episodes.mini_swe_agent.config import MiniSweAgentScaffold

# Per request, as the OpenHands runner's LLM: a CPU server can take minutes for a long prompt.
REQUEST_TIMEOUT_S = 600.0


class ChatModel:
    """One episode's model: ``query`` sends the history and returns the assistant message with its
    parsed actions (``extra.actions``) and the raw response (``extra.response``)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        name: str,
        scaffold: MiniSweAgentScaffold,
        seed: int | None,
        temperature: float | None,
        stop: threading.Event,
        deadline: float | None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.scaffold = scaffold
        self.config = scaffold.config
        self.name = name
        sampling = scaffold.scaffold.sampling
        self.request: dict[str, Any] = {
            "model": name,
            "temperature": sampling.temperature if temperature is None else temperature,
            "top_p": sampling.top_p,
            "max_tokens": max_output_tokens or sampling.max_output_tokens,
        }
        if seed is not None:
            self.request["seed"] = seed
        if scaffold.config.actions == "toolcall":
            self.request["tools"] = [BASH_TOOL]
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, timeout=REQUEST_TIMEOUT_S
        )
        self._stop = stop
        self._deadline = deadline
        self.llm_s = 0.0

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        sent = [
            {k: v for k, v in m.items() if k != "extra"}
            for m in messages
            if not (m.get("extra") or {}).get("format_error")
        ]
        started = time.monotonic()
        try:
            response = wait_for(lambda: self._create(sent, **kwargs), self._stop, self._deadline)
        finally:
            self.llm_s += time.monotonic() - started
        choice = response.choices[0]
        reply = choice.message
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [c.model_dump(mode="json", exclude_none=True) for c in reply.tool_calls]
        elif reply.content is None:
            message["content"] = ""
        extra: dict[str, Any] = {"response": response.model_dump(mode="json"), "cost": 0.0}
        try:
            actions = self._actions(reply.content or "", reply.tool_calls or [], choice.finish_reason)
        except FormatError as exc:
            # kept for the trajectory, left out of later requests (see the module docstring)
            message["extra"] = extra | {"actions": [], "format_error": True, "timestamp": time.time()}
            exc.messages[0]["extra"]["response"] = extra["response"]
            raise FormatError(message, *exc.messages) from None
        message["extra"] = extra | {"actions": actions, "timestamp": time.time()}
        return message

    def _create(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatCompletion:
        # the messages are mini-swe-agent's plain dicts; the typed overloads do not describe them
        create: Callable[..., ChatCompletion] = self.client.chat.completions.create
        return create(messages=messages, **self.request, **kwargs)

    def _actions(
        self, content: str, tool_calls: list[Any], finish_reason: str | None
    ) -> list[dict[str, Any]]:
        if self.config.actions == "toolcall":
            return list(
                parse_toolcall_actions(
                    tool_calls,
                    format_error_template=self.scaffold.templates.format_error,
                    template_kwargs={"finish_reason": finish_reason},
                )
            )
        return list(
            parse_regex_actions(
                content,
                action_regex=self.config.action_regex,
                format_error_template=self.scaffold.templates.format_error,
                template_kwargs={"finish_reason": finish_reason},
            )
        )

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def format_observation_messages(
        self,
        message: dict[str, Any],
        outputs: list[dict[str, Any]],
        template_vars: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        template = self.scaffold.templates.observation
        if self.config.actions == "toolcall":
            return list(
                format_toolcall_observation_messages(
                    actions=message.get("extra", {}).get("actions", []),
                    outputs=outputs,
                    observation_template=template,
                    template_vars=template_vars,
                )
            )
        return list(
            format_observation_messages(outputs, observation_template=template, template_vars=template_vars)
        )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {"model_name": self.name} | kwargs

    def serialize(self) -> dict[str, Any]:
        request = {k: v for k, v in self.request.items() if k != "tools"}
        return {
            "info": {
                "config": {
                    "model": {
                        "model_name": self.name,
                        "request": request,
                        "actions": self.config.actions,
                        "action_regex": self.config.action_regex,
                        "observation_template": self.scaffold.templates.observation,
                        "format_error_template": self.scaffold.templates.format_error,
                    },
                    "model_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }

    def close(self) -> None:
        self.client.close()
