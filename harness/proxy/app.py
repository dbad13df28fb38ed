"""The proxy's ASGI app: OpenAI-compatible, one path prefix per episode, forwarding upstream.

``POST /ep/<episode>/v1/chat/completions`` and ``GET /ep/<episode>/v1/models`` are forwarded to the
episode's upstream (its ``openai_url``, with the upstream's key; the agent uses the proxy's own).
Bodies pass through as the upstream sent them, streams chunk by chunk. What goes wrong on the way
comes back as the same kind of failure the agent would have seen talking to the upstream itself,
so the runner's infrastructure classification (harness/episodes/faults.py) reads it the same:

- an upstream status (5xx included) is passed back as it is, with its body;
- the upstream cannot be reached, or its connection breaks before the answer: 502 naming why;
- the upstream takes longer than the read timeout: 504;
- the upstream's connection breaks (or stalls past the timeout) mid-stream: the client's
  connection is cut the same way (it reads an incomplete stream);
- a 200 whose body is not a chat completion: passed on as it is, and a format finding;
- the client disconnects: the upstream request is cancelled (a model server stops generating).
"""

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from harness.proxy.config import ProxyConfig, StopAnswer
from harness.proxy.records import Exchange
from harness.proxy.sse import StreamAssembler
from harness.proxy.watch import EpisodeWatch

EXPECTED = "/ep/<episode>/v1/chat/completions (or /ep/<episode>/v1/models)"
_ROUTE = re.compile(r"^/ep/([^/]+)/v1/(chat/completions|models)/?$")
# Upstream headers worth passing back (length and encoding are the proxy's own).
_PASSED_HEADERS = ("content-type", "retry-after", "x-request-id")


class Upstream(Protocol):
    """Where an episode's requests go (any ModelEndpoint)."""

    @property
    def openai_url(self) -> str: ...

    @property
    def api_key(self) -> str: ...


class Route(Protocol):
    """An open episode as the app sees it."""

    @property
    def watch(self) -> EpisodeWatch: ...

    @property
    def upstream(self) -> Upstream: ...


class _UpstreamBroke(Exception):
    """The upstream's stream broke after the client's began: raised to cut the client's connection
    (the ASGI server then closes it without the stream's end, as the upstream did)."""


class _Quiet(logging.Filter):
    """uvicorn logs an exception that ends a started response as an error: ours is on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _UpstreamBroke)


logging.getLogger("uvicorn.error").addFilter(_Quiet())


class _ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status
    )


def _fault(exc: Exception, url: str, timeout_s: float) -> tuple[int, str]:
    """An httpx failure talking to the upstream -> the status and message the client gets."""
    if isinstance(exc, httpx.ConnectTimeout):
        return 504, f"the upstream ({url}) did not accept a connection in time ({exc!r})"
    if isinstance(exc, httpx.TimeoutException):
        return 504, f"the upstream ({url}) sent nothing for {timeout_s:g} s ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return 502, f"the upstream ({url}) cannot be reached: {exc or type(exc).__name__}"
    return 502, f"the upstream's connection ({url}) broke: {type(exc).__name__}: {exc}"


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_gone[T](work: Coroutine[Any, Any, T], receive: Receive) -> T:
    """``work``'s result, or ``_ClientGone`` (and ``work`` cancelled) if the client leaves first."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            gone.cancel()
            raise _ClientGone
        gone.cancel()
    return task.result()


