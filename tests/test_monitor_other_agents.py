"""Loops of agents and models the detector was not built on (issue 24): each case is a failure mode
seen in other agents' runs or reported by their users, with the legitimate behaviour beside it that
must stay quiet.

- responses whose "action" the scaffold refused to run (its format-error feedback, an unknown
  tool), reworded every turn: repeat_error from the first of them;
- reasoning-only responses that never act;
- the same edit again and again, its output growing with the file;
- calls whose arguments vary but whose results repeat verbatim;
- a sentence chanted inside one response that then ends normally;
- cycles of period 3 to 5 found online, with their onset at the block's first turn.
"""

import json

from harness.monitor import LoopDetector, LoopKind, ToolCall, Turn, detect_loops
from harness.monitor.loops import chanted_unit


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=json.dumps(args))


def turn(i: int, *calls: ToolCall, text: str = "", obs: str = "", error: bool = False) -> Turn:
    return Turn(index=i, text=text, tool_calls=calls, observation=obs, observation_is_error=error)


def explore(n: int) -> list[Turn]:
    return [turn(i, call("bash", command=f"cat f{i}.py"), obs=f"body {i}") for i in range(n)]


def reindex(turns: list[Turn]) -> list[Turn]:
    return [t.model_copy(update={"index": i}) for i, t in enumerate(turns)]


def online(turns: list[Turn]) -> tuple[int | None, object]:
    """(the turn at which the detector fed turn by turn became certain, its finding)."""
    detector = LoopDetector()
    for t in turns:
        if (found := detector.feed(t)) is not None:
            return t.index, found
    return None, None


# ---- responses the scaffold refused to run ---------------------------------------------------------

SWE_AGENT_FORMAT_ERROR = (
    "Your output was not formatted correctly. You must always include one discussion and one command "
    "as part of your response. Make sure you do not have multiple discussion/command tags.\n"
    "Please make sure your output precisely matches the following format:\nDISCUSSION\n..."
)


def test_reworded_responses_the_scaffold_refused_are_repeat_error_from_the_first() -> None:
    # A parser that took each response's prose for its command (SWE-agent's identity-like parsing),
    # answered with the format error every time: nothing ran, whatever the wording.
    prose = [
        "I will now look at the file to understand it better",
        "Let me carefully think about what the parser does here",
        "First I should understand the structure of the repository",
        "The next step is to review the failing test once more",
    ]
    turns = explore(2) + [
        turn(2 + k, call("bash", command=p), obs=SWE_AGENT_FORMAT_ERROR) for k, p in enumerate(prose)
    ]
    at, f = online(turns)
    assert f is not None and at == 4
    assert (f.kind, f.start_turn) == (LoopKind.repeat_error, 2)  # type: ignore[attr-defined]
    assert f.unit.startswith("refused calls => Your output was not formatted correctly")  # type: ignore[attr-defined]
    assert "refusal" in f.why  # type: ignore[attr-defined]


def test_calls_to_a_tool_that_does_not_exist_are_repeat_error() -> None:
    refusal = "Tool 'trmall' not found. Available: ['terminal', 'file_editor', 'finish']"
    turns = [
        turn(k, call("trmall", command=c), obs=refusal, error=True)
        for k, c in enumerate(["ls", "pwd", "ls -a"])
    ]
    f = detect_loops(turns)
    assert f is not None and (f.kind, f.start_turn, f.repeats) == (LoopKind.repeat_error, 0, 3)


def test_varied_commands_failing_alike_are_not_refusals() -> None:
    # the commands ran (and failed): thrashing, not responses that ran nothing
    turns = explore(2) + [
        turn(2 + k, call("bash", command=c), obs="make: *** [Makefile:192: build] Error 2")
        for k, c in enumerate(["make", "make clean && make", "rm -rf build && make", "make -j1"])
    ]
    assert detect_loops(turns) is None


# ---- reasoning that never acts -----------------------------------------------------------------------


def test_reasoning_only_responses_that_never_act_are_repeat_error() -> None:
    thoughts = [
        "<think>The bug is probably in the parser. I should open it.</think>",
        "<think>Maybe the tokenizer instead; the error mentions tokens",
        "<think>Let me reconsider the whole approach from the start.</think>\n",
    ]
    turns = explore(3) + [turn(3 + k, text=t) for k, t in enumerate(thoughts)]  # nothing came back
    at, f = online(turns)
    assert f is not None and at == 5
    assert (f.kind, f.start_turn) == (LoopKind.repeat_error, 3)  # type: ignore[attr-defined]
    assert f.unit.startswith("reasoning only")  # type: ignore[attr-defined]


