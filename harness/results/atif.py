"""Harbor's Agent Trajectory Interchange Format (ATIF, RFC 0001 in the Harbor repository): a run's
episodes written as ATIF trajectories, and ATIF trajectories read back as Turn records.

The models below are ATIF's own fields (v1.5: tool definitions on the agent), strict on writing
(what we write validates against Harbor's models, `harbor.models.trajectories`) and tolerant on
reading (other producers' extra fields are kept, newer content parts read as their text).

A harness turn is one agent step: its text is the step's ``message``, its calls ``tool_calls``
(arguments as an object; arguments that are not a JSON object are kept verbatim in the call's
``extra.raw_arguments``), its observation the step's ``observation`` (one result, for the
turn's one call or, with several calls, for all of them; an error flagged in the result's
``extra.is_error``), its token counts the step's ``metrics``. The episode's record (status,
reward, loop and stall findings, format errors) is the trajectory's ``extra.harness``.
"""

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError
from harness.monitor.records import ToolCall, Turn
from harness.results.run_files import inside_run, read_run_file
from harness.results.store import EpisodeRecord, RunStore

SCHEMA_VERSION = "ATIF-v1.5"
SUFFIX = ".atif.json"


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class AtifToolCall(_Model):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] | None = None


class AtifResult(_Model):
    source_call_id: str | None = None
    content: str | list[Any] | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(_Model):
    results: list[AtifResult] = Field(default_factory=list)


class AtifMetrics(_Model):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    extra: dict[str, Any] | None = None


class AtifStep(_Model):
    step_id: int
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    message: str | list[Any] = ""
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    extra: dict[str, Any] | None = None


class AtifAgent(_Model):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(_Model):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class AtifTrajectory(_Model):
    schema_version: str
    session_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep]
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    extra: dict[str, Any] | None = None


def is_atif(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and str(doc.get("schema_version") or "").startswith("ATIF-")
        and isinstance(doc.get("steps"), list)
    )


# ---- reading -------------------------------------------------------------------------------------
def _text(content: Any) -> str:
    """A message or a result: a string, or content parts (v1.6+) of which the text ones count."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _call(call: AtifToolCall) -> ToolCall:
    raw = (call.extra or {}).get("raw_arguments")
    return ToolCall(
        name=call.function_name,
        arguments=raw if isinstance(raw, str) else json.dumps(call.arguments),
        id=call.tool_call_id,
    )


def turns_from_atif(doc: Any) -> list[Turn]:
    """An ATIF trajectory's agent steps as turns (a user step after a step without tool calls is
    what answered it: the nudge, or the simulated user's reply). Raises ValidationError."""
    trajectory = AtifTrajectory.model_validate(doc)
    turns: list[dict[str, Any]] = []
    for step in trajectory.steps:
        if step.source == "agent":
            calls = [_call(c) for c in step.tool_calls or ()]
            results = step.observation.results if step.observation else []
            metrics = step.metrics or AtifMetrics()
            finish = (step.extra or {}).get("finish_reason")
            turns.append(
                {
                    "index": len(turns),
                    "text": _text(step.message),
                    "tool_calls": calls,
                    "finish_reason": finish
                    if isinstance(finish, str)
                    else ("tool_calls" if calls else "stop"),
                    "observation": "\n".join(t for r in results if (t := _text(r.content))),
                    "observation_is_error": any((r.extra or {}).get("is_error") is True for r in results),
                    "prompt_tokens": metrics.prompt_tokens,
                    "completion_tokens": metrics.completion_tokens,
                }
            )
        elif step.source == "user" and turns and not turns[-1]["tool_calls"]:
            turn, said = turns[-1], _text(step.message)
            turn["observation"] = f"{turn['observation']}\n{said}" if turn["observation"] else said
    return [Turn.model_validate(t) for t in turns]


def atif_episode_name(path: Path, doc: dict[str, Any]) -> str:
    """The trajectory's session, else its file's name (Harbor's trial/agent/trajectory.json: the trial)."""
    if doc.get("session_id"):
        return str(doc["session_id"])
    if path.name == "trajectory.json":
        return path.parent.parent.name if path.parent.name == "agent" else path.parent.name
    return path.name.removesuffix(".json").removesuffix(".atif")


