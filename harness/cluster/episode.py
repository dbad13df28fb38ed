"""An episode as a Ray task, on the node of the replica that serves it.

It runs the same attempts as the thread executor (``rollout.run_attempts``: sandbox, runner,
checkpoints, infrastructure retries once the replica's server answers again) in a scratch directory
of its node, then hands the outcome and the episode's files (final workspace, conversation,
completions) back as one tar: the driver unpacks them into the run directory and writes the
record. The sandbox is closed here (a container is removed on its node); verification on the
driver starts from the exported files. Each checkpoint reaches the driver's run directory as it is
taken, and an episode that has one there starts from it (mirror.py); the run's graceful stop
reaches the task through the same mailbox: the turn in flight ends, is checkpointed and shipped.
"""

import hashlib
import io
import shutil
import tarfile
import tempfile
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from harness.cluster.mirror import DRAIN_WAIT_S, Mirror
from harness.cluster.replica import Address
from harness.resume.checkpoint import DIR
from harness.runtime.export_caps import remove_tree
from harness.seam import EpisodeOutcome, ServerFacts
from harness.tasks.steps import StepResult

if TYPE_CHECKING:
    from harness.evaluate import EvalConfig
    from harness.rollout import Arm
    from harness.runtime.base import Runtime
    from harness.tasks import Task

SCRATCH = Path(tempfile.gettempdir()) / "harness-ray"


class EpisodeResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    outcome: EpisodeOutcome
    files: bytes  # the episode directory as a tar
    scratch: str  # the episode directory on its node (paths in the outcome point there)
    node: str
    steps: list[StepResult] | None = None  # a multi-step task's, verified on its node as they ran


class EpisodeStopped(BaseModel):
    """The run's graceful stop ended the episode after a turn (``drained``: checkpointed and
    shipped), or it never began (not recorded either way)."""

    model_config = ConfigDict(frozen=True)

    drained: bool


class ReplicaEndpoint:
    """The ModelEndpoint an episode task sees: its replica's server, asked where it is on every
    ``ensure_up`` (a restarted server has a new port and key)."""

    def __init__(self, replica: Any, name: str, path: str) -> None:
        self._replica = replica
        self.name, self.path = name, path
        self._address: Address | None = None

    @property
    def openai_url(self) -> str:
        assert self._address is not None, "ensure_up first"
        return self._address.openai_url

    @property
    def api_key(self) -> str:
        assert self._address is not None, "ensure_up first"
        return self._address.api_key

    @property
    def server_id(self) -> str:
        return f"replica:{id(self._replica)}"

    def facts(self) -> ServerFacts | None:
        return None  # the replica's own seconds come back with it (ClusterModel.release)

    def ensure_up(self) -> None:
        import ray

        self._address = ray.get(self._replica.ensure_up.remote())
        self.name = self._address.name

    def healthy(self) -> bool:
        import ray

        return bool(ray.get(self._replica.healthy.remote()))

    def release(self, *, now: bool = False) -> None:
        pass


_cache: dict[str, Any] = {}  # per worker process: the run's arms and runtime
_cache_lock = threading.Lock()


def _parts(config: "EvalConfig", run_id: str, scratch: Path) -> tuple[dict[str, "Arm"], "Runtime"]:
    # Keyed on the whole configuration, not the run directory's name: a worker process outlives a
    # run, and two runs in directories of the same name (``.../ray`` twice) may differ in scaffolds.
    key = hashlib.sha256(f"{run_id}\0{config.model_dump_json()}".encode()).hexdigest()
    with _cache_lock:  # episodes of one worker may start together
        if _cache.get("key") != key:
            from harness.evaluate import make_arms, make_runtime

            runtime = make_runtime(config.runtime, config.sandbox)
            runtime.prepare(scratch, [])  # task images are built on first use, on this node
            _cache.update(key=key, parts=(make_arms(config), runtime))
        parts: tuple[dict[str, Arm], Runtime] = _cache["parts"]
    return parts


