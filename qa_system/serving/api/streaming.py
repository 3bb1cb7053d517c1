"""What answering over an open connection needs: server-sent events, keep-alive comments, and a generator
stopped once its client has left."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

EVENT_STREAM = "text/event-stream"
# How often a question in progress checks whether its (non-streaming) client is still connected.
DISCONNECT_POLL_S = 0.25
# The status logged for an answer whose client left first (nginx's "client closed request"); nobody reads it.
CLIENT_CLOSED_REQUEST = 499
# Comments that keep a quiet event stream open (proxies and clients drop a connection silent for a minute);
# a RAG answer can take minutes before its first token on a busy CPU.
KEEPALIVE_S = 15.0
KEEPALIVE = ": keep-alive\n\n"


class ClientGone(Exception):
    """Raised in the generator's thread at its next piece of text once the client has left."""


def stopping_when(client_gone: threading.Event, forward: Callable[[Any], None] | None = None) -> Callable[[Any], None]:
    """A streaming callback that passes each piece of text on, and stops the generator once ``client_gone`` is set."""

    def callback(chunk: Any) -> None:  # in the worker thread
        if client_gone.is_set():
            raise ClientGone()
        if forward is not None:
            forward(chunk)

    return callback


def sse(event: str, data: Any) -> str:
    """One server-sent event: its name and ``data`` as JSON."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
