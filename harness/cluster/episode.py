"""An episode as a Ray task, on the node of the replica that serves it.

It runs the same attempts as the thread executor (``evaluate._episode_attempts``: sandbox,
runner, infrastructure retries once the replica's server answers again) in a scratch directory
of its node, then hands the outcome and the episode's files (final workspace, conversation,
completions) back as one tar: the driver unpacks them into the run directory and writes the
record. The sandbox is closed here (a container is removed on its node); verification on the
driver starts from the exported files.
"""

import io
import shutil
import tarfile
import tempfile
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from harness.cluster.replica import Address
from harness.episodes.driver import EpisodeOutcome

if TYPE_CHECKING:
    from harness.evaluate import EvalConfig
    from harness.server.process import VLLMServer
    from harness.tasks import Task

SCRATCH = Path(tempfile.gettempdir()) / "harness-ray"


class EpisodeResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    outcome: EpisodeOutcome
    files: bytes  # the episode directory as a tar
    scratch: str  # the episode directory on its node (paths in the outcome point there)
    node: str


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
    def server(self) -> "VLLMServer | None":
        return None

    def ensure_up(self) -> None:
        import ray

        self._address = ray.get(self._replica.ensure_up.remote())
        self.name = self._address.name

    def healthy(self) -> bool:
        import ray

        return bool(ray.get(self._replica.healthy.remote()))

    def release(self) -> None:
        pass


_cache: dict[str, Any] = {}  # per worker process: the run's scaffold, runtime and runner


def _parts(config: "EvalConfig", run_id: str, scratch: Path) -> tuple[Any, Any, Any]:
    if _cache.get("run") != run_id:
        from harness.episodes.runner import get_runner
        from harness.episodes.scaffold import load_scaffold
        from harness.runtime.base import ContainerLimits
        from harness.runtime.select import get_runtime

        runtime = get_runtime(
            config.runtime,
            ContainerLimits(
                cpus=config.sandbox_cpus, memory_gib=config.sandbox_memory_gib, pids=config.sandbox_pids
            ),
            config.image_map,
            config.export_limits(),
        )
        runtime.prepare(scratch, [])  # task images are built on first use, on this node
        _cache.update(
            run=run_id, parts=(load_scaffold(config.scaffold), runtime, get_runner("openhands-sdk"))
        )
    parts: tuple[Any, Any, Any] = _cache["parts"]
    return parts


def _pack(directory: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if directory.exists():
            tar.add(directory, arcname=".")
    return buf.getvalue()


def unpack(files: bytes, directory: Path) -> None:
    """The episode's files into ``directory`` (driver side), replacing what an earlier attempt left."""
    from harness.evaluate import _remove_tree

    if directory.exists():
        _remove_tree(directory)
    directory.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(files)) as tar:
        tar.extractall(directory, filter="tar")  # our own tar: links kept, nothing outside directory


def run_episode(
    config: "EvalConfig", run_id: str, replica: Any, model: tuple[str, str], task: "Task", seed: int
) -> EpisodeResult | None:
    """The task's body; None when the run was stopped while it ran (ray.cancel: not recorded)."""
    import ray

    from harness.evaluate import _episode_attempts, _Rollout
    from harness.results.store import RunStore

    scratch = SCRATCH / run_id / uuid.uuid4().hex[:12]  # two tries of one episode never meet
    scaffold, runtime, runner = _parts(config, run_id, SCRATCH / run_id)
    store = RunStore(scratch)
    ctx = _Rollout(config, store, scaffold, runtime, runner)
    endpoint = ReplicaEndpoint(replica, *model)
    result: list[Any] = []

    def work() -> None:
        try:
            result.append((True, _episode_attempts(ctx, endpoint, task, seed)))
        except BaseException as exc:  # raised in the task's own thread below
            result.append((False, exc))

    worker = threading.Thread(target=work, name="episode", daemon=True)
    worker.start()
    try:
        while worker.is_alive():  # the task's main thread takes ray.cancel's KeyboardInterrupt
            worker.join(0.2)
    except KeyboardInterrupt:
        ctx.halt()  # shells killed, sandboxes closed: the same stop as in one process
        shutil.rmtree(scratch, ignore_errors=True)
        return None
    ok, value = result[0]
    if not ok:
        raise value
    if value is None:
        return None
    outcome, sandbox = value
    if sandbox is not None:
        sandbox.close()
    edir = store.episode_dir(endpoint.name, task.id, seed)
    try:
        return EpisodeResult(
            outcome=outcome,
            files=_pack(edir),
            scratch=str(edir),
            node=ray.get_runtime_context().get_node_id(),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
