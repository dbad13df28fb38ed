"""mini-swe-agent's messages -> Turn records, as the agent adds them.

One assistant message is one turn; the user/tool messages after it are its observation. The rules
are those `harness loops` applies to a saved ``*.traj.json`` (harness/results/trajectories.py), so
the live turns and a re-read of the trajectory agree:
- calls: in tool-call mode the message's raw ``tool_calls`` (arguments as the model wrote them), else
  its parsed actions; in text mode only its parsed actions, as ``bash`` calls with
  ``{"command": ...}`` (mini-swe-agent reads the text alone: tool calls a server sent beside it ran
  nothing); a response mini-swe-agent refused (a format error) ran nothing, so in text mode it has
  no call;
- failed: a non-zero return code, an exception, an interrupt (format error), or no call at all.
"""

import json
from typing import Any

from harness.monitor import ToolCall, Turn


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(content: object) -> str:
    if isinstance(content, list):  # multimodal parts
        return "".join(str(_dict(p).get("text") or "") for p in content)
    return "" if content is None else str(content)


def calls_of(message: dict[str, Any], *, text_actions: bool = False) -> tuple[ToolCall, ...]:
    raw = [
        ToolCall(
            name=str(fn.get("name") or ""),
            arguments=args if isinstance(args := fn.get("arguments"), str) else json.dumps(args or {}),
            id=_dict(call).get("id"),
        )
        for call in ([] if text_actions else message.get("tool_calls") or [])
        if (fn := _dict(_dict(call).get("function")))
    ]
    if raw:
        return tuple(raw)
    actions = _dict(message.get("extra")).get("actions") or []
    return tuple(
        ToolCall(name="bash", arguments=json.dumps({"command": str(a.get("command") or "")}))
        for a in actions
        if isinstance(a, dict)
    )


class TurnRecorder:
    """Fed every message the agent adds; ``close`` hands back the turn in progress once complete."""

    def __init__(self, *, text_actions: bool = False) -> None:
        self._turn: dict[str, Any] | None = None
        self.count = 0
        self._text_actions = text_actions

    def add(self, message: dict[str, Any]) -> Turn | None:
        """Take one message; an assistant message closes the previous turn (returned)."""
        role = message.get("role")
        extra = _dict(message.get("extra"))
        if role == "assistant":
            done = self.close()
            response = _dict(extra.get("response"))
            usage = _dict(response.get("usage"))
            choice = _dict((response.get("choices") or [{}])[0])
            calls = calls_of(message, text_actions=self._text_actions)
            self._turn = {
                "index": self.count,
                "text": _text(message.get("content")),
                "tool_calls": calls,
                "finish_reason": choice.get("finish_reason") or ("tool_calls" if calls else "stop"),
                "observation": "",
                "observation_is_error": False,
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
            }
            self.count += 1
            return done
        if role in ("user", "tool") and self._turn is not None:
            turn, text = self._turn, _text(message.get("content"))
            code = extra.get("returncode")
            failed = (
                bool(extra.get("interrupt_type") or extra.get("exception_info"))
                or code not in (None, 0)
                or not turn["tool_calls"]
            )
            turn["observation"] = f"{turn['observation']}\n{text}" if turn["observation"] else text
            turn["observation_is_error"] = turn["observation_is_error"] or failed
        return None

    def close(self) -> Turn | None:
        """The turn in progress, finished (None when there is none)."""
        turn, self._turn = self._turn, None
        return Turn.model_validate(turn) if turn is not None else None
