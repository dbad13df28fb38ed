"""One OpenHands episode: scaffold -> agent -> conversation, watched turn by turn by the monitor."""

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.episodes.agent_log import episode_label
from harness.episodes.faults import is_infra_error_name, is_infra_fault
from harness.episodes.openhands._patching import episode_scope
from harness.episodes.openhands.resume import conversation_state, restore_conversation
from harness.episodes.openhands.sdk import build_agent, build_llm
from harness.episodes.openhands.sdk_stuck import StuckReasons, finding_from_stuck
from harness.episodes.openhands.turns_from_events import SdkTurnAssembler
from harness.episodes.scaffold import Scaffold
from harness.leader import Leader
from harness.monitor import LoopConfig, LoopDetector, Turn
from harness.paths import absolute
from harness.resume.files import CheckpointUnusable
from harness.runtime.procs import kill_session, kill_sessions
from harness.seam import Checkpointing, EpisodeOutcome, EpisodeStatus

# Conversations running in this process, so that a stopping run can kill their shells from the
# main thread before it exits (an episode's own stop watch runs in a daemon thread, which the
# exit does not wait for).
_running: set[Any] = set()
_running_lock = threading.Lock()


def kill_running_shells() -> int:
    """Kill the local shell (and all it started) of every running conversation; the processes killed."""
    with _running_lock:
        convs = list(_running)
    return kill_sessions(_terminal_shell(conv) for conv in convs)


