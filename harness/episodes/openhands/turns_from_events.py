"""OpenHands events -> Turn records, for live episodes and for trajectories on disk.

Two event shapes are read:
- OpenHands SDK events (``{"kind": "ActionEvent" | "ObservationEvent" | "MessageEvent" |
  "AgentErrorEvent", ...}``): conversation persistence (events/*.json) and SDK-based evaluation
  output.jsonl ``history``.
- OpenHands 0.x events (``{"action": "run", "args": {...}, "tool_call_metadata": {...}}`` and
  ``{"observation": "run", "cause": id, "content": ...}``), flat or as [action, observation] pairs.
One turn is one model response: parallel tool calls of one response share a turn.
"""

import json
from collections.abc import Iterable
from typing import Any

from harness.monitor.records import Turn

_NOT_ARGS = frozenset(
    {
        "thought",
        "blocking",
        "hidden",
        "confirmation_state",
        "impl_source",
        "is_static",
        "translated_ipython_code",
        "image_urls",
        "wait_for_response",
        "outputs",
    }
)


def text_of(content: Any) -> str:
    """Text from a string or a list of content parts ({"type": "text", "text": ...})."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if len(content) == 1:  # the usual single part, without a generator (same result as below)
            part = content[0]
            text = part.get("text") if isinstance(part, dict) else None
            return str(text) if text else ""
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text"))
    return ""


# Validation runs in pydantic-core and beats model_construct's Python loop here; calling the
# validator itself skips model_validate's keyword handling (a quarter of the cost per turn).
_turn = Turn.__pydantic_validator__.validate_python


class _Builder:
    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []
        self.by_call: dict[str, dict[str, Any]] = {}

    def new(self, text: str = "", **kw: Any) -> dict[str, Any]:
        turn = {
            "index": len(self.turns),
            "text": text,
            "tool_calls": [],
            "finish_reason": None,
            "observation": "",
            "observation_is_error": False,
            **kw,
        }
        self.turns.append(turn)
        return turn

    def observe(self, turn: dict[str, Any] | None, text: str, is_error: bool) -> None:
        if turn is None:
            return
        turn["observation"] = f"{turn['observation']}\n{text}".strip() if turn["observation"] else text
        turn["observation_is_error"] = turn["observation_is_error"] or is_error

    def build(self) -> list[Turn]:
        return [_turn(t) for t in self.turns]


class SdkTurnAssembler:
    """Feed SDK events (as JSON dicts) in order; completed turns come out as soon as they are whole.

    A tool-call turn is whole when every call of its response has its observation (or error); a
    text-only turn is whole at once. ``finish()`` flushes what is left at the end of an episode.
    """

    def __init__(self) -> None:
        self._b = _Builder()
        self._by_response: dict[str, dict[str, Any]] = {}
        self._last: dict[str, Any] | None = None
        self._pending: dict[int, set[str]] = {}  # turn index -> tool_call ids still without output
        self._emitted = 0
        self.response_ids: dict[int, str] = {}  # turn index -> llm_response_id (to join token usage)

    def feed(self, ev: dict[str, Any]) -> list[Turn]:
        b = self._b
        kind = ev.get("kind")
        if kind == "ActionEvent":
            call = ev.get("tool_call") or {}
            event_id, tool_call_id = ev.get("id"), ev.get("tool_call_id")
            response_id = str(ev.get("llm_response_id") or event_id)
            turn = self._by_response.get(response_id)
            if turn is None:
                turn = b.new(text=text_of(ev.get("thought")), finish_reason="tool_calls")
                self._by_response[response_id] = turn
                self.response_ids[turn["index"]] = response_id
            call_id = str(tool_call_id or event_id)
            turn["tool_calls"].append(
                {
                    "name": str(call.get("name") or ev.get("tool_name") or ""),
                    "arguments": str(call.get("arguments") or ""),
                    "id": tool_call_id,
                }
            )
            b.by_call[str(event_id)] = turn
            b.by_call[call_id] = turn
            self._pending.setdefault(turn["index"], set()).add(call_id)
            self._last = turn
        elif kind in ("ObservationEvent", "UserRejectObservation", "AgentErrorEvent"):
            call_id = str(ev.get("tool_call_id"))
            turn = b.by_call.get(call_id) or b.by_call.get(str(ev.get("action_id")))
            if kind == "AgentErrorEvent":
                if turn is None:
                    turn = b.new(finish_reason="tool_calls")
                    turn["tool_calls"].append(
                        {
                            "name": str(ev.get("tool_name") or ""),
                            "arguments": "",
                            "id": ev.get("tool_call_id"),
                        }
                    )
                    self._last = turn
                b.observe(turn, str(ev.get("error") or ""), True)
            else:
                obs = ev.get("observation") or {}
                text = text_of(obs.get("content")) or str(
                    obs.get("output") or ev.get("rejection_reason") or ""
                )
                is_error = bool(obs.get("is_error") or obs.get("error")) or kind == "UserRejectObservation"
                b.observe(turn or self._last, text, is_error)
            if turn is not None and (pending := self._pending.get(turn["index"])):
                pending.discard(call_id)
        elif kind == "MessageEvent":
            msg = ev.get("llm_message") or {}
            text = text_of(msg.get("content"))
            if ev.get("source") == "agent":
                self._last = b.new(text=text, finish_reason="stop")
                if ev.get("llm_response_id"):
                    self.response_ids[self._last["index"]] = str(ev["llm_response_id"])
            elif self._last is not None and not self._last["tool_calls"]:
                b.observe(self._last, text, False)  # the (simulated) user's reply to a text-only turn
        return self._ready()

    def _ready(self) -> list[Turn]:
        turns, pending = self._b.turns, self._pending
        out: list[Turn] = []
        while self._emitted < len(turns):
            turn = turns[self._emitted]
            if pending.get(turn["index"]):
                break
            out.append(_turn(turn))
            self._emitted += 1
        return out

    def finish(self) -> list[Turn]:
        out = [_turn(t) for t in self._b.turns[self._emitted :]]
        self._emitted = len(self._b.turns)
        return out


def turns_from_sdk_events(events: Iterable[dict[str, Any]]) -> list[Turn]:
    """SDK events in order -> turns (offline)."""
    asm = SdkTurnAssembler()
    turns: list[Turn] = []
    for ev in events:
        turns += asm.feed(ev)
    return turns + asm.finish()


def _raw_arguments(ev: dict[str, Any]) -> tuple[str, str]:
    meta = ev.get("tool_call_metadata") or {}
    name = str(meta.get("function_name") or ev.get("action") or "")
    response = meta.get("model_response") or {}
    for choice in response.get("choices") or []:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            if call.get("id") == meta.get("tool_call_id"):
                return name, str((call.get("function") or {}).get("arguments") or "")
    args = {k: v for k, v in (ev.get("args") or {}).items() if k not in _NOT_ARGS}
    return name, json.dumps(args, sort_keys=True)


def _usage(ev: dict[str, Any]) -> dict[str, int | None]:
    usage = ((ev.get("tool_call_metadata") or {}).get("model_response") or {}).get("usage") or {}
    return {"prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens")}


def _sourced(ev: dict[str, Any]) -> dict[str, Any]:
    """An event of the early (~0.9) form, whose arguments sit beside ``action`` with no ``source``
    or ``args``, in the later form. Every action but a message is the agent's; a message is the
    agent's when it waits for an answer (the user's task does not)."""
    if "action" not in ev or "source" in ev or "args" in ev:
        return ev
    agent = ev["action"] != "message" or ev.get("wait_for_response") is True
    args = {k: v for k, v in ev.items() if k not in ("action", "action_risk", "is_confirmed", "keep_prompt")}
    return {"action": ev["action"], "source": "agent" if agent else "user", "args": args}


def turns_from_v0_history(history: list[Any]) -> list[Turn]:
    """OpenHands 0.x evaluation history (flat events or [action, observation] pairs) -> turns."""
    flat: list[dict[str, Any]] = []
    for item in history:
        if isinstance(item, list | tuple):
            flat += [_sourced(e) for e in item if isinstance(e, dict)]
        elif isinstance(item, dict):
            flat.append(_sourced(item))
    b = _Builder()
    by_response: dict[str, dict[str, Any]] = {}
    last: dict[str, Any] | None = None
    for position, ev in enumerate(flat):
        if ev.get("source") == "agent" and ev.get("action") and ev.get("action") not in ("system", "recall"):
            args = ev.get("args") or {}
            meta = ev.get("tool_call_metadata")
            if ev["action"] == "message" and not meta:
                last = b.new(text=str(args.get("content") or ev.get("message") or ""), finish_reason="stop")
                continue
            # an event without an id (the early form) is its own response
            own = ev.get("id") if ev.get("id") is not None else f"#{position}"
            response_id = str(((meta or {}).get("model_response") or {}).get("id") or own)
            turn = by_response.get(response_id)
            if turn is None:
                turn = b.new(text=str(args.get("thought") or ""), finish_reason="tool_calls", **_usage(ev))
                by_response[response_id] = turn
            name, raw = _raw_arguments(ev)
            turn["tool_calls"].append(
                {"name": name, "arguments": raw, "id": (meta or {}).get("tool_call_id")}
            )
            if ev.get("id") is not None:
                b.by_call[str(ev["id"])] = turn
            last = turn
        elif ev.get("observation") and ev.get("observation") not in ("null", "agent_state_changed", "recall"):
            turn = b.by_call.get(str(ev.get("cause"))) if ev.get("cause") is not None else None
            is_error = ev.get("observation") == "error"
            if turn is None and is_error:
                # A malformed response: the controller answered with an error and no action.
                turn = b.new(finish_reason="tool_calls")
                last = turn
            b.observe(turn or last, str(ev.get("content") or ""), is_error)
        elif (
            ev.get("source") == "user"
            and ev.get("action") == "message"
            and last is not None
            and not last["tool_calls"]
        ):
            b.observe(last, str((ev.get("args") or {}).get("content") or ""), False)
    return b.build()
