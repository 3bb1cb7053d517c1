"""What stands in front of the endpoints: request metrics, unexpected errors, the bearer token, the
per-client rate limit, the request size limit, whole bodies only (one cut short by a client that
left is refused, never handed to an endpoint) and, in a server of several processes, the spreading of
connections among them.

They are plain ASGI middleware rather than FastAPI dependencies, so that they run before a body is
parsed (an unauthenticated or oversized request is refused without reading it) and cover every path,
unknown ones included. Refusals are JSON ``{"detail": "..."}`` like every other error of the API.
"""

from __future__ import annotations

import hmac
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.responses import JSONResponse

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]

# Open without a token: the readiness probe and the API's documentation.
OPEN_PATHS = frozenset({"/health", "/docs", "/openapi.json"})
# Not rate limited: probes and scrapers call these on a schedule.
UNLIMITED_PATHS = frozenset({"/health", "/metrics"})
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The API's Prometheus metrics, in a registry of their own (several apps may live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "qa_api_requests", "HTTP requests answered, by route and status", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "qa_api_request_duration_seconds",
            "Time from a request to the end of its response",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("qa_api_requests_in_flight", "Requests being answered", registry=self.registry)
        self.stages = Histogram(
            "qa_api_stage_duration_seconds",
            "Seconds per stage of the answered questions (queue: waiting for a worker thread)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.generations_stopped = Counter(
            "qa_api_generations_stopped",
            "Answers stopped because their client left before the end (a RAG answer stops at its next piece of text)",
            registry=self.registry,
        )
        self.ready = Gauge("qa_api_ready", "1 once the models and indexes are loaded", registry=self.registry)

    def render(self) -> bytes:
        """Every metric in Prometheus' text format."""
        return generate_latest(self.registry)


class Metered:
    """Counts every request and times it to the end of its response (a stream's last event included).

    Routes are labelled by their template, never by the raw path, so unknown paths cannot grow the metrics.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, paths: frozenset[str]):
        self.app, self.metrics, self.paths = app, metrics, paths

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # a response that never started is an error

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        began = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.in_flight.dec()
            route = getattr(scope.get("route"), "path", None) or (scope["path"] if scope["path"] in self.paths else "other")
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.latency.labels(scope["method"], route).observe(time.perf_counter() - began)


class Contained:
    """An unexpected error is a 500 of one line (its traceback logged here), and the connection stays open.

    Starlette's own last-resort handler sends its 500 and raises the error again for the server to log,
    and uvicorn then closes the connection: a client's next request on it was reset.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as error:
            if started:  # half a response cannot become a 500: the server ends the connection
                raise
            logger.exception("Internal error answering %s %s", scope["method"], scope["path"])
            await refuse(500, f"Internal error ({type(error).__name__}). Fix: see the server's log.", scope, receive, send)


class Spread:
    """Keeps a server's processes about equally busy: a process answering more requests than it has worker threads
    ends the connection after the response (``Connection: close``).

    uvicorn's processes share one listening socket and a keep-alive connection stays with the process that accepted
    it, so a burst of clients can leave one process twice its share or more while another idles. The client connects
    again, and the process that takes the new connection first, most often one with time to spare, answers it. A
    process within its share keeps its connections: a server with as many worker threads as clients settles.
    """

    def __init__(self, app: ASGIApp, workers: int):
        self.app, self.workers = app, workers
        self.answering = 0  # requests in this process, probes left out (the event loop's only: no lock)

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start" and self.answering > self.workers:
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        self.answering += 1
        try:
            await self.app(scope, receive, sending)
        finally:
            self.answering -= 1


class RateLimiter:
    """A token bucket per client: ``per_minute`` requests at once, refilled at ``per_minute`` a minute.

    Called from the event loop only (no lock needed); at most ``max_clients`` buckets are kept, the
    least recently seen client's dropped first (a dropped client starts again with a full bucket).
    """

    def __init__(self, per_minute: int, max_clients: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.capacity, self.per_second = float(per_minute), per_minute / 60.0
        self.max_clients, self.clock = max_clients, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, client: str) -> float:
        """0 when ``client`` may go ahead (one request counted), else the seconds until it may."""
        now = self.clock()
        tokens, last = self._buckets.pop(client, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - last) * self.per_second)
        wait = 0.0 if tokens >= 1 else (1 - tokens) / self.per_second
        self._buckets[client] = (tokens - 1 if wait == 0 else tokens, now)
        if len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return wait


def is_upload(scope: Scope) -> bool:
    """Whether the request adds documents to a collection (POST /collections/NAME/documents): its body may be a file."""
    parts = scope["path"].split("/")
    return scope["method"] == "POST" and len(parts) == 4 and parts[1] == "collections" and parts[3] == "documents"


