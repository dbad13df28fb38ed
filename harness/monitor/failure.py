"""Why an unresolved episode failed: one cause per episode, from what was recorded, by precedence.

Several things can be true of one failed episode (a loop and a turn limit, format errors and a
failing test); the cause is the first that applies in this order, which puts what *ended* the
episode before what was merely seen in it:

1. ``context_overflow``: the model's context filled up (the server refused the prompt's length).
2. ``time_limit``: the task's wall-clock limit ended it.
3. ``model_error``: the model server answered with an error (other than a context overflow).
4. ``sandbox_error``: the sandbox was lost, hit a limit, or was destroyed by the agent's commands;
   or the workspace could not be verified.
5. ``loop``: the monitor (or the scaffold) stopped a loop, or found one the episode never left
   (a loop that ran into the turn limit is the loop).
6. ``turn_limit``: the turn budget ran out.
7. ``no_tool_call``: the model never called a tool, nor tried to.
8. ``format_error``: at least half of its calls were malformed (tool-call markup left in the text,
   unparseable arguments, unknown tools, schema violations).
9. ``stall``: varied attempts kept getting the same failure back.
10. ``tests_failed``: it ran to its end and the tests failed (the detail names the failing tests
    and the exception from the verifier's log).

Two failures are the same failure when their ``signature`` is: the cause, its kind (the loop kind,
the format-error category, the error type), the failing tests and their exception, and the last
error the agent saw, with what varies between episodes masked (numbers, quoted names, paths,
addresses). ``harness report`` clusters a run's failures by it.

Pure logic: the caller hands in the record's fields, the last error (``last_error`` of the turns)
and the verifier log's text.
"""

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.monitor.loops import LoopFinding
from harness.monitor.normalize import looks_failed
from harness.monitor.records import Turn
from harness.monitor.stalls import StallFinding

Cause = Literal[
    "context_overflow",
    "time_limit",
    "model_error",
    "sandbox_error",
    "loop",
    "turn_limit",
    "no_tool_call",
    "format_error",
    "stall",
    "tests_failed",
]
CAUSES: tuple[Cause, ...] = Cause.__args__  # type: ignore[attr-defined]


class Failure(BaseModel):
    """Why an unresolved episode failed (``cause``) and the particulars (``detail``)."""

    model_config = ConfigDict(frozen=True)

    cause: Cause
    detail: str = ""
    signature: str = Field(
        "",
        description="What makes two failures the same: cause, kind, failing tests and exception, the "
        'last error with its particulars masked ("" on records written before signatures were kept).',
    )

    def key(self) -> str:
        """The signature, or for an older record one made from its cause and detail."""
        return self.signature or f"{self.cause} | {gist(self.detail)}"


_OVERFLOW = re.compile(
    r"context[ _-]?(?:length|window)|maximum context|too many tokens|prompt is too long|"
    r"ContextWindowExceed|input tokens exceed",
    re.I,
)
_SANDBOX_TYPES = frozenset(
    {"SandboxLost", "SandboxLimit", "SandboxDestroyed", "VerifyWorkspace", "VerifyTampering", "StepSetup"}
)
_TIME_TYPES = frozenset({"TimeLimit", "TimeExceeded", "AgentTimeout"})
# pytest's short summary: "FAILED tests/test_x.py::test_y - AssertionError: ..."
_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)(?: - (\w[\w.]*)(?::|$))?", re.M)
# a traceback's last line: "ValueError: ...", "calc.Error", "AssertionError"
_EXCEPTION = re.compile(r"^(?:E\s+)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure))\b", re.M)
_DETAIL_CHARS = 300
_NO_CALL = frozenset({"no_tool_call", "empty_response"})


# An exception line ("KeyError: 'x'", "E   AssertionError: ..."), a shell's complaint, a
# test runner's verdict: the line that says what went wrong, in the order they are preferred.
_ERROR_LINE = (
    re.compile(r"^(?:E\s+)?(?:[\w.]*(?:Error|Exception|Exit|Interrupt|Failure)|ERROR|FATAL)\b.*$", re.M),
    re.compile(r"^.*(?:command not found|No such file or directory|Permission denied|not found).*$", re.M),
    re.compile(r"^(?:FAILED|FAIL:) .*$", re.M),
    re.compile(r"^.*\b(?:\d+ failed|[Ee]rror)\b.*$", re.M),
)
_TEST_VERDICT = re.compile(r"\b\d+ failed\b|^FAILED |^FAIL: |AssertionError", re.M)
_LAST_ERROR_CHARS = 200


def last_error(turns: Sequence[Turn]) -> str:
    """The last error the agent saw: from the last observation that reads as a failure (flagged
    as one, an exception, a shell's complaint, failing tests), its most telling line; "" when no
    observation failed."""
    for turn in reversed(turns):
        obs = turn.observation
        if not obs:
            continue
        head_tail = obs if len(obs) <= 8192 else obs[:4096] + "\n" + obs[-4096:]
        if not (turn.observation_is_error or looks_failed(head_tail) or _TEST_VERDICT.search(head_tail)):
            continue
        for pattern in _ERROR_LINE:
            lines = pattern.findall(head_tail)
            if lines:
                return _clip(lines[-1])
        return _clip(next((ln for ln in head_tail.splitlines() if ln.strip()), ""))
    return ""


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= _LAST_ERROR_CHARS else line[: _LAST_ERROR_CHARS - 1] + "…"


