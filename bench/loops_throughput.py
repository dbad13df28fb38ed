"""Benchmark: `harness loops` throughput and online detection cost.

1. A synthetic OpenHands evaluation output.jsonl (SDK event shape) of 10,000 episodes x 30 turns,
   one in five looping (repeat_call, cycle, repeat_error, repeat_output in turn); `harness loops
   FILE --json` is timed end to end, pinned to one core. Target: >= 50,000 turns/s.
2. Real-sized turns: the same loops, the other turns being the agents' real turns from
   ../shared/real-trajectories, in order (its episodes laid end to end, 30 turns from a random
   point: actions repeat as often as these agents repeat them, loops repeat real turns),
   written as the OpenHands SDK writes events (ids, timestamps, tool call and action, observation
   metadata): about 4 KB of JSON per turn, as in the SDK file there. Each observation is made
   unique (a marker line), and so are each call's raw arguments (a `summary`, which the detector
   ignores); each call and text-only response names its synthetic episode, so no cache sees a
   real turn again in another episode, as the episodes of one run would not show it. Synthetic
   shell output of real sizes when that folder is absent. Target: >= 20,000 turns/s.
3. Online: LoopDetector.feed cost per turn around turn 200 of a long non-looping episode.
   Target: < 1 ms per turn.

Times are wall clock and the child's CPU time (the machine may be shared; CPU time is what one
core spends), with the load average beside them.

usage: .venv/bin/python bench/loops_throughput.py [--episodes N] [--turns T]
"""

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from harness.monitor import LoopDetector, ToolCall, Turn

COMMANDS = [
    "ls -la",
    "cat src/app.py",
    "pytest -q tests/test_app.py",
    "grep -rn parse src",
    "git diff",
    "python -m app",
]


def action(i: int, name: str, args: dict, thought: str) -> dict:
    return {
        "kind": "ActionEvent",
        "id": f"a{i}",
        "source": "agent",
        "thought": [{"type": "text", "text": thought}],
        "tool_name": name,
        "tool_call_id": f"c{i}",
        "llm_response_id": f"r{i}",
        "tool_call": {"id": f"c{i}", "name": name, "arguments": json.dumps(args), "origin": "completion"},
        "action": {"kind": "TerminalAction", **args},
    }


def observation(i: int, text: str, error: bool = False) -> dict:
    return {
        "kind": "ObservationEvent",
        "id": f"o{i}",
        "source": "environment",
        "tool_call_id": f"c{i}",
        "action_id": f"a{i}",
        "observation": {
            "kind": "TerminalObservation",
            "is_error": error,
            "content": [{"type": "text", "text": text}],
        },
    }


def shell_output(t: int, rng: random.Random, size: int) -> str:
    """Observation text the size of a real agent's: listings, tracebacks and test lines with numbers."""
    lines = []
    while sum(len(x) + 1 for x in lines) < size:
        k = rng.randint(1, 400)
        lines.append(
            rng.choice(
                [
                    f"src/pkg/module_{k}.py:{rng.randint(1, 900)}: def handler_{k}(request, ctx=None):",
                    f"-rw-r--r-- 1 agent agent {rng.randint(100, 99999)} Nov 22 17:{k % 60:02d} file_{k}.txt",
                    f'  File "/workspace/src/pkg/module_{k}.py", line {rng.randint(1, 900)}, in run_{k}',
                    f"tests/test_{k}.py::test_case_{rng.randint(1, 50)} PASSED [{rng.randint(0, 100)}%]",
                    f"step {t}: processed {rng.randint(1, 10**6)} records in {rng.random():.3f}s",
                ]
            )
        )
    return "\n".join(lines)


def real_turns() -> list[Turn]:
    """The development set's episodes' turns, end to end (empty when it is not beside the repository)."""
    from harness.results.trajectories import read_trajectories

    root = Path(__file__).resolve().parent.parent.parent / "shared" / "real-trajectories"
    turns = []
    for f in sorted(root.rglob("*.json*")) if root.is_dir() else ():
        if f.name != "labels.json":
            turns += [turn for traj in read_trajectories(f).trajectories for turn in traj.turns]
    return turns


