"""Normalisation: the cheap gates in front of each rule only skip work, never change a result."""

import random
import re
import sys

import pytest

from harness.monitor.normalize import (
    _OBSERVATION_RULES,
    _RULES,
    _normalize,
    canonical_arguments,
    normalize_observation,
    normalize_text,
)

FRAGMENTS = [
    "550e8400-e29b-41d4-a716-446655440000",
    "550E8400-E29B-41D4-A716-44665544000",
    "-abcd-",
    "2024-01-02T03:04:05.123Z",
    "2024-01-02 03:04:05+01:00",
    "-01-02 03:",
    "12:34:56",
    "12:34:56.789",
    "1:2:3",
    "٣٤:٥٦:٧٨",  # Unicode digits are \d too
    "0xdeadbeef",
    "0XABCDEF01",
    "0x12",
    "pid 42",
    "PID=7",
    "process:9",
    "/tmp/abc-1.x",
    "/private/tmp/y",
    "deadbeefcafe",
    "0123456789abcdefABCDEF",
    "abcdefabcde",
    "3.5s",
    "12 ms",
    "4 seconds",
    "7 sec",
    "5\u2003s",
    "9ms",
    "٣s",
    "\x1b[31m",
    "\x1bM",
    "\ud800",
    "é",
    "中文",
    "\u212a",
    "s",
    "m",
    "-",
    ":",
    " ",
    "\n",
    "_",
    "x",
    "1",
    "a",
    "F",
]


def random_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def ungated(text: str) -> str:
    for rule in _RULES:
        text = rule.pattern.sub(rule.repl, text)
    return " ".join(text.split())


def test_each_gate_is_a_necessary_condition_of_its_rule() -> None:
    for text in random_texts(20_000):
        for gate, pattern, repl, _starts in _RULES:
            if pattern.search(text):
                assert gate(text), (pattern.pattern, text)
            text = pattern.sub(repl, text)  # the next rule sees what this one left


def test_gated_normalisation_equals_running_every_rule() -> None:
    for text in random_texts(20_000, seed=11):
        assert _normalize(text) == ungated(text), text
    assert normalize_text("run 12:34:56 took 3.5s at 0xdeadbeef") == "run <time> took <dur> at <addr>"


@pytest.mark.slow
def test_hex_class_without_ignorecase_is_the_same_for_every_code_point() -> None:
    """The uuid and hex gates spell out [0-9a-fA-F] where the rules use [0-9a-f] with re.I."""
    folded, spelled = re.compile("[0-9a-f]", re.I), re.compile("[0-9a-fA-F]")
    differ = [
        c for c in range(sys.maxunicode + 1) if bool(folded.match(chr(c))) != bool(spelled.match(chr(c)))
    ]
    assert differ == []


def test_canonical_arguments() -> None:
    assert canonical_arguments('{"b": 1, "a": 2, "summary": "x"}') == '{"a":2,"b":1}'
    assert canonical_arguments("{oops") == "raw:{oops"
    assert canonical_arguments("  ") == "{}"


OBSERVATION_FRAGMENTS = [
    '"index": 12',
    '"index":7',
    '"idx": 3',
    '"node_id": 40',
    '"backend_node_id":5',
    '"element_id": 9',
    "[12]<a>",
    "[3]<",
    "Clicked element 12",
    "Element with index 7",
    "ELEMENT #4",
    "with index 5",
    "into index 8",
    "[ref=e12]",
    "ref=3",
    "line 4",
    "Line 5",
    "(120 lines total)",
    "(3 more lines above)",
    "In [3]:",
    "Out[4]:",
    "tmpab_12cd",
    "tmp",
    "\n[1] 4242\n",
    "[2]+ 17",
    "index",
    "element",
    "lines",
    "\n",
    " ",
    "1",
    '"',
    ":",
]


def test_each_observation_gate_is_a_necessary_condition_of_its_rule() -> None:
    rng = random.Random(5)
    for _ in range(20_000):
        text = "".join(rng.choice(OBSERVATION_FRAGMENTS + FRAGMENTS) for _ in range(rng.randint(1, 10)))
        text = _normalize(text)  # the observation rules see normalised text
        for _label, (gate, pattern, repl, _starts) in _OBSERVATION_RULES:
            if pattern.search(text):
                assert gate(text), (pattern.pattern, text)
            text = pattern.sub(repl, text)


def test_normalize_observation_is_normalize_text_then_the_masks() -> None:
    raw = "\x1b[31m12:34:56\x1b[0m Clicked element 1233; bash: line 7: x: command not found"
    assert normalize_observation(raw) == "<time> Clicked element <n>; bash: line <n>: x: command not found"
    assert normalize_text(raw) == "<time> Clicked element 1233; bash: line 7: x: command not found"
    big = "Clicked element 5\n" + "x" * 40_000 + "\nline 9"
    assert normalize_observation(big).startswith("Clicked element <n>") and normalize_observation(
        big
    ).endswith("line <n>")
