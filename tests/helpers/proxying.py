"""What the proxy tests share: an upstream endpoint at a fixed URL, the tools an agent declares,
and an agent's loop (the official openai client, its message list growing turn by turn)."""

from typing import Any

import openai

from harness.seam import ServerFacts

TERMINAL = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}


class Upstream:
    """A ModelEndpoint for a server that is already up (a replay server, a misbehaving one)."""

    def __init__(self, openai_url: str, api_key: str = "EMPTY", name: str = "scripted") -> None:
        self._url = openai_url
        self._key = api_key
        self.name = self.path = name

    @property
    def openai_url(self) -> str:
        return self._url

    @property
    def api_key(self) -> str:
        return self._key

    def ensure_up(self) -> None:
        pass

    def healthy(self) -> bool:
        return True

    def release(self) -> None:
        pass

    def facts(self) -> ServerFacts | None:
        return None


def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)


def tool_agent(
    c: openai.OpenAI, task: str, turns: int, *, stream: bool = False, observe: Any = None
) -> list[dict[str, Any]]:
    """Up to ``turns`` model calls as a tool-calling scaffold makes them: each call's result goes back
    as a tool message (``observe(turn, call)`` says what it is), a text answer gets a user nudge."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": task},
    ]
    for t in range(turns):
        if stream:
            chunks = list(
                c.chat.completions.create(model="scripted", messages=messages, tools=[TERMINAL], stream=True)  # type: ignore[list-item]
            )
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            calls = [
                {
                    "id": tc.id,
                    "type": "function",
                    "function": {"name": tc.function.name, "arguments": tc.function.arguments},
                }
                for ch in chunks
                if ch.choices
                for tc in ch.choices[0].delta.tool_calls or ()
            ]
        else:
            message = (
                c.chat.completions.create(model="scripted", messages=messages, tools=[TERMINAL])
                .choices[0]
                .message
            )  # type: ignore[list-item]
            text = message.content or ""
            calls = [tc.model_dump() for tc in message.tool_calls or ()]
        messages.append({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})
        for call in calls:
            result = observe(t, call) if observe else f"ran {call['function']['arguments']}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if not calls:
            messages.append({"role": "user", "content": "Please continue: call a tool."})
    return messages