def synthetic_turns(rng: random.Random) -> list[Turn]:
    """Stand-ins for the development set: shell commands with outputs of real agents' sizes."""
    return [
        Turn(
            index=t,
            text=f"Step {t}: let me check this.",
            tool_calls=(ToolCall(name="terminal", arguments=json.dumps({"command": rng.choice(COMMANDS)})),),
            observation=shell_output(t, rng, int(rng.lognormvariate(6.2, 1.3))),
        )
        for t in range(2000)
    ]


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def sdk_events(
    turn: Turn, e: int, t: int, rng: random.Random, marker: str = "", error: bool = False
) -> list[dict]:
    """A real turn as the OpenHands SDK writes it (the fields of its ActionEvent/ObservationEvent),
    made unique: a marker line in the observation, a `summary` in each call's arguments (which
    the detector ignores, as it ignores the model's wording of them). The same real turns recur
    in many synthetic episodes, which one run's episodes would not: a field naming the episode in
    each call and a line in each text-only response keep caches from seeing across episodes."""
    stamp = f"2025-10-30T03:{t % 60:02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}"
    observation = f"{turn.observation}\n{marker or f'[episode {e} turn {t}]'}"
    turn = turn.model_copy(update={"observation_is_error": True}) if error else turn
    if not turn.tool_calls:
        events = [
            {
                "kind": "MessageEvent",
                "id": _uid(rng),
                "timestamp": stamp,
                "source": "agent",
                "llm_message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"{turn.text}\n(task-{e:05d})"}],
                },
                "llm_response_id": f"chatcmpl-{rng.getrandbits(64):x}",
            }
        ]
        if turn.observation:
            events.append(
                {
                    "kind": "MessageEvent",
                    "id": _uid(rng),
                    "timestamp": stamp,
                    "source": "user",
                    "llm_message": {"role": "user", "content": [{"type": "text", "text": observation}]},
                }
            )
        return events
    response = f"chatcmpl-{rng.getrandbits(64):x}"
    events = []
    for k, call in enumerate(turn.tool_calls):
        try:
            args = json.loads(call.arguments)
        except ValueError:
            args = None
        if isinstance(args, dict):
            arguments = json.dumps(
                {**args, "bench_episode": f"task-{e:05d}", "summary": f"step {t} of episode {e}"}
            )
            fields = {k: v for k, v in args.items() if isinstance(v, str | int | bool)}
        else:
            arguments, fields = call.arguments, {}
        call_id, action_id = f"call_{rng.getrandbits(96):x}", _uid(rng)
        events.append(
            {
                "kind": "ActionEvent",
                "id": action_id,
                "timestamp": stamp,
                "source": "agent",
                "thought": [{"type": "text", "text": turn.text}] if k == 0 and turn.text else [],
                "reasoning_content": None,
                "thinking_blocks": [],
                "responses_reasoning_item": None,
                "action": {
                    "kind": "ExecuteBashAction",
                    **fields,
                    "is_input": False,
                    "timeout": None,
                    "reset": False,
                },
                "tool_name": call.name,
                "tool_call_id": call_id,
                "tool_call": {
                    "id": call_id,
                    "name": call.name,
                    "arguments": arguments,
                    "origin": "completion",
                },
                "llm_response_id": response,
                "security_risk": "UNKNOWN",
            }
        )
        code = 1 if turn.observation_is_error else 0
        events.append(
            {
                "kind": "ObservationEvent",
                "id": _uid(rng),
                "timestamp": stamp,
                "source": "environment",
                "tool_name": call.name,
                "tool_call_id": call_id,
                "observation": {
                    "kind": "ExecuteBashObservation",
                    "output": observation if k == 0 else "",
                    "command": str(fields.get("command", "")),
                    "exit_code": None,
                    "error": turn.observation_is_error,
                    "timeout": False,
                    "metadata": {
                        "exit_code": code,
                        "pid": -1,
                        "username": "root",
                        "hostname": "b3b068e233a4",
                        "working_dir": "/workspace",
                        "py_interpreter_path": "/usr/local/bin/python",
                        "prefix": "",
                        "suffix": f"\n[The command completed with exit code {code}.]",
                    },
                },
                "action_id": action_id,
            }
        )
    return events


# The detector's bound for a one-line acknowledgement of a relative move ("Navigated back").
_ACKNOWLEDGED = 200


