"""What the judge reads of one failed episode: the task, the outcome the harness recorded (its
deterministic cause among it), the last turns and the end of the tests' output, clipped so that
the whole fits a small model's context (~2k tokens)."""

from pathlib import Path

from harness.results.episode_view import episode_id, load_episode
from harness.results.failures import failure_of
from harness.results.show import verifier_tail
from harness.results.store import EpisodeRecord

INSTRUCTION_CHARS = 1500
LAST_TURNS = 6
TURN_PART_CHARS = 300
VERIFIER_LINES = 30


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit // 2] + " […] " + text[-limit // 2 :]


def digest(root: Path, record: EpisodeRecord, instruction: str) -> str:
    """The episode in words, for the judge."""
    failure = failure_of(record)
    lines = [f"Episode {episode_id(record)} (task {record.task_id})."]
    if instruction:
        lines += ["", "The task's instruction:", _clip(instruction, INSTRUCTION_CHARS)]
    outcome = f"status {record.status}, reward {record.reward}, {record.turns} turns, {record.tool_calls} tool calls"
    lines += ["", f"Outcome: {outcome}."]
    if failure is not None:
        lines.append(
            f"The harness's cause: {failure.cause}" + (f" ({failure.detail})" if failure.detail else "")
        )
    if record.error:
        lines.append(f"Error: {record.error.type}: {_clip(record.error.message, TURN_PART_CHARS)}")
    view = load_episode(root, record, None)
    turns = [tv.turn for tv in view.turns][-LAST_TURNS:]
    if turns:
        lines += ["", f"Its last {len(turns)} of {len(view.turns)} turns:"]
    for t in turns:
        lines.append(f"- turn {t.index}:")
        if t.text.strip():
            lines.append(f"  said: {_clip(t.text, TURN_PART_CHARS)}")
        for call in t.tool_calls:
            lines.append(f"  called {call.name}: {_clip(call.arguments, TURN_PART_CHARS)}")
        if t.observation.strip():
            kind = "error" if t.observation_is_error else "got back"
            lines.append(f"  {kind}: {_clip(t.observation, TURN_PART_CHARS)}")
    tail = verifier_tail(root, record, VERIFIER_LINES)
    if tail is not None and tail[1].strip():
        lines += ["", "The end of the tests' output:", tail[1]]
    return "\n".join(lines)
