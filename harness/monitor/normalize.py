"""Normalisation before comparison: volatile details (ids, pids, times, temp paths) must not hide a loop.

Ordinary numbers are kept: '3 failed' and '1 failed' after an edit are progress, not a loop. What
an observation numbers only to point at something (a renumbered DOM element index, a shell's
`line N:`, `(N lines total)`, a REPL's `In [N]:`) is masked in observations, never in actions:
clicking element 4 and element 6 are different actions, while the page listing them is the same
page whatever its numbering.
"""

import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

import orjson

# Hex digit bytes -> 1, other bytes -> 0. UTF-8 keeps ASCII characters as they are and sets the high
# bit in every byte of a longer character, so a run of 12 hex digits in a text is a run of 12 ones
# in its translated UTF-8: found at C speed instead of by the regex engine's walk.
_HEX_BYTES = bytes(c in b"0123456789abcdefABCDEF" for c in range(256))


def _has_hex_run(text: str) -> bool:
    return b"\x01" * 12 in text.encode("utf-8", "surrogatepass").translate(_HEX_BYTES)


class _Rule(NamedTuple):
    r"""A mask: ``pattern`` matches are replaced by ``repl``, where ``gate`` or ``starts`` allow.

    A rule runs only when its gate finds something: most texts hold no escape codes, uuids, times
    or temp paths, and the regex engine tries a pattern that starts with `\b` at every character
    (~10 ns a character, nine times per text: the hot spot of `harness loops`). A gate is a
    necessary condition of its pattern that is cheap to look for: substrings, or a regex that
    starts with a literal, which the engine jumps to. So a gate that finds nothing proves the rule
    would change nothing (tests/test_monitor_normalize.py checks it). [0-9a-fA-F] is [0-9a-f]
    under re.I for every code point. A pattern that would start with `\b` starts with its first
    character's class instead, followed by a lookbehind for the boundary (`\d(?<!\w\d)` is `\b\d`):
    the engine then only tries positions where that class matches.

    ``starts``, where given, runs once the gate found something: every position where a match can
    start, found from substrings (or a literal-led regex) at C speed, so that the pattern is tried
    only there instead of at every digit or common letter; None when there are too many to try
    one by one.
    """

    gate: Callable[[str], object]
    pattern: re.Pattern[str]
    repl: str
    starts: Callable[[str], list[int] | None] | None = None


# Beyond this many candidate starts, one pass of the regex engine is cheaper than a Python loop.
_MAX_STARTS = 24


def _sub_at(pattern: re.Pattern[str], repl: str, text: str, starts: list[int]) -> str:
    r"""``pattern.sub(repl, text)`` when every match starts at one of ``starts`` (ascending).

    The same matches as sub's scan: tried in order from where the last match ended, each with
    the whole text around it (lookbehinds and `\b` see what precedes). None of the patterns
    matches the empty string.
    """
    out: list[str] = []
    last = 0
    for at in starts:
        if at >= last and (m := pattern.match(text, at)):
            out += (text[last:at], m.expand(repl))
            last = m.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _literal(needle: str) -> Callable[..., re.Match[str] | None]:
    """A search for ``needle``: the regex engine's literal scan is about twice as fast as `in` or
    str.find for needles of two to four characters (CPython 3.12), and no slower for longer ones."""
    return re.compile(re.escape(needle)).search


def _needles(*needles: tuple[str, int]) -> Callable[[str], list[int] | None]:
    """Starts at each occurrence of a needle less its offset (a match begins ``offset`` before);
    a needle given with several offsets is searched once."""
    offsets: dict[str, list[int]] = {}
    for needle, offset in needles:
        offsets.setdefault(needle, []).append(offset)
    finders = tuple((_literal(needle), tuple(offs)) for needle, offs in offsets.items())
    single = len(needles) == 1

    def starts(text: str) -> list[int] | None:
        found: list[int] = []
        for search, offs in finders:
            m = search(text)
            while m is not None:
                at = m.start()
                found += [at - offset for offset in offs if at >= offset]
                if len(found) > _MAX_STARTS:
                    return None
                m = search(text, at + 1)
        return found if single else sorted(set(found))

    return starts


def _any(first: str, second: str, third: str) -> Callable[[str], bool]:
    """A gate: whether any of three needles occurs (each searched at C speed)."""
    a, b, c = _literal(first), _literal(second), _literal(third)
    return lambda text: a(text) is not None or b(text) is not None or c(text) is not None


# A duration's unit: an "s" after a digit, maybe one space and an "m"; "sec" and "seconds" too.
_UNIT = re.compile(r"s(?:(?<=\ds)|(?<=\d\ss)|(?<=\dms)|(?<=\d\sms))(?:ec|econds)?\b")


