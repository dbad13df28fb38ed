"""Write run directories from hand-made episode records (the same files harness eval writes)."""

import json
from pathlib import Path
from typing import Any

from harness.monitor import LoopFinding, LoopKind, Turn
from harness.results.store import EpisodeError, EpisodeRecord, RunStore


def record(
    task: str,
    seed: int = 1,
    reward: float | None = 1.0,
    *,
    model: str = "m",
    run_id: str = "run",
    status: str | None = None,
    loop: str | None = None,
    format_errors: dict[str, int] | None = None,
    turns: int = 3,
    error: str | None = None,
) -> EpisodeRecord:
    finding = (
        LoopFinding(
            kind=LoopKind(loop), start_turn=1, period=1, repeats=4, unit="terminal(ls)", detected_at=4
        )
        if loop
        else None
    )
    if status is None:
        status = (
            "error"
            if error
            else ("loop_stopped" if loop else ("resolved" if reward == 1.0 else "unresolved"))
        )
    return EpisodeRecord(
        run_id=run_id,
        model=model,
        model_path=model,
        task_id=task,
        suite="s",
        seed=seed,
        status=status,  # type: ignore[arg-type]
        reward=0.0 if error else reward,
        turns=turns,
        tool_calls=turns,
        format_errors=format_errors or {},
        loop=finding,
        prompt_tokens=100 * turns,
        completion_tokens=10 * turns,
        wall_s=2.0 * turns,
        llm_s=1.0 * turns,
        error=EpisodeError(type="BadRequest", message="maximum context length exceeded") if error else None,
        trajectory="",
        verified=reward is not None or bool(error),
    )


def write_run(
    root: Path,
    records: list[EpisodeRecord],
    *,
    tasks: list[str] | None = None,
    seeds: list[int] | None = None,
    scaffold_hash: str = "abc",
    turns: dict[str, list[Turn]] | None = None,
) -> Path:
    """A run directory: run.json, episodes.jsonl and (optionally) trajectories keyed by task."""
    store = RunStore(root)
    manifest: dict[str, Any] = {
        "run_id": root.name,
        "tasks": tasks or sorted({r.task_id for r in records}),
        "models": sorted({r.model for r in records}),
        "seeds": seeds or sorted({r.seed for r in records}),
        "scaffold": "openhands-codeact",
        "scaffold_hash": scaffold_hash,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps(manifest))
    for r in records:
        if turns and r.task_id in turns:
            rel = store.write_trajectory(store.trajectory_path(r.model, r.task_id, r.seed), turns[r.task_id])
            r = r.model_copy(update={"trajectory": rel})
        store.append(r)
    return root
