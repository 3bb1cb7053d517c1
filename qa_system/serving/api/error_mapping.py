"""How errors become the API's one line, ``{"detail": "..."}``: the status of each library error, Pydantic's
complaints said as one line, and the responses each route documents."""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from qa_system.errors import Conflict, NotFound, QAError, Unavailable
from qa_system.serving.api.guards import error_response
from qa_system.serving.api.schemas import ErrorOut

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


# The document routes take `index --input`'s flags as query parameters: the library's messages name the flags.
_FLAG = re.compile(r"--(text-column|id-column|item-column|encoding|format|sync)\b(?: (?!(?:with|to|or|for|and)\b)([a-z][a-z0-9_-]*)\b)?")


def in_http_terms(message: str) -> str:
    """A library message about reading documents, its flags said as the document routes' query parameters
    ("pass --encoding cp1252" -> "pass encoding=cp1252", "--text-column" -> "text_column")."""

    def parameter(match: re.Match) -> str:
        name = match[1].replace("-", "_")
        if name == "sync":
            return "sync=true"
        return f"{name}={match[2]}" if match[2] else name

    return _FLAG.sub(parameter, message)


def _is_document_route(request: Request) -> bool:
    parts = request.url.path.split("/")
    return len(parts) > 3 and parts[1] == "collections" and parts[3] == "documents"


async def _library_error(request: Request, error: QAError) -> JSONResponse:
    message = in_http_terms(str(error)) if _is_document_route(request) else str(error)
    return error_response(message, status_of(error))


async def _invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
    return error_response(one_line(error), 422)


async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    detail = str(error.detail)
    if "Fix:" not in detail:  # Starlette's own: an unknown route, or a method the route does not take
        detail = f"{detail}: {request.method} {request.url.path}. Fix: see the routes and their request bodies at /docs."
    return error_response(detail, error.status_code, error.headers)


def add_error_handlers(app: FastAPI) -> None:
    """Every error ``app`` answers as one line: the library's, a request Pydantic refuses, Starlette's own."""
    app.add_exception_handler(QAError, _library_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