def _duration_starts(text: str) -> list[int] | None:
    """Where a duration can start: the run of digits and dots before each unit (`12.5 ms`)."""
    found: list[int] = []
    for unit in _UNIT.finditer(text):
        at = unit.start()
        for end in (at - 1, at - 2, at - 3):  # the number's last digit: "5s", "5 s" or "5ms", "5 ms"
            if end >= 0 and text[end].isdecimal():  # \d is a Unicode decimal digit
                begin = end
                while begin > 0 and (text[begin - 1].isdecimal() or text[begin - 1] == "."):
                    begin -= 1
                found += range(begin, end + 1)
        if len(found) > _MAX_STARTS:
            return None
    return sorted(set(found))


_PID_STARTS = _needles(("pid", 0), ("PID", 0), ("process", 0))
_TMP_STARTS = _needles(("/tmp/", 0), ("/tmp/", len("/private")))  # /tmp/x or /private/tmp/x
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_RULES: tuple[_Rule, ...] = (
    _Rule(lambda t: "\x1b" in t, _ESCAPES, ""),  # terminal escapes
    _Rule(
        re.compile(r"-[0-9a-fA-F]{4}-").search,
        re.compile(
            r"[0-9a-fA-F](?<!\w[0-9a-fA-F])[0-9a-f]{7}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
            re.I,
        ),
        "<uuid>",
    ),
    _Rule(
        re.compile(r"-\d{2}[T ]\d{2}:").search,
        re.compile(r"\d(?<!\w\d)\d{3}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),
        "<time>",
    ),
    _Rule(re.compile(r":\d\d:\d\d").search, re.compile(r"\d(?<!\w\d)\d:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    _Rule(re.compile("0[xX]").search, re.compile(r"0(?<!\w0)x[0-9a-f]{6,}\b", re.I), "<addr>"),
    _Rule(
        _any("pid", "PID", "process"),
        re.compile(r"[pP](?<!\w[pP])(?:(?<=p)(?:id|rocess)|(?<=P)ID)[ =:]*\d+"),
        "pid <n>",
        _PID_STARTS,
    ),
    _Rule(_literal("/tmp/"), re.compile(r"/(?:private/tmp|tmp)/[\w.\-]+"), "<tmp>", _TMP_STARTS),
    _Rule(_has_hex_run, re.compile(r"[0-9a-fA-F](?<!\w[0-9a-fA-F])[0-9a-f]{11,}\b", re.I), "<hex>"),
    _Rule(
        _UNIT.search,
        re.compile(r"\d(?<!\w\d)\d*(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b"),
        "<dur>",
        _duration_starts,
    ),
)
_VOLATILE_ARGS = frozenset({"summary", "security_risk", "thought", "reasoning"})
# Beyond this, only the head and tail are normalised (with the length between them), which keeps
# a 10 MB output cheap while a growing output still compares as different.
_HEAD_TAIL = 16_384


def _apply(rule: _Rule, text: str) -> str:
    gate, pattern, repl, starts = rule
    if not gate(text):
        return text
    if starts is None or (at := starts(text)) is None:
        return pattern.sub(repl, text)
    return _sub_at(pattern, repl, text, at) if at else text


def _normalize(text: str) -> str:
    for gate, pattern, repl, starts in _RULES:  # _apply, inlined: this loop runs for every text
        if not gate(text):
            continue
        if starts is None or (at := starts(text)) is None:
            text = pattern.sub(repl, text)
        elif at:
            text = _sub_at(pattern, repl, text, at)
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
    return canonical_and_gist(raw)[0]


def canonical_and_gist(raw: str) -> tuple[str, str]:
    """(canonical arguments, the same with prose strings masked as `<text>`), decoded once."""
    # Loops repeat the same calls, byte for byte: a cache skips decoding and encoding them again.
    return _canonical_cached(raw) if len(raw) <= 4096 else _canonical(raw)


@lru_cache(maxsize=8192)
def exact_arguments(raw: str) -> str:
    """Arguments as canonical JSON without the fields that vary with the model's mood, nothing
    else masked: an edit's numbers say where it writes (``sed -i "910s/^/    /"``, an
    ``insert_line``), so edits of other lines are other calls. Unparseable arguments stay raw."""
    try:
        args = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        return "raw:" + raw
    if isinstance(args, dict):
        args = {k: v for k, v in args.items() if k not in _VOLATILE_ARGS}
    try:
        return orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # e.g. integers beyond 64 bits
        return json.dumps(args, sort_keys=True, ensure_ascii=False)


def _dumps(args: object) -> str:
    try:
        return normalize_text(orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode())
    except TypeError:  # e.g. integers beyond 64 bits
        return normalize_text(json.dumps(args, sort_keys=True, ensure_ascii=False))


def _canonical(raw: str) -> tuple[str, str]:
    try:
        args = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        text = "raw:" + normalize_text(raw)
        return text, text
    if isinstance(args, dict):
        args = {k: v for k, v in args.items() if k not in _VOLATILE_ARGS}
    canonical = _dumps(args)
    if canonical.count(" ") < 3:  # prose needs four words
        return canonical, canonical
    masked, changed = _gist_value(args)
    return canonical, _dumps(masked) if changed else canonical


_canonical_cached = lru_cache(maxsize=8192)(_canonical)


# Observation-only rules, (label, rule): numbers whose role is to point at something that the
# tool renumbers or counts on its own, not a quantity the agent changes.
_IDX, _ID, _LINES_TOTAL, _MORE_LINES, _IN, _OUT = map(
    _literal, ("idx", "_id", "lines total", "more lines", "In [", "Out[")
)
_ELEMENT_STARTS = _needles(("lement", 1), ("ith index", 1), ("nto index", 1))
_OBSERVATION_RULES: tuple[tuple[str, _Rule], ...] = (
    (
        "element indices",  # in browser state JSON (browser-use, OpenHands browser tools)
        _Rule(
            lambda t: '"' in t and ("index" in t or _IDX(t) or _ID(t)),
            re.compile(r'"(index|idx|node_id|backend_node_id|element_id)": ?\d+'),
            r'"\1": <n>',
        ),
    ),
    ("element indices", _Rule(_literal("]<"), re.compile(r"\[\d+\]<"), "[<n>]<")),  # [12]<button>
    (
        "element indices",  # "Clicked element 12", "Element with index 12 not found", "into index 12"
        _Rule(
            _any("lement", "ith index", "nto index"),
            re.compile(r"([Eewi](?:(?<=[Ee])lement(?: with index)?|(?<=w)ith index|(?<=i)nto index)) ?#?\d+"),
            r"\1 <n>",
            _ELEMENT_STARTS,
        ),
    ),
    (
        "element refs",
        _Rule(_literal("ref="), re.compile(r"ref=e?\d+"), "ref=<n>"),
    ),  # Playwright snapshots
    ("line numbers", _Rule(_literal("line "), re.compile(r"line \d+"), "line <n>")),  # bash: line 7:
    (
        "line counts",
        _Rule(
            lambda t: _LINES_TOTAL(t) or _MORE_LINES(t),
            re.compile(r"\d+(?= lines total| more lines)"),
            "<n>",
        ),
    ),
    (
        "REPL counters",
        _Rule(lambda t: _IN(t) or _OUT(t), re.compile(r"(In |Out)\[\d+\]"), r"\1[<n>]"),
    ),
    ("temp names", _Rule(lambda t: "tmp" in t, re.compile(r"tmp[a-z0-9_]{6,}"), "<tmp>")),
)


def _normalize_observation(text: str) -> str:
    text = _normalize(text)
    for _label, (gate, pattern, repl, starts) in _OBSERVATION_RULES:  # as in _normalize
        if not gate(text):
            continue
        if starts is None or (at := starts(text)) is None:
            text = pattern.sub(repl, text)
        elif at:
            text = _sub_at(pattern, repl, text, at)
    return text


_observation_cached = lru_cache(maxsize=8192)(_normalize_observation)


def normalize_observation(text: str) -> str:
    """normalize_text, then the observation-only masks (renumbered indices, line numbers, counters)."""
    if not text:
        return ""
    if len(text) > 2 * _HEAD_TAIL:
        text = f"{text[:_HEAD_TAIL]} <{len(text) - 2 * _HEAD_TAIL} chars> {text[-_HEAD_TAIL:]}"
    return _observation_cached(text) if len(text) <= 4096 else _normalize_observation(text)


def without_echo(observation: str, arguments: str) -> str:
    """``observation`` less a terminal's echo of the command it ran, when its first line is one of
    the call's one-line string arguments (``arguments``: their JSON). Whether a pty's output shows
    the typed command depends on timing (seen under load: the first of four identical ``cat`` calls
    carried it, and the loop's onset moved a turn), not on what the command did."""
    text = _ESCAPES.sub("", observation) if "\x1b" in observation else observation
    first, _, rest = text.lstrip().partition("\n")
    first = first.strip()
    if not first:
        return observation
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return observation
    if isinstance(args, dict) and any(isinstance(v, str) and v.strip() == first for v in args.values()):
        return rest
    return observation


def volatile_details(texts: list[str]) -> list[str]:
    """What normalisation hid where ``texts`` differ but normalise alike (for a finding's why)."""
    current = {" ".join(t.split()) for t in texts}
    if len(current) < 2:
        return []
    found: list[str] = []
    if len(after := {_normalize(t) for t in current}) < len(current):
        found.append("ids, times or paths")
    current = after
    for label, rule in _OBSERVATION_RULES:
        after = {_apply(rule, t) for t in current}
        if len(after) < len(current) and label not in found:
            found.append(label)
        current = after
    return found


# Why a result reads as a failure when the tool did not flag it (a shell's non-zero exit is no
# tool error to OpenHands): the usual last words of failing commands and tools.
_FAILURE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|^\s*(?:[\w.]*(?:Error|Exception)|ERROR|FATAL|fatal|error)(?:\[\w+\])?:"
    r"|: command not found|No such file or directory|Permission denied|\bnot found\b"
    r"|cannot (?:stat|access|open|find|create|remove)"
    r"|(?:exit (?:code|status)|returncode>|exit_code\W{0,3})\s*-?[1-9]",
    re.M,
)


def looks_failed(text: str) -> bool:
    """Whether an observation reads as a failure (head and tail searched; called lazily)."""
    if len(text) > 8192:
        text = text[:4096] + "\n" + text[-4096:]
    return _FAILURE.search(text) is not None


# A scaffold's answer to a response it could not run (its format-error feedback, an unknown tool):
# nothing ran, whatever the response said. SWE-agent's parsers, mini-swe-agent's templates and
# OpenHands' unknown-tool error; such feedback opens the message, so only its head is searched.
_REFUSED = re.compile(
    r"did not use any tool calls|included multiple tool calls|not formatted correctly"
    r"|could not be parsed|EXACTLY ONE action|No tool calls found in the response"
    r"|^\s*(?:Tool call error|Format error):|Error parsing tool call arguments|Unknown tool '"
    r"|Tool '[^'\n]{1,80}' not found|reached the output token limit",
    re.M,
)


def refused(text: str) -> bool:
    """Whether an observation is the scaffold refusing to run the response (nothing ran)."""
    return _REFUSED.search(text[:1000]) is not None


_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.S | re.I)


def without_thinking(text: str) -> str:
    """A response's text without its reasoning blocks (``<think>...</think>``, an unclosed one to
    the end): what it says, as opposed to what it thought."""
    return _THINKING.sub("", text) if "<" in text else text


# Prose inside an action (a message to a person, a reworded note) is wording, not what the action
# does: `chat_npc "Nathan" "<any wording>"` asks Nathan. Prose is sentences: four words or more,
# punctuated as sentences are (`, `, `. `, a final `.`, `?` or `!`), at least three in four of them
# plain words (not flags, paths or numbers), and nothing of code (braces, brackets, `=`, `$`,
# pipes, backslashes, calls). A command line or a search phrase is not prose; a sentence quoted
# inside a command line is.
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'')
_CODE_CHARS = re.compile(r"[{}\[\]=<>|$`\\]")
_PUNCTUATION = ".,;:!?()\"'\u2019"
_CALL = re.compile(r"\w\(")  # f(x): code
_SENTENCE_MARK = re.compile(r"[,.?!;] ")  # ", ", ". ", "? ", "! " or "; " (one search, not five)