@episode_scope()  # the harness's SDK patches act in this call's context only (_patching.py)
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
    time_limit_s: float | None = None,
    temperature: float | None = None,
    max_output_tokens: int | None = None,
    tool_params: dict[str, dict[str, Any]] | None = None,
    sandbox_failure: Callable[[], BaseException | None] | None = None,
    stop: threading.Event | None = None,
    checkpoint: Checkpointing | None = None,
) -> EpisodeOutcome:
    """Run one conversation in ``workspace``; stop it as soon as the monitor is certain of a loop.

    ``tool_params`` are extra parameters of the scaffold's tool specs (a container sandbox's
    address: the tools then act inside it, while the conversation, and so the monitor, stay here);
    ``sandbox_failure`` says whether that sandbox broke (gone, at a limit): the episode then ends
    as an error with that reason. ``stop`` set (the run is stopping) pauses the conversation and
    kills the local shell at once; the outcome then says ``stopped``. ``checkpoint``: each completed
    turn is handed to it (resume.py keeps the conversation's state), and a conversation it resumes
    goes on from its checkpointed turn (its shell starts afresh in the workspace).
    """
    from openhands.sdk import LocalConversation
    from openhands.sdk.conversation import ConversationExecutionStatus as Status

    from harness.episodes.openhands.sdk_tuning import EpisodeFileStore, freeze_imports

    freeze_imports()  # the SDK's import-time objects: out of every later garbage collection
    started = time.monotonic()
    # The SDK hands these to the agent's shell (which starts in the workspace) and to its tools:
    # relative, they would name other places there.
    workspace, out_dir = absolute(workspace), absolute(out_dir)
    completions = out_dir / "completions"
    llm = build_llm(
        base_url=base_url,
        model=model,
        api_key=api_key,
        scaffold=scaffold,
        seed=seed,
        temperature=temperature,
        max_output_tokens=max_output_tokens,
        completions_dir=completions,
    )
    agent = build_agent(scaffold, llm, tool_params=tool_params)
    assembler = SdkTurnAssembler()
    detector = LoopDetector(loop_config)
    turns: list[Turn] = []
    conv: Any = None
    drained = threading.Event()  # paused for the run's graceful stop, after a checkpoint

    from openhands.sdk.event import ActionEvent  # after sdk.py has set the SDK's environment up

    def on_event(event: Any) -> None:
        if sandbox_failure is not None and sandbox_failure() is not None and conv is not None:
            conv.pause()  # the SDK made the tool's failure an observation; the episode is over
        if checkpoint is not None and isinstance(event, ActionEvent):
            checkpoint.before_tools()  # the SDK emits an action before it runs it
        for turn in assembler.feed(event.model_dump(mode="json")):
            turns.append(turn)
            if detector.feed(turn) is not None and stop_on_loop and conv is not None:
                conv.pause()  # takes effect before the next model call
            elif checkpoint is not None and conv is not None and checkpoint.turn_done(len(turns), state):
                drained.set()
                conv.pause()  # the run is stopping: this turn was the last, checkpointed

    def state() -> dict[str, Any]:
        return conversation_state(conv, conversation_id.hex, persistence_dir.name)

    # What the SDK's Conversation(persistence_dir=...) sets up, but with a store that fsyncs once
    # at the end instead of after every write (see sdk_tuning).
    resume = checkpoint.resume if checkpoint is not None else None
    conversation_id = uuid.UUID(str(resume.state.get("conversation_id"))) if resume else uuid.uuid4()
    persistence_dir = out_dir / "conversation"
    iterations = max_iterations or scaffold.max_iterations
    if resume is not None:
        restore_conversation(persistence_dir / conversation_id.hex, resume.state)
    store = EpisodeFileStore(str(persistence_dir / conversation_id.hex), cache_limit_size=iterations)
    try:
        conv = LocalConversation(
            agent=agent,
            workspace=str(workspace),
            persistence_dir=str(persistence_dir),
            conversation_id=conversation_id,
            file_store=store,
            max_iteration_per_run=iterations - (resume.turn if resume else 0),
            stuck_detection=sdk_stuck_detection,
            callbacks=[on_event],
            visualizer=None,
        )
    except (ValueError, OSError) as exc:  # the SDK refused the persisted conversation
        if resume is None:
            raise
        raise CheckpointUnusable(f"the SDK did not restore the conversation: {str(exc)[:300]}") from None
    if resume is not None:  # the checkpointed turns, as the monitor saw them
        for event in conv.state.events:
            for turn in assembler.feed(event.model_dump(mode="json")):
                turns.append(turn)
                detector.feed(turn)
    with _running_lock:
        _running.add(conv)
    error: str | None = None
    error_type: str | None = None
    infra = False
    timed_out = threading.Event()
    ended = threading.Event()

    def stop_when_asked() -> None:
        assert stop is not None
        while not ended.is_set():
            if stop.wait(0.1):
                # The shell first: a running command ends now. pause() waits for the state lock,
                # which the SDK holds through a step (a model call included); this thread is a
                # daemon, so the run's exit never waits for it.
                kill_session(_terminal_shell(conv))
                _pause(conv)
                return

    if stop is not None:
        threading.Thread(target=stop_when_asked, name="episode-stop", daemon=True).start()

    def time_up() -> None:
        timed_out.set()
        _pause(conv)  # takes effect between steps; the LLM timeout bounds a step

    timer = threading.Timer(time_limit_s, time_up) if time_limit_s else None
    if timer:
        timer.daemon = True
        timer.start()
    stuck = StuckReasons()
    try:
        with stuck, episode_label("/".join(out_dir.parts[-3:])):
            if resume is None:
                conv.send_message(instruction)
            if resume is None or resume.turn < iterations:
                conv.run()
    except Exception as exc:  # the SDK raises ConversationRunError for model/transport failures
        error_type, error = _root_cause(exc)
        infra = is_infra_fault(exc)
    finally:
        ended.set()
        if timer:
            timer.cancel()
        turns += assembler.finish()
        turns = enrich_from_completions(turns, completions, assembler.response_ids)
        sdk_status = str(conv.state.execution_status.value)
        conv_dir = Path(conv.state.persistence_dir) if conv.state.persistence_dir else None
        last_error = _last_error_code(conv)
        prompt_tokens, completion_tokens, llm_s = _usage(conv)
        shell = _terminal_shell(conv)  # before close() reaps it: afterwards its number may be another's
        with _running_lock:
            _running.discard(conv)
        conv.close()
        kill_session(shell)  # what the agent left running (`server &`) ends with its episode
        store.sync()  # the conversation is on disk before the episode's record is
    loop = detector.finding
    if sdk_status == Status.STUCK.value:  # the SDK's own detector stopped it: a loop finding too
        loop = (
            loop.model_copy(update={"scaffold_reason": stuck.last or "stuck (no reason logged)"})
            if loop is not None
            else finding_from_stuck(turns, stuck.last)
        )
    broken = sandbox_failure() if sandbox_failure is not None else None
    if broken is not None:
        status: EpisodeStatus = "error"
        error_type, error = type(broken).__name__, str(broken)
        infra = is_infra_fault(broken)  # the container gone: yes; a limit the agent hit: no
    elif detector.finding is not None and stop_on_loop:
        status = "loop_stopped"
    elif timed_out.is_set():
        status, error_type = "error", "TimeLimit"
        error = f"episode time limit of {time_limit_s:g} s reached after {len(turns)} turns"
    elif error:
        status = "error"
    elif sdk_status == Status.STUCK.value:
        status = "stuck"
    elif last_error == "MaxIterationsReached":
        status = "max_iterations"
    elif sdk_status == Status.ERROR.value:
        status, error = "error", error or last_error
        infra = is_infra_error_name(last_error, error)
    else:
        status = "finished"
    return EpisodeOutcome(
        status=status,
        turns=turns,
        loop=loop,
        details={"sdk_status": sdk_status, **({"conversation_dir": str(conv_dir)} if conv_dir else {})},
        error=error,
        error_type=error_type or (last_error if status == "error" else None),
        wall_s=time.monotonic() - started,
        llm_s=llm_s,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        timed_out=timed_out.is_set(),
        infra=infra and status == "error",
        # paused for a graceful stop: not recorded, resumed (a turn that finished it is its end)
        stopped=(stop is not None and stop.is_set())
        or (drained.is_set() and sdk_status == Status.PAUSED.value),
    )


