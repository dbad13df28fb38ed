"""Loop detection on hand-made trajectories: every kind, the onset turn, and no false alarms."""

import json
import random

import pytest

from harness.monitor import LoopConfig, LoopDetector, LoopKind, ToolCall, Turn, degenerate_unit, detect_loops


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=json.dumps(args))


def turn(
    i: int, *calls: ToolCall, text: str = "", obs: str = "", error: bool = False, finish: str = "tool_calls"
) -> Turn:
    return Turn(
        index=i,
        text=text,
        tool_calls=calls,
        observation=obs,
        observation_is_error=error,
        finish_reason=finish,
    )


def explore(n: int) -> list[Turn]:
    """n turns of ordinary, varied work."""
    return [
        turn(i, call("terminal", command=f"cat file{i}.py"), obs=f"contents of file {i}") for i in range(n)
    ]


def test_repeat_call_with_varying_thought_summary_and_ids() -> None:
    turns = explore(3)
    for k in range(6):
        turns.append(
            turn(
                3 + k,
                call("terminal", command="ls -la", summary=f"look around, attempt {k}", security_risk="LOW"),
                text=f"Let me try listing again ({k}).",
                obs=f"total 8\n-rw-r--r-- 1 root root 12 2026-11-22 07:0{k}:01 a.py\n[pid {1000 + k}]",
            )
        )
    f = detect_loops(turns)
    assert f is not None and f.kind == LoopKind.repeat_call
    assert (f.start_turn, f.period, f.repeats, f.detected_at) == (3, 1, 6, 6)
    assert 'terminal({"command":"ls -la"})' in f.unit


def test_online_detection_fires_once_at_the_certain_turn() -> None:
    det = LoopDetector(LoopConfig(repeat_call=4))
    results = [
        det.feed(t) for t in explore(2) + [turn(2 + k, call("think", thought="hmm")) for k in range(6)]
    ]
    fired = [i for i, r in enumerate(results) if r is not None]
    assert fired == [5]  # turns 2,3,4,5 are four identical steps
    assert det.finding is not None and det.finding.start_turn == 2


def test_a_terminal_s_echo_of_the_command_does_not_move_the_onset() -> None:
    """Seen in CI under load: the first of identical `cat` calls came back with the pty's echo of
    the command (and bracketed-paste escapes) before the file, the others without; the loop began
    at turn 0 all the same."""
    body = '"""A tiny calculator."""\n\ndef add(a, b):\n    return a - b\n\x1b[?2004h'
    first = "\x1b[?2004l\x1b[?2004h\n\ncat calc.py\n\x1b[?2004l" + body
    turns = [
        turn(i, call("terminal", command="cat calc.py"), obs=first if i == 0 else "\x1b[?2004l" + body)
        for i in range(6)
    ]
    loop = detect_loops(turns)
    assert loop is not None and loop.kind == LoopKind.repeat_call and loop.start_turn == 0, loop
    # a first line that is only like the command is output, not an echo: no loop from turn 0
    turns[0] = turn(0, call("terminal", command="cat calc.py"), obs="cat calc.py: no such file\n" + body)
    loop = detect_loops(turns)
    assert loop is not None and loop.start_turn == 1, loop


def test_cycle_of_period_two() -> None:
    a = turn(0, call("file_editor", command="view", path="/w/a.py"), obs="A")
    b = turn(0, call("terminal", command="python a.py"), obs="Error: x")
    turns = explore(4) + [(a if k % 2 == 0 else b).model_copy(update={"index": 4 + k}) for k in range(8)]
    f = detect_loops(turns)
    assert f is not None and (f.kind, f.start_turn, f.period, f.repeats) == (LoopKind.cycle, 4, 2, 4)
    assert "file_editor" in f.unit and "terminal" in f.unit


def test_cycle_of_period_three_is_found_not_as_period_six() -> None:
    units = [turn(0, call("terminal", command=c), obs=o) for c, o in (("a", "1"), ("b", "2"), ("c", "3"))]
    turns = [units[k % 3].model_copy(update={"index": k}) for k in range(9)]
    f = detect_loops(turns)
    assert f is not None and (f.kind, f.period, f.start_turn, f.repeats) == (LoopKind.cycle, 3, 0, 3)


def test_repeat_error_of_malformed_calls() -> None:
    bad = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"\n</tool_call>'
    turns = explore(2) + [
        turn(
            2 + k,
            text=bad,
            obs="Error: tool call could not be parsed (invalid JSON)",
            error=True,
            finish="stop",
        )
        for k in range(4)
    ]
    f = detect_loops(turns)
    assert f is not None and (f.kind, f.start_turn, f.repeats) == (LoopKind.repeat_error, 2, 4)
    assert "invalid JSON" in f.unit


