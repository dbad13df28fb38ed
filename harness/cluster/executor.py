"""The driver's side of ``--executor ray``: replicas placed, episodes routed, lost ones rerun.

The driver stays what it is on one machine: the only writer of the run directory (each result
comes back here, its files are unpacked into the episode's directory and its record appended;
each checkpoint comes here as it is taken, mirror.py),
the only one to decide what is pending (resume works as before), and the progress bar (it counts
results from the whole cluster). Episodes go to the least-loaded live replica of their model,
``--concurrency`` at most on each (auto: the limit that replica's own controller sets from its
own server's metrics, asked every second without waiting for the answer); an episode whose node (or replica) is lost is run again on
another replica, and is recorded once, when a result comes back.
"""

import collections
import contextlib
import hashlib
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness._text import markup
from harness.cluster.connect import connect
from harness.cluster.episode import SCRATCH, EpisodeResult, EpisodeStopped, run_episode, unpack
from harness.cluster.mirror import Mailbox, pack_episode, write_shipment
from harness.cluster.replica import Replica, ReplicaSpec
from harness.errors import HarnessError
from harness.progress import console
from harness.replay.endpoint import is_replay_model
from harness.seam import ServerFacts

if TYPE_CHECKING:
    from harness.evaluate import EvalConfig
    from harness.rollout import Finished, Pending, Rollout

MAX_RERUNS = 3  # an episode whose node is lost this often stops the run (something else is wrong)
_PROBE_S = 30.0  # how long a replica may take to answer before it counts as lost
_RELEASE_S = 60.0  # a replica's server stop (vLLM's grace is 15 s) before the actor is killed
_CANCEL_WAIT_S = 15.0  # a stop waits this long for cancelled episodes to clean up on their nodes
_TAKE_WAIT_S = 60.0  # a checkpoint mailbox that does not answer in this long is taken for lost
_ASK_S = 1.0  # --concurrency auto: how often the driver asks each replica for its limit


class _Replica:
    def __init__(self, handle: Any, node: str, index: int, limit: int) -> None:
        self.handle, self.node, self.index = handle, node, index
        self.load = 0
        self.limit = limit  # --concurrency, or (auto) what the replica's controller answered last
        self.asked: Any = None  # the admission call in flight (auto), answered by ray.wait
        self.asked_at = 0.0
        self.alive = True

    def ask(self, now: float) -> None:
        """auto: tell the replica its episodes in flight and ask its limit (one call at a time)."""
        if self.alive and self.asked is None:
            self.asked, self.asked_at = self.handle.admission.remote(self.load), now


def _layout(ray: Any) -> list[tuple[str, int, float]]:
    """(node id, GPUs, CPUs) of every live node."""
    return [
        (n["NodeID"], int(n["Resources"].get("GPU", 0)), float(n["Resources"].get("CPU", 0)))
        for n in ray.nodes()
        if n.get("Alive")
    ]


