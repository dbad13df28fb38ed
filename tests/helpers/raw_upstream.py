"""A model server that misbehaves on purpose, over raw sockets (what no well-behaved HTTP framework
will do): reset the connection, answer a body that is not a completion, stream slowly, break or
stall a stream half-way. It says what it saw: when each chunk left, and whether the client hung up
before the stream ended.
"""

import contextlib
import json
import socket
import struct
import threading
import time
from typing import Literal, Self

Mode = Literal["reset", "not_json", "no_choices", "slow_stream", "reset_mid_stream", "stall_mid_stream"]

_EVENT = {
    "id": "chatcmpl-raw",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "raw",
    "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
}


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def sse(event: dict[str, object]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


class RawUpstream:
    """``with RawUpstream("slow_stream", chunks=5, gap=0.2) as up: up.base_url``."""

    def __init__(self, mode: Mode, *, chunks: int = 5, gap: float = 0.2, stall: float = 30.0) -> None:
        self.mode = mode
        self.chunks = chunks
        self.gap = gap
        self.stall = stall
        self.sent_at: list[float] = []  # when each stream chunk left
        self.hung_up = threading.Event()  # the client closed before the stream ended
        self.requests = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = int(self._sock.getsockname()[1])
        self._closing = False
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._closing:
            conn, _ = self._sock.accept()
            if self._closing:
                conn.close()
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                return data
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            part = conn.recv(65536)
            if not part:
                break
            body += part
        return head

    @staticmethod
    def _reset(conn: socket.socket) -> None:
        """Close with RST instead of FIN (what a crashed or killed peer does)."""
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            if not self._read_request(conn):
                return
            self.requests += 1
            if self.mode == "reset":
                self._reset(conn)
                return
            if self.mode in ("not_json", "no_choices"):
                body = (
                    b"<html>502 oops</html>" if self.mode == "not_json" else b'{"object": "chat.completion"}'
                )
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                    + body
                )
                return
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            )
            conn.settimeout(0.05)
            for i in range(self.chunks):
                if i and self.mode == "reset_mid_stream":
                    self._reset(conn)
                    return
                if i and self.mode == "stall_mid_stream":
                    self._wait_for_hangup(conn, self.stall)
                    return
                try:
                    conn.sendall(_chunk(sse(_EVENT)))
                except OSError:
                    self.hung_up.set()
                    return
                self.sent_at.append(time.monotonic())
                if self._wait_for_hangup(conn, self.gap):
                    return
            done = {**_EVENT, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            with contextlib.suppress(OSError):
                conn.sendall(_chunk(sse(done)) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    def _wait_for_hangup(self, conn: socket.socket, seconds: float) -> bool:
        """Wait ``seconds``; True (and ``hung_up`` set) if the client closed meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if conn.recv(1) == b"":
                    self.hung_up.set()
                    return True
            except TimeoutError:
                continue
            except OSError:
                self.hung_up.set()
                return True
        return False
