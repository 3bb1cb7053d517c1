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

The routes are in ``routes/``; what they share: ``served_api`` (the service and the worker pools),
``strict_json``, ``streaming``, ``error_mapping`` and ``openapi``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse

from qa_system import __version__
from qa_system.config import Settings
from qa_system.serving.api import documents as document_routes
from qa_system.serving.api.error_mapping import add_error_handlers
from qa_system.serving.api.guards import Contained, Guarded, Metered, Metrics, Spread
from qa_system.serving.api.openapi import DESCRIPTION, docs, with_event_schemas
from qa_system.serving.api.routes import collections as collection_routes, feedback, health, questions
from qa_system.serving.api.served_api import ServedAPI
from qa_system.serving.documents import DocumentChanges
from qa_system.serving.service import DEFAULT_COLLECTIONS, QAService, ServedCollection
from qa_system.serving.shared import shared_service

# In the order /docs lists them.
ROUTERS = (
    health.router,
    collection_routes.router,
    questions.router,
    feedback.router,
    health.metrics_router,
    collection_routes.documents_router,
)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.api.start()
    yield
    app.state.documents.finish()
    app.state.api.stop()


def create_app(
    settings: Settings | None = None, collections: Sequence[ServedCollection] = DEFAULT_COLLECTIONS, service: QAService | None = None
) -> FastAPI:
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
    for router in ROUTERS:
        app.include_router(router)
    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False, response_class=HTMLResponse)
    add_error_handlers(app)
    paths = frozenset(route.path for route in app.routes if hasattr(route, "path"))  # the docs' and ours
    app.add_middleware(
        Guarded,
        token=settings.api_token,
        rate_limit=settings.api_rate_limit,
        max_body_bytes=settings.api_max_body_bytes,
        max_upload_bytes=settings.api_max_upload_bytes if settings.api_documents else None,
    )
    app.add_middleware(Contained)
    if settings.api_processes > 1:
        app.add_middleware(Spread, workers=settings.api_workers)
    app.add_middleware(Metered, metrics=metrics, paths=paths)  # refusals are counted too
    if settings.cors_origins:  # outermost: a browser's preflight carries no token, and every answer (errors too) gets its headers
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Accept"],
            expose_headers=["Retry-After", "X-Feedback-Summary"],
            max_age=600,
        )
    app.state.api = ServedAPI(settings, service, metrics)
    app.state.service, app.state.metrics = service, metrics
    app.state.documents = DocumentChanges(settings, service)
    app.openapi = with_event_schemas(app)
    return app
