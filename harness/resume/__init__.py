"""Runs that survive a stop: mid-episode checkpoints (checkpoint.py, files.py) and the graceful
first stop signal that lets running episodes finish their turn and checkpoint (drain.py)."""

from harness.resume.checkpoint import EpisodeCheckpoint, open_checkpoint, set_aside
from harness.resume.drain import Drain, graceful_stop_words
from harness.resume.files import CheckpointUnusable
from harness.seam import EpisodeOutcome

__all__ = [
    "CheckpointUnusable",
    "Drain",
    "EpisodeCheckpoint",
    "graceful_stop_words",
    "open_checkpoint",
    "set_aside",
    "with_checkpoint",
]


def with_checkpoint(
    outcome: EpisodeOutcome, checkpoint: EpisodeCheckpoint | None, note: str | None
) -> EpisodeOutcome:
    """The runner is done with ``checkpoint`` (its journal closed). The outcome with what its
    checkpoints did: the turns it took from one, why a checkpoint was
    not used, and what saving them cost. (Whether it ended for a graceful stop, ``stopped``, is the
    runner's to say: a turn that ended the episode ends it, stop or not.)"""
    update: dict[str, object] = {}
    if checkpoint is not None:
        checkpoint.close()
        if checkpoint.resume is not None:
            update["resumed_turns"] = checkpoint.resume.turn
        update["checkpoint_s"] = checkpoint.seconds
    if note:
        update["resume_note"] = note
    return outcome.model_copy(update=update) if update else outcome
