"""Normalisation before comparison: volatile details (ids, pids, times, temp paths) must not hide a loop.

Ordinary numbers are kept: '3 failed' and '1 failed' after an edit are progress, not a loop.
"""

import json
import re
from functools import lru_cache

import orjson

# (gate, pattern, replacement): a rule runs only when its cheap gate matches, since most texts
# hold no escape codes, uuids or temp paths and nine full regex scans per text are the hot spot.
_RULES: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    (("\x1b",), re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]"), ""),  # terminal escapes
    (("-",), re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (
        (":",),
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),
        "<time>",
    ),
    ((":",), re.compile(r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (("0x", "0X"), re.compile(r"\b0x[0-9a-f]{6,}\b", re.I), "<addr>"),
    (("pid", "PID", "process"), re.compile(r"\b(?:pid|PID|process)[ =:]*\d+"), "pid <n>"),
    (("/tmp/",), re.compile(r"(?:/private)?/tmp/[\w.\-]+"), "<tmp>"),
    ((), re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<hex>"),
    (("s",), re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b"), "<dur>"),
)
_VOLATILE_ARGS = frozenset({"summary", "security_risk", "thought", "reasoning"})
# Beyond this, only the head and tail are normalised (with the length between them), which keeps
# a 10 MB output cheap while a growing output still compares as different.
_HEAD_TAIL = 16_384


def _normalize(text: str) -> str:
    for gates, pattern, repl in _RULES:
        if not gates or any(g in text for g in gates):
            text = pattern.sub(repl, text)
    return " ".join(text.split())


_cached = lru_cache(maxsize=8192)(_normalize)


def normalize_text(text: str) -> str:
    if not text:
        return ""
    if len(text) > 2 * _HEAD_TAIL:
        text = f"{text[:_HEAD_TAIL]} <{len(text) - 2 * _HEAD_TAIL} chars> {text[-_HEAD_TAIL:]}"
    # Loops repeat the same texts: a cache makes the repeats nearly free.
    return _cached(text) if len(text) <= 4096 else _normalize(text)


def canonical_arguments(raw: str) -> str:
    """Arguments as canonical JSON without fields that vary with the model's mood, not its action.

    The OpenHands scaffold adds `summary` and `security_risk` to every tool: a model that repeats
    a call while rewording them is still repeating the call. Unparseable arguments stay raw.
    """
    try:
        args = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        return "raw:" + normalize_text(raw)
    if isinstance(args, dict):
        args = {k: v for k, v in args.items() if k not in _VOLATILE_ARGS}
    try:
        return normalize_text(orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode())
    except TypeError:  # e.g. integers beyond 64 bits
        return normalize_text(json.dumps(args, sort_keys=True, ensure_ascii=False))
