"""Stalls: varied attempts that keep getting the same failure back (edit/test thrashing).

The failure mode: a weak model edits a file a different way every time and runs the same test, which
fails the same way each time (35 times in a row in one held-out run). By the rubric that is not a
loop, and the loop detector must stay quiet on it; it is a stall, reported beside loops.
"""

import json

from harness.monitor import StallDetector, ToolCall, Turn, detect_loops, detect_stall

FAILURE = (
    "F\n=== FAILURES ===\n___ test_parse ___\n    assert parse('a,b') == ['a', 'b']\n"
    "E   AssertionError: assert ['a'] == ['a', 'b']\n1 failed in 0.{ms}s"
)


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=json.dumps(args))


def turn(i: int, c: ToolCall, obs: str, error: bool = False) -> Turn:
    return Turn(index=i, tool_calls=(c,), observation=obs, observation_is_error=error)


def thrash(rounds: int, first: int = 3) -> list[Turn]:
    """Exploration, then rounds of (a different edit, the same test, the same failure)."""
    turns = [turn(i, call("bash", command=f"cat f{i}.py"), f"body {i}") for i in range(first)]
    for k in range(rounds):
        edit = call(
            "str_replace_editor",
            command="str_replace",
            path="/r/parse.py",
            old_str="split(',')",
            new_str=f"split(',', {k})",
        )
        turns.append(turn(len(turns), edit, f"The file /r/parse.py has been edited (attempt {k})."))
        turns.append(
            turn(len(turns), call("bash", command="pytest -q tests/test_parse.py"), FAILURE.format(ms=31 + k))
        )
    return turns


def test_edit_test_thrashing_is_a_stall_not_a_loop() -> None:
    turns = thrash(6)
    assert detect_loops(turns) is None  # still trying different things: not a loop
    stall = detect_stall(turns)
    assert stall is not None
    assert (stall.start_turn, stall.repeats, stall.attempts) == (4, 6, 6)  # from the first failing run
    assert stall.unit.startswith("F === FAILURES ===") and "not a loop" in stall.why
    # online: certain at the fourth failure, never before
    detector = StallDetector()
    found = [t.index for t in turns if detector.feed(t) is not None]
    assert found == [10]


def test_edits_that_fail_alike_each_a_different_way_are_a_stall() -> None:
    lint = "Your proposed edit has introduced new syntax error(s).\nE999 IndentationError: unexpected indent"
    turns = [
        turn(k, call("bash", command=f"edit 12:14\n    return x + {k}\nend_of_edit"), lint, error=True)
        for k in range(5)
    ]
    assert detect_loops(turns) is None
    stall = detect_stall(turns)
    assert stall is not None and (stall.start_turn, stall.repeats, stall.attempts) == (0, 5, 5)


def test_a_terminal_echo_of_the_first_command_does_not_hide_the_stall() -> None:
    """Under load a pty echoed the first of four failing imports (after its bracketed-paste
    escapes and blank lines): that observation is the same failure as the others."""
    error = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nModuleNotFoundError: No module named 'nosuchmod'\n"
    imports = (
        "import nosuchmod",
        "import sys, nosuchmod",
        "from nosuchmod import x",
        "import os; import nosuchmod",
    )
    turns = []
    for k, code in enumerate(imports):
        command = f'python3 -c "{code}"'
        echo = f"\x1b[?2004l\x1b[?2004h\n\n{command}\n" if k == 0 else ""
        turns.append(turn(k, call("terminal", command=command), f"{echo}\x1b[?2004l{error}\x1b[?2004h"))
    stall = detect_stall(turns)
    assert stall is not None and (stall.start_turn, stall.repeats) == (0, 4), stall


def test_what_is_not_a_stall() -> None:
    # the same call failing alike is a loop (repeat_error), not a stall
    same = [turn(k, call("bash", command="pytest -q"), FAILURE.format(ms=1), error=True) for k in range(5)]
    assert detect_stall(same) is None and detect_loops(same) is not None
    # greps that find nothing: an exit code around empty output is no failure to be stuck on
    greps = [
        turn(k, call("bash", command=f"grep -rn x{k} src"), "<returncode>1</returncode>\n<output>\n</output>")
        for k in range(6)
    ]
    assert detect_stall(greps) is None
    # progress: the failure changes after each edit
    moving = thrash(6)
    moving = [
        t.model_copy(update={"observation": t.observation.replace("1 failed", f"{9 - t.index // 2} failed")})
        for t in moving
    ]
    assert detect_stall(moving) is None
    # three failures only; then a long stretch without it ends the count
    short = (
        thrash(3) + [turn(9 + k, call("bash", command=f"ls d{k}"), f"d{k}") for k in range(8)] + thrash(1, 0)
    )
    short = [t.model_copy(update={"index": i}) for i, t in enumerate(short)]
    assert detect_stall(short) is None


def test_edits_writing_different_sentences_are_different_attempts() -> None:
    # notes appended one sentence at a time, and docstrings rewritten: the prose an edit writes is
    # what it does (masked as prose, four appends in a row were one edit repeated: a false loop)
    sentences = [
        "Split the line on commas and return the fields.",
        "Return every comma separated field of the line.",
        "Parse one line of the file into its fields.",
        "Break the input at each comma, keeping empty fields.",
    ]
    notes = [
        turn(k, call("bash", command=f'echo "{doc}" >> NOTES.md'), "") for k, doc in enumerate(sentences)
    ]
    assert detect_loops(notes) is None
    turns = []
    for k, doc in enumerate(sentences):
        edit = call(
            "str_replace_editor",
            command="str_replace",
            path="/r/parse.py",
            old_str='"""',
            new_str=f'"""{doc}',
        )
        turns.append(turn(2 * k, edit, "The file /r/parse.py has been edited."))
        turns.append(turn(2 * k + 1, call("bash", command="pytest -q"), FAILURE.format(ms=5)))
    assert detect_loops(turns) is None
    stall = detect_stall(turns)
    assert stall is not None and (stall.start_turn, stall.repeats) == (1, 4)