def _slots(layout: list[tuple[str, int, float]], tp: int, gpu: bool) -> list[str]:
    """A node id per replica, taken round robin over the nodes (so --ray-replicas spreads them)."""
    per_node = [
        [node] * (gpus // tp) if gpu else [node] for node, gpus, cpus in layout if (gpus if gpu else cpus)
    ]
    order: list[str] = []
    while any(per_node):
        for slots in per_node:
            if slots:
                order.append(slots.pop())
    return order


def _plan_on_node(config: dict[str, Any], model_dir: str, gpus: int, util: float, max_len: int | None) -> Any:
    """Runs on a GPU node: the replica plan for its GPUs as NVML sees them there."""
    from harness.server.replicas import plan_replicas

    return plan_replicas(
        config,
        gpus=gpus,
        model_dir=Path(model_dir),
        gpu_memory_utilization=util,
        max_model_len=max_len,
    )


class ClusterModel:
    """One model on the cluster: its replicas (made when its rollouts start, gone at ``release``).

    To the driver it is the model's endpoint: ``name`` and ``path`` for records, ``ensure_up``
    starts every replica's server at once, ``release`` stops them and keeps their files."""

    def __init__(self, config: "EvalConfig", model: str, run_dir: Path) -> None:
        self.ray = connect(config.executor.ray_address)
        self.config, self.run_dir = config, run_dir
        self.up_seconds = self.busy_seconds = 0.0
        self._replicas: list[_Replica] = []
        layout = _layout(self.ray)
        gpu = any(g for _, g, _ in layout)
        server = config.server.model_dump(exclude_defaults=True)
        tp = 1
        if config.base_url or is_replay_model(model):
            self.name = self.path = model
            if is_replay_model(model):
                from harness.replay.endpoint import ReplayEndpoint

                self.name = ReplayEndpoint(model, 0).name  # the script is checked here, before any node
            gpu = False  # no GPU to plan: one replica per node
        else:
            tp = self._plan(model, server, layout, gpu)
            if tp > 1 and not any(
                a.startswith(("--tensor-parallel-size", "-tp")) for a in server.get("extra_args", ())
            ):
                server["extra_args"] = (*server.get("extra_args", ()), "--tensor-parallel-size", str(tp))
        self.tp = tp
        self.gpu = gpu
        self.spec = ReplicaSpec(
            model=_absolute(model),
            server={k: _absolute(v) if k in _PATH_FIELDS else v for k, v in server.items()},
            base_url=config.base_url,
            api_key=config.api_key,
            idle_timeout=config.idle_timeout,
            auto=config.concurrency == "auto",
            sandbox_cpus=config.sandbox.cpus,
            sandbox_memory_gib=config.sandbox.memory_gib,
            max_concurrency=config.max_concurrency,
        )
        self.nodes = _slots(layout, tp, gpu)[: config.executor.ray_replicas or None]
        if not self.nodes:
            biggest = max((g for _, g, _ in layout), default=0)
            raise HarnessError(
                f"{model}: no node of the Ray cluster can hold a replica (it needs {tp} GPU(s) on one node; "
                f"the largest node has {biggest})"
                if gpu
                else f"{model}: the Ray cluster has no node with CPUs for a replica"
            )

    def _plan(
        self, model: str, server: dict[str, Any], layout: list[tuple[str, int, float]], gpu: bool
    ) -> int:
        """The checkpoint inspected here (names for the records), its plan made where it will run:
        on a GPU node for a GPU cluster (tensor parallel size), else as on one CPU machine."""
        from harness.server.checkpoint import inspect_checkpoint
        from harness.server.config import ServerConfig
        from harness.server.memory import plan_memory
        from harness.server.preflight import tensor_parallel_size

        cfg = ServerConfig(model=model, **server)
        ckpt = inspect_checkpoint(
            model,
            base_model=cfg.base_model,
            served_name=cfg.served_name,
            tool_call_parser=cfg.tool_call_parser,
            chat_template=cfg.chat_template,
        )
        self.name, self.path = ckpt.request_model, str(ckpt.path)
        if not gpu:
            plan = plan_memory(
                ckpt.config,
                model_dir=ckpt.base_path,
                gpu="cpu",
                max_model_len=cfg.max_model_len,
                concurrency=cfg.max_num_seqs,
                cpu_kv_cache_gib=cfg.cpu_kv_cache_gib,
                dtype=cfg.dtype,
            )
            if not plan.fits:
                raise HarnessError(f"memory plan for {model} on every node (cpu): {plan.advice}")
            return 1
        given = tensor_parallel_size(cfg.extra_args)
        if given > 1:
            return given
        node, gpus, _ = max(layout, key=lambda n: n[1])
        strategy = self.ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node, soft=False)
        # One GPU is enough to see its memory (NVML there); the plan counts all of the node's.
        task = self.ray.remote(num_gpus=1, num_cpus=0, scheduling_strategy=strategy)(_plan_on_node)
        plan = _get(
            self.ray,
            task.remote(
                ckpt.config, str(ckpt.base_path), gpus, cfg.gpu_memory_utilization, cfg.max_model_len
            ),
        )
        if not plan.fits:
            raise HarnessError(f"memory plan for {model}: {plan.advice}")
        console.print(f"{markup(model)}: {markup(plan.advice)}", highlight=False)
        return int(plan.tensor_parallel)

    # ---- ModelEndpoint -------------------------------------------------------------------------
    @property
    def openai_url(self) -> str:
        raise HarnessError(f"{self.name}: served by {len(self.nodes)} replicas, not one URL")

    @property
    def api_key(self) -> str:
        return self.config.api_key

    @property
    def server_id(self) -> str:
        return f"ray:{id(self)}"

    def facts(self) -> ServerFacts | None:
        """The replicas' vLLM servers' seconds, summed; None for servers the harness does not
        watch (a --base-url, a replay script), as on one machine."""
        managed = not (self.config.base_url or is_replay_model(self.spec.model))
        return ServerFacts(up_s=self.up_seconds, busy_s=self.busy_seconds) if managed else None

    def healthy(self) -> bool:
        return any(r.alive for r in self._replicas)

    def ensure_up(self) -> None:
        """Place the replicas (once) and bring every server up, all at once."""
        ray = self.ray
        if not self._replicas:
            actor = ray.remote(Replica)
            for i, node in enumerate(self.nodes):
                strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node, soft=False)
                handle = actor.options(
                    num_cpus=0,
                    num_gpus=self.tp if self.gpu else 0,
                    scheduling_strategy=strategy,
                    max_restarts=0,
                    name=None,
                ).remote(self.spec, str(self._scratch / f"replica-{i}"))
                fixed = self.config.concurrency
                self._replicas.append(_Replica(handle, node, i, 1 if fixed == "auto" else fixed))
            hosts = len(set(self.nodes))
            console.print(
                f"{markup(self.name)}: {len(self.nodes)} replica(s) on {hosts} node(s)"
                + (f", tensor parallel {self.tp}" if self.tp > 1 else ""),
                highlight=False,
            )
        live = [r for r in self._replicas if r.alive]
        refs = [r.handle.ensure_up.remote() for r in live]
        for r, ref in zip(live, refs, strict=True):
            try:
                _get(ray, ref)
            except ray.exceptions.RayTaskError:
                raise  # the replica's own failure (not its node's): as in one process
            except ray.exceptions.RayError:
                r.alive = False  # its node is gone: the others serve
        if not any(r.alive for r in self._replicas):
            raise HarnessError(f"{self.name}: every replica was lost (their nodes left the cluster)")

    def release(self, *, now: bool = False) -> None:
        """Every server stopped, its files into run_dir/replicas/MODEL-N/, the actors gone."""
        ray = self.ray
        calls = [(r, r.handle.release.remote()) for r in self._replicas if r.alive]
        for r, ref in calls:
            try:
                up, busy, files = ray.get(ref, timeout=_RELEASE_S)
            except ray.exceptions.RayError:
                continue
            self.up_seconds += up
            self.busy_seconds += busy
            if files:
                where = self.run_dir / "replicas" / f"{_safe(self.name)}-{r.index}"
                where.mkdir(parents=True, exist_ok=True)
                for name, data in files.items():
                    (where / name).write_bytes(data)
        for r in self._replicas:
            with contextlib.suppress(Exception):
                ray.kill(r.handle)
        self._replicas = []
        shutil.rmtree(self._scratch, ignore_errors=True)  # replicas here on this machine
        with contextlib.suppress(OSError):  # the run's directory, once its last model's are gone
            self._scratch.parent.rmdir()

    @property
    def _scratch(self) -> Path:
        """This model's replicas' directories on their nodes: of this run directory (its whole path,
        not its name: two runs called ``run`` at once shared them, and one's release removed the
        other's) and of this model (two models of one run each have their own replicas)."""
        where = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:12]
        return SCRATCH / f"{self.run_dir.name}-{where}" / _safe(self.name)

    # ---- routing -------------------------------------------------------------------------------
    def pick(self) -> "_Replica | None":
        """The least-loaded live replica under its limit."""
        free = [r for r in self._replicas if r.alive and r.load < r.limit]
        return min(free, key=lambda r: (r.load / r.limit, r.load, r.index)) if free else None

    def admission(self, now: float) -> None:
        """auto: every replica's limit brought up to date (answers taken, a question asked every
        ``_ASK_S`` or when its load changed); never waits."""
        if not self.spec.auto:
            return
        asked = [r for r in self._replicas if r.asked is not None]
        if asked:
            ready, _ = self.ray.wait([r.asked for r in asked], num_returns=len(asked), timeout=0)
            for r in asked:
                if any(r.asked == ref for ref in ready):
                    with contextlib.suppress(self.ray.exceptions.RayError):
                        r.limit = max(1, int(self.ray.get(r.asked)))
                    r.asked = None
        for r in self._replicas:
            if now - r.asked_at >= _ASK_S:
                r.ask(now)

    def lost(self, replica: _Replica) -> None:
        """After an episode of ``replica`` failed for Ray's reasons: is the replica still there?"""
        ray = self.ray
        if not replica.alive:
            return
        try:
            ray.get(replica.handle.server_pid.remote(), timeout=_PROBE_S)
        except (ray.exceptions.RayError, TimeoutError):
            replica.alive = False
            console.print(
                f"[yellow]{markup(self.name)}: replica {replica.index} lost (its node left the cluster); "
                f"{sum(r.alive for r in self._replicas)} left[/]",
                highlight=False,
            )
            with contextlib.suppress(Exception):
                ray.kill(replica.handle)


