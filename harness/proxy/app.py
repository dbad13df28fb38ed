"""The proxy's ASGI app: OpenAI-compatible, one path prefix per episode, forwarding upstream.

``POST /ep/<episode>/v1/chat/completions`` and ``GET /ep/<episode>/v1/models`` are forwarded to the
episode's upstream (its ``openai_url``, with the upstream's key; the agent uses the proxy's own).
Bodies pass through as the upstream sent them, streams chunk by chunk. ``POST /ep/<episode>/v1/messages``
(the Anthropic Messages dialect) is translated to a chat completion and its answer back
(harness/proxy/anthropic.py). Paths without ``/ep/<episode>`` are served only where the proxy
is told how to attribute them (``harness proxy``: a header or the conversation itself). What goes wrong on the way
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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

import httpx
import orjson
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from harness.proxy import anthropic
from harness.proxy.config import ProxyConfig, StopAnswer
from harness.proxy.records import Exchange
from harness.proxy.sse import StreamAssembler
from harness.proxy.watch import EpisodeWatch

EXPECTED = "/ep/<episode>/v1/chat/completions (or /ep/<episode>/v1/models)"
_ROUTE = re.compile(r"^(?:/ep/([^/]+))?/v1/(chat/completions|models|messages)/?$")
EPISODE_HEADER = "x-harness-episode"  # names a request's episode where its path does not
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


# lookup(slug from the path or None, the episode header or None, the request body or None)
Lookup = Callable[[str | None, str | None, Any], Route | None]


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
    """The ASGI app. ``lookup`` finds a request's episode; requests must carry ``api_key`` (as a
    bearer token, or Anthropic's ``x-api-key``). ``unnamed``: serve paths without an episode
    prefix (``lookup`` gets None for the slug). ``prepare(route)``, awaited before a request is
    forwarded, brings the episode's upstream up (an on-demand server); what it raises is a 502."""

    def __init__(
        self,
        lookup: Lookup,
        api_key: str,
        config: ProxyConfig,
        *,
        unnamed: bool = False,
        prepare: Callable[[Route], Awaitable[None]] | None = None,
    ) -> None:
        self._lookup = lookup
        self._auth = f"Bearer {api_key}".encode()
        self._key = api_key.encode()
        self._unnamed = unnamed
        self._prepare = prepare
        self.config = config
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            response = await self._handle(scope, receive, send)
            if response is not None:
                await response(scope, receive, send)

    async def _body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes | Response:
        """The request's body, or the error that answers it: 413 past ``max_body_bytes`` (by its
        Content-Length before a byte is read, or as it arrives), 408 when it has not all come
        within ``body_timeout_s``."""
        cap = self.config.max_body_bytes
        too_big = _error(
            413,
            f"the request body is over the proxy's {f'{cap >> 20} MiB' if cap >= 1 << 20 else f'{cap >> 10} KiB'} "
            "limit (ProxyConfig.max_body_bytes)",
            "RequestTooLarge",
        )
        declared = headers.get(b"content-length", b"").strip()
        if declared.isdigit() and int(declared) > cap:
            return too_big
        chunks: list[bytes] = []
        size = 0

        async def read() -> bool:
            nonlocal size
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return True
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > cap:
                    return False
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return True

        try:
            whole = await asyncio.wait_for(read(), self.config.body_timeout_s)
        except TimeoutError:
            return _error(
                408,
                f"the request body did not arrive within {self.config.body_timeout_s:g} s",
                "RequestTimeout",
            )
        return b"".join(chunks) if whole else too_big

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
        if match is None or (match[1] is None and not self._unnamed):
            return _error(
                404, f"{path} is not served here: use {EXPECTED}, one prefix per episode", "NotFoundError"
            )
        headers = dict(scope["headers"])
        # before saying what is open
        if headers.get(b"authorization") != self._auth and headers.get(b"x-api-key") != self._key:
            return _error(
                401, "invalid API key: use the key the harness gave the episode", "AuthenticationError"
            )
        method, what = scope["method"], match[2]
        if method != ("GET" if what == "models" else "POST"):
            return _error(
                405, f"{method} {path}: use {'GET' if what == 'models' else 'POST'}", "MethodNotAllowed"
            )
        at = time.time()
        raw = b"" if what == "models" else await self._body(headers, receive)
        if isinstance(raw, Response):
            return raw
        body = None if what == "models" else _json(raw)
        named = headers.get(EPISODE_HEADER.encode())
        route = self._lookup(match[1], named.decode(errors="replace") if named else None, body)
        if route is None:
            return _error(
                404,
                f"unknown episode {match[1]!r} (not open, or closed): use {EXPECTED} with the URL "
                "the harness gave the episode",
                "NotFoundError",
            )
        if what == "models":
            return await self._models(route, receive)
        if what == "messages":
            return await self._messages(route, at, body, receive)
        return await self._chat(route, at, raw, body, receive, send)

    # ---- forwarding -----------------------------------------------------------------------------------
    async def _target(self, route: Route, tail: str) -> tuple[str, dict[str, str]]:
        """The upstream URL and headers (raises when the upstream endpoint is not up)."""
        if self._prepare is not None:
            await self._prepare(route)
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
            url, headers = await self._target(route, "models")
        except Exception as exc:
            return self._unreachable(route, n, at, "models", exc)
        try:
            upstream = await _unless_gone(self._client.get(url, headers=headers), receive)
        except _ClientGone:
            self._record(route, n, at, "models", None, 499, error=_GONE)
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

    async def _chat(
        self, route: Route, at: float, raw: bytes, body: Any, receive: Receive, send: Send
    ) -> Response | None:
        assert self._client is not None
        if (model := self.config.model) and isinstance(body, dict) and body.get("model") != model:
            body = {**body, "model": model}
            raw = orjson.dumps(body)
        stream = isinstance(body, dict) and body.get("stream") is True
        watch = route.watch
        n, answer = watch.request(body)
        if answer is not None:
            return self._stop(route, n, at, body, answer, stream)
        try:
            url, headers = await self._target(route, "chat/completions")
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

    async def _messages(self, route: Route, at: float, request: Any, receive: Receive) -> Response:
        """An Anthropic Messages request: translated, forwarded as one (non-streamed) chat
        completion, its answer translated back (as events when the agent streams). The records
        and the turn are the chat completion's, as for every other episode."""
        assert self._client is not None
        try:
            body = anthropic.to_openai(request, self.config.model)
        except anthropic.TranslationError as exc:
            message = f"not a Messages request the proxy can translate: {exc}"
            n = route.watch.count()  # an exchange, not a turn
            self._record(route, n, at, "messages", None, 400, error=message, dialect="anthropic")
            return _anthropic_error(400, message)
        asked = str(request.get("model") or body["model"])
        stream = request.get("stream") is True
        watch = route.watch
        n, answer = watch.request(body)
        if answer is not None:
            response = self._stop(route, n, at, body, answer, False, "anthropic")
            reply = orjson.loads(response.body)
            if response.status_code != 200:
                return _anthropic_error(response.status_code, reply)
            return _anthropic_reply(anthropic.to_message(reply, asked), stream)
        try:
            url, headers = await self._target(route, "chat/completions")
        except Exception as exc:
            self._unreachable(route, n, at, "chat/completions", exc)
            return _anthropic_error(502, f"the upstream endpoint is not up: {type(exc).__name__}: {exc}")
        started = time.monotonic()
        try:
            upstream = await _unless_gone(self._client.post(url, json=body, headers=headers), receive)
        except _ClientGone:
            self._record(route, n, at, "chat/completions", body, 499, error=_GONE, dialect="anthropic")
            return Response(status_code=499)
        except httpx.HTTPError as exc:
            status, message = _fault(exc, url, self.config.read_timeout_s)
            self._record(route, n, at, "chat/completions", body, status, error=message, dialect="anthropic")
            return _anthropic_error(status, message)
        parsed = _json(upstream.content)
        turn = None
        if upstream.status_code == 200:
            problem = None if isinstance(parsed, dict) else "the upstream's body is not a JSON object"
            turn = watch.response(n, body, parsed if isinstance(parsed, dict) else None, problem)
        self._record(
            route,
            n,
            at,
            "chat/completions",
            body,
            upstream.status_code,
            response=parsed,
            raw=upstream.content,
            upstream_s=time.monotonic() - started,
            turn=turn,
            dialect="anthropic",
        )
        if upstream.status_code != 200:
            return _anthropic_error(
                upstream.status_code, parsed if parsed is not _NOT_JSON else _text(upstream.content, 500)
            )
        if (
            not isinstance(parsed, dict)
            or not isinstance(parsed.get("choices"), list)
            or not parsed["choices"]
        ):
            return _anthropic_error(
                502, f"the upstream's answer is not a chat completion: {_text(upstream.content, 200)!r}"
            )
        return _anthropic_reply(anthropic.to_message(parsed, asked), stream)

    def _stop(
        self,
        route: Route,
        n: int,
        at: float,
        body: Any,
        answer: StopAnswer,
        stream: bool,
        dialect: str = "openai",
    ) -> Response:
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
                dialect=dialect,
            )
            return JSONResponse(payload, status_code=answer.status)
        model = str(body.get("model") or "") if isinstance(body, dict) else ""
        completion = _stop_completion(answer, model)
        self._record(
            route,
            n,
            at,
            "chat/completions",
            body,
            200,
            stream=stream,
            response=completion,
            by_proxy=True,
            dialect=dialect,
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
        dialect: str = "openai",
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
                dialect=dialect,
                turn=turn,
            )
        )


def _anthropic_error(status: int, body: Any) -> JSONResponse:
    return JSONResponse(anthropic.to_error(status, body), status_code=status)


def _anthropic_reply(message: dict[str, Any], stream: bool) -> Response:
    if stream:
        return Response(anthropic.to_events(message), media_type="text/event-stream")
    return JSONResponse(message)


_GONE = "the client disconnected before its answer (the upstream request was cancelled)"
_NOT_JSON: Any = object()


def _json(content: bytes) -> Any:
    """The parsed body, or ``_NOT_JSON``."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return _NOT_JSON
