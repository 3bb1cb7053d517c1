"""The REST API: a FastAPI app over ``QAService``, the library object the doors share.

Questions run in a pool of ``api_workers`` threads (a pipeline run is blocking: tokenising, matrix
products, a search engine's reply), RAG questions in a pool of their own, so the event loop keeps
answering health checks, product lists and other questions while one is being read, and a slow
generation never holds up an extractive answer; the reader's inference runs in one lane per model
(``reading.batching``), whatever the number of workers; each answer reports how long it waited for a worker
(``queue_s``). The models and indexes load once per process, in the background: ``/health`` answers
503 until they are loaded, and so do the endpoints that need them.

Errors are one line, ``{"detail": "..."}``: 422 for a request the library's rules refuse (the same
checks and messages as the CLI and the page) or a body that is not strict JSON, 404 for an unknown
collection, product, document or route, 503 while loading or when a server the system relies on does
not answer, and 400 (a body cut short) / 401 / 413 / 429 / 500 from the guards (``guards.py``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any, AsyncIterator, Callable, Sequence

import psutil
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from qa_system import __version__
from qa_system.config import Settings
from qa_system.errors import Conflict, NotFound, QAError, Unavailable
from qa_system.serving.answer_views import answer_cards, answer_views, rank_answers
from qa_system.serving.api import documents as document_routes
from qa_system.serving.api.docs_page import CSP, docs_page
from qa_system.serving.api.guards import Contained, Guarded, Metered, Metrics, error_response
from qa_system.serving.api.schemas import (
    AnswerOut,
    CollectionOut,
    Count,
    EVENT_SCHEMAS,
    EVENT_STREAM_SCHEMA,
    SQUAD_SCHEMA,
    ErrorOut,
    FeedbackOut,
    FeedbackRequest,
    HealthOut,
    ProductOut,
    ProductsOut,
    QueryRequest,
    QueryResponse,
    ReviewOut,
)
from qa_system.serving.documents import DocumentChanges
from qa_system.serving.feedback import Feedback
from qa_system.serving.service import DEFAULT_COLLECTIONS, QAService, Question, ServedCollection, shared_service

logger = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"
# How often a question in progress checks whether its (non-streaming) client is still connected.
DISCONNECT_POLL_S = 0.25
# The status logged for an answer whose client left first (nginx's "client closed request"); nobody reads it.
CLIENT_CLOSED_REQUEST = 499
# Comments that keep a quiet event stream open (proxies and clients drop a connection silent for a minute);
# a RAG answer can take minutes before its first token on a busy CPU.
KEEPALIVE_S = 15.0
KEEPALIVE = ": keep-alive\n\n"
ERROR_MEANINGS = {
    401: "no bearer token, or a wrong one (when the server has one: QA_API_TOKEN)",
    403: "document changes are off on this server (QA_API_DOCUMENTS)",
    404: "an unknown collection, product, document or task",
    409: "the collection exists already, or another change to it is running",
    413: "the request body is larger than the server takes (QA_API_MAX_BODY_BYTES)",
    422: "a request the library's rules refuse, or a body that is not strict JSON",
    429: "too many requests from this client (QA_API_RATE_LIMIT); Retry-After says when to retry",
    500: "an unexpected error (the traceback is in the server's log)",
    503: "the server is loading, or a search server or generator endpoint does not answer",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses a route really gives (each one line, ``ErrorOut``), and 500, which any route can."""
    return {status: {"model": ErrorOut, "description": ERROR_MEANINGS[status]} for status in sorted({*statuses, 500})}


# What the token and the rate limit add to every protected route.
GUARDED = (401, 429)
DESCRIPTION = """Answers questions about a product from its reviews: the retrieved reviews, the answer spans at
their character offsets (or a generated answer citing the reviews), and the time each stage took.
Every request but `/health` and these docs carries `Authorization: Bearer <token>` when the server
has a token (`QA_API_TOKEN`)."""