def _get(ray: Any, ref: Any) -> Any:
    """``ray.get``, with a user's mistake found on a node (a refused plan, a server that would not
    start) raised here as itself: one line, not Ray's traceback."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, HarnessError):
            raise exc.cause from None
        raise


_PATH_FIELDS = frozenset({"base_model", "chat_template", "vllm_python"})


def _absolute(value: Any) -> Any:
    """A path the user gave relative to here, made absolute: replicas and episodes run in
    directories of Ray's (the same path must hold the same files on every node)."""
    text = str(value)
    prefix = "replay:" if is_replay_model(text) else ""
    path = Path(text.removeprefix(prefix))
    return f"{prefix}{path.resolve()}" if path.exists() else value


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


class RayRollouts:
    """``--executor ray``: each model's replicas on the cluster (its endpoint, ClusterModel), and
    every pending episode a Ray task on its replica's node, run through rollout.run_attempts there
    (cluster/episode.py); each result comes back here, its files unpacked into the run directory."""

    def __init__(self, config: "EvalConfig") -> None:
        self.config = config

    def endpoint(self, config: "EvalConfig", model: str, run_dir: Path) -> ClusterModel:
        return ClusterModel(config, model, run_dir)

    def rollouts(self, ctx: "Rollout", pending: "Sequence[Pending]") -> Iterator["Finished | None"]:
        return _cluster_rollouts(ctx, pending)


