"""Normalisation before comparison: volatile details (ids, pids, times, temp paths) must not hide a loop.

Ordinary numbers are kept: '3 failed' and '1 failed' after an edit are progress, not a loop.
"""

import json
import re
from collections.abc import Callable
from functools import lru_cache

import orjson

# Hex digit bytes -> 1, other bytes -> 0. UTF-8 keeps ASCII characters as they are and sets the high
# bit in every byte of a longer character, so a run of 12 hex digits in a text is a run of 12 ones
# in its translated UTF-8: found at C speed instead of by the regex engine's walk.
_HEX_BYTES = bytes(c in b"0123456789abcdefABCDEF" for c in range(256))


def _has_hex_run(text: str) -> bool:
    return b"\x01" * 12 in text.encode("utf-8", "surrogatepass").translate(_HEX_BYTES)


# (gate, pattern, replacement). A rule runs only when its gate finds something: most texts hold
# no escape codes, uuids, times or temp paths, and the regex engine tries a pattern that starts
# with `\b` at every character (~10 ns a character, nine times per text: the hot spot of
# `harness loops`). A gate is a necessary condition of its pattern that is cheap to look for:
# substrings, or a regex that starts with a literal, which the engine jumps to. So a gate that
# finds nothing proves the rule would change nothing (tests/test_monitor_normalize.py checks it).
# [0-9a-fA-F] is [0-9a-f] under re.I for every code point.
_RULES: tuple[tuple[Callable[[str], object], re.Pattern[str], str], ...] = (
    (lambda t: "\x1b" in t, re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]"), ""),  # terminal escapes
    (
        re.compile(r"-[0-9a-fA-F]{4}-").search,
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (
        re.compile(r"-\d{2}[T ]\d{2}:").search,
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),
        "<time>",
    ),
    (re.compile(r":\d{2}:").search, re.compile(r"\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (lambda t: "0x" in t or "0X" in t, re.compile(r"\b0x[0-9a-f]{6,}\b", re.I), "<addr>"),
    (
        lambda t: "pid" in t or "PID" in t or "process" in t,
        re.compile(r"\b(?:pid|PID|process)[ =:]*\d+"),
        "pid <n>",
    ),
    (lambda t: "/tmp/" in t, re.compile(r"(?:/private)?/tmp/[\w.\-]+"), "<tmp>"),
    (_has_hex_run, re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<hex>"),
    (
        # a digit, maybe one space, then "s" or "ms" (searched from the literal "s")
        re.compile(r"s(?:(?<=\ds)|(?<=\d\ss)|(?<=\dms)|(?<=\d\sms))").search,
        re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b"),
        "<dur>",
    ),
)
_VOLATILE_ARGS = frozenset({"summary", "security_risk", "thought", "reasoning"})
# Beyond this, only the head and tail are normalised (with the length between them), which keeps
# a 10 MB output cheap while a growing output still compares as different.
_HEAD_TAIL = 16_384


def _normalize(text: str) -> str:
    for gate, pattern, repl in _RULES:
        if gate(text):
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
    # Loops repeat the same calls, byte for byte: a cache skips decoding and encoding them again.
    return _canonical_cached(raw) if len(raw) <= 4096 else _canonical(raw)


def _canonical(raw: str) -> str:
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


_canonical_cached = lru_cache(maxsize=8192)(_canonical)