# ---- writing -------------------------------------------------------------------------------------
def _arguments(raw: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(arguments as ATIF's object, the call's extra keeping a raw string that is not one)."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value, None
    return {}, {"raw_arguments": raw}


def _step(turn: Turn, model: str, step_id: int) -> dict[str, Any]:
    calls = []
    for k, call in enumerate(turn.tool_calls):
        arguments, extra = _arguments(call.arguments)
        calls.append(
            {
                "tool_call_id": call.id or f"call_{turn.index}_{k}",
                "function_name": call.name,
                "arguments": arguments,
                **({"extra": extra} if extra else {}),
            }
        )
    step: dict[str, Any] = {"step_id": step_id, "source": "agent", "model_name": model, "message": turn.text}
    if calls:
        step["tool_calls"] = calls
    if turn.observation or turn.observation_is_error:
        result: dict[str, Any] = {"content": turn.observation}
        if len(calls) == 1:
            result["source_call_id"] = calls[0]["tool_call_id"]
        if turn.observation_is_error:
            result["extra"] = {"is_error": True}
        step["observation"] = {"results": [result]}
    metrics = {
        k: v
        for k, v in (("prompt_tokens", turn.prompt_tokens), ("completion_tokens", turn.completion_tokens))
        if v is not None
    }
    if metrics:
        step["metrics"] = metrics
    if turn.finish_reason:
        step["extra"] = {"finish_reason": turn.finish_reason}
    return step


def episode_trajectory(
    record: EpisodeRecord,
    turns: list[Turn],
    *,
    tools: list[dict[str, Any]] | None = None,
    agent_version: str = "",
) -> dict[str, Any]:
    """One episode as an ATIF trajectory (a JSON object). An episode without a turn gets one empty
    agent step (ATIF needs a step; its ``extra`` says so)."""
    steps = [_step(t, record.model, k + 1) for k, t in enumerate(turns)] or [
        {"step_id": 1, "source": "agent", "message": "", "extra": {"no_turn": True}}
    ]
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": f"{record.model}/{record.task_id}/seed{record.seed}",
        "agent": {
            "name": record.scaffold or "unknown",
            "version": agent_version or "unknown",
            "model_name": record.model,
            **({"tool_definitions": tools} if tools else {}),
        },
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": record.prompt_tokens,
            "total_completion_tokens": record.completion_tokens,
            "total_steps": len(steps),
        },
        "extra": {
            "harness": record.model_dump(
                mode="json",
                include={
                    "run_id",
                    "model",
                    "model_path",
                    "task_id",
                    "suite",
                    "seed",
                    "status",
                    "reward",
                    "verified",
                    "loop",
                    "stall",
                    "format_errors",
                    "repairs",
                    "wall_s",
                    "llm_s",
                },
            )
        },
    }
    AtifTrajectory.model_validate(doc)  # our own output is ATIF, or this is a bug
    return doc


def _declared_tools(episode_dir: Path) -> list[dict[str, Any]] | None:
    """The tools the episode's first request declared (its model_calls.jsonl), if it was kept."""
    from harness.proxy import Exchange, read_records

    path = episode_dir / "model_calls.jsonl"
    if not path.is_file():
        return None
    try:
        for r in read_records(path):
            if isinstance(r, Exchange) and r.request and isinstance(r.request.get("tools"), list):
                return [t for t in r.request["tools"] if isinstance(t, dict)]
    except (OSError, ValueError):
        return None
    return None


def export_atif(run_dir: Path, out: Path | None = None) -> list[Path]:
    """Write every episode of the run at ``run_dir`` as ``OUT/<model>/<task>/seed<N>.atif.json``
    (``out`` default: RUN/atif); the paths written."""
    store = RunStore(run_dir)
    if not store.episodes_path.is_file():
        raise HarnessError(
            f"{run_dir}: no episodes.jsonl here; give the --run-dir of harness eval or harness proxy"
        )
    manifest: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError, HarnessError):
        manifest = json.loads(read_run_file(store.root / "run.json"))
    version = str(manifest.get("scaffold_hash") or "")[:12]
    target = out or store.root / "atif"
    written: list[Path] = []
    for record in store.records().values():
        turns: list[Turn] = []
        if record.trajectory and inside_run(store.root, record.trajectory) is not None:
            path = store.root / record.trajectory
            if path.is_file():
                try:
                    turns = [
                        Turn.model_validate_json(line)
                        for line in path.read_bytes().splitlines()
                        if line.strip()
                    ]
                except ValidationError as exc:
                    raise HarnessError(f"{path}: not Turn records ({exc.errors()[0]['msg']})") from None
        tools = _declared_tools(store.episode_dir(record.model, record.task_id, record.seed))
        doc = episode_trajectory(record, turns, tools=tools, agent_version=version)
        dest = target / _safe(record.model) / record.task_id / f"seed{record.seed}{SUFFIX}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False))
        os.replace(tmp, dest)
        written.append(dest)
    if not written:
        raise HarnessError(f"{run_dir}: no episode recorded yet; nothing to export")
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