def _mailbox(ray: Any) -> Any:
    """The run's mailbox (mirror.py), on the driver's node when the driver is a node of the cluster
    (a soft preference let Ray put it on a node that was then lost); async, so every running task's
    wait for the drain is a coroutine there."""
    options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 10_000}
    with contextlib.suppress(Exception):  # a Ray Client driver is no node: anywhere will do
        node = ray.get_runtime_context().get_node_id()
        options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
            node, soft=False
        )
    return ray.remote(Mailbox).options(**options).remote()


class _Post:
    """The run's mailbox as the driver uses it: one lost (its node left the cluster, it died) is
    replaced by a new one. The checkpoints it had not handed over are lost with it, but those the
    driver took are whole, so nothing is wrong on disk: the episodes that shipped to it run on, their
    later checkpoints unshipped (each task's mirror stops at its first failed send; their results
    come back whole), and the episodes started after it ship to the new one."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.box = _mailbox(ray)
        self.draining = False

    def drain(self) -> None:
        self.draining = True
        self.box.drain.remote()  # each running task ends after its turn, checkpointed

    def take(
        self, ctx: "Rollout", flying: "dict[Any, tuple[Pending, _Replica, int]]", *, last: bool = False
    ) -> None:
        """The checkpoints shipped so far written into the run directory, in the order they came;
        only those of episodes still in flight (a late shipment of one whose result came back
        already, e.g. after its task gave up waiting for the mailbox, must not touch its finished
        directory). ``last``: the run is over, a lost mailbox is not replaced."""
        try:
            shipments = self.ray.get(self.box.take.remote(), timeout=_TAKE_WAIT_S)
        except self.ray.exceptions.RayError as exc:  # GetTimeoutError is one too
            if last:
                return
            console.print(
                f"[yellow]the run's checkpoint mailbox was lost ({type(exc).__name__}): the episodes "
                "running now are no longer checkpointed on this machine; the next ones are[/]",
                highlight=False,
            )
            self.close()
            self.box = _mailbox(self.ray)
            if self.draining:
                self.drain()
            return
        live = {
            str(ctx.store.episode_dir(item.label, item.task.id, item.seed).relative_to(ctx.store.root))
            for item, _, _ in flying.values()
        }
        for shipment in shipments:
            if shipment.episode in live:
                write_shipment(ctx.store.root, shipment)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ray.kill(self.box)


def _cluster_rollouts(ctx: "Rollout", pending: "Sequence[Pending]") -> Iterator["Finished | None"]:
    from harness.rollout import Finished

    first = pending[0].endpoint
    assert isinstance(first, ClusterModel)
    ray = first.ray
    task_fn = ray.remote(num_cpus=0, max_retries=0)(run_episode)
    todo: collections.deque[tuple[Pending, int]] = collections.deque((p, 0) for p in pending)
    flying: dict[Any, tuple[Pending, _Replica, int]] = {}
    # The runtime as the driver resolved it (auto: docker or local), the same on every node.
    update = {"scaffolds": tuple(_absolute(s) for s in ctx.config.scaffolds), "runtime": ctx.runtime.name}
    config_ref = ray.put(ctx.config.model_copy(update=update))
    submitted: set[str] = set()
    post = _Post(ray)
    try:
        while todo or flying:
            if ctx.drain.event.is_set() and not post.draining:  # the first stop signal: a graceful stop
                post.drain()
            if post.draining and not flying:
                return  # every running episode ended (evaluate._rollouts says what the stop did)
            for model in {id(p.endpoint): p.endpoint for p in pending}.values():
                assert isinstance(model, ClusterModel)
                model.admission(time.monotonic())
            while todo and not ctx.stop.is_set() and not post.draining:
                item, tries = todo[0]
                model = item.endpoint
                assert isinstance(model, ClusterModel)
                replica = model.pick()
                if replica is None:
                    if not model.healthy():
                        raise HarnessError(
                            f"{model.name}: every replica was lost (their nodes left the cluster)"
                        )
                    break
                todo.popleft()
                strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    replica.node, soft=False
                )
                ref = task_fn.options(scheduling_strategy=strategy).remote(
                    config_ref,
                    ctx.run_id,
                    replica.handle,
                    (model.name, model.path),
                    (item.scaffold, item.task, item.seed, item.label),
                    post.box,
                    # a checkpoint of an earlier run (or attempt) here: the episode goes on from it
                    pack_episode(ctx.store.episode_dir(item.label, item.task.id, item.seed)),
                )
                replica.load += 1
                replica.asked_at = 0.0  # its load changed: tell it at the next turn
                flying[ref] = (item, replica, tries)
                if item.key not in submitted:
                    submitted.add(item.key)
                    ctx.started += 1
            if ctx.stop.is_set():
                return
            ready, _ = ray.wait(list(flying), num_returns=1, timeout=0.2)
            # after the wait: a task that returned shipped its last checkpoint before it did
            post.take(ctx, flying)
            for ref in ready:
                item, replica, tries = flying.pop(ref)
                model = item.endpoint
                assert isinstance(model, ClusterModel)
                replica.load -= 1
                replica.asked_at = 0.0
                try:
                    result: EpisodeResult | EpisodeStopped | None = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    if not isinstance(exc.cause, ray.exceptions.RayError):
                        raise (exc.cause or exc) from None  # the episode's own error, as in one process
                    result, lost = None, exc
                except ray.exceptions.RayError as exc:  # its worker or node died, it could not be placed
                    result, lost = None, exc
                else:
                    lost = None
                if lost is not None:
                    model.lost(replica)
                    if tries + 1 > MAX_RERUNS:
                        raise HarnessError(
                            f"{item.key}: lost {tries + 1} times on the cluster "
                            f"({type(lost).__name__}); see the Ray logs"
                        )
                    console.print(
                        f"[yellow]{markup(item.task.id)} seed {item.seed}: lost with its node or worker "
                        f"({type(lost).__name__}); running it again[/]",
                        highlight=False,
                    )
                    todo.appendleft((item, tries + 1))
                    continue
                if result is None or isinstance(result, EpisodeStopped):  # stopped while it ran
                    ctx.drained += result is not None and result.drained
                    yield None
                    continue
                unpack(result.files, ctx.store.episode_dir(item.label, item.task.id, item.seed))
                yield Finished(item, result.outcome, None, result.steps)
    finally:
        if flying:
            ctx.stopped += len(flying)
            for ref in flying:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
            # Cancelled episodes clean up on their nodes (shells killed, containers removed).
            deadline = time.monotonic() + _CANCEL_WAIT_S
            left = list(flying)
            while left and time.monotonic() < deadline:
                _, left = ray.wait(left, num_returns=len(left), timeout=0.5)
        with contextlib.suppress(Exception):  # what reached the mailbox before the stop: kept
            post.take(ctx, flying, last=True)
        post.close()