def test_repeat_error_of_the_same_failing_call() -> None:
    turns = [
        turn(
            k,
            call("file_editor", command="str_replace", path="/w/a.py", old_str="x", new_str="y"),
            obs="ERROR: No replacement was performed, old_str `x` did not appear verbatim",
            error=True,
        )
        for k in range(3)
    ]
    f = detect_loops(turns)
    assert f is not None and f.kind == LoopKind.repeat_error and f.repeats == 3


def test_repeat_output_near_duplicates() -> None:
    texts = [
        "I will now fix the bug in utils.py by editing the parse function.",
        "I will now fix the bug in utils.py by editing the parse function!",
        "I will now fix the bug in utils.py, by editing the parse function.",
    ]
    turns = explore(1) + [
        turn(1 + k, text=t, obs="Please continue.", finish="stop") for k, t in enumerate(texts)
    ]
    f = detect_loops(turns)
    assert f is not None and (f.kind, f.start_turn, f.repeats) == (LoopKind.repeat_output, 1, 3)


def test_degenerate_text_lines_and_runaway_tail() -> None:
    lines = "Here are the files:\n" + "\n".join(["/Users/user/my_project/main.py"] * 12)
    assert degenerate_unit(lines) == ("/Users/user/my_project/main.py", 12)
    runaway = "Here is the path: /Users/user/" + "my_project/" * 40
    unit, n = degenerate_unit(runaway) or ("", 0)
    assert unit.strip("/") == "my_project" and n >= 39
    f = detect_loops([turn(0, text=runaway, finish="length")])
    assert f is not None and f.kind == LoopKind.degenerate_text and f.start_turn == 0


def test_no_false_alarm_rerunning_tests_after_edits() -> None:
    turns, i = [], 0
    for attempt in range(5):
        turns.append(
            turn(
                i,
                call(
                    "file_editor",
                    command="str_replace",
                    path="/w/m.py",
                    old_str=f"v{attempt}",
                    new_str=f"v{attempt + 1}",
                ),
                obs=f"edited line {attempt}",
            )
        )
        turns.append(
            turn(
                i + 1,
                call("terminal", command="pytest -q"),
                obs=f"{5 - attempt} failed, {attempt} passed in 0.{attempt}1s",
            )
        )
        i += 2
    assert detect_loops(turns) is None


def test_no_false_alarm_polling_a_growing_output() -> None:
    log = ""
    turns = []
    for k in range(10):
        log += f"step {k} done\n"
        turns.append(
            turn(k, call("terminal", command="tail -n 50 train.log", summary="check progress"), obs=log)
        )
    assert detect_loops(turns) is None


def test_no_false_alarm_for_markdown_rules_and_short_repeats() -> None:
    text = "Summary\n" + "-" * 40 + "\nAll tests pass.\n" + "=" * 40 + "\nDone. Done. Done."
    assert degenerate_unit(text) is None
    code = "\n".join(["def f():", "    pass", "}", "}", "}", "x = 1"] * 3)
    assert degenerate_unit(code) is None


def test_odd_input_never_raises() -> None:
    weird = [
        Turn(index=0),
        Turn(index=1, text="\x00\xff" * 10),
        Turn(index=2, tool_calls=(ToolCall(name="", arguments="{{{"),)),
        Turn(index=3, text="x" * 100_000, finish_reason="length"),
    ]
    f = detect_loops(weird)
    assert f is not None and f.kind == LoopKind.degenerate_text and f.start_turn == 3


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        LoopConfig(repeat_call=1)


def every_period_tail(text: str, min_span: int, min_repeats: int) -> tuple[str, int] | None:
    """The substring part of degenerate_unit, trying every period (what its fast path skips)."""
    tail = text[-32_768:].rstrip()
    for period in range(1, min(400, len(tail) // min_repeats) + 1):
        unit = tail[-period:]
        repeats, end = 1, len(tail) - period
        while end >= period and tail[end - period : end] == unit:
            repeats += 1
            end -= period
        needed = min_span if period >= 4 else 2 * min_span
        if repeats >= min_repeats and repeats * period >= needed and (period > 1 or not unit.isspace()):
            return unit, repeats
    return None


def test_degenerate_unit_skips_only_periods_that_cannot_repeat() -> None:
    rng = random.Random(3)
    pieces = ["ab", "a", "Let me check. ", "-", " ", "\t", "xyz", "é", "=" * 3, "ok.", "I will fix it."]
    found = 0
    for _ in range(3000):  # one line each, so only the substring scan can find a unit
        prefix = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        unit = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))
        end = rng.choice(["", " ", "\n", unit[: rng.randint(0, len(unit))]])
        text = prefix + unit * rng.randint(1, 60) + end
        for min_span, min_repeats in ((10, 2), (40, 3), (120, 5)):
            if len(text) >= min_span:
                expected = every_period_tail(text, min_span, min_repeats)
                assert degenerate_unit(text, min_span, min_repeats) == expected, (text, min_span, min_repeats)
                found += expected is not None
    assert found > 1000