def _stop_completion(answer: StopAnswer, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.tool is not None:
        message["tool_calls"] = [
            {
                "id": f"call_harness_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": answer.tool, "arguments": orjson.dumps(answer.arguments).decode()},
            }
        ]
    return {
        "id": f"chatcmpl-harness-stop-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if answer.tool else "stop"}
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _as_events(completion: dict[str, Any]) -> bytes:
    """A completion as the server-sent events of a stream (one delta, the finish, [DONE])."""
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _events(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


def _text(content: bytes, limit: int) -> str:
    return content[:limit].decode(errors="replace")


class ProxyApp:
    """The ASGI app. ``lookup(slug)`` finds an open episode; requests must carry ``api_key``."""

    def __init__(self, lookup: Callable[[str], Route | None], api_key: str, config: ProxyConfig) -> None:
        self._lookup = lookup
        self._auth = f"Bearer {api_key}".encode()
        self.config = config
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            response = await self._handle(scope, receive, send)
            if response is not None:
                await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                cfg = self.config
                self._client = httpx.AsyncClient(
                    timeout=httpx.Timeout(cfg.read_timeout_s, connect=cfg.connect_timeout_s, pool=None),
                    limits=httpx.Limits(
                        max_connections=cfg.max_connections,
                        max_keepalive_connections=cfg.max_connections,
                        keepalive_expiry=30.0,
                    ),
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> Response | None:
        path: str = scope["path"]
        if path == "/health":
            return Response(status_code=200)
        match = _ROUTE.match(path)
        if match is None:
            return _error(
                404, f"{path} is not served here: use {EXPECTED}, one prefix per episode", "NotFoundError"
            )
        if dict(scope["headers"]).get(b"authorization") != self._auth:  # before saying what is open
            return _error(
                401, "invalid API key: use the key the harness gave the episode", "AuthenticationError"
            )
        route = self._lookup(match[1])
        if route is None:
            return _error(
                404,
                f"unknown episode {match[1]!r} (not open, or closed): use {EXPECTED} with the URL "
                "the harness gave the episode",
                "NotFoundError",
            )
        method = scope["method"]
        if match[2] == "models":
            if method != "GET":
                return _error(405, f"{method} {path}: use GET", "MethodNotAllowed")
            return await self._models(route, receive)
        if method != "POST":
            return _error(405, f"{method} {path}: use POST", "MethodNotAllowed")
        return await self._chat(route, scope, receive, send)

    # ---- forwarding -----------------------------------------------------------------------------------
    def _target(self, route: Route, tail: str) -> tuple[str, dict[str, str]]:
        """The upstream URL and headers (raises when the upstream endpoint is not up)."""
        url = route.upstream.openai_url.rstrip("/")
        headers = {
            "authorization": f"Bearer {route.upstream.api_key}",
            "accept-encoding": "identity",  # bodies are relayed as they come
        }
        return f"{url}/{tail}", headers

    def _passed(self, response: httpx.Response) -> dict[str, str]:
        return {h: response.headers[h] for h in _PASSED_HEADERS if h in response.headers}

    async def _models(self, route: Route, receive: Receive) -> Response:
        assert self._client is not None
        n = route.watch.count()
        at = time.time()
        try:
            url, headers = self._target(route, "models")
        except Exception as exc:
            return self._unreachable(route, n, at, "models", exc)
        try:
            upstream = await _unless_gone(self._client.get(url, headers=headers), receive)
        except _ClientGone:
            return Response(status_code=499)
        except httpx.HTTPError as exc:
            status, message = _fault(exc, url, self.config.read_timeout_s)
            self._record(route, n, at, "models", None, status, error=message)
            return _error(status, message, "BadGatewayError" if status == 502 else "GatewayTimeoutError")
        parsed = _json(upstream.content)
        self._record(route, n, at, "models", None, upstream.status_code, response=parsed)
        return Response(upstream.content, status_code=upstream.status_code, headers=self._passed(upstream))

    def _unreachable(self, route: Route, n: int, at: float, path: str, exc: Exception) -> Response:
        message = f"the upstream endpoint is not up: {type(exc).__name__}: {exc}"
        self._record(route, n, at, path, None, 502, error=message)
        return _error(502, message, "BadGatewayError")

    async def _chat(self, route: Route, scope: Scope, receive: Receive, send: Send) -> Response | None:
        assert self._client is not None
        at = time.time()
        raw = await Request(scope, receive).body()
        body = _json(raw)
        stream = isinstance(body, dict) and body.get("stream") is True
        watch = route.watch
        n, answer = watch.request(body)
        if answer is not None:
            return self._stop(route, n, at, body, answer, stream)
        try:
            url, headers = self._target(route, "chat/completions")
        except Exception as exc:
            return self._unreachable(route, n, at, "chat/completions", exc)
        headers["content-type"] = "application/json"
        request = self._client.build_request("POST", url, content=raw, headers=headers)
        client = self._client

        async def fetch() -> tuple[httpx.Response, bytes | None]:
            """The upstream's answer and its body (None: an event stream, to be relayed)."""
            upstream = await client.send(request, stream=True)
            if stream and upstream.status_code == 200 and _events(upstream):
                return upstream, None
            try:
                return upstream, await upstream.aread()
            finally:
                await upstream.aclose()

        started = time.monotonic()
        try:
            upstream, content = await _unless_gone(fetch(), receive)
        except _ClientGone:
            self._record(route, n, at, "chat/completions", body, 499, stream=stream, error=_GONE)
            return Response(status_code=499)
        except httpx.HTTPError as exc:
            status, message = _fault(exc, url, self.config.read_timeout_s)
            self._record(route, n, at, "chat/completions", body, status, stream=stream, error=message)
            return _error(status, message, "BadGatewayError" if status == 502 else "GatewayTimeoutError")
        if content is None:
            await self._relay(route, n, at, body, upstream, started, receive, send)
            return None
        elapsed = time.monotonic() - started
        status = upstream.status_code
        parsed = _json(content)
        turn = None
        if status == 200:
            if _events(upstream):  # a stream to a request that did not ask for one: read it as one
                assembler = StreamAssembler()
                assembler.feed(content)
                assembler.close()
                parsed = assembler.completion()
            problem = (
                None
                if parsed is not _NOT_JSON
                else f"the upstream's body is not JSON: {_text(content, 200)!r}"
            )
            turn = watch.response(n, body, None if parsed is _NOT_JSON else parsed, problem)
        self._record(
            route,
            n,
            at,
            "chat/completions",
            body,
            status,
            stream=stream,
            response=parsed,
            raw=content,
            upstream_s=elapsed,
            turn=turn,
        )
        return Response(content, status_code=status, headers=self._passed(upstream))

    async def _relay(
        self,
        route: Route,
        n: int,
        at: float,
        body: Any,
        upstream: httpx.Response,
        started: float,
        receive: Receive,
        send: Send,
    ) -> None:
        """Pass an event stream on chunk by chunk while reassembling it; a client that leaves
        cancels the upstream request, an upstream that breaks cuts the client. The exchange is
        recorded (and its turn begun) before the client sees the stream's end ([DONE], or the end
        of the body), so a runner that finishes the episode at once finds it there."""
        assembler = StreamAssembler()
        headers = [(k.encode(), v.encode()) for k, v in self._passed(upstream).items()]
        settled = False

        def settle(error: str | None) -> None:
            nonlocal settled
            if settled:  # the client left between the record and the stream's end
                return
            settled = True
            assembler.close()
            completion = assembler.completion()
            turn = None
            if error is None and assembler.error is None:
                problem = None
                if assembler.problem or completion is None:
                    problem = (
                        f"the upstream's stream is not a chat completion: {assembler.problem or 'no chunks'}"
                    )
                turn = route.watch.response(n, body, completion, problem)
            self._record(
                route,
                n,
                at,
                "chat/completions",
                body,
                200,
                stream=True,
                response=completion if assembler.error is None else {"error": assembler.error},
                upstream_s=time.monotonic() - started,
                turn=turn,
                error=error,
            )

        async def pump() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in upstream.aiter_bytes():
                assembler.feed(chunk)
                if assembler.done:  # a client stops reading at [DONE]: the record first
                    settle(None)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            settle(None)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await _unless_gone(pump(), receive)
        except _ClientGone:
            settle(_GONE)
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.TimeoutException):
                error = f"the upstream stalled mid-stream ({self.config.read_timeout_s:g} s without a byte)"
            else:
                error = f"the upstream's stream broke: {type(exc).__name__}: {exc}"
            settle(error)
            raise _UpstreamBroke(error) from exc
        finally:
            await upstream.aclose()

    def _stop(self, route: Route, n: int, at: float, body: Any, answer: StopAnswer, stream: bool) -> Response:
        """The answer once the episode's loop is certain (the request is not forwarded)."""
        loop = route.watch.loop
        why = (
            f" ({loop.kind.value} from turn {loop.start_turn}, seen at turn {loop.detected_at})"
            if loop
            else ""
        )
        if answer.mode == "error":
            payload: dict[str, Any] = {
                "error": {
                    "message": answer.message + why,
                    "type": "LoopStopped",
                    "param": None,
                    "code": answer.status,
                }
            }
            self._record(
                route,
                n,
                at,
                "chat/completions",
                body,
                answer.status,
                stream=stream,
                response=payload,
                by_proxy=True,
            )
            return JSONResponse(payload, status_code=answer.status)
        model = str(body.get("model") or "") if isinstance(body, dict) else ""
        completion = _stop_completion(answer, model)
        self._record(
            route, n, at, "chat/completions", body, 200, stream=stream, response=completion, by_proxy=True
        )
        if stream:
            return Response(_as_events(completion), media_type="text/event-stream")
        return JSONResponse(completion)

    def _record(
        self,
        route: Route,
        n: int,
        at: float,
        path: str,
        body: Any,
        status: int,
        *,
        stream: bool = False,
        response: Any = None,
        raw: bytes | None = None,
        upstream_s: float = 0.0,
        turn: int | None = None,
        error: str | None = None,
        by_proxy: bool = False,
    ) -> None:
        not_json = response is _NOT_JSON
        route.watch.record(
            Exchange(
                n=n,
                at=at,
                path=path,
                stream=stream,
                request=body if isinstance(body, dict) else None,
                status=status,
                answered_by="proxy" if by_proxy else "upstream",
                response=response if isinstance(response, dict) else None,
                body=_text(raw, self.config.record_body_chars) if raw is not None and not_json else None,
                error=error,
                upstream_s=upstream_s,
                took_s=time.time() - at,
                turn=turn,
            )
        )


_GONE = "the client disconnected before its answer (the upstream request was cancelled)"
_NOT_JSON: Any = object()


def _json(content: bytes) -> Any:
    """The parsed body, or ``_NOT_JSON``."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return _NOT_JSON
