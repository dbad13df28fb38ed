"""The proxy as a running thing: uvicorn on 127.0.0.1 (a random port) in a background thread with
its own event loop, and one ``EpisodeEndpoint`` per episode.

    with serve_proxy(upstream) as proxy:
        with proxy.episode(spec.key, WatchConfig(actions=ActionFormat()), record=out / "model_calls.jsonl",
                           on_loop=lambda f: stop.set()) as endpoint:
            runner.run(spec, sandbox, endpoint, stop)   # the agent talks to endpoint.openai_url
            turns, loop = endpoint.watch.finish(), endpoint.watch.loop

An episode's base URL is ``http://127.0.0.1:PORT/ep/<slug>/v1``: the slug is the episode key made
URL-safe plus a number unique in the proxy's life, so a retried episode (same key) never receives
a request its previous attempt's agent still sends. The agent's key is the proxy's own, random;
the upstream's key stays in the proxy.
"""

import asyncio
import itertools
import math
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

import uvicorn

from harness.errors import HarnessError
from harness.monitor import LoopFinding, Turn, TurnFormat
from harness.proxy.app import ProxyApp
from harness.proxy.config import ProxyConfig, WatchConfig
from harness.proxy.watch import EpisodeWatch
from harness.seam import ModelEndpoint, ServerFacts

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class _Route:
    __slots__ = ("key", "upstream", "watch")

    def __init__(self, key: str, watch: EpisodeWatch, upstream: ModelEndpoint) -> None:
        self.key = key
        self.watch = watch
        self.upstream = upstream


class EpisodeEndpoint:
    """One episode's view of the model: a ModelEndpoint whose URL is the proxy's prefix for it.

    ``ensure_up``, ``healthy`` and ``facts`` are the upstream's; ``release`` gives back only the
    episode's prefix: the upstream belongs to whoever made it (the driver releases it).
    """

    def __init__(self, proxy: "Proxy", slug: str, route: _Route) -> None:
        self._proxy = proxy
        self.slug = slug
        self.key = route.key
        self.watch = route.watch
        self.upstream = route.upstream
        self.name = route.upstream.name
        self.path = route.upstream.path

    @property
    def openai_url(self) -> str:
        return f"{self._proxy.url}/ep/{self.slug}/v1"

    @property
    def api_key(self) -> str:
        return self._proxy.api_key

    @property
    def server_id(self) -> str:
        return self.upstream.server_id

    def ensure_up(self) -> None:
        self.upstream.ensure_up()

    def healthy(self) -> bool:
        return self.upstream.healthy()

    def facts(self) -> ServerFacts | None:
        return self.upstream.facts()

    def release(self, *, now: bool = False) -> None:
        """The episode is over: its last turn is whole and its prefix answers 404 from now on."""
        self._proxy.close_episode(self.slug)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class Proxy:
    """The model-call proxy in a background thread: ``start()``, ``episode(...)``, ``stop()``."""

    unnamed = False  # serve paths without an episode prefix (a subclass's _route attributes them)

    def __init__(
        self, upstream: ModelEndpoint | None = None, config: ProxyConfig | None = None, *, port: int = 0
    ) -> None:
        self.upstream = upstream
        self.config = config or ProxyConfig()
        self.api_key = f"harness-proxy-{secrets.token_urlsafe(18)}"
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only for such a
        # socket; without it a response's head and body (two writes) wait out a 40 ms delayed ACK.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            self._sock.bind(("127.0.0.1", port))
        except OSError as exc:
            self._sock.close()
            raise HarnessError(f"port {port} on 127.0.0.1 cannot be used: {exc.strerror}") from None
        self.port = int(self._sock.getsockname()[1])
        app = ProxyApp(self._route, self.api_key, self.config, unnamed=self.unnamed, prepare=self._prepare)
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="warning",
                access_log=False,
                lifespan="on",
                ws="none",
                http=_header_deadline(self.config.header_timeout_s),
                # idle connections end by the header deadline, not uvicorn's 5 s keep-alive: 5 s is
                # httpx's pool expiry too, and an agent reusing one at 4.99 s met the close
                timeout_keep_alive=math.ceil(self.config.header_timeout_s),
                timeout_graceful_shutdown=math.ceil(self.config.shutdown_grace_s),
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="harness-proxy", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _route(self, slug: str | None, named: str | None, body: object) -> _Route | None:
        """A request's episode: the open one its path names (the app's lookup)."""
        return self._routes.get(slug) if slug is not None else None

    _prepare = None  # an async hook run before each forward (a subclass's on-demand upstream)

    @property
    def cpu_s(self) -> float:
        """CPU seconds the proxy's thread has used so far (what it costs the harness process)."""
        ident = self._thread.ident
        if ident is None or not self._thread.is_alive():
            return 0.0
        return time.clock_gettime(time.pthread_getcpuclockid(ident))

    def start(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise HarnessError("the model-call proxy did not start (see the log above)")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving (requests in flight get ``shutdown_grace_s``), close every episode."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=self.config.shutdown_grace_s + 10)
        self._sock.close()
        with self._lock:
            routes = list(self._routes.values())
            self._routes.clear()
        for route in routes:
            route.watch.finish()

    def episode(
        self,
        key: str,
        watch: WatchConfig | None = None,
        *,
        record: Path | None = None,
        upstream: ModelEndpoint | None = None,
        on_turn: Callable[[Turn, TurnFormat], None] | None = None,
        on_loop: Callable[[LoopFinding], None] | None = None,
    ) -> EpisodeEndpoint:
        """Open an episode: its endpoint (URL prefix), watched as ``watch`` says, its exchanges
        written to ``record`` (a JSONL file; None: not written). ``on_loop`` is called (on the
        proxy's thread: keep it short) the moment a loop is certain."""
        target = upstream or self.upstream
        if target is None:
            raise HarnessError(f"episode {key}: no upstream endpoint (give the proxy or the episode one)")
        slug = f"{_UNSAFE.sub('_', key).strip('_')[-80:] or 'episode'}.{next(self._numbers)}"
        route = _Route(key, EpisodeWatch(key, watch, record=record, on_turn=on_turn, on_loop=on_loop), target)
        with self._lock:
            self._routes[slug] = route
        return EpisodeEndpoint(self, slug, route)

    def close_episode(self, slug: str) -> list[Turn]:
        """An episode is over: its prefix answers 404, its watch is finished; its turns."""
        with self._lock:
            route = self._routes.pop(slug, None)
        return route.watch.finish() if route is not None else []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextmanager
def serve_proxy(upstream: ModelEndpoint | None = None, config: ProxyConfig | None = None) -> Iterator[Proxy]:
    """A started proxy in front of ``upstream`` for the block; stopped (thread and socket gone) after."""
    proxy = Proxy(upstream, config).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def _header_deadline(seconds: float) -> type:
    """uvicorn's h11 protocol, closing a connection that has no request in progress ``seconds``
    after it opened or after its last answer: uvicorn waits for ever on a connection that never
    finishes its headers (3,200 such were all kept open), and its keep-alive timer stops at the
    first byte of the next request."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(seconds, self._expire)

        def _expire(self) -> None:
            self._deadline = None
            if self.cycle is None or self.cycle.response_complete:  # no request of its own under way
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

    return Protocol
