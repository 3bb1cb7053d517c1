"""`/health` (ready once the models and indexes are loaded) and `/metrics` (Prometheus)."""

from __future__ import annotations

import asyncio

import psutil
from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from qa_system.serving.api.error_mapping import GUARDED, errors
from qa_system.serving.api.schemas import HealthOut
from qa_system.serving.api.served_api import PROTECTED, Served
from qa_system.serving.api.strict_json import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute)
metrics_router = APIRouter(route_class=StrictJSONRoute)  # listed after the others in /docs


@router.get(
    "/health",
    response_model=HealthOut,
    tags=["service"],
    summary="ready (200) once the models and indexes are loaded and the search server answers, else 503",
    responses={
        503: {
            "model": HealthOut,
            "description": "loading (with progress, or waiting for the search server), failed (with the reason), or unavailable "
            "(the search server stopped answering)",
        },
        **errors(),
    },
)
async def health(api: Served) -> JSONResponse:
    """The server's status: loading, ready or failed, the collections it serves and the reader's backend,
    its memory (RSS) and the collections open now."""
    status = await asyncio.to_thread(api.status, True)  # it may ask the search server, which may not answer at once
    memory_mb = round(psutil.Process().memory_info().rss / 2**20, 1)
    body = HealthOut(
        **status,
        collections=api.service.names,
        reader_backend=api.service.reader_backend,
        device=api.service.device,
        memory_mb=memory_mb,
        open_collections=list(api.service.open_collections()),
    )
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if status["status"] == "ready" else 503)


@router.head("/health", include_in_schema=False)
async def health_head(api: Served) -> Response:
    """``/health``'s status without its body, for the load balancers and probes that ask with HEAD."""
    status = await asyncio.to_thread(api.status, True)
    return Response(status_code=200 if status["status"] == "ready" else 503)


@metrics_router.get(
    "/metrics",
    dependencies=PROTECTED,
    tags=["service"],
    summary="Prometheus metrics: requests, latency, stage times",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string", "description": "Prometheus' text format (version 0.0.4)"}}}},
        **errors(*GUARDED),
    },
)
async def metrics_(api: Served) -> Response:
    """The API's metrics in Prometheus' text format."""
    api.metrics.ready.set(api.service.ready)
    return PlainTextResponse(api.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
