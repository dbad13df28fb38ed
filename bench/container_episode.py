"""Benchmark: what a container per episode costs (docker runtime vs local), on one replay script.

1. Start-up: a fresh episode container from the cached sandbox image, the task's files copied in
   and the tool server launched (runtime.open + ContainerTools.start: the agent's first model call can go
   out). Target: median < 2 s. Printed beside it: until the tools first answer (the tool server
   imports the SDK meanwhile, overlapping the first model call), and the container's CPU time
   until then (its cgroup's counter: mostly that import).
2. Per-turn overhead: the same scripted episode (terminal commands and think calls) against an
   instant replay server in its own process, under --runtime local and --runtime docker:
   (episode wall - LLM time) / turns, for 20-turn episodes (target: docker < local + 20%): in
   `harness eval` of 4 episodes (each episode's sandbox starts while the one before runs, the
   first one's while the harness starts), of one episode, and for one episode run by run_eval()
   in a process that has run one before (the worst case: nothing hides its sandbox's start); split
   into a fixed cost per episode and a marginal cost per turn (measured inside each episode, from
   its first observation on: bench/eval_overhead.py's 10- vs 30-turn difference drowned here in
   the noise of the container's start-up on a shared machine).
   Beside it, one tool call's round trip through the container's tool server against the same
   executors in this process.
3. Concurrency: 8 container episodes of 4 model calls each (each plays the same script:
   ``pick="by_turn"``) against the replay server with a fixed 0.5 s delay per completion, at
   concurrency 1 and 4, verification included. Target ratio >= 3. Printed beside it: the CPU
   time the episodes cost (harness and replay processes, the engine's API service, the containers
   with their conmon), and the wall time that CPU alone needs on this machine's cores: when the
   concurrency-4 wall is near it, the run is CPU-bound (a shared machine lends fewer cores still).

The machine's load average is printed with the figures (a shared machine: other work competes).

usage: .venv/bin/python bench/container_episode.py [--rounds N]
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from eval_overhead import replay_process  # bench/ is on sys.path when this file is run

from harness.episodes.openhands.container_tools import ContainerTools
from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from harness.runtime.container import ContainerRuntime, ContainerSandbox
from harness.runtime.engine import docker_client
from harness.tasks import load_tasks

FIX_ADD = Path(__file__).resolve().parent.parent / "tasks" / "smoke" / "fix-add"
RUN_EPISODES = 4
FINISH = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "ok"})])


def load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def container_cpu_s(sandbox: ContainerSandbox) -> float:
    """CPU seconds the container has used so far (the engine's counter of its cgroup)."""
    stats = sandbox.container.stats(stream=False, one_shot=True)
    return int(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9


def startup(tmp: Path, rounds: int) -> list[tuple[float, float, float]]:
    """(seconds until the agent can start, seconds until the tools first answer, container CPU
    seconds by then) per round."""
    runtime = ContainerRuntime(docker_client())
    (task,) = load_tasks(str(FIX_ADD))
    runtime.prepare(tmp / "startup-run", [task])
    out = []
    for i in range(rounds + 1):
        t0 = time.perf_counter()
        sandbox = runtime.open(task, tmp / f"startup-{i}", f"bench/fix-add/seed{i}")
        tools = ContainerTools(sandbox, "subprocess")
        tools.start()
        ready = time.perf_counter() - t0
        tools.call("terminal", {"command": "true"})  # waits for the tool server's imports
        answered = time.perf_counter() - t0
        cpu = container_cpu_s(sandbox)
        tools.close()
        sandbox.finish()
        sandbox.close()
        if i:  # the first start warms the engine's caches: not counted
            out.append((ready, answered, cpu))
    return out


def per_turn(
    tmp: Path, runtime: str, n_turns: int = 20, episodes: int = 1, cli: bool = True
) -> tuple[float, float]:
    """A run of ``episodes`` scripted ``n_turns`` episodes, one at a time: ((wall - LLM) seconds per
    turn, marginal seconds per turn), over all its episodes. ``cli``: the run is ``harness eval``
    in its own process, else ``run_eval`` in this one (where the SDK is imported already).

    The marginal cost is what a turn costs once the tools have answered: from the first
    observation to the last action in the persisted conversation, per model call in between,
    less the episode's mean LLM time per call. The difference between the two is the fixed cost
    per episode (the sandbox and its tools starting, the episode's end). In a run of several
    episodes, each one's sandbox starts while the one before runs (runtime/warm.py); the first
    one's while ``harness eval`` starts (it imports the SDK too), which ``run_eval`` called again
    in a process that has imported it does not do: nothing hides that sandbox's start."""
    turns = [
        ScriptedResponse(
            content=f"step {i}",
            tool_calls=[
                ScriptedCall(name="think", arguments={"thought": f"plan {i}"})
                if i % 2
                else ScriptedCall(name="terminal", arguments={"command": f"echo {i} >> log.txt"})
            ],
        )
        for i in range(n_turns - 1)
    ]
    run = tmp / f"turns-{runtime}-{time.monotonic_ns()}"
    suite = tmp / f"suite-{run.name}"
    suite.mkdir()
    for i in range(episodes):
        (suite / f"fix-add-{i}").symlink_to(FIX_ADD, target_is_directory=True)
    replay = ReplayScript(model="bench", responses=[*turns, FINISH], pick="by_turn")
    with replay_process(replay, tmp) as url:
        if cli:  # what a researcher runs: a fresh process
            subprocess.run(
                [sys.executable, "-m", "harness.cli", "eval", "--model", "bench", "--tasks", str(suite),
                 "--base-url", url, "--run-dir", str(run), "--runtime", runtime,
                 "--max-iterations", str(n_turns)],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        else:
            run_eval(
                EvalConfig(
                    models=("bench",),
                    tasks=str(suite),
                    base_url=url,
                    run_dir=run,
                    runtime=runtime,
                    max_iterations=n_turns,
                )  # type: ignore[arg-type]
            )
    wall = llm = marginal = 0.0
    n = calls = 0
    for rec in RunStore(run).records().values():
        conv = run / "episodes" / "bench" / rec.task_id / f"seed{rec.seed}" / "conversation"
        events = [json.loads(p.read_text()) for p in sorted(conv.glob("*/events/event-*.json"))]
        first_obs = next(
            datetime.fromisoformat(e["timestamp"]) for e in events if e.get("kind") == "ObservationEvent"
        )
        later = [
            datetime.fromisoformat(e["timestamp"])
            for e in events
            if e.get("kind") == "ActionEvent" and datetime.fromisoformat(e["timestamp"]) > first_obs
        ]
        marginal += (later[-1] - first_obs).total_seconds() - len(later) * rec.llm_s / rec.turns
        wall, llm, n, calls = wall + rec.wall_s, llm + rec.llm_s, n + rec.turns, calls + len(later)
    return (wall - llm) / n, marginal / calls


CONTAINERS_CPU = Path("/sys/fs/cgroup/cpuacct/libpod_parent/cpuacct.usage")  # podman, cgroup v1


def cpu_now() -> dict[str, float]:
    """CPU seconds so far: this process and its waited-for children (the replay server), the
    engine's API service, and every podman container with its conmon (their parent cgroup, when
    this machine has one where it is looked for)."""
    import resource

    import psutil

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    service = 0.0
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if cmd and cmd[0].endswith("podman") and "system" in cmd and "service" in cmd:
            with contextlib.suppress(psutil.Error):
                service += sum(proc.cpu_times()[:2])
    out = {
        "harness": me.ru_utime + me.ru_stime,
        "replay server": kids.ru_utime + kids.ru_stime,  # the model's stand-in: not a harness cost
        "engine": service,
    }
    with contextlib.suppress(OSError, ValueError):
        out["containers"] = int(CONTAINERS_CPU.read_text()) / 1e9
    return out


def throughput(tmp: Path, concurrency: int) -> tuple[float, dict[str, float]]:
    """(wall seconds, CPU seconds by whom) of 8 container episodes, verification included."""
    script = [
        ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": f"echo {i}"})])
        for i in range(3)
    ]
    suite = tmp / f"suite-{concurrency}"
    suite.mkdir()
    for i in range(8):
        (suite / f"t{i}").symlink_to(FIX_ADD, target_is_directory=True)
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    replay = ReplayScript(model="bench", responses=[*script, FINISH], delay=0.5, pick="by_turn")
    with replay_process(replay, tmp) as url:
        run_eval(
            EvalConfig(
                models=("bench",),
                tasks=str(suite),
                base_url=url,
                run_dir=tmp / f"conc-{concurrency}",
                runtime="docker",
                concurrency=concurrency,
                max_iterations=4,
            )
        )
    wall = time.perf_counter() - t0
    cpu1 = cpu_now()
    return wall, rollout_span(tmp / f"conc-{concurrency}"), {k: cpu1[k] - cpu0[k] for k in cpu1 if k in cpu0}


def rollout_span(run: Path) -> float:
    """Seconds from the first file an episode writes to the last trajectory written: the episodes
    alone, without what a run pays once whatever its concurrency (preflight, the SDK's import in
    the harness, verification). The first container's start (~0.25 s) comes before it."""
    first = min(
        p.stat().st_mtime for d in (run / "episodes").glob("*/*/seed*/conversation") for p in d.rglob("*")
    )
    return max(f.stat().st_mtime for f in (run / "trajectories").rglob("*.jsonl")) - first


def round_trips(tmp: Path, calls: int = 30) -> dict[tuple[str, str], float]:
    """Median seconds of one tool call, the same action through a container's tool server and
    through the same executors in this process: the marginal cost of the container per call."""
    from openhands.tools.file_editor.definition import FileEditorAction
    from openhands.tools.file_editor.impl import FileEditorExecutor
    from openhands.tools.terminal.definition import TerminalAction

    from harness.episodes.openhands.ready_terminal import ReadyTerminalExecutor
    from harness.tasks import prepare_workspace

    def median_s(call: Callable[[], object]) -> float:
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    runtime = ContainerRuntime(docker_client())
    (task,) = load_tasks(str(FIX_ADD))
    runtime.prepare(tmp / "rtt-run", [task])
    sandbox = runtime.open(task, tmp / "rtt", "bench/fix-add/rtt")
    tools = ContainerTools(sandbox, "subprocess")
    out = {}
    try:
        tools.start()
        tools.call("terminal", {"command": "true"})
        view = {"command": "view", "path": f"{sandbox.workdir}/calc.py"}
        out["docker", "terminal"] = median_s(lambda: tools.call("terminal", {"command": "echo 1 >> log.txt"}))
        out["docker", "file_editor"] = median_s(lambda: tools.call("file_editor", view))
        tools.close()
        sandbox.finish()
    finally:
        tools.close()
        sandbox.close()
    workspace = prepare_workspace(task, tmp / "rtt-local")
    terminal = ReadyTerminalExecutor(str(workspace))
    editor = FileEditorExecutor(workspace_root=str(workspace))
    try:
        terminal(TerminalAction(command="true"))
        out["local", "terminal"] = median_s(lambda: terminal(TerminalAction(command="echo 1 >> log.txt")))
        local_view = FileEditorAction(command="view", path=str(workspace / "calc.py"))
        out["local", "file_editor"] = median_s(lambda: editor(local_view))
    finally:
        terminal.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-container-") as name:
        tmp = Path(name)
        print(f"before: {load()}")
        starts = startup(tmp, args.rounds)
        ready, answered, cpu = ([s[k] for s in starts] for k in range(3))
        print(
            f"container start-up (cached image, files in, tool server launched): median {statistics.median(ready):.2f} s "
            f"(runs: {', '.join(f'{s:.2f}' for s in ready)}; target < 2 s)"
        )
        print(
            f"  tools answering (the tool server imports the SDK while the first model call runs): median "
            f"{statistics.median(answered):.2f} s (runs: {', '.join(f'{s:.2f}' for s in answered)}); "
            f"container CPU by then: median {statistics.median(cpu):.2f} s"
        )
        print(f"  {load()}")
        for episodes, cli, what in (
            (RUN_EPISODES, True, f"`harness eval` of {RUN_EPISODES} episodes, one at a time"),
            (1, True, "`harness eval` of one episode"),
            (
                1,
                False,
                "one episode by run_eval() in a process that ran one before (nothing hides its start)",
            ),
        ):
            runs: dict[str, list[tuple[float, float]]] = {"local": [], "docker": []}
            for _ in range(args.rounds):  # taking turns: a change in the machine's load hits both alike
                for runtime in runs:
                    runs[runtime].append(per_turn(tmp, runtime, episodes=episodes, cli=cli))
            (ml, cl), (md, cd) = (
                (statistics.median(x for x, _ in runs[r]), statistics.median(m for _, m in runs[r]))
                for r in runs
            )
            print(
                f"per-turn time without the model, 20-turn episodes, {what}: local {1000 * ml:.1f} ms, docker "
                f"{1000 * md:.1f} ms, {100 * (md / ml - 1):+.0f}% (target < +20%; runs local "
                f"{', '.join(f'{1000 * x:.0f}' for x, _ in runs['local'])}, docker "
                f"{', '.join(f'{1000 * x:.0f}' for x, _ in runs['docker'])} ms)"
            )
            print(
                f"  split: marginal per turn once the tools answer: local {1000 * cl:.1f} ms, docker {1000 * cd:.1f} ms "
                f"({100 * (cd / cl - 1):+.0f}%); fixed per episode: local {20 * (ml - cl):.2f} s, docker "
                f"{20 * (md - cd):.2f} s (docker: what of the sandboxes' start nothing hid)"
            )
        rtt = round_trips(tmp)
        print(
            "  one tool call, container vs this process (median of 30): "
            + "; ".join(
                f"{tool} {1000 * rtt['docker', tool]:.1f} vs {1000 * rtt['local', tool]:.1f} ms"
                for tool in ("terminal", "file_editor")
            )
        )
        print(f"  {load()}")
        (one, span1, cpu1), (four, span4, cpu4) = throughput(tmp, 1), throughput(tmp, 4)
        print(
            f"8 container episodes x 4 calls, 0.5 s per completion: concurrency 1 {one:.1f} s, "
            f"concurrency 4 {four:.1f} s, ratio {one / four:.2f} (target >= 3)"
        )
        print(
            f"  the episodes alone (first episode's start to last one's end, without the run's one-off "
            f"preflight, imports and verification): concurrency 1 {span1:.1f} s, concurrency 4 {span4:.1f} s, "
            f"ratio {span1 / span4:.2f}"
        )
        for n, used, wall in ((1, cpu1, one), (4, cpu4, four)):
            total = sum(v for k, v in used.items() if k != "replay server")
            print(
                f"  CPU at concurrency {n}: {total / 8:.2f} s per episode without the replay server ("
                + ", ".join(f"{k} {v / 8:.2f}" for k, v in used.items())
                + f"); all 8 need {total / (os.cpu_count() or 1):.1f} s of this machine's {os.cpu_count()} cores "
                f"(wall {wall:.1f} s)"
            )
        print(f"  {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
