"""An OpenHands conversation checkpointed after a turn and taken back where it was.

The SDK persists a conversation as it goes (one file per event, ``events/event-NNNNN-ID.json``,
and ``base_state.json``: the agent, its statistics, the execution status) and restores it when a
``LocalConversation`` is made with the same id and directory. A checkpoint records how many events
the conversation had after the turn and its base state then; taking it back removes the events a
later, interrupted turn added and puts that base state back, so the SDK restores the conversation
exactly as it was after the checkpointed turn (statistics and all).
"""

import re
from pathlib import Path
from typing import Any

from harness.resume.files import CheckpointUnusable

_EVENT = re.compile(r"^event-(\d+)-.*\.json$")
_MARKER = re.compile(r"^\.eventlog-len-\d+\.marker$")
BASE_STATE = "base_state.json"


def conversation_state(conv: Any, conversation_id: str, persistence: str) -> dict[str, Any]:
    """What a checkpoint keeps of a conversation after a turn (called from its event callback, in
    its step: the events so far are on disk)."""
    return {
        "conversation_id": conversation_id,
        "events": len(conv.state.events),
        "base_state": conv.state.model_dump_json(exclude_none=True),
        "_requires": [f"{persistence}/{conversation_id}/events"],
    }


def restore_conversation(directory: Path, state: dict[str, Any]) -> None:
    """The conversation's files as they were at the checkpoint (CheckpointUnusable when they cannot
    be: events missing, a state of another form)."""
    count, base = state.get("events"), state.get("base_state")
    if not isinstance(count, int) or count < 1 or not isinstance(base, str):
        raise CheckpointUnusable("the checkpoint's conversation state is malformed")
    events = directory / "events"
    present: set[int] = set()
    for path in events.iterdir() if events.is_dir() else ():
        if (m := _EVENT.match(path.name)) is not None:
            index = int(m.group(1))
            if index >= count:
                path.unlink()  # a turn after the checkpoint, cut short: asked again
            else:
                present.add(index)
        elif _MARKER.match(path.name):
            path.unlink()  # the SDK counts the files when its length marker is missing
    if len(present) != count:
        raise CheckpointUnusable(f"the conversation has {len(present)} of the checkpoint's {count} events")
    (directory / BASE_STATE).write_text(base)
