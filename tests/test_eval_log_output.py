"""What `harness eval` prints while it runs, read from a log (output not a terminal), with the
replay server as the model: live lines that say what is known, tables that fit their content,
and progress lines at intervals."""

import json
import os
import re
from pathlib import Path

import pytest

from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse
from tests.conftest import run_harness

pytestmark = pytest.mark.timeout(300)


def terminal(command: str, content: str | None = None) -> ScriptedResponse:
    return ScriptedResponse(
        content=content, tool_calls=[ScriptedCall(name="terminal", arguments={"command": command})]
    )


FINISH = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])


def eval_in_a_log(tmp_path: Path, responses: list[ScriptedResponse], *args: str) -> tuple[str, str]:
    """`harness eval` with stdout and stderr to files (no terminal, COLUMNS unset); (stdout, stderr)."""
    script = tmp_path / "script.json"
    script.write_text(ReplayScript(model="scripted", responses=responses).model_dump_json())
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["HARNESS_PROGRESS_INTERVAL"] = "0.3"
    done = run_harness(
        "eval", "--model", f"replay:{script}", "--run-dir", str(tmp_path / "run"), *args, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, done.stderr


def test_live_lines_say_what_is_known_then_the_verified_outcome(tmp_path: Path) -> None:
    """A rollout's end says its turns and loop, 'verifying later' (it used to say 'unresolved' for
    an episode that verification then resolved); verification prints each outcome."""
    responses = [
        *[terminal("cat data.txt", f"Look, attempt {i}.") for i in range(4)],  # count-lines: a loop
        terminal("ls"),  # fix-add: not fixed
        FINISH,
        terminal("echo 'Hello, world!' > hello.txt"),  # hello-file: solved
        FINISH,
    ]
    _, err = eval_in_a_log(tmp_path, responses, "--tasks", "smoke")
    lines = err.splitlines()
    for expected in (
        "  count-lines seed 1: rollout stopped (4 turns, loop repeat_call@0) — verifying later",
        "  fix-add seed 1: rollout done (2 turns, no loop) — verifying later",
        "  hello-file seed 1: rollout done (2 turns, no loop) — verifying later",
        "  count-lines seed 1: verified unresolved (reward 0, loop_stopped)",
        "  fix-add seed 1: verified unresolved (reward 0)",
        "  hello-file seed 1: verified resolved (reward 1)",
    ):
        assert expected in lines, f"missing {expected!r} in:\n{err}"
    assert lines.index(
        "  hello-file seed 1: rollout done (2 turns, no loop) — verifying later"
    ) < lines.index("  hello-file seed 1: verified resolved (reward 1)")
    assert not [x for x in lines if re.search(r"seed \d+: (unresolved|resolved)\b", x)]


@pytest.mark.slow
def test_in_a_log_tables_fit_their_content_and_progress_comes_at_intervals(tmp_path: Path) -> None:
    """Not a terminal: the summary table and the headline are not wrapped at 80 columns, and the
    rollouts print a progress line every HARNESS_PROGRESS_INTERVAL seconds and at their end (a
    live bar draws nothing in a log until it is done)."""
    solve = [terminal("echo 'Hello, world!' > hello.txt", "Writing the file now."), FINISH]
    slow = [r.model_copy(update={"delay": 0.5}) for r in solve]
    out, err = eval_in_a_log(tmp_path, slow * 3, "--tasks", "smoke")
    header = [x for x in out.splitlines() if "model" in x and "episodes" in x]
    assert header and "server up / busy" in header[0], out  # one line: the table is as wide as it needs
    assert not [x for x in out.splitlines() if re.search(r"\bepisod\b|\bes\b", x)], out
    headline = [x for x in out.splitlines() if x.startswith("scripted: resolved")]
    assert headline and "format errors/turn" in headline[0], out  # not cut at 80 columns
    # each with the episodes in flight (the replay server has no KV cache to show)
    ticks = re.findall(r"^rollouts scripted: (\d)/3 \(0:00:\d\d; \d in flight\)$", err, re.M)
    assert len(ticks) >= 3, err  # while the rollouts ran (3 episodes of 2 s or more)
    assert "rollouts scripted: 3/3 done (" in err and "verification: 3/3 done (" in err
    assert "━━━━" not in err  # no bar drawn into the log
    assert json.loads((tmp_path / "run" / "run.json").read_text())["models"] == ["scripted"]