def test_a_conversation_without_replies_is_not_a_loop() -> None:
    # an agent talking to people (messages, each answered elsewhere) says something every turn
    texts = [
        "Hi Nathan, could you send me the report?",
        "Thanks! Which quarter is it for?",
        "Got it, I will file it.",
    ]
    assert detect_loops([turn(k, text=t) for k, t in enumerate(texts)]) is None


# ---- the same edit again and again ---------------------------------------------------------------------


def test_the_same_edit_growing_the_file_is_repeat_call_from_the_first() -> None:
    line = "DEBUG = True"
    turns = explore(2) + [
        turn(
            2 + k,
            call("bash", command=f"echo '{line}' >> settings.py && cat settings.py"),
            obs=f"{line}\n" * (k + 1),
        )
        for k in range(4)
    ]
    at, f = online(turns)
    assert f is not None and at == 5
    assert (f.kind, f.start_turn, f.period) == (LoopKind.repeat_call, 2, 1)  # type: ignore[attr-defined]
    assert "same edit" in f.why  # type: ignore[attr-defined]
    # an editor's insert, its snippet growing each time
    snippet = "The file /r/a.py has been edited. Here's the result of running `cat -n` on a snippet:\n"
    edits = [
        turn(
            k,
            call("str_replace_editor", command="insert", path="/r/a.py", insert_line=3, new_str="import os"),
            obs=snippet + "".join(f"{4 + j}\timport os\n" for j in range(k + 1)),
        )
        for k in range(4)
    ]
    f = detect_loops(edits)
    assert f is not None and (f.kind, f.start_turn) == (LoopKind.repeat_call, 0)


def test_polling_a_growing_output_is_not_a_loop() -> None:
    turns = [turn(k, call("bash", command="tail -n 50 build.log"), obs="step\n" * (k + 1)) for k in range(8)]
    assert detect_loops(turns) is None


# ---- other arguments, the same result --------------------------------------------------------------------


PAGE = "\n".join(f"[{i}] link 'Product {i}'" for i in range(12)) + "\nPage 1 of 9"


def test_calls_with_other_arguments_and_the_same_result_verbatim_are_repeat_call() -> None:
    turns = explore(2) + [turn(2 + k, call("browser_click", index=40 + k), obs=PAGE) for k in range(4)]
    at, f = online(turns)
    assert f is not None and at == 5
    assert (f.kind, f.start_turn) == (LoopKind.repeat_call, 2)  # type: ignore[attr-defined]
    assert f.unit.startswith("browser_click(...) => [0] link")  # type: ignore[attr-defined]
    assert "arguments differ" in f.why  # type: ignore[attr-defined]


def test_the_same_result_to_other_arguments_stays_quiet_when_it_is_an_acknowledgement_or_a_failure() -> None:
    ack = "Task list has been updated with 9 items. Stored in session directory: sessions/a1/TASKS.md"
    acks = [turn(k, call("task_tracker", command="plan", items=k), obs=ack) for k in range(6)]
    assert detect_loops(acks) is None
    failing = (
        "Traceback (most recent call last):\n  File 'x.py'\nModuleNotFoundError: No module named 'y'\n" * 2
    )
    fails = [turn(k, call("bash", command=f"python x.py --try {k}"), obs=failing) for k in range(6)]
    assert detect_loops(fails) is None  # thrashing: a stall, not a loop


# ---- content chanting --------------------------------------------------------------------------------------


def test_a_sentence_chanted_inside_one_response_that_then_ends_normally() -> None:
    chant = "I will now run the tests to check the fix. " * 8
    text = "The parser drops the last field.\n" + chant + "\nLet me run them."
    f = detect_loops([*explore(2), turn(2, call("bash", command="pytest -q"), text=text, obs="3 passed")])
    assert f is not None and (f.kind, f.start_turn) == (LoopKind.degenerate_text, 2)
    assert f.unit == "I will now run the tests to check the fix." and f.repeats == 8
    assert (
        chanted_unit("- fix the parser.\n- add a test.\n- run the suite.\n- update the docs.\n- release it.")
        is None
    )


# ---- cycles of period 3 to 5, online ----------------------------------------------------------------------------


def test_cycles_of_period_three_to_five_are_found_online_from_their_onset() -> None:
    for period in (3, 4, 5):
        block = [call("bash", command=f"step {j}") for j in range(period)]
        repeats = 3 if period < 5 else 2
        turns = explore(2) + [
            turn(2 + k, block[k % period], obs=f"out {k % period}") for k in range(period * repeats)
        ]
        at, f = online(turns)
        assert f is not None and at == 1 + period * repeats, period
        assert (f.kind, f.period, f.start_turn) == (LoopKind.cycle, period, 2), period  # type: ignore[attr-defined]
