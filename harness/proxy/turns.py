"""OpenAI chat exchanges -> Turn records (pure: no HTTP, no files).

One turn is one model response the upstream gave (streamed or not). Its observation is what the
scaffold sent back: the messages that the episode's next request carries after its last assistant
message (tool-role messages for a tool-calling scaffold; the user message with the command's
output, or the scaffold's format-error feedback, for a text-action one). A response that is not a
chat completion (not JSON, no choices) is a turn with nothing in it, and the reason why.
"""

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from harness.monitor import ToolCall, ToolSchemas, Turn
from harness.proxy.config import ActionFormat


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (bodies are whatever a server sent)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def text_of(content: Any) -> str:
    """Text from a message's content: a string or a list of parts ({"type": "text", "text": ...})."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def assistants(messages: Sequence[Any]) -> int:
    """How many assistant messages a request carries (a turn's response adds one)."""
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def observation(messages: Sequence[Any]) -> str:
    """The text of the messages after the last assistant message (what answered that response)."""
    after: list[str] = []
    for m in reversed(messages):
        if not isinstance(m, dict):
            continue
        if m.get("role") == "assistant":
            break
        after.append(text_of(m.get("content")))
    return "\n".join(t for t in reversed(after) if t)


@lru_cache(maxsize=32)
def _pattern(regex: str) -> re.Pattern[str]:
    return re.compile(regex, re.DOTALL)


def parse_actions(text: str, actions: ActionFormat) -> list[str]:
    """The commands in a text-action response (as mini-swe-agent reads them: stripped)."""
    return [m.strip() for m in _pattern(actions.regex).findall(text)]


def _calls(message: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    calls = []
    for c in message.get("tool_calls") or ():
        if not isinstance(c, dict):
            continue
        fn = as_dict(c.get("function"))
        args = fn.get("arguments")
        calls.append(
            ToolCall(
                name=str(fn.get("name") or ""),
                # the raw string as the server sent it; an object (some servers) as JSON
                arguments=args if isinstance(args, str) else json.dumps(args) if args is not None else "",
                id=c.get("id") if isinstance(c.get("id"), str) else None,
            )
        )
    return tuple(calls)


def _tokens(usage: Any, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) else None


def completion_turn(index: int, completion: Any, actions: ActionFormat | None) -> tuple[Turn, str | None]:
    """The turn a chat completion is, and None; or an empty turn and why the body is not one."""
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        what = "no choices" if isinstance(completion, dict) else f"a JSON {type(completion).__name__}"
        return Turn(index=index), f"the upstream's body is not a chat completion ({what})"
    choice = choices[0]
    message = as_dict(choice.get("message"))
    text = text_of(message.get("content"))
    if actions is not None:
        calls = tuple(
            ToolCall(name=actions.tool, arguments=json.dumps({actions.argument: command}))
            for command in parse_actions(text, actions)
        )
    else:
        calls = _calls(message)
    finish = choice.get("finish_reason")
    usage = completion.get("usage")
    turn = Turn(
        index=index,
        text=text,
        tool_calls=calls,
        finish_reason=finish if isinstance(finish, str) else None,
        prompt_tokens=_tokens(usage, "prompt_tokens"),
        completion_tokens=_tokens(usage, "completion_tokens"),
    )
    return turn, None


def schemas_for(
    tools: Any, actions: ActionFormat | None, aliases: Mapping[str, str]
) -> tuple[ToolSchemas, bool] | None:
    """What a response is validated against, and whether it must call a tool: the action format's
    one tool, or the tools the request declares (none declared: prose is fine). None: the request's
    tools cannot be read (they are then the upstream's to refuse, not a finding of the model's)."""
    if actions is not None:
        return ToolSchemas(parameters={actions.tool: actions.tool_schema()}), True
    if not tools:
        return ToolSchemas(parameters={}), False
    try:
        return ToolSchemas.from_openai_tools(tools, aliases=aliases), True
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