def too_large_fix(scope: Scope, upload: bool) -> str:
    """What makes a body too large for its route fit, and the setting of that route's limit (its closing bracket left out)."""
    path = scope["path"].rstrip("/")
    if upload:
        return "send the documents in several requests (QA_API_MAX_UPLOAD_BYTES"
    if path.startswith("/query"):
        return "send a shorter question (QA_API_MAX_BODY_BYTES"
    if path.endswith("/documents/delete"):
        return "send the ids in several requests, or a filter that matches them (QA_API_MAX_BODY_BYTES"
    return "send a smaller body (QA_API_MAX_BODY_BYTES"


class Guarded:
    """The rate limit (when on: every request but the probes', and every one without the right token), the bearer token
    (when one is set) and the body size limit, in that order (``max_upload_bytes`` for a body that adds documents,
    ``max_body_bytes`` for every other)."""

    def __init__(self, app: ASGIApp, token: str | None, rate_limit: int, max_body_bytes: int, max_upload_bytes: int | None = None):
        self.app, self.token, self.max_body_bytes = app, token, max_body_bytes
        self.max_upload_bytes = max_upload_bytes or max_body_bytes
        self.limiter = RateLimiter(rate_limit) if rate_limit else None

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        authorized = not self.token or path in OPEN_PATHS or self._authorized(scope)
        # A wrong token counts against the limit too, on every path: guessing it is as slow as any other request.
        if self.limiter and (path not in UNLIMITED_PATHS or not authorized):
            wait = self.limiter.take(client_of(scope))
            if wait:
                message = (
                    f"Too many requests from this client (limit {self.limiter.capacity:.0f} a minute). Fix: retry in {math.ceil(wait)} s."
                )
                await refuse(429, message, scope, receive, send, {"Retry-After": str(math.ceil(wait))})
                return
        if not authorized:
            await refuse(
                401,
                self._unauthorized_message(scope),
                scope,
                receive,
                send,
                {"WWW-Authenticate": "Bearer"},
            )
            return
        upload = is_upload(scope)
        limit = self.max_upload_bytes if upload else self.max_body_bytes
        try:
            body = await self._body(scope, receive, limit)
        except BodyCut as cut:
            # Half a file read as a whole one would be stored (and, with sync, the rest deleted): nothing runs.
            await refuse(400, f"{cut} Fix: send the whole body again; nothing was changed.", scope, receive, send)
            return
        if body is None:
            message = f"The request body is larger than {limit} bytes. Fix: {too_large_fix(scope, upload)} sets the limit)."
            await refuse(413, message, scope, receive, send)
            return
        delivered = False

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect a stream waits for

        await self.app(scope, replay, send)

    @staticmethod
    def _unauthorized_message(scope: Scope) -> str:
        """Why a request is refused: no token, another scheme, or a wrong token (a client then knows what to mend)."""
        fix = "Fix: send the header 'Authorization: Bearer <QA_API_TOKEN>'."
        header = dict(scope["headers"]).get(b"authorization", b"")
        if not header.strip():
            return f"A bearer token is required. {fix}"
        if header.partition(b" ")[0].lower() != b"bearer":
            return f"The Authorization header is not a bearer token. {fix}"
        return f"The bearer token is not this server's. {fix}"

    def _authorized(self, scope: Scope) -> bool:
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, credentials = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), self.token.encode())

    async def _body(self, scope: Scope, receive, limit: int) -> bytes | None:
        """The whole body (at most ``limit`` bytes), or None as soon as it is larger.

        Raises ``BodyCut`` when the client left before the body's end, or the body is shorter than its
        Content-Length: what came is a part, never the request.
        """
        declared = dict(scope["headers"]).get(b"content-length")
        expected = int(declared) if declared is not None and declared.isdigit() else None
        if expected is not None and expected > limit:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                of = f" of its {expected}" if expected is not None else ""
                raise BodyCut(f"The request body ended after {size}{of} bytes: the client disconnected before its end.")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                if expected is not None and size < expected:
                    raise BodyCut(f"The request body has {size} bytes, fewer than its Content-Length ({expected}).")
                return b"".join(chunks)


class BodyCut(Exception):
    """A request body that did not arrive whole."""


def client_of(scope: Scope) -> str:
    """The client's address (uvicorn puts a trusted proxy's X-Forwarded-For there)."""
    client = scope.get("client")
    return client[0] if client else "unknown"


def error_response(detail: str, status: int, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The API's error body, ``{"detail": "..."}``; text a client sent that is not UTF-8 (quoted back) is escaped, never a 500."""
    return JSONResponse({"detail": detail.encode("utf-8", "backslashreplace").decode("utf-8")}, status_code=status, headers=headers)


async def refuse(status: int, detail: str, scope: Scope, receive, send, headers: dict[str, str] | None = None) -> None:
    """Answer the request with the API's one-line error body and ``status``, without calling the app."""
    await error_response(detail, status, headers)(scope, receive, send)