def episode(e: int, turns: int, rng: random.Random, real: list[Turn] | None = None) -> dict:
    """One instance of output.jsonl; one in five loops. The other turns are synthetic, or with
    ``real``, real turns in order from a random point."""
    history: list[dict] = [
        {
            "kind": "MessageEvent",
            "source": "user",
            "llm_message": {
                "role": "user",
                "content": [{"type": "text", "text": "Fix the failing test in src/app.py."}],
            },
        }
    ]
    loop_kind = e % 20 if e % 5 == 0 else None
    onset = rng.randint(5, 15)
    source = real or []
    start = rng.randrange(len(source)) if source else 0
    # With real turns, a loop repeats real ones (calls with multi-line results) from its onset on,
    # each result with a new timing line that normalisation masks, so no two are the same text.
    looped = [
        turn
        for turn in source[start + onset : start + onset + 200]
        if turn.tool_calls and "\n" in turn.observation.strip() and len(turn.observation) > _ACKNOWLEDGED
    ][:2]
    for t in range(turns):
        i = e * 1000 + t
        if loop_kind is not None and t >= onset:
            k = (loop_kind // 5) % 4
            if len(looped) == 2 and k < 3:
                timing = f"[took {t}.{rng.randint(0, 9)}s]"
                history += sdk_events(looped[t % 2 if k == 1 else 0], e, t, rng, timing, error=k == 2)
                continue
            if k == 0:  # repeat_call with varying thought
                history += [
                    action(i, "terminal", {"command": "ls -la"}, f"Let me look again ({t})"),
                    observation(i, "total 8\n-rw-r--r-- app.py"),
                ]
            elif k == 1:  # cycle
                cmd = COMMANDS[t % 2]
                history += [action(i, "terminal", {"command": cmd}, "retry"), observation(i, f"out of {cmd}")]
            elif k == 2:  # repeat_error
                history += [
                    action(i, "terminal", {"command": "python -m nope"}, "run it"),
                    observation(i, "No module named nope", error=True),
                ]
            else:  # repeat_output
                history.append(
                    {
                        "kind": "MessageEvent",
                        "source": "agent",
                        "llm_response_id": f"r{i}",
                        "llm_message": {
                            "role": "assistant",
                            "content": [{"type": "text", "text": "I will now fix the bug in app.py."}],
                        },
                    }
                )
            continue
        if real:
            history += sdk_events(source[(start + t) % len(source)], e, t, rng)
            continue
        cmd = f"{rng.choice(COMMANDS)} # step {t}"
        history += [
            action(i, "terminal", {"command": cmd, "summary": "work"}, f"Step {t}: checking {cmd}"),
            observation(i, f"output of step {t}: " + "x" * rng.randint(20, 400)),
        ]
    return {"instance_id": f"task-{e:05d}", "history": history, "error": None, "test_result": {}}


def write_run_dir(root: Path, episodes: int, turns: int, rng: random.Random) -> None:
    """The same trajectories in the harness's own run layout: episodes.jsonl + one Turn file each."""
    from harness.episodes.openhands.turns_from_events import turns_from_sdk_events

    (root / "trajectories").mkdir(parents=True)
    with (root / "episodes.jsonl").open("w") as idx:
        for e in range(episodes):
            rel = f"trajectories/e{e:05d}.jsonl"
            ep_turns = turns_from_sdk_events(episode(e, turns, rng)["history"])
            (root / rel).write_text("".join(t.model_dump_json() + "\n" for t in ep_turns))
            idx.write(
                json.dumps({"model": "m", "task_id": f"task-{e:05d}", "seed": 1, "trajectory": rel}) + "\n"
            )


def timed_loops(path: Path) -> tuple[float, float, dict]:
    """(wall seconds, the child's CPU seconds, totals) of `harness loops PATH --json` on one core."""
    cmd = [sys.executable, "-m", "harness.cli", "loops", str(path), "--json"]
    if os.path.exists("/usr/bin/taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return elapsed, cpu, json.loads(done.stdout)["totals"]


def report(what: str, turns: int, path: Path, target: int) -> None:
    elapsed, cpu, totals = timed_loops(path)
    print(what)
    print(
        f"  harness loops: {elapsed:.2f} s wall -> {turns / elapsed:,.0f} turns/s; {cpu:.2f} s CPU -> "
        f"{turns / cpu:,.0f} turns/s (one core; target >= {target:,}; load average {os.getloadavg()[0]:.2f})"
    )
    print(f"  found {totals['looping']} looping episodes: {totals['by_kind']}")


def online_cost_per_turn(rng: random.Random) -> float:
    """CPU seconds per LoopDetector.feed around turn 200, in the costliest case without a loop: every
    action is one of the window's (so every observation is normalised and compared), and every
    observation is new, 0.5-8 KB of shell output."""
    det = LoopDetector()
    turns = [
        Turn(
            index=i,
            text=f"Step {i}: let me inspect the file again",
            observation=shell_output(i, rng, rng.randint(500, 8000)),
            tool_calls=(ToolCall(name="terminal", arguments=json.dumps({"command": COMMANDS[i % 5]})),),
        )
        for i in range(260)
    ]
    for t in turns[:190]:
        det.feed(t)
    t0 = time.process_time()
    for t in turns[190:210]:
        det.feed(t)
    assert det.finding is None
    return (time.process_time() - t0) / 20


def online_cost_per_wordy_turn(rng: random.Random) -> float:
    """The same around turn 200 for turns that also carry 2-6 KB of prose each (reasoning written
    out: every text scanned for chanting and repeated lines), and an edit every third turn."""
    words = [
        "the",
        "parser",
        "drops",
        "a",
        "field",
        "when",
        "the",
        "input",
        "ends",
        "early",
        "so",
        "we",
        "check",
        "the",
        "tokenizer",
        "next",
    ]
    det = LoopDetector()
    turns = []
    for i in range(260):
        prose = " ".join(rng.choice(words) for _ in range(rng.randint(350, 1000)))
        args = (
            {"command": "str_replace", "path": f"/r/m{i}.py", "old_str": "a", "new_str": f"b{i}"}
            if i % 3 == 0
            else {"command": COMMANDS[i % 5]}
        )
        name = "file_editor" if i % 3 == 0 else "terminal"
        turns.append(
            Turn(
                index=i,
                text=f"<think>{prose}</think> Step {i}.",
                observation=shell_output(i, rng, rng.randint(500, 8000)),
                tool_calls=(ToolCall(name=name, arguments=json.dumps(args)),),
            )
        )
    for t in turns[:190]:
        det.feed(t)
    t0 = time.process_time()
    for t in turns[190:210]:
        det.feed(t)
    assert det.finding is None
    return (time.process_time() - t0) / 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--online-only", action="store_true", help="only the online cost per turn (3.)")
    args = ap.parse_args()
    if args.online_only:
        online(runs=5)
        return
    rng = random.Random(0)
    total = args.episodes * args.turns
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "output.jsonl"
        with path.open("w") as fh:
            for e in range(args.episodes):
                fh.write(json.dumps(episode(e, args.turns, rng)) + "\n")
        size = path.stat().st_size
        report(
            f"OpenHands output.jsonl (SDK events): {args.episodes} episodes x {args.turns} turns, {size / 2**20:.0f} MiB",
            total,
            path,
            50_000,
        )
        run_dir = Path(tmp) / "run"
        write_run_dir(run_dir, args.episodes, args.turns, random.Random(0))
        report(f"harness run directory (Turn records): {args.episodes} trajectories", total, run_dir, 50_000)
        real = Path(tmp) / "real-sized.jsonl"
        n_real = max(1, args.episodes // 5)
        sources = real_turns()
        source = f"{len(sources)} real turns" if sources else "synthetic shell output"
        sources = sources or synthetic_turns(rng)
        with real.open("w") as fh:
            for e in range(n_real):
                fh.write(json.dumps(episode(e, args.turns, rng, sources)) + "\n")
        per_turn = real.stat().st_size / (n_real * args.turns)
        report(
            f"real-sized turns ({source}): {n_real} episodes x {args.turns} turns, "
            f"{per_turn / 1024:.1f} KiB of JSON per turn",
            n_real * args.turns,
            real,
            20_000,
        )
    online(runs=3)


def online(runs: int) -> None:
    """3.: the median of ``runs`` measurements of each online case."""
    cost = statistics.median(online_cost_per_turn(random.Random(k)) for k in range(runs))
    print(
        f"online LoopDetector.feed at turn ~200, every observation new and normalised: "
        f"{cost * 1e3:.3f} ms CPU/turn (target < 1 ms)"
    )
    cost = statistics.median(online_cost_per_wordy_turn(random.Random(k)) for k in range(runs))
    print(
        f"online LoopDetector.feed at turn ~200, 2-6 KB of reasoning per turn, an edit every third: "
        f"{cost * 1e3:.3f} ms CPU/turn (target < 1 ms)"
    )


if __name__ == "__main__":
    main()