def status_of(error: QAError) -> int:
    """The HTTP status of a library error: 404 for something not found, 409 for a clash, 503 for a server that does not answer, else 422."""
    for kind, status in ((NotFound, 404), (Conflict, 409), (Unavailable, 503)):
        if isinstance(error, kind):
            return status
    return 422


def one_line(error: RequestValidationError) -> str:
    """Pydantic's first complaint as the API's one line: the field, then the library's message when it is the library's check."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"] if part != "body") or "body"
    if first["type"] == "value_error":  # our validators: the library's QAError text, which names field and fix
        return str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "json_invalid":
        return f"The request body is not valid JSON ({first.get('ctx', {}).get('error', first['msg'])}). Fix: send a JSON object in UTF-8, see /docs."
    if field == "body" and first["type"] == "model_attributes_type":  # an array, or a body sent as another content type
        return "The request body is not a JSON object. Fix: send a JSON object with the header 'Content-Type: application/json', see /docs."
    if first["type"] == "missing":
        return f"The request has no '{field}'. Fix: see the request schema at /docs."
    if first["type"] == "extra_forbidden":
        return f"Unknown field '{field}' in the request. Fix: see the request schema at /docs."
    return f"Invalid '{field}': {first['msg']}. Fix: see the request schema at /docs."


class Refused(ValueError):
    """What ``read_json`` refuses in a body that Python's parser would take."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):  # which value a repeated key means depends on the parser: a proxy may have read the other
        keys = [key for key, _ in pairs]
        raise Refused(f"the key {next(k for k in keys if keys.count(k) > 1)!r} appears twice")
    return found


def _no_constant(name: str) -> None:
    raise Refused(f"{name} is not a JSON number")


