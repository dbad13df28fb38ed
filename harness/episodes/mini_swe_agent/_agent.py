"""mini-swe-agent's DefaultAgent, unchanged in its loop, with the harness's hooks around it.

- every message it adds goes through a TurnRecorder; the turn before a model call is complete, so
  it is handed to ``on_turn`` (the loop monitor) there, and a certain loop ends the agent before the
  next call (exit status ``LoopDetected``);
- a stop of the run or the episode's deadline ends it at once, also mid-request or mid-command
  (exit status ``Stopped`` / mini-swe-agent's ``TimeExceeded``);
- the saved trajectory carries the action regex where `harness loops` reads it, and the episode key;
- checkpoints (the seam's ``Checkpointing``): before a model call, the turns before it are complete,
  so its messages are handed to the checkpoint there; a graceful stop of the run ends the agent then
  (exit status ``Stopped``). A resumed agent starts from the checkpoint's messages instead of its
  system and task messages: the same loop, the same turns, its model calls counted as made.
"""

import threading
from collections.abc import Callable
from typing import Any

from minisweagent.agents.default import DefaultAgent
from minisweagent.exceptions import InterruptAgentFlow, TimeExceeded

from harness.episodes.mini_swe_agent._wait import Interrupted, check
from harness.episodes.mini_swe_agent.turns import TurnRecorder
from harness.monitor import LoopFinding, Turn
from harness.resume.files import CheckpointUnusable
from harness.seam import Checkpointing


def exit_message(status: str, **extra: Any) -> dict[str, Any]:
    return {"role": "exit", "content": status, "extra": {"exit_status": status, "submission": "", **extra}}


def _interrupt(why: Interrupted) -> InterruptAgentFlow:
    kind = TimeExceeded if why.why == "TimeExceeded" else InterruptAgentFlow
    return kind(exit_message(why.why))


class HarnessAgent(DefaultAgent):
    def __init__(
        self,
        model: Any,
        env: Any,
        *,
        on_turn: Callable[[Turn], LoopFinding | None],
        stop: threading.Event,
        deadline: float | None,
        trajectory_extra: dict[str, Any],
        text_actions: bool,
        checkpoint: Checkpointing | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, env, **kwargs)
        self.recorder = TurnRecorder(text_actions=text_actions)
        self.turns: list[Turn] = []
        self._on_turn = on_turn
        self._stop = stop
        self._deadline = deadline
        self._trajectory_extra = trajectory_extra
        self._checkpoint = checkpoint
        self._resuming: list[dict[str, Any]] | None = None
        self._checkpointed = 0

    def run(self, task: str = "", **kwargs: Any) -> dict[str, Any]:
        resume = self._checkpoint.resume if self._checkpoint is not None else None
        if resume is not None:
            messages = resume.state.get("messages")
            if (
                not isinstance(messages, list)
                or not all(isinstance(m, dict) for m in messages)
                or len(messages) < 2
            ):
                raise CheckpointUnusable("the checkpoint's messages are not a message list")
            self._resuming = messages
            self._checkpointed = resume.turn
            self.n_calls = sum(1 for m in messages if m.get("role") == "assistant")
        return dict(super().run(task, **kwargs))

    def add_messages(self, *messages: dict[str, Any]) -> list[dict[str, Any]]:
        if self._resuming is not None:  # run()'s system and task messages: the checkpoint's instead
            messages, self._resuming = tuple(self._resuming), None
        for message in messages:
            if (done := self.recorder.add(message)) is not None:
                self._take(done)
        return list(super().add_messages(*messages))

    def flush(self) -> LoopFinding | None:
        """Hand the turn in progress to the monitor; the loop it completes, if any."""
        turn = self.recorder.close()
        return self._take(turn) if turn is not None else None

    def _take(self, turn: Turn) -> LoopFinding | None:
        self.turns.append(turn)
        return self._on_turn(turn)

    def query(self) -> dict[str, Any]:
        try:
            check(self._stop, self._deadline)
            if (loop := self.flush()) is not None:
                raise InterruptAgentFlow(exit_message("LoopDetected", loop=loop.model_dump(mode="json")))
            if self._checkpoint is not None and len(self.turns) > self._checkpointed:
                self._checkpointed = len(self.turns)
                if self._checkpoint.turn_done(len(self.turns), self._state):
                    raise InterruptAgentFlow(exit_message("Stopped"))
            return dict(super().query())
        except Interrupted as why:
            raise _interrupt(why) from None

    def _state(self) -> dict[str, Any]:
        """What a checkpoint keeps: the messages so far (JSON, as the trajectory file has them)."""
        return {"messages": self.messages}

    def execute_actions(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        if self._checkpoint is not None:
            self._checkpoint.before_tools()  # the last checkpoint's files saved before they change
        try:
            return list(super().execute_actions(message))
        except Interrupted as why:
            raise _interrupt(why) from None

    def serialize(self, *extra_dicts: dict[str, Any]) -> dict[str, Any]:
        return dict(super().serialize(self._trajectory_extra, *extra_dicts))