def is_prose(text: str) -> bool:
    text = text.strip()
    if not text or not (text[-1] in ".?!" or _SENTENCE_MARK.search(text)):
        return False
    if _CODE_CHARS.search(text) or ("(" in text and _CALL.search(text)):
        return False
    words = text.split()
    if len(words) < 4:
        return False
    allowed = len(words) // 4  # words that are not plain words (flags, paths, numbers, symbols)
    for word in words:
        word = word.strip(_PUNCTUATION)
        if word.startswith("-") or not word.replace("'", "").replace("\u2019", "").replace("-", "").isalpha():
            allowed -= 1
            if allowed < 0:
                return False
    return True


def _prose_quoted(match: re.Match[str]) -> str:
    return "<text>" if is_prose(match.group()[1:-1]) else match.group()


def _gist_value(value: object) -> tuple[object, bool]:
    """(value with prose masked, whether anything was masked)."""
    if isinstance(value, str):
        if ('"' in value or "'" in value) and "\n" not in value:  # one command line
            masked = _QUOTED.sub(_prose_quoted, value)
            if masked != value:
                return masked, True  # a command line with prose arguments: `notify "Nathan" "<text>"`
        return ("<text>", True) if is_prose(value) else (value, False)
    if isinstance(value, list | dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        masked_items = [(k, *_gist_value(v)) for k, v in items]
        if not any(changed for _, _, changed in masked_items):
            return value, False
        if isinstance(value, dict):
            return {k: v for k, v, _ in masked_items}, True
        return [v for _, v, _ in masked_items], True
    return value, False
