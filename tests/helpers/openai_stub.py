"""A tiny OpenAI-compatible chat-completions server for tests: 127.0.0.1 only, a bounded number of
requests and a deadline, after which it stops by itself (also on leaving the ``with`` block).
Requests are answered each in its own thread, as a real server does, so slow replies overlap."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "stub-model"


def _completion(text: str, body: dict[str, Any]) -> dict[str, Any]:
    prompt_words = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    usage = {"prompt_tokens": prompt_words, "completion_tokens": len(text.split()), "total_tokens": prompt_words + len(text.split())}
    message = {"role": "assistant", "content": text}
    return {
        "id": "stub",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    }


def _chunk(body: dict[str, Any], delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    chunk = {
        "id": "stub",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


class OpenAIStub:
    """Answers ``POST /v1/chat/completions`` with ``reply(request_body)``, streamed word by word when
    asked (``drip_s`` apart, as a model writes); an unknown model gets the 404 a real server sends.
    ``requests`` holds the bodies received; ``streamed`` each streamed reply's (pieces written, pieces it had)
    once it ended, cut short when its client closed the connection."""

    def __init__(self, reply: Callable[[dict[str, Any]], str], max_requests: int = 20, deadline_s: float = 120.0):
        self.reply = reply
        self.max_requests = max_requests
        self.deadline_s = deadline_s
        self.requests: list[dict[str, Any]] = []
        self.streamed: list[tuple[int, int]] = []
        self.drip_s = 0.0
        self._stopped = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
                self._start(status, content_type)
                self.wfile.write(payload)

            def _start(self, status: int, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(body)
                if self.path != "/v1/chat/completions" or body.get("model") != MODEL:
                    error = {"error": {"message": f"model '{body.get('model')}' not found", "type": "invalid_request_error"}}
                    self._send(404, json.dumps(error).encode())
                    return
                text = stub.reply(body)
                if not body.get("stream"):
                    self._send(200, json.dumps(_completion(text, body)).encode())
                    return
                pieces = [piece + " " for piece in text.split(" ")]
                pieces[-1] = pieces[-1].rstrip()
                self._start(200, "text/event-stream")
                written = 0
                try:
                    for piece in pieces:
                        self.wfile.write(_chunk(body, {"role": "assistant", "content": piece}))
                        self.wfile.flush()
                        written += 1
                        time.sleep(stub.drip_s)
                    self.wfile.write(_chunk(body, {}, "stop") + b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                    pass
                stub.streamed.append((written, len(pieces)))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 0.2
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _serve(self) -> None:
        deadline = time.monotonic() + self.deadline_s
        while not self._stopped.is_set() and len(self.requests) < self.max_requests and time.monotonic() < deadline:
            self.server.handle_request()
        self.server.server_close()

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stopped.set()
        self.thread.join(timeout=5)