# What varies between two episodes that met the same error: the names and values it quotes, the
# directories of a path, line numbers and other numbers, addresses and ids.
_GIST = (
    (re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{8,}\b"), "#"),
    (re.compile(r"(?:[\w.~-]*/)+([\w.-]+)"), r"\1"),
    (re.compile(r"'[^'\n]{0,80}'|\"[^\"\n]{0,80}\"|`[^`\n]{0,80}`"), "'…'"),
    (re.compile(r"\d+(?:\.\d+)?"), "N"),
)


def gist(text: str) -> str:
    """``text`` with what varies between episodes masked: two episodes that met the same error
    have the same gist (``KeyError: 'b'`` at line 12 and ``KeyError: 'c'`` at line 40 alike)."""
    for pattern, repl in _GIST:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def _signature(cause: str, kind: str, tests: str, error: str) -> str:
    return " | ".join(part for part in (cause, kind, tests, gist(error)) if part)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."


def verifier_detail(verifier_log: str) -> str:
    """The failing tests and the exception type, from a verifier's log (pytest's summary lines,
    else the last exception named); "" when the log names neither."""
    failed = _PYTEST_FAILED.findall(verifier_log)
    if failed:
        names = [name for name, _ in failed]
        kinds = [kind for _, kind in failed if kind]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return _short(f"{shown}: {kinds[0]}" if kinds else shown)
    exceptions = _EXCEPTION.findall(verifier_log)
    return exceptions[-1] if exceptions else ""


def failure_cause(
    *,
    status: str,
    reward: float | None,
    tool_calls: int,
    format_errors: Mapping[str, int],
    loop: LoopFinding | None,
    stall: StallFinding | None,
    error_type: str | None,
    error_message: str | None,
    verifier_log: str = "",
    last_error: str = "",
) -> Failure | None:
    """The cause of an unresolved episode (None for a resolved one, an unverified one, or an
    infrastructure failure, which is not the model's and is run again), and its signature."""
    failure = _cause(
        status=status,
        reward=reward,
        tool_calls=tool_calls,
        format_errors=format_errors,
        loop=loop,
        stall=stall,
        error_type=error_type,
        error_message=error_message,
        verifier_log=verifier_log,
    )
    if failure is None:
        return None
    kind = {
        "loop": loop.kind.value if loop else "",
        "format_error": failure.detail.split(" ", 1)[0],
    }.get(failure.cause, error_type or "")
    # the tests say why only when the episode ran to its end; a loop fails every test the same way
    tests = failure.detail if failure.cause == "tests_failed" else ""
    # an error the server or sandbox answered is the error; otherwise the agent's last one
    error = (error_message or "") if error_type else last_error
    return failure.model_copy(update={"signature": _signature(failure.cause, kind, gist(tests), error)})


def _cause(
    *,
    status: str,
    reward: float | None,
    tool_calls: int,
    format_errors: Mapping[str, int],
    loop: LoopFinding | None,
    stall: StallFinding | None,
    error_type: str | None,
    error_message: str | None,
    verifier_log: str,
) -> Failure | None:
    if status == "resolved" or status == "infra_error" or (reward is not None and reward >= 1.0):
        return None
    if reward is None and status not in ("error", "loop_stopped", "max_iterations"):
        return None  # not verified yet: the tests may still pass
    kind, message = error_type or "", error_message or ""
    if kind and (_OVERFLOW.search(message) or _OVERFLOW.search(kind)):
        return Failure(cause="context_overflow", detail=_short(message))
    if kind in _TIME_TYPES:
        return Failure(cause="time_limit", detail=_short(message))
    if kind in _SANDBOX_TYPES or kind.startswith("Sandbox"):
        return Failure(cause="sandbox_error", detail=_short(f"{kind}: {message}"))
    if kind:
        return Failure(cause="model_error", detail=_short(f"{kind}: {message}"))
    if loop is not None:
        stopped = "stopped" if status == "loop_stopped" else "never left"
        return Failure(
            cause="loop", detail=_short(f"{loop.kind} from turn {loop.start_turn} ({stopped}): {loop.unit}")
        )
    if status == "max_iterations":
        return Failure(cause="turn_limit")
    # text-only turns are counted as no_tool_call format errors: a model that never tried a call
    calls_wrong = {k: v for k, v in format_errors.items() if k not in _NO_CALL and v}
    malformed = sum(calls_wrong.values())
    if tool_calls == 0 and malformed == 0:
        return Failure(cause="no_tool_call")
    if malformed and (tool_calls == 0 or 2 * malformed >= tool_calls):
        worst = max(calls_wrong.items(), key=lambda kv: kv[1])[0]
        return Failure(
            cause="format_error", detail=f"{worst} ({malformed} of {max(tool_calls, malformed)} calls)"
        )
    if stall is not None:
        return Failure(cause="stall", detail=_short(f"from turn {stall.start_turn}: {stall.unit}"))
    return Failure(cause="tests_failed", detail=verifier_detail(verifier_log))