def _pack(directory: Path, *, skip: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if directory.exists():
            tar.add(directory, arcname=".", filter=lambda m: None if _under(m.name, skip) else m)
    return buf.getvalue()


def _under(name: str, tops: tuple[str, ...]) -> bool:
    return any(name == top or name.startswith(f"{top}/") for top in tops)


def unpack(files: bytes, directory: Path) -> None:
    """The episode's files into ``directory`` (driver side), replacing what an earlier attempt left."""
    if directory.exists():
        remove_tree(directory)
    directory.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(files)) as tar:
        tar.extractall(directory, filter="tar")  # our own tar: links kept, nothing outside directory


def run_episode(
    config: "EvalConfig",
    run_id: str,
    replica: Any,
    model: tuple[str, str],
    episode: tuple[str, "Task", int, str],
    mailbox: Any,
    resume: bytes | None = None,
) -> EpisodeResult | EpisodeStopped | None:
    """The task's body: ``episode`` (scaffold, task, seed, the records' label) through
    rollout.run_attempts, as on one machine, its checkpoints shipped to the driver through
    ``mailbox`` (mirror.py) and ``resume`` (the driver's episode directory, when it holds a
    checkpoint) its start; EpisodeStopped when the run's graceful stop ended it; None when the run
    was stopped at once while it ran (ray.cancel: not recorded)."""
    import ray

    from harness.results.store import RunStore
    from harness.rollout import Pending, Rollout, run_attempts
    from harness.tasks.harbor_config import allow_host_vars

    allow_host_vars(config.sandbox.task_env)  # this worker process runs this run's episodes only
    scratch = SCRATCH / run_id / uuid.uuid4().hex[:12]  # two tries of one episode never meet
    arms, runtime = _parts(config, run_id, SCRATCH / run_id)
    store = RunStore(scratch)
    ctx = Rollout(config, store, arms, runtime)
    endpoint = ReplicaEndpoint(replica, *model)
    scaffold, task, seed, label = episode
    item = Pending(endpoint, scaffold, task, seed, label)
    edir = store.episode_dir(label, task.id, seed)
    mirror = Mirror(mailbox, edir, str(edir.relative_to(scratch)))
    if resume is not None:  # open_checkpoint takes it from here, as from the run directory
        unpack(resume, edir)
        mirror.seed()
    ctx.on_checkpoint = mirror.attach
    result: list[Any] = []

    def work() -> None:
        try:
            result.append((True, run_attempts(ctx, item)))
        except BaseException as exc:  # raised in the task's own thread below
            result.append((False, exc))

    worker = threading.Thread(target=work, name="episode", daemon=True)
    worker.start()
    drain: Any = mailbox.until_drain.remote(DRAIN_WAIT_S)
    try:
        while worker.is_alive():  # the task's main thread takes ray.cancel's KeyboardInterrupt
            worker.join(0.2)
            if drain is not None and ray.wait([drain], timeout=0)[0]:
                try:
                    draining = ray.get(drain)
                except ray.exceptions.RayError:  # the driver is gone (and this task with it, soon)
                    drain = None
                    continue
                if draining:
                    ctx.drain.event.set()  # the runner checkpoints after the turn in flight and ends
                    drain = None
                else:
                    drain = mailbox.until_drain.remote(DRAIN_WAIT_S)
    except KeyboardInterrupt:
        mirror.close(ship_rest=False)
        ctx.halt()  # shells killed, sandboxes closed: the same stop as in one process
        ctx.close()
        shutil.rmtree(scratch, ignore_errors=True)
        return None
    ctx.close()
    ok, value = result[0]
    # a stopped episode's last checkpoint is on the driver before it hears of the stop; a finished
    # one's files go back whole with it
    mirror.close(ship_rest=ok and value is None)
    if not ok:
        shutil.rmtree(scratch, ignore_errors=True)
        raise value
    if value is None:
        shutil.rmtree(scratch, ignore_errors=True)
        return EpisodeStopped(drained=ctx.drained > 0)
    if value.sandbox is not None:
        value.sandbox.close()
    try:
        return EpisodeResult(
            outcome=value.outcome,
            # its checkpoint is of no more use unless it is run again (infra_error, rollout.record_episode)
            files=_pack(edir, skip=() if value.outcome.infra else (f"./{DIR}",)),
            scratch=str(edir),
            node=ray.get_runtime_context().get_node_id(),
            steps=value.steps,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
