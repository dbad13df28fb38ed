"""Normalisation before comparison: volatile details (ids, pids, times, temp paths) must not hide a loop.

Ordinary numbers are kept: '3 failed' and '1 failed' after an edit are progress, not a loop.
"""

import json
import re

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]"),
        "",
    ),  # terminal escapes (bracketed paste, colours)
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b0x[0-9a-f]{6,}\b", re.I), "<addr>"),
    (re.compile(r"\b(?:pid|PID|process)[ =:]*\d+"), "pid <n>"),
    (re.compile(r"(?:/private)?/tmp/[\w.\-]+"), "<tmp>"),
    (re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<hex>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b"), "<dur>"),
    (re.compile(r"\s+"), " "),
)
_VOLATILE_ARGS = frozenset({"summary", "security_risk", "thought", "reasoning"})


# Beyond this, only the head and tail are normalised (with the length between them), which keeps
# a 10 MB output cheap while a growing output still compares as different.
_HEAD_TAIL = 16_384


def normalize_text(text: str) -> str:
    if not text:
        return ""
    if len(text) > 2 * _HEAD_TAIL:
        text = f"{text[:_HEAD_TAIL]} <{len(text) - 2 * _HEAD_TAIL} chars> {text[-_HEAD_TAIL:]}"
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text.strip()


def canonical_arguments(raw: str) -> str:
    """Arguments as canonical JSON without fields that vary with the model's mood, not its action.

    The OpenHands scaffold adds `summary` and `security_risk` to every tool: a model that repeats
    a call while rewording them is still repeating the call. Unparseable arguments stay raw.
    """
    try:
        args = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, RecursionError):
        return "raw:" + normalize_text(raw)
    if isinstance(args, dict):
        args = {k: v for k, v in args.items() if k not in _VOLATILE_ARGS}
        return normalize_text(json.dumps(args, sort_keys=True, ensure_ascii=False))
    return normalize_text(json.dumps(args, sort_keys=True, ensure_ascii=False))
