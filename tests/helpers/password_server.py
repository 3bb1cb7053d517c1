"""A web server behind a password, as a wrong URL may lead to: every request is answered 401 with a Basic challenge.
It records the Authorization header of each request, so that a test can assert which credentials were sent."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def asking_for_a_password() -> Iterator[tuple[str, list[str | None]]]:
    """(the server's URL on a free loopback port, the Authorization header of each request so far)."""
    sent: list[str | None] = []

    class Protected(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            sent.append(self.headers.get("Authorization"))
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="Restricted"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Protected)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sent
    finally:
        server.shutdown()
        server.server_close()