def read_json(body: bytes) -> Any:
    """A request body as strict JSON (RFC 8259): UTF-8 (a byte order mark ignored), no NaN / Infinity, no repeated
    key; else a JSONDecodeError naming the problem, which FastAPI turns into the API's one-line 422 (it answered
    other parse errors, such as a byte that is not UTF-8, with a bare 400)."""
    try:
        return json.loads(body.decode("utf-8-sig"), parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as error:
        problem = f"byte 0x{body[error.start]:02x} at position {error.start} is not UTF-8"
    except RecursionError:
        problem = "arrays or objects nested more deeply than the parser allows"
    except Refused as error:
        problem = str(error)
    except ValueError:  # the one other: an integer longer than Python converts
        problem = f"a number of more than {sys.get_int_max_str_digits()} digits"
    raise json.JSONDecodeError(problem, "", 0) from None


class StrictJSONRequest(Request):
    """A request whose JSON body is read by ``read_json`` (strict JSON, one-line errors)."""

    async def json(self) -> Any:
        """The body parsed by ``read_json``, once per request."""
        if not hasattr(self, "_json"):
            self._json = read_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is read by ``read_json``."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        """FastAPI's handler, given a ``StrictJSONRequest`` in place of the request."""
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict


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


class ServedAPI:
    """What the endpoints share: the service, its settings, the metrics and the pool of worker threads.

    One per app, kept in ``app.state.api``; the routes get it through ``Depends(served_api)``.
    """

    def __init__(self, settings: Settings, service: QAService, metrics: Metrics):
        self.settings, self.service, self.metrics = settings, service, metrics
        self.workers: ThreadPoolExecutor | None = None  # from the server's start to its stop
        self.generating: ThreadPoolExecutor | None = None  # RAG answers' own threads: a slow generation never holds a worker
        # Document changes' own thread: reading and checking an upload (seconds for a large file) never holds a
        # question's worker, and uploads sent at once are checked one after another, not all against the questions.
        self.changing: ThreadPoolExecutor | None = None
        self.keepalive_s = KEEPALIVE_S  # seconds of silence before an event stream sends a keep-alive comment

    def start(self) -> None:
        """Open the pool of ``api_workers`` threads and start loading the service (in the background)."""
        self.workers = ThreadPoolExecutor(self.settings.api_workers, thread_name_prefix="qa-api-worker")
        self.generating = ThreadPoolExecutor(self.settings.api_workers, thread_name_prefix="qa-api-generator")
        self.changing = ThreadPoolExecutor(1, thread_name_prefix="qa-api-changes")
        self.service.start()

    def stop(self) -> None:
        """Stop the service, and the worker threads without waiting for the questions they are reading."""
        self.service.stop()
        self.workers.shutdown(wait=False, cancel_futures=True)
        self.generating.shutdown(wait=False, cancel_futures=True)
        self.changing.shutdown(wait=False, cancel_futures=True)

    def status(self) -> dict[str, Any]:
        """The service's status (``QAService.status``), with the readiness gauge brought up to date."""
        status = self.service.status()
        self.metrics.ready.set(status["status"] == "ready")
        return status

    def loaded(self) -> QAService:
        """The service once its models and indexes are loaded; a 503 naming what it waits for before that."""
        status = self.status()
        if status["status"] != "ready":
            if status["status"] == "failed":
                detail = f"The server failed to load: {status['error']}"
            elif waiting := status.get("waiting"):
                detail = f"The server is waiting for its search server: {waiting['error']}"
            else:
                detail = "The server is still loading its models and indexes. Fix: retry when GET /health answers 200."
            raise HTTPException(503, detail)
        return self.service

    async def blocking(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """``function`` run in a worker thread (a RAG question's in a generator thread: extractive questions
        never wait behind a generation), and the seconds it waited for one."""
        submitted = time.perf_counter()
        started: list[float] = []

        def run() -> Any:
            started.append(time.perf_counter())
            return function(*args, **kwargs)

        rag = isinstance(args[0] if args else None, Question) and args[0].mode == "rag"
        result = await asyncio.get_running_loop().run_in_executor(self.generating if rag else self.workers, run)
        return result, started[0] - submitted

    async def changing_documents(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function`` (a change to documents: reading and checking an upload, a deletion) run in the thread of document changes."""
        return await asyncio.get_running_loop().run_in_executor(self.changing, functools.partial(function, *args))

    def respond(self, question: Question, result: dict[str, Any], queued: float) -> QueryResponse:
        """The response body of an answered question; its stage times go to the metrics."""
        timings = {**result["timings"], "queue_s": queued}
        for stage in ("retrieval_s", "answer_s", "queue_s"):
            self.metrics.stages.labels(stage.removesuffix("_s")).observe(timings[stage])
        views = answer_views(result.get("answers", []))
        return QueryResponse(
            query=question.query, collection=question.collection or self.service.names[0], item_id=question.item_id,
            retriever=question.retriever or self.settings.retriever, mode=question.mode, pipeline=result["pipeline"],
            no_answer=rank_answers(views).abstains, answers=[AnswerOut.of(v, c) for v, c in zip(views, answer_cards(views))],
            documents=[ReviewOut.of(d) for d in result["documents"]], timings=timings, device=result.get("device"),
        )  # fmt: skip

    async def answer(self, question: Question, request: Request) -> QueryResponse | Response:
        """The answer to ``question``; a generated (RAG) one stops when the client leaves before its end."""
        if question.mode != "rag":  # only a generator can be stopped part-way: nothing to watch for
            result, queued = await self.blocking(self.service.ask, question)
            return self.respond(question, result, queued)
        client_gone = threading.Event()
        run = asyncio.ensure_future(self.blocking(self.service.ask, question, stopping_when(client_gone)))
        watching = asyncio.ensure_future(self.stop_when_disconnected(request, run, client_gone))
        try:
            result, queued = await run
        except Exception:
            if client_gone.is_set():  # the generator stopped on purpose (ClientGone, wrapped by the pipeline)
                return Response(status_code=CLIENT_CLOSED_REQUEST)
            raise
        finally:
            watching.cancel()
        return self.respond(question, result, queued)

    async def stop_when_disconnected(self, request: Request, run: asyncio.Future, client_gone: threading.Event) -> None:
        """Sets ``client_gone`` if the client disconnects before ``run`` is done (a RAG answer then stops)."""
        while not run.done():
            if await request.is_disconnected():
                self.stop_generating(client_gone)
                return
            await asyncio.sleep(DISCONNECT_POLL_S)

    def stop_generating(self, client_gone: threading.Event) -> None:
        """Tell the generator of an answer whose client left to stop at its next piece of text."""
        client_gone.set()
        self.metrics.generations_stopped.inc()
        logger.info("A client left before its answer: it is stopped at the generator's next piece of text.")

    async def stream_answer(self, question: Question) -> AsyncIterator[str]:
        """``token`` events while the generator writes (RAG), then the whole response as ``result``.

        A client that leaves stops the generator at its next piece of text: the worker thread is free
        for other questions instead of writing an answer nobody reads.
        """
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str] = asyncio.Queue()
        client_gone = threading.Event()
        forward = stopping_when(client_gone, lambda chunk: loop.call_soon_threadsafe(pieces.put_nowait, chunk.content))
        run = asyncio.ensure_future(self.blocking(self.service.ask, question, forward))
        waiting: asyncio.Future | None = None
        try:
            while not run.done() or not pieces.empty():
                waiting = waiting or asyncio.ensure_future(pieces.get())
                done, _ = await asyncio.wait({run, waiting}, timeout=self.keepalive_s, return_when=asyncio.FIRST_COMPLETED)
                if not done:  # nothing to send for a while (the first token can take minutes): a comment keeps the connection open
                    yield KEEPALIVE
                elif waiting.done():
                    piece, waiting = waiting.result(), None
                    if piece:
                        yield sse("token", {"text": piece})
        finally:  # also when the server cancels the stream because its client disconnected
            if waiting is not None:
                waiting.cancel()
            if not run.done():
                self.stop_generating(client_gone)
                run.add_done_callback(lambda done: done.cancelled() or done.exception())  # the ClientGone is expected: not "never retrieved"
        try:
            result, queued = run.result()
        except QAError as error:
            yield sse("error", {"detail": str(error), "status": status_of(error)})
            return
        yield sse("result", self.respond(question, result, queued).model_dump(mode="json"))


def served_api(request: Request) -> ServedAPI:
    """The ``ServedAPI`` of the app that received ``request`` (a route dependency)."""
    return request.app.state.api


Served = Annotated[ServedAPI, Depends(served_api)]
# Documents the token on the routes that need it (the docs' Authorize button); Guarded checks it.
PROTECTED = [Security(HTTPBearer(auto_error=False))]

router = APIRouter(route_class=StrictJSONRoute)

# ------------------------------------------------------------------------------------- endpoints
# Each docstring is the endpoint's description in the OpenAPI schema (/docs), in Markdown.


@router.get(
    "/health", response_model=HealthOut, tags=["service"], summary="ready (200) once the models and indexes are loaded, else 503",
    responses={503: {"model": HealthOut, "description": "loading (with progress, or waiting for the search server) or failed (with the reason)"}, **errors()},
)  # fmt: skip
async def health(api: Served) -> JSONResponse:
    """The server's status: loading, ready or failed, the collections it serves and the reader's backend,
    its memory (RSS) and the collections open now."""
    status = api.status()
    memory_mb = round(psutil.Process().memory_info().rss / 2**20, 1)
    body = HealthOut(
        **status, collections=api.service.names, reader_backend=api.settings.reader_backend, device=api.service.device, memory_mb=memory_mb,
        open_collections=list(api.service.open_collections()),
    )  # fmt: skip
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if status["status"] == "ready" else 503)


@router.get(
    "/collections", response_model=list[CollectionOut], dependencies=PROTECTED, tags=["data"], summary="the collections served, with their sizes",
    responses=errors(*GUARDED, 503),
)  # fmt: skip
async def collections_(api: Served) -> list[CollectionOut]:
    """Every collection served, the default one first."""
    return [CollectionOut.of(info) for info in api.loaded().collections()]


@router.get(
    "/products", response_model=ProductsOut, dependencies=PROTECTED, tags=["data"], summary="a collection's products with their review counts",
    responses=errors(*GUARDED, 404, 422, 503),
)  # fmt: skip
async def products(
    api: Served,
    collection: str | None = Query(None, description="default: the first collection served"),
    limit: Annotated[Count("limit", 1, 1000), Query(description="products to return")] = 100,
    offset: Annotated[Count("offset", 0), Query(description="products to skip")] = 0,
) -> ProductsOut:
    """One page of a collection's products, each with its number of reviews."""
    counts = api.loaded().products(collection)
    page = list(counts.items())[offset : offset + limit]
    name = collection or api.service.names[0]
    return ProductsOut(collection=name, total=len(counts), products=[ProductOut(item_id=i, reviews=n) for i, n in page])


@router.post(
    "/query", response_model=QueryResponse, dependencies=PROTECTED, tags=["answers"], summary="answer a question about a product",
    responses={200: {"content": {EVENT_STREAM: {"schema": EVENT_STREAM_SCHEMA}}}, **errors(*GUARDED, 404, 413, 422, 503)},
)  # fmt: skip
async def query(body: QueryRequest, request: Request, api: Served) -> Any:
    """The retrieved reviews and the answers read from them (or generated, citing them), with each stage's time.

    With `stream` (or `Accept: text/event-stream`) the answer comes as server-sent events.
    """
    question = api.loaded().check(Question(**body.model_dump(exclude={"stream"})))
    if body.stream or EVENT_STREAM in request.headers.get("accept", ""):
        return StreamingResponse(api.stream_answer(question), media_type=EVENT_STREAM, headers={"Cache-Control": "no-store"})
    return await api.answer(question, request)


@router.post(
    "/feedback", response_model=FeedbackOut, status_code=201, dependencies=PROTECTED, tags=["feedback"], summary="record a verdict on an answer",
    responses={200: {"model": FeedbackOut, "description": "a repeated `click_id`: nothing new stored, the first click returned"}, **errors(*GUARDED, 404, 413, 422, 503)},
)  # fmt: skip
async def feedback(body: FeedbackRequest, api: Served) -> JSONResponse:
    """Store a user's verdict on one answer (the verdicts: see `verdict`): 201, or 200 for a `click_id` stored before."""
    values = body.model_dump(exclude={"collection", "document_id"})
    service = api.loaded()

    def record() -> tuple[Feedback, bool]:  # both database reads in the worker: the event loop never waits on SQLite
        repeated = body.click_id is not None and service.feedback.has_click(body.click_id)
        return service.record_feedback(body.collection, body.document_id, **values), repeated

    (saved, repeated), _ = await api.blocking(record)
    return JSONResponse(FeedbackOut.of(saved).model_dump(mode="json"), status_code=200 if repeated else 201)


@router.get(
    "/feedback/export", dependencies=PROTECTED, tags=["feedback"], summary="the confirmed answers as SQuAD v2 (train-reader's --train-file)",
    responses={200: {"content": {"application/json": {"schema": SQUAD_SCHEMA}}}, **errors(*GUARDED, 404, 503)},
)  # fmt: skip
async def export_feedback(api: Served) -> JSONResponse:
    """The answers users confirmed, as a SQuAD v2 file; its summary in the `X-Feedback-Summary` header."""
    try:
        export, _ = await api.blocking(api.loaded().export_feedback)
    except QAError as error:  # nothing exportable yet
        raise NotFound(error.problem, error.fix) from None
    return JSONResponse(export.squad, headers={"X-Feedback-Summary": export.summary()})


@router.get(
    "/metrics", dependencies=PROTECTED, tags=["service"], summary="Prometheus metrics: requests, latency, stage times", response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string", "description": "Prometheus' text format (version 0.0.4)"}}}}, **errors(*GUARDED)},
)  # fmt: skip
async def metrics_(api: Served) -> Response:
    """The API's metrics in Prometheus' text format."""
    api.metrics.ready.set(api.service.ready)
    return PlainTextResponse(api.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


document_routes.register(router, PROTECTED, errors)


# ------------------------------------------------------------------------------------- the app


async def _library_error(request: Request, error: QAError) -> JSONResponse:
    return error_response(str(error), status_of(error))


async def _invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
    return error_response(one_line(error), 422)


async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    detail = str(error.detail)
    if "Fix:" not in detail:  # Starlette's own: an unknown route, or a method the route does not take
        detail = f"{detail}: {request.method} {request.url.path}. Fix: see the routes and their request bodies at /docs."
    return error_response(detail, error.status_code, error.headers)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.api.start()
    yield
    app.state.api.stop()


async def _docs(request: Request) -> HTMLResponse:
    """The routes and schemas as a page that loads nothing from anywhere."""
    return HTMLResponse(docs_page(request.app.openapi()), headers={"Content-Security-Policy": CSP})


def create_app(settings: Settings | None = None, collections: Sequence[ServedCollection] = DEFAULT_COLLECTIONS, service: QAService | None = None) -> FastAPI:
    """The app; it starts loading ``service`` (default: the process's shared QAService of ``collections``, which a
    page in this process uses too) when the server starts."""
    settings = settings or Settings.from_env()
    document_routes.check_guarded(settings)
    service = service or shared_service(settings, collections)
    # The document routes make and change collections of the store: after a restart it serves them again.
    service.serve_own |= settings.api_documents
    metrics = Metrics()
    # FastAPI's /docs and /redoc load their scripts from a CDN: /docs is rendered here instead (docs_page.py).
    app = FastAPI(title="qa_system", version=__version__, description=DESCRIPTION, lifespan=_lifespan, docs_url=None, redoc_url=None)
    app.include_router(router)
    app.add_api_route("/docs", _docs, methods=["GET"], include_in_schema=False, response_class=HTMLResponse)
    app.add_exception_handler(QAError, _library_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    paths = frozenset(route.path for route in [*app.routes, *router.routes] if hasattr(route, "path"))  # the docs' and ours
    app.add_middleware(
        Guarded, token=settings.api_token, rate_limit=settings.api_rate_limit, max_body_bytes=settings.api_max_body_bytes,
        max_upload_bytes=settings.api_max_upload_bytes if settings.api_documents else None,
    )  # fmt: skip
    app.add_middleware(Contained)
    app.add_middleware(Metered, metrics=metrics, paths=paths)  # refusals are counted too
    if settings.cors_origins:  # outermost: a browser's preflight carries no token, and every answer (errors too) gets its headers
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Accept"], expose_headers=["Retry-After", "X-Feedback-Summary"], max_age=600,
        )  # fmt: skip
    app.state.api = ServedAPI(settings, service, metrics)
    app.state.service, app.state.metrics = service, metrics
    app.state.documents = DocumentChanges(settings, service)
    app.openapi = with_event_schemas(app)
    return app


def with_event_schemas(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The app's OpenAPI schema generator, adding the schemas that routes name without FastAPI seeing them: the event
    stream's data (`x-events` of /query) and the JSON body of adding documents."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # made once, then cached by FastAPI
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (*EVENT_SCHEMAS, *document_routes.EXTRA_SCHEMAS):
            components.setdefault(model.__name__, model.model_json_schema(ref_template="#/components/schemas/{model}"))
        # FastAPI documents a 422 of its own shape on every route with parameters; this API's 422 is one line, as every error.
        for operation in (op for item in schema["paths"].values() for op in item.values()):
            invalid = operation.get("responses", {}).get("422", {})
            if "HTTPValidationError" in json.dumps(invalid):
                operation["responses"]["422"] = {"description": ERROR_MEANINGS[422], "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}}
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        return schema

    return openapi
