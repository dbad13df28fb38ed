"""A local HTTP server whose answers a test writes as a function: for a server that misbehaves in
ways a real one only does under load (a /health that never answers, an engine that refuses)."""

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (method, path) -> (status, body); None: no answer at all (the client's timeout decides)
Answer = Callable[[str, str], tuple[int, bytes] | None]


@contextlib.contextmanager
def stub_http(answer: Answer) -> Iterator[int]:
    """Serve ``answer`` on 127.0.0.1; yields the port. A request body is read and ignored."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            reply = answer(self.command, self.path)
            if reply is None:
                stop.wait(30)
                return
            status, body = reply
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _reply

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        stop.set()
        server.shutdown()
