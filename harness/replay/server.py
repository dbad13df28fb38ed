"""An OpenAI-compatible server that plays a ReplayScript: /v1/chat/completions, /v1/models, /health.

Responses are served in order, one per request, whatever was asked, so an agent scaffold can be
driven deterministically (tests, loop reproduction, overhead benchmarks). Requests are kept in
``ReplayServer.requests`` for inspection. Delays use asyncio, so concurrent clients overlap.
"""

import asyncio
import json
import logging
import socket
import threading
import time
import uuid
from types import TracebackType
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.replay.script import ReplayScript, ScriptedResponse


class _Player:
    """Hands out the script's responses in order (thread-safe)."""

    def __init__(self, script: ReplayScript) -> None:
        self.script = script
        self.position = 0
        self._lock = threading.Lock()

    def next(self, turn: int | None = None) -> ScriptedResponse | None:
        """The next response in order, or (``turn`` given, pick = by_turn) the one for that turn."""
        with self._lock:
            responses = self.script.responses
            i = self.position if turn is None else turn
            self.position += 1
            if i < len(responses):
                return responses[i]
            match self.script.when_exhausted:
                case "repeat_last":
                    return responses[-1]
                case "cycle":
                    return responses[i % len(responses)]
                case _:
                    return None


def _completion(resp: ScriptedResponse, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": resp.content}
    if resp.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.raw_arguments},
            }
            for c in resp.tool_calls
        ]
    completion_tokens = resp.completion_tokens
    if completion_tokens is None:
        completion_tokens = max(
            1, len((resp.content or "") + "".join(c.raw_arguments for c in resp.tool_calls)) // 4
        )
    prompt_tokens = resp.prompt_tokens or 0
    return {
        "id": f"chatcmpl-replay-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": resp.resolved_finish_reason, "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _stream(completion: dict[str, Any]) -> list[str]:
    """The same completion as server-sent events: one content chunk, one tool-call chunk, done."""
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    msg = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
    if msg.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(msg["tool_calls"])]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {
            **base,
            "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
            "usage": completion["usage"],
        },
    ]
    return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


def _turn(body: dict[str, Any]) -> int:
    """The request's turn in its conversation: how many assistant messages it already holds."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def _error(status: int, message: str) -> JSONResponse:
    kind = "BadRequestError" if status < 500 else "InternalServerError"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status
    )


def build_app(
    script: ReplayScript, *, api_key: str | None = None, requests: list[dict[str, Any]] | None = None
) -> Starlette:
    player = _Player(script)
    log = requests if requests is not None else []

    def authorised(request: Request) -> bool:
        return api_key is None or request.headers.get("authorization") == f"Bearer {api_key}"

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        if not authorised(request):
            return _error(401, "invalid API key")
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": script.model, "object": "model", "created": 0, "owned_by": "harness-replay"}],
            }
        )

    async def chat(request: Request) -> Response:
        if not authorised(request):
            return _error(401, "invalid API key")
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return _error(400, "request body is not JSON (or nested too deeply)")
        if not isinstance(body, dict):  # refused before player.next(): a bad request uses no response
            return _error(400, "request body must be a JSON object")
        log.append(body)
        resp = player.next(_turn(body) if script.pick == "by_turn" else None)
        if resp is None:
            return _error(500, f"replay script exhausted after {len(script.responses)} responses")
        delay = resp.delay + script.delay
        if delay:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:  # the server is stopping (_GRACE_S): end the request, no traceback
                return _error(503, "the replay server stopped")
        if resp.status >= 400:
            return _error(resp.status, resp.error or f"scripted error {resp.status}")
        completion = _completion(resp, str(body.get("model") or script.model))
        if body.get("stream"):
            return StreamingResponse(iter(_stream(completion)), media_type="text/event-stream")
        return JSONResponse(completion)

    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/models", models),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )
    app.state.player = player
    return app


# A stop waits this long for requests in flight, then cancels them: a scripted delay (minutes,
# to hold a request open) must not hold the stop; uvicorn's default waits for ever.
_GRACE_S = 1
# An idle connection is kept this long. uvicorn's default (5 s) equals httpx's pool expiry (5 s):
# a client that reuses a connection idle for just under 5 s meets the server closing it (measured:
# 3 in 1,800 requests spaced ~5 s apart got ReadError or RemoteProtocolError). Clients must expire
# first: httpx 5 s, aiohttp 15 s, Node's agents 4-5 s.
KEEP_ALIVE_S = 75

_log = logging.getLogger("harness.replay")


def _protocol() -> type:
    """uvicorn's h11 protocol, naming what it refused: "Invalid HTTP request received." alone
    cannot tell a client's bad request from another program that reached the port."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        _last = b""

        def data_received(self, data: bytes) -> None:
            self._last = data
            super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            peer = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
            _log.warning(
                "replay server: refused a request from %s, its last %d bytes began %r",
                peer,
                len(self._last),
                self._last[:120],
            )
            super().send_400_response(msg)

    return Protocol


class ReplayServer:
    """Run the replay app on 127.0.0.1 in a background thread: ``with ReplayServer(script) as s: s.base_url``."""

    def __init__(self, script: ReplayScript, *, port: int = 0, api_key: str | None = None) -> None:
        self.script = script
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only for such a
        # socket; without it each answer's head and body (two writes) wait out a 40 ms delayed ACK.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port = int(self._sock.getsockname()[1])
        app = build_app(script, api_key=api_key, requests=self.requests)
        self._player: Any = app.state.player
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="off",
                http=_protocol(),
                timeout_keep_alive=KEEP_ALIVE_S,
                timeout_graceful_shutdown=_GRACE_S,
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def served(self) -> int:
        """How many chat completions were requested so far."""
        return int(self._player.position)

    def start(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("replay server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def serve_forever(script: ReplayScript, *, port: int, api_key: str | None = None) -> None:
    """Foreground server for `harness replay`: Ctrl-C or SIGTERM stops it within seconds, requests
    in flight abandoned after _GRACE_S (uvicorn re-raises SIGTERM afterwards: exit 143)."""
    uvicorn.run(
        build_app(script, api_key=api_key),
        host="127.0.0.1",
        port=port,
        log_level="info",
        http=_protocol(),
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=_GRACE_S,
    )