def _pause(conv: Any) -> None:
    """Pause from a watcher thread. The SDK sets the paused status, then saves its state on the
    way out of its lock: on a full disk the save fails, the pause itself has happened, and the
    episode's own thread reports the disk (a traceback from this thread would say nothing more)."""
    with contextlib.suppress(OSError):
        conv.pause()


def _terminal_shell(conv: Any) -> Leader | None:
    """The local terminal's bash (the leader of its own session), or None (a container's tools, no
    terminal started, or a shell already reaped, whose number may be another process's now)."""
    try:
        process = conv.agent.tools_map["terminal"].executor._session.terminal.process
        pid, reaped = int(process.pid), process.returncode is not None
    except Exception:  # not started, remote, or an SDK whose insides moved: nothing to kill here
        return None
    return None if reaped else Leader.of(pid)


def enrich_from_completions(turns: list[Turn], completions: Path, response_ids: dict[int, str]) -> list[Turn]:
    """Put back what the SDK's events lose, from its raw completion logs.

    Events carry the *repaired* call: an alias renamed (execute_bash -> terminal), unparseable
    arguments replaced by a marker. The format check must see what the model really wrote, plus
    each response's finish_reason and token counts, which events do not carry at all.
    """
    by_call: dict[str, tuple[str, str, tuple[Any, Any, Any]]] = {}
    by_response: dict[str, tuple[Any, Any, Any]] = {}
    for f in completions.glob("*.json") if completions.is_dir() else ():
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        response = data.get("response") or {}
        choice = (response.get("choices") or [{}])[0]
        usage = response.get("usage") or {}
        info = (choice.get("finish_reason"), usage.get("prompt_tokens"), usage.get("completion_tokens"))
        if response.get("id"):
            by_response[str(response["id"])] = info
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            fn = call.get("function") or {}
            if call.get("id"):
                by_call[str(call["id"])] = (str(fn.get("name") or ""), str(fn.get("arguments") or ""), info)
    if not by_call and not by_response:
        return turns
    enriched = []
    for turn in turns:
        calls = []
        found: tuple[Any, Any, Any] | None = None
        for c in turn.tool_calls:
            if c.id and c.id in by_call:
                name, raw, found = by_call[c.id]
                calls.append(c.model_copy(update={"name": name, "arguments": raw}))
            else:
                calls.append(c)
        found = found or by_response.get(response_ids.get(turn.index, ""))
        update: dict[str, Any] = {"tool_calls": tuple(calls)}
        if found:
            update |= {
                "finish_reason": found[0] or turn.finish_reason,
                "prompt_tokens": found[1],
                "completion_tokens": found[2],
            }
        enriched.append(turn.model_copy(update=update))
    return enriched


def _root_cause(exc: BaseException) -> tuple[str, str]:
    """The innermost exception's type and message (the SDK wraps model errors in ConversationRunError)."""
    inner: BaseException = exc
    while inner.__cause__ is not None and inner.__cause__ is not inner:
        inner = inner.__cause__
    return type(inner).__name__, str(inner)[:2000]


def _usage(conv: Any) -> tuple[int, int, float]:
    try:
        metrics = conv.conversation_stats.get_combined_metrics()
        usage = metrics.accumulated_token_usage
        llm_s = float(sum(getattr(r, "latency", 0.0) for r in metrics.response_latencies))
        return (int(usage.prompt_tokens) if usage else 0, int(usage.completion_tokens) if usage else 0, llm_s)
    except Exception:  # statistics are a nicety; never fail an episode over them
        return 0, 0, 0.0


def _last_error_code(conv: Any) -> str | None:
    for event in reversed(list(conv.state.events)):
        if type(event).__name__ == "ConversationErrorEvent":
            return str(getattr(event, "code", None) or getattr(event, "detail", ""))
    return None
