"""Where episodes run: the executor part of the episode seam.

An executor takes the pending episodes and yields each one's result as it finishes; the driver
(harness/evaluate.py) alone appends records, restarts servers and draws progress, so an executor
only decides where and how many at once. Threads here; ``--executor ray`` is harness/cluster (its
Ray tasks run an episode's attempts on other nodes and hand the outcome back to be recorded).

Stopping: once ``stop`` is set (Ctrl-C, SIGTERM, or an error the driver raises) no queued item
starts, and the run never waits for a running one: its worker is a daemon thread that the
episode's own stop watch ends (the conversation paused, its shell killed, its container removed).
``concurrent.futures`` cannot do that: its workers are joined at interpreter exit, so one episode
blocked in a model call held the whole process for as long as the call lasted.
"""

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.seam import ModelEndpoint

if TYPE_CHECKING:
    from harness.eval_config import EvalConfig
    from harness.rollout import Finished, Pending, Rollout


class Executor(Protocol):
    """Where episodes run (picked by ``--executor``, harness/registry.py): the endpoints its
    episodes reach their models through, and the episodes run, each through
    rollout.run_attempts (here or on another node), results as they finish (None: stopped)."""

    def endpoint(self, config: "EvalConfig", model: str, run_dir: Path) -> ModelEndpoint: ...

    def rollouts(self, ctx: "Rollout", pending: Sequence["Pending"]) -> Iterator["Finished | None"]: ...


class Gate(Protocol):
    """How many items may run at once, decided while they run (admission/gate.py)."""

    threads: int  # the most that may ever run at once

    def acquire(self, stopping: Callable[[], bool]) -> bool: ...

    def release(self) -> None: ...


class ThreadExecutor:
    """Episodes as daemon threads of this process (the model server does the heavy work)."""

    def run[T, R](
        self,
        fn: Callable[[T], R],
        items: Sequence[T],
        concurrency: "int | Gate",
        stop: threading.Event,
    ) -> Iterator[R]:
        """``fn`` over ``items``, ``concurrency`` at a time: a number, or a gate that each worker
        passes before it takes an item (the limit may change while items run; none is stopped)."""
        todo: queue.SimpleQueue[T] = queue.SimpleQueue()
        for item in items:
            todo.put(item)
        done: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        closed = threading.Event()  # this run is over (error or stop): workers take nothing more
        gate, most = (
            (None, concurrency) if isinstance(concurrency, int) else (concurrency, concurrency.threads)
        )

        def stopping() -> bool:
            return closed.is_set() or stop.is_set() or todo.empty()

        def work() -> None:
            while not (closed.is_set() or stop.is_set()):
                if gate is not None and not gate.acquire(stopping):
                    return
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    if gate is not None:
                        gate.release()
                    return
                try:
                    done.put((True, fn(item)))
                except BaseException as exc:  # handed to the driver, raised there
                    done.put((False, exc))
                finally:
                    if gate is not None:
                        gate.release()

        workers = [
            threading.Thread(target=work, name=f"episode-{i}", daemon=True)
            for i in range(max(1, min(most, len(items))))
        ]
        for w in workers:
            w.start()
        try:
            for _ in range(len(items)):
                while True:
                    try:  # a short timeout keeps Ctrl-C prompt in this (the main) thread
                        ok, value = done.get(timeout=0.2)
                        break
                    except queue.Empty:
                        if stop.is_set():
                            return
                        if not any(w.is_alive() for w in workers) and done.empty():
                            return  # every worker ended (and its last result was taken)
                if not ok:
                    raise value
                yield value
        finally:
            closed.set()


class ThreadRollouts:
    """``--executor threads``: episodes as threads of this process, beside one model server per
    model; each episode's sandbox started ahead of it while the one before runs (runtime/warm.py)."""

    def __init__(self, config: "EvalConfig") -> None:
        self.config = config

    def endpoint(self, config: "EvalConfig", model: str, run_dir: Path) -> ModelEndpoint:
        from harness import registry
        from harness.server.endpoint import endpoint_kind

        make = registry.load("endpoint", endpoint_kind(config, model))
        endpoint: ModelEndpoint = make(config, model, run_dir)
        return endpoint

    def rollouts(self, ctx: "Rollout", pending: Sequence["Pending"]) -> Iterator["Finished | None"]:
        from harness.admission.gate import admission_for
        from harness.rollout import run_attempts

        # One server per call (the driver groups endpoints by server): one gate for its episodes.
        gate = admission_for(self.config, pending[0].endpoint, ctx.store.root, ctx.status)
        ctx.runtime.warm_up(
            [(p.task, getattr(ctx.arms[p.scaffold].runner, "prep", None)) for p in pending], gate.limit
        )
        try:
            yield from ThreadExecutor().run(lambda p: run_attempts(ctx, p), pending, gate, ctx.stop)
        finally:
            gate.close()
            ctx.runtime.cool_down()
