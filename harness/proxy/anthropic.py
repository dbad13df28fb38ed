"""The Anthropic Messages dialect, translated to and from OpenAI chat completions (pure: no HTTP).

An agent that speaks only Anthropic's API (``POST {base}/v1/messages``) is served by an upstream
that speaks OpenAI's: its request becomes a chat completion request (system prompt, text, tool
uses and tool results, tools and tool choice, sampling), the upstream's completion becomes a
Message, and its error body an Anthropic error. The episode's turns, validation and loop
detection then run on the OpenAI form, as for every other agent.

What does not cross: thinking blocks (an OpenAI upstream has no place for them), images (kept
as OpenAI image parts when they carry a URL or base64 data, else dropped), ``metadata``, cache
control marks. Tool-call arguments that are not a JSON object reach the agent as ``{}`` (the
Messages API has no way to say "unparseable"); the proxy's format finding keeps the raw string.
"""

import json
import uuid
from typing import Any

from harness.proxy.turns import as_dict, as_list

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Error types by status, as Anthropic names them.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class TranslationError(ValueError):
    """The request is not a Messages request the proxy can translate (the agent's to fix: 400)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(b.get("text") or "") for b in as_list(content) if isinstance(b, dict) and b.get("type") == "text"
    )


def _image(block: dict[str, Any]) -> dict[str, Any] | None:
    source = as_dict(block.get("source"))
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
        return {"type": "image_url", "image_url": {"url": url}}
    return None


def _user(content: Any) -> list[dict[str, Any]]:
    """One Anthropic user message -> tool messages (its tool results, first: they answer the
    previous assistant message) and a user message (its text and images)."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in as_list(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            text = _text(block.get("content"))
            tools.append(
                {
                    "role": "tool",
                    "tool_call_id": str(block.get("tool_use_id") or ""),
                    "content": text,
                }
            )
        elif kind == "text":
            parts.append({"type": "text", "text": str(block.get("text") or "")})
        elif kind == "image" and (image := _image(block)) is not None:
            parts.append(image)
    out = tools
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts) if only_text else parts})
    return out


def _assistant(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in as_list(content):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name") or ""),
                        "arguments": json.dumps(block.get("input") if block.get("input") is not None else {}),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_choice(choice: Any) -> Any:
    kind = as_dict(choice).get("type")
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": str(choice.get("name") or "")}}
    if kind in ("auto", "none"):
        return kind
    return None


def to_openai(body: Any, model: str | None = None) -> dict[str, Any]:
    """A Messages request as a chat completion request (not streamed: the proxy streams the
    answer itself). ``model``: the name sent upstream (None: the request's own)."""
    if not isinstance(body, dict):
        raise TranslationError("the body is not a JSON object")
    if not isinstance(body.get("messages"), list):
        raise TranslationError("`messages` is missing or not a list")
    messages: list[dict[str, Any]] = []
    if system := _text(body.get("system")):
        messages.append({"role": "system", "content": system})
    for m in body["messages"]:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise TranslationError("each message needs the role user or assistant")
        if m["role"] == "user":
            messages += _user(m.get("content"))
        else:
            messages.append(_assistant(m.get("content")))
    out: dict[str, Any] = {"model": model or body.get("model") or "", "messages": messages}
    if isinstance(body.get("max_tokens"), int):
        out["max_tokens"] = body["max_tokens"]
    for key in ("temperature", "top_p", "top_k"):
        if isinstance(body.get(key), int | float) and not isinstance(body.get(key), bool):
            out[key] = body[key]
    if isinstance(body.get("stop_sequences"), list) and body["stop_sequences"]:
        out["stop"] = body["stop_sequences"]
    tools = [
        {
            "type": "function",
            "function": {
                "name": str(t.get("name") or ""),
                "description": str(t.get("description") or ""),
                "parameters": as_dict(t.get("input_schema")) or {"type": "object", "properties": {}},
            },
        }
        for t in as_list(body.get("tools"))
        if isinstance(t, dict) and "input_schema" in t  # server tools (web search...) have none
    ]
    if tools:
        out["tools"] = tools
        if (choice := _tool_choice(body.get("tool_choice"))) is not None:
            out["tool_choice"] = choice
        if as_dict(body.get("tool_choice")).get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False
    return out


def _input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def to_message(completion: dict[str, Any], model: str) -> dict[str, Any]:
    """A chat completion as a Message (``model``: the name the agent asked for)."""
    choice = as_dict(as_list(completion.get("choices"))[0]) if as_list(completion.get("choices")) else {}
    message = as_dict(choice.get("message"))
    content: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for call in as_list(message.get("tool_calls")):
        fn = as_dict(as_dict(call).get("function"))
        content.append(
            {
                "type": "tool_use",
                "id": str(as_dict(call).get("id") or f"toolu_{uuid.uuid4().hex[:24]}"),
                "name": str(fn.get("name") or ""),
                "input": _input(fn.get("arguments")),
            }
        )
    finish = choice.get("finish_reason")
    stop = _STOP_REASONS.get(str(finish), "end_turn")
    if any(b["type"] == "tool_use" for b in content):
        stop = "tool_use" if stop == "end_turn" else stop
    usage = as_dict(completion.get("usage"))
    return {
        "id": f"msg_{str(completion.get('id') or uuid.uuid4().hex)[-24:]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
        },
    }


def to_events(message: dict[str, Any]) -> bytes:
    """A Message as the server-sent events of a Messages stream (each block whole in one delta)."""

    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    out = [event("message_start", {"message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            out.append(
                event("content_block_start", {"index": i, "content_block": {"type": "text", "text": ""}})
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            out.append(event("content_block_start", {"index": i, "content_block": {**block, "input": {}}}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(event("content_block_delta", {"index": i, "delta": delta}))
        out.append(event("content_block_stop", {"index": i}))
    out.append(
        event(
            "message_delta",
            {
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    out.append(event("message_stop", {}))
    return b"".join(out)


def to_error(status: int, body: Any) -> dict[str, Any]:
    """An upstream (OpenAI-style) error body, or a message, as an Anthropic error body."""
    error = as_dict(as_dict(body).get("error")) if isinstance(body, dict) else {}
    message = str(error.get("message") or (body if isinstance(body, str) else "") or f"HTTP {status}")
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
