"""A streamed chat completion (server-sent events), put back together as it passes through.

The proxy relays the upstream's bytes untouched, chunk by chunk; a ``StreamAssembler`` fed the
same bytes rebuilds the completion a non-streamed request would have returned (content and tool
call arguments concatenated, the last finish reason, the usage if the stream carried it), so the
record and the turn do not depend on whether the scaffold streams.
"""

from typing import Any

import orjson

from harness.proxy.turns import as_dict


class StreamAssembler:
    """Feed the stream's bytes in any pieces; ``completion()`` is what they add up to."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []  # the data lines of the event being read
        self.done = False  # the stream said [DONE]
        self.events = 0
        self.error: Any = None  # an error event the upstream sent mid-stream
        self.problem: str | None = None  # the first event that is not a completion chunk
        self._meta: dict[str, Any] = {}
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._role = "assistant"

    def feed(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                self._data.append(line[5:].removeprefix(b" "))
            # comments (":...") and other fields (event:, id:, retry:) carry nothing of the completion

    def close(self) -> None:
        """The stream ended: an event without its blank line still counts."""
        if self._buffer.strip():
            self.feed(b"\n")
        self._dispatch()

    def _dispatch(self) -> None:
        if not self._data:
            return
        payload = b"\n".join(self._data)
        self._data = []
        self.events += 1
        if payload.strip() == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.problem = (
                self.problem or f"an event that is not JSON: {payload[:200].decode(errors='replace')}"
            )
            return
        if not isinstance(chunk, dict):
            self.problem = self.problem or f"an event that is a JSON {type(chunk).__name__}"
            return
        if chunk.get("error") is not None:
            self.error = chunk["error"]
            return
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk and key not in self._meta:
                self._meta[key] = chunk[key]
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            self.problem = self.problem or "an event without choices"
            return
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = as_dict(choice.get("delta"))
        if isinstance(delta.get("role"), str):
            self._role = delta["role"]
        if isinstance(delta.get("content"), str):
            self._content.append(delta["content"])
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                self._reasoning.append(delta[key])
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            index = call.get("index", len(self._calls))
            slot = self._calls.setdefault(
                index if isinstance(index, int) else len(self._calls),
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if call.get("id"):
                slot["id"] = call["id"]
            fn = as_dict(call.get("function"))
            if isinstance(fn.get("name"), str):
                slot["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                slot["function"]["arguments"] += fn["arguments"]
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]

    def completion(self) -> dict[str, Any] | None:
        """The completion the stream added up to; None when it carried no completion chunk."""
        if not self._meta and not self._content and not self._calls and self._finish is None:
            return None
        message: dict[str, Any] = {"role": self._role, "content": "".join(self._content) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        out = {
            **self._meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None:
            out["usage"] = self._usage
        return out
