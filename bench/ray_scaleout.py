"""Benchmark: episodes per minute with --executor ray on 1, 2 and 4 nodes.

The nodes are simulated on this machine (ray.cluster_utils: a head without CPUs and N nodes of
one CPU and a custom resource each); each node holds one replica, a replay server (``replay:``)
that answers every completion after a fixed 0.5 s, and runs ``--concurrency`` episodes at once.
An episode is 3 ``think`` calls and a finish (4 completions, 2 s of model time, little CPU), so
what grows with the nodes is model capacity, not CPU-bound work. Each size first runs one warm-up
episode per slot (Ray starts its worker processes, which import the SDK once), then 12 episodes
per node on the smoke suite; the figures are episodes / rollout phase (replicas starting
included; verification excluded), and the same once the replicas are up. Targets: 2 nodes vs 1
>= 1.8x, 4 nodes vs 1 >= 3.4x. The machine's other load shares its CPUs: it is printed.

usage: .venv/bin/python bench/ray_scaleout.py [--concurrency 2] [--nodes 1 2 4]
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import harness.evaluate as evaluate
from harness.cluster.executor import ClusterModel
from harness.evaluate import EvalConfig, ExecutorConfig, run_eval
from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse

DELAY_S = 0.5
THINKS = 3  # + a finish: 4 completions, 2 s of model time (more thinks in a row are a loop, stopped)
PER_NODE = 12  # measured episodes per node
SUITE_TASKS = 3  # smoke

_phase: list[float] = []
_replicas_up: list[float] = []
_real_rollouts = evaluate._rollouts
_real_ensure_up = ClusterModel.ensure_up


def _timed_rollouts(*args, **kwargs):  # type: ignore[no-untyped-def]
    """The rollout phase's wall time (replicas up, episodes routed, records written)."""
    start = time.monotonic()
    try:
        return _real_rollouts(*args, **kwargs)
    finally:
        _phase.append(time.monotonic() - start)


def _timed_ensure_up(self: ClusterModel) -> None:
    """The replicas' start (actors placed, replay servers up) within the rollout phase."""
    start = time.monotonic()
    try:
        _real_ensure_up(self)
    finally:
        _replicas_up.append(time.monotonic() - start)


evaluate._rollouts = _timed_rollouts
ClusterModel.ensure_up = _timed_ensure_up  # type: ignore[method-assign]


def script(path: Path) -> str:
    responses = [
        ScriptedResponse(
            content=f"Step {i}.", tool_calls=[ScriptedCall(name="think", arguments={"thought": f"step {i}"})]
        )
        for i in range(THINKS)
    ]
    responses.append(
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
    )
    path.write_text(
        ReplayScript(model="bench", pick="by_turn", delay=DELAY_S, responses=responses).model_dump_json()
    )
    return f"replay:{path}"


def measure(nodes: int, concurrency: int, tmp: Path) -> tuple[int, float, float]:
    """(episodes, rollout seconds, of which replicas starting) on a fresh cluster of ``nodes`` nodes."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for i in range(nodes):
        # As many CPUs (a Ray resource: nothing here is CPU-bound) as episodes at once, so that Ray
        # keeps that many worker processes between runs (it ends idle ones beyond a node's CPUs).
        cluster.add_node(num_cpus=concurrency, resources={f"bench_node{i}": 1})
    ray.init(address=cluster.address, logging_level="WARNING")
    try:
        model = script(tmp / "script.json")
        common = dict(
            runtime="local",
            models=(model,),
            tasks="smoke",
            executor=ExecutorConfig(name="ray"),
            concurrency=concurrency,
        )
        warm_seeds = -(-nodes * concurrency // SUITE_TASKS)
        run_eval(EvalConfig(**common, seeds=warm_seeds, run_dir=tmp / f"warm-{nodes}"))  # type: ignore[arg-type]
        seeds = PER_NODE * nodes // SUITE_TASKS
        _phase.clear()
        _replicas_up.clear()
        summary = run_eval(EvalConfig(**common, seeds=seeds, run_dir=tmp / f"run-{nodes}"))  # type: ignore[arg-type]
        return summary.new_episodes, _phase[0], _replicas_up[0]
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=2, help="episodes at once per node [default: 2]")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    rates: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="ray-scaleout-") as tmp:
        for n in args.nodes:
            episodes, seconds, start = measure(n, args.concurrency, Path(tmp))
            rates[n] = (episodes / seconds * 60, episodes / (seconds - start) * 60)
            print(
                f"{n} node(s), {args.concurrency} at once each: {episodes} episodes in {seconds:.1f} s "
                f"(replicas up in {start:.1f} s) = {rates[n][0]:.1f} episodes/min, "
                f"{rates[n][1]:.1f} once the replicas are up (load average {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    if 1 in rates:
        for n, target in ((2, 1.8), (4, 3.4)):
            if n in rates:
                whole, served = (rates[n][i] / rates[1][i] for i in (0, 1))
                verdict = "meets" if whole >= target else "misses"
                print(
                    f"{n} nodes vs 1: {whole:.2f}x ({verdict} the target {target}x); "
                    f"{served:.2f}x once the replicas are up"
                )
    ideal = args.concurrency * 60 / ((THINKS + 1) * DELAY_S)
    print(f"(the model's time alone allows {ideal:.0f} episodes/min per node)")


if __name__ == "__main__":
    main()
