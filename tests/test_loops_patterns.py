"""Two loop patterns of other agents' labelled runs, written from their description (issue 33):
pure logic, hand-made turns.

1. Every response is prose run as a command: the same shell error comes back from the first turn
   while the wording varies. A repeat_error loop from its first occurrence (it was found turns
   late, as repeat_call, once calls began to repeat).
2. Edit/test alternations where each edit changes another line (``sed -i "910s/^/    /"``, then
   918s, 937s, ...) and the test's error moves with it: progress, at most a stall, never a cycle
   (masked numbers made the edits look like one call).
"""

import json

from harness.monitor import LoopKind, ToolCall, Turn, detect_loops

PROSE = [
    "I will start by looking at the repository layout",
    "Let me look at the failing test first",
    "Now I should read the module that raises",
    "First, I need to understand the error",
    "The next step is to open utils.py",
    "Okay, let me try to run the test suite",
    "We should check the imports in setup.py",
]


def shell(i: int, command: str, obs: str) -> Turn:
    call = ToolCall(name="terminal", arguments=json.dumps({"command": command}))
    return Turn(index=i, tool_calls=(call,), observation=obs, finish_reason="tool_calls")


def not_found(command: str) -> str:
    word = command.split()[0]
    return f"bash: {word}: command not found\n[The command completed with exit code 127.]"


def test_prose_run_as_commands_is_a_repeat_error_from_its_first_turn() -> None:
    turns = [shell(0, "ls", "README.md  setup.py  src  tests")]
    turns += [shell(1 + k, text, not_found(text)) for k, text in enumerate(PROSE)]
    found = detect_loops(turns)
    assert found is not None
    assert (found.kind, found.start_turn, found.detected_at) == (LoopKind.repeat_error, 1, 3), found
    assert found.repeats == len(PROSE)
    assert "command not found" in (found.why or "")


def test_multi_line_prose_with_a_quote_is_the_same_shell_error_each_time() -> None:
    """Each line a command, an apostrophe leaves a quote open: the kinds of error, not their words."""
    turns = []
    for k, text in enumerate(PROSE[:4]):
        obs = (
            f"bash: {text.split()[0]}: command not found\n"
            f"bash: line {k + 2}: unexpected EOF while looking for matching `''\n"
            "bash: line 3: syntax error: unexpected end of file"
        )
        turns.append(shell(k, f"{text}\nI'll then fix it", obs))
    found = detect_loops(turns)
    assert found is not None and (found.kind, found.start_turn) == (LoopKind.repeat_error, 0), found


def test_commands_that_fail_in_their_own_words_are_not_this_loop() -> None:
    """Different real commands, each failing its own way (a missing file, a failing import): an
    agent exploring, not a shell refusing prose."""
    turns = [
        shell(0, "cat config.yaml", "cat: config.yaml: No such file or directory"),
        shell(1, "python -c 'import foo'", "ModuleNotFoundError: No module named 'foo'"),
        shell(2, "ls build", "ls: cannot access 'build': No such file or directory"),
        shell(3, "grep -rn main src", "src/app.py:3:def main():"),
    ]
    assert detect_loops(turns) is None


def test_edits_down_a_file_with_the_error_moving_are_not_a_cycle() -> None:
    turns = []
    lines = [910, 918, 937, 952, 966, 981]
    for k, line in enumerate(lines):
        turns.append(shell(2 * k, f'sed -i "{line}s/^/    /" src/parser.py', ""))
        nxt = lines[k + 1] if k + 1 < len(lines) else 990
        turns.append(
            shell(
                2 * k + 1,
                "python -m pytest -q tests/test_parser.py",
                f'  File "src/parser.py", line {nxt}\n    return x\nIndentationError: unexpected indent\n'
                "1 error in 0.31s",
            )
        )
    found = detect_loops(turns)
    assert found is None or found.kind not in (LoopKind.cycle, LoopKind.repeat_call), found


def test_the_same_edit_and_test_again_and_again_is_still_a_cycle() -> None:
    """The control: the same line edited each time, the same error back."""
    turns = []
    for k in range(4):
        turns.append(shell(2 * k, 'sed -i "910s/^/    /" src/parser.py', ""))
        turns.append(
            shell(
                2 * k + 1,
                "python -m pytest -q tests/test_parser.py",
                '  File "src/parser.py", line 910\nIndentationError: unexpected indent\n1 error in 0.31s',
            )
        )
    found = detect_loops(turns)
    assert found is not None and found.kind in (LoopKind.cycle, LoopKind.repeat_call), found
