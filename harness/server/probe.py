"""A single tool-calling request that shows a freshly started server really answers."""

from typing import Any

PROBE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command in the workspace and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"],
            },
        },
    }
]
PROBE_MESSAGES = [
    {"role": "system", "content": "You are a coding agent. Use the tools to act."},
    {"role": "user", "content": "List the files in the current directory."},
]


def probe_request(**overrides: Any) -> dict[str, Any]:
    return {
        "messages": PROBE_MESSAGES,
        "tools": PROBE_TOOLS,
        "max_tokens": 64,
        "temperature": 0.0,
        "seed": 0,
        **overrides,
    }


def describe_reply(completion: Any) -> str:
    choice = completion.choices[0]
    msg = choice.message
    if msg.tool_calls:
        calls = "; ".join(f"{c.function.name}({c.function.arguments})" for c in msg.tool_calls)
        return f"tool call: {calls}"
    text = (msg.content or "").strip().replace("\n", " ")
    return f"text ({choice.finish_reason}): {text[:160]}"
