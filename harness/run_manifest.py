"""`harness eval`'s run manifest: what the run asks for and what produces it (harness/provenance.py
gathers the facts; harness/results/store.py writes run.json and refuses a resume that is another
experiment; harness/results/manifest.py reads and compares it)."""

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import provenance
from harness.results.store import RunManifest, RunStore

if TYPE_CHECKING:
    from harness.eval_config import EvalConfig
    from harness.rollout import Arm
    from harness.seam import ModelEndpoint
    from harness.tasks import Task


def _scaffold_info(arms: "dict[str, Arm]", sampling: dict[str, Any]) -> dict[str, dict[str, Any]]:
    info: dict[str, dict[str, Any]] = {}
    for name, arm in arms.items():
        scaffold = arm.scaffold
        info[name] = {
            "runner": scaffold.runner,
            "tool_schema_sha256": hashlib.sha256(scaffold.schema_path.read_bytes()).hexdigest(),
            "definition_sha256": hashlib.sha256(
                repr(sorted(scaffold.snapshot().items())).encode()
            ).hexdigest(),
            "max_iterations": scaffold.max_iterations,
            "sampling": {
                "temperature": sampling["temperature"]
                if sampling.get("source") == "--temperature"
                else scaffold.sampling.temperature,
                "top_p": scaffold.sampling.top_p,
                "max_output_tokens": scaffold.sampling.max_output_tokens,
            },
        }
    return info


def _limits(config: "EvalConfig", tasks: "list[Task]") -> dict[str, Any]:
    """The limits an episode runs under (the flag's, else each task's, else the scaffold's)."""
    return {
        "max_iterations": config.max_iterations
        if config.max_iterations
        else sorted({t.limits.max_iterations or 0 for t in tasks}),
        "agent_timeout_s": sorted({t.limits.agent_timeout_s for t in tasks}),
    }


def build_manifest(
    config: "EvalConfig",
    *,
    run_dir: Path,
    tasks: "list[Task]",
    endpoints: "list[ModelEndpoint]",
    arms: "dict[str, Arm]",
    runtime: str,
    sampling: dict[str, Any],
    scaffold_hash: str,
) -> RunManifest:
    uses_mswea = any(a.scaffold.runner == "mini-swe-agent" for a in arms.values())
    packages = provenance.package_versions()
    if not uses_mswea:
        packages.pop("mini-swe-agent", None)
    return RunManifest(
        run_id=run_dir.name,
        tasks=sorted(t.id for t in tasks),
        suite=tasks[0].suite,
        # What --tasks resolved to, so that exports can diff against the starting workspaces.
        tasks_source=str(Path(config.tasks).resolve()) if Path(config.tasks).exists() else config.tasks,
        models=[e.name for e in endpoints],
        seeds=list(range(1, config.seeds + 1)),
        scaffold=",".join(a.scaffold.name for a in arms.values()),
        scaffold_hash=scaffold_hash,
        runtime=runtime,
        sampling=sampling,
        manifest_version=2,
        started_at=provenance.now(),
        harness=provenance.harness_facts(),
        packages=packages,
        model_info={
            e.name: provenance.describe_endpoint(e, m) for e, m in zip(endpoints, config.models, strict=True)
        },
        scaffold_info=_scaffold_info(arms, sampling),
        limits=_limits(config, tasks),
        task_set=provenance.task_set_facts(tasks),
        machine=provenance.machine_facts(),
    )


def complete_manifest(store: RunStore, endpoints: "list[ModelEndpoint]", models: tuple[str, ...]) -> None:
    """run.json at the end of an invocation (stopped or not): when it ended, each started server's
    real argv."""
    facts = {}
    for endpoint, model in zip(endpoints, models, strict=True):
        try:
            facts[endpoint.name] = provenance.describe_endpoint(endpoint, model)
        except Exception:  # a fact missed at the end must not hide how the run ended
            continue
    store.complete_manifest(facts, provenance.now())
