"""Sandboxes started ahead of the episodes that will take them.

A container episode's fixed cost is its sandbox starting: the container, and the tool server
importing the SDK inside it (~0.5 s of CPU, longer than a turn). Nothing in that depends on the
episode itself, only on what it runs in (image, working directory, environment, limits, terminal):
so while episodes run, the next ones' sandboxes start, and an episode takes one ready (or
already under way) instead of starting its own.

The pool knows the episodes to come in the order they will ask (``expect``) and keeps ``ahead``
of them started; every one taken starts the next (once it has settled: fully up), so a run
starts no more sandboxes than it has episodes. ``discard`` ends whatever no episode took (the run's end, a stop). The pool holds
no I/O of its own: ``make`` and ``drop`` (the runtime's) start and remove one sandbox.
"""

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field


@dataclass
class _Pending[W]:
    """One sandbox being started in its own (daemon) thread."""

    ready: threading.Event = field(default_factory=threading.Event)
    made: W | None = None
    abandoned: bool = False  # discarded while it started: its thread removes it
    taken: bool = False
    settled: bool = False  # fully up (or failed): the next one may start once it is taken


class WarmPool[K, W]:
    """``make(item)`` run ahead for items whose ``spec(item)`` (None: not poolable) an episode
    will later ``take``."""

    def __init__(
        self,
        make: Callable[[K], W],
        drop: Callable[[W], None],
        spec: Callable[[K], Hashable | None],
        settle: Callable[[W], None] = lambda _: None,
    ) -> None:
        self._make, self._drop, self._spec, self._settle = make, drop, spec, settle
        self._lock = threading.Lock()
        self._upcoming: deque[tuple[Hashable, K]] = deque()
        self._started: dict[Hashable, deque[_Pending[W]]] = {}
        self._closed = False

    def expect(self, items: Iterable[K], ahead: int) -> None:
        """The episodes to come, in the order they will ask; ``ahead`` of them started now."""
        with self._lock:
            self._closed = False
            self._upcoming.clear()
            for item in items:
                key = self._spec(item)
                if key is not None:
                    self._upcoming.append((key, item))
        for _ in range(max(0, ahead)):
            self._start_next()

    def take(self, item: K) -> W | None:
        """A sandbox started for ``item``'s spec (waiting for it if it is still starting), or None:
        none started for it, or it failed to start (the caller starts one as it would have)."""
        key = self._spec(item)
        with self._lock:
            queue = self._started.get(key) if key is not None else None
            pending = queue.popleft() if queue else None
        if pending is None:
            return None
        pending.ready.wait()
        with self._lock:
            pending.taken = True
            settled = pending.settled
        if settled:
            self._start_next()  # one taken, the next one under way (else once this one settles)
        return pending.made

    def discard(self, wait_s: float = 60.0) -> None:
        """Nothing more starts; what no episode took is removed (those still starting by their own
        thread, waited for up to ``wait_s``)."""
        with self._lock:
            self._closed = True
            self._upcoming.clear()
            left = [p for queue in self._started.values() for p in queue]
            self._started.clear()
            ready = [p.made for p in left if p.ready.is_set() and p.made is not None]
            for pending in left:
                pending.abandoned = not pending.ready.is_set()
        for made in ready:
            self._drop(made)
        for pending in left:
            pending.ready.wait(wait_s)

    def _start_next(self) -> None:
        with self._lock:
            if self._closed or not self._upcoming:
                return
            key, item = self._upcoming.popleft()
            pending: _Pending[W] = _Pending()
            self._started.setdefault(key, deque()).append(pending)

        def run() -> None:
            made: W | None = None
            # Nothing made: the episode that takes it starts its own (and meets the error).
            with contextlib.suppress(BaseException):
                made = self._make(item)
            try:
                with self._lock:
                    abandoned = pending.abandoned
                    if not abandoned:
                        pending.made = made
                if abandoned and made is not None:
                    self._drop(made)
            finally:
                pending.ready.set()
            if made is not None and not abandoned:
                # The next one starts only once this one is fully up (settle: its tool server
                # answers), so that the sandboxes episodes wait for do not share the machine
                # with those started for later ones.
                with contextlib.suppress(Exception):
                    self._settle(made)
            with self._lock:
                pending.settled = True
                taken = pending.taken
            if taken:
                self._start_next()

        # A daemon: a stopping run never waits for a sandbox nobody will use (the next run's
        # orphan sweep removes what it left).
        threading.Thread(target=run, name="warm-sandbox", daemon=True).start()
