"""One OpenHands episode: scaffold -> agent -> conversation, watched turn by turn by the monitor."""

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from harness.episodes.scaffold import Scaffold
from harness.episodes.sdk import build_agent, build_llm
from harness.episodes.turns_from_events import SdkTurnAssembler
from harness.monitor import LoopConfig, LoopDetector, LoopFinding, Turn

EpisodeStatus = Literal["finished", "loop_stopped", "max_iterations", "stuck", "error"]


class EpisodeOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: EpisodeStatus
    turns: list[Turn]
    loop: LoopFinding | None
    sdk_status: str
    conversation_dir: Path | None
    completions_dir: Path
    error: str | None = None
    wall_s: float


def run_sdk_episode(
    *,
    instruction: str,
    workspace: Path,
    base_url: str,
    model: str,
    api_key: str,
    scaffold: Scaffold,
    out_dir: Path,
    seed: int | None = None,
    max_iterations: int | None = None,
    loop_config: LoopConfig | None = None,
    stop_on_loop: bool = True,
    sdk_stuck_detection: bool = True,
) -> EpisodeOutcome:
    """Run one conversation in ``workspace``; stop it as soon as the monitor is certain of a loop."""
    from openhands.sdk import Conversation
    from openhands.sdk.conversation import ConversationExecutionStatus as Status

    started = time.monotonic()
    completions = out_dir / "completions"
    llm = build_llm(
        base_url=base_url,
        model=model,
        api_key=api_key,
        scaffold=scaffold,
        seed=seed,
        completions_dir=completions,
    )
    agent = build_agent(scaffold, llm)
    assembler = SdkTurnAssembler()
    detector = LoopDetector(loop_config)
    turns: list[Turn] = []
    conv: Any = None

    def on_event(event: Any) -> None:
        for turn in assembler.feed(event.model_dump(mode="json")):
            turns.append(turn)
            if detector.feed(turn) is not None and stop_on_loop and conv is not None:
                conv.pause()  # takes effect before the next model call

    conv = Conversation(
        agent=agent,
        workspace=str(workspace),
        persistence_dir=str(out_dir / "conversation"),
        max_iteration_per_run=max_iterations or scaffold.max_iterations,
        stuck_detection=sdk_stuck_detection,
        callbacks=[on_event],
        visualizer=None,
    )
    error: str | None = None
    try:
        conv.send_message(instruction)
        conv.run()
    except Exception as exc:  # the SDK raises ConversationRunError for model/transport failures
        error = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        turns += assembler.finish()
        sdk_status = str(conv.state.execution_status.value)
        conv_dir = Path(conv.state.persistence_dir) if conv.state.persistence_dir else None
        last_error = _last_error_code(conv)
        conv.close()
    if detector.finding is not None and stop_on_loop:
        status: EpisodeStatus = "loop_stopped"
    elif error:
        status = "error"
    elif sdk_status == Status.STUCK.value:
        status = "stuck"
    elif last_error == "MaxIterationsReached":
        status = "max_iterations"
    elif sdk_status == Status.ERROR.value:
        status, error = "error", error or last_error
    else:
        status = "finished"
    return EpisodeOutcome(
        status=status,
        turns=turns,
        loop=detector.finding,
        sdk_status=sdk_status,
        conversation_dir=conv_dir,
        completions_dir=completions,
        error=error,
        wall_s=time.monotonic() - started,
    )


def _last_error_code(conv: Any) -> str | None:
    for event in reversed(list(conv.state.events)):
        if type(event).__name__ == "ConversationErrorEvent":
            return str(getattr(event, "code", None) or getattr(event, "detail", ""))
    return None
