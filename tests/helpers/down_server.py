"""An endpoint that is down, but records who tried it: a loopback port that reads each request's first
line and then resets the connection. A closed port refuses connections unseen; this one lets a test
assert which requests the code made and how often it retried, not how long that took."""

from __future__ import annotations

import socket
import struct
import threading


class DownServer:
    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.requests: list[str] = []  # "METHOD /path", in the order they came
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed: the test is over
                return
            with connection:
                connection.settimeout(5)
                try:
                    line = connection.makefile("rb").readline(2048).decode("latin-1").split()
                except OSError:
                    line = []
                self.requests.append(" ".join(line[:2]) if line else "(nothing sent)")
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset

    def __enter__(self) -> DownServer:
        return self

    def __exit__(self, *exc) -> None:
        self._socket.close()
        self._thread.join(timeout=10)
