"""How errors become the API's one line, ``{"detail": "..."}``: the status of each library error, Pydantic's
complaints said as one line, the server's own paths said by the settings that name them, and the responses each route documents."""

from __future__ import annotations

import logging
import math
import re
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from qa_system.config import Settings
from qa_system.errors import Conflict, NoSpace, NotFound, QAError, Unavailable, disk_error
from qa_system.serving.api.guards import error_response
from qa_system.serving.api.schemas import ErrorOut

logger = logging.getLogger(__name__)

ERROR_MEANINGS = {
    401: "no bearer token, or a wrong one (when the server has one: QA_API_TOKEN)",
    403: "document changes are off on this server (QA_API_DOCUMENTS)",
    404: "an unknown collection, product, document or task",
    409: "the collection exists already, or another change to it is running",
    413: "the request body is larger than the server takes (QA_API_MAX_BODY_BYTES)",
    422: "a request the library's rules refuse, a body that is not strict JSON, or a query parameter the route does not take "
    "(or given twice)",
    429: "too many requests from this client (QA_API_RATE_LIMIT); Retry-After says when to retry",
    500: "an unexpected error (the traceback is in the server's log)",
    503: "the server is loading, or a search server, generator endpoint or its own disk (QA_HOME, QA_FEEDBACK_DB) cannot be used",
    507: "no space left on the server's disk (QA_HOME) for the documents",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses a route really gives (each one line, ``ErrorOut``), and 422 and 500, which any route can (a
    query parameter it does not take, an unexpected error)."""
    return {status: {"model": ErrorOut, "description": ERROR_MEANINGS[status]} for status in sorted({*statuses, 422, 500})}


# What the token and the rate limit add to every protected route.
GUARDED = (401, 429)


def status_of(error: QAError) -> int:
    """The HTTP status of a library error: 404 for something not found, 409 for a clash, 503 for a server that does not answer,
    507 for a full disk, else 422."""
    for kind, status in ((NotFound, 404), (Conflict, 409), (Unavailable, 503), (NoSpace, 507)):
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
_FLAG = re.compile(
    r"--(text-column|id-column|item-column|encoding|format|sync|html|force)\b(?: (?!(?:with|to|or|for|and)\b)([a-z][a-z0-9_-]*)\b)?"
)


def in_http_terms(message: str) -> str:
    """A library message about reading documents, its flags said as the document routes' query parameters
    ("pass --encoding cp1252" -> "pass encoding=cp1252", "--text-column" -> "text_column")."""

    def parameter(match: re.Match) -> str:
        name = match[1].replace("-", "_")
        if name in ("sync", "html", "force"):
            return f"{name}=true"
        return f"{name}={match[2]}" if match[2] else name

    return _FLAG.sub(parameter, message)


# A path that goes on after a root is not that root: "/srv/home" is not the start of "/srv/home2" nor of "/srv/home.bak".
_PATH_ENDS = r"(?![\w-]|\.\w)"


def _server_paths(settings: Settings) -> list[tuple[str, str]]:
    """(absolute path, what a client is told instead), longest first: the configured roots by their settings, a model
    folder by its name. Relative paths are left out: they show nothing of the server, and "reports" is also a word."""
    roots: list[tuple[Path, str]] = [
        (settings.home, "$QA_HOME"),
        (settings.data_dir, "$QA_DATA_DIR"),
        (settings.reports_dir, "$QA_REPORTS_DIR"),
    ]
    if settings.feedback_file is not None:
        roots.append((settings.feedback_file, "$QA_FEEDBACK_DB"))
    for model in (settings.reader_model, settings.selector_model, settings.embedding_model, settings.query_embedding_model):
        if model and Path(model).is_absolute():
            roots.append((Path(model), Path(model).name))
    paths = {}
    for path, name in roots:
        for form in (path.absolute(), path.resolve()):
            if len(form.parts) > 1:  # never "/" alone
                paths.setdefault(str(form), name)
    return sorted(paths.items(), key=lambda pair: len(pair[0]), reverse=True)


# An absolute path of two or more parts in a message (not a URL's, nor a route's: those are no folders of the server).
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.])/(?:[^\s/`'\"()]+/)+[^\s/`'\"()]*[^\s/`'\"().,;:]")


def _file_name(match: re.Match) -> str:
    """A path of the server's own (its folder is there) by its name alone; anything else as it is (a route, a client's path)."""
    path = Path(match[0])
    return path.name if path.parent.is_dir() else match[0]


def public(message: str, settings: Settings) -> str:
    """``message`` as a client may read it: the server's own paths said by the settings that name them
    ("$QA_HOME/indexes/memory/docs.json", "$QA_FEEDBACK_DB"), a model folder by its name, any other file of the server
    (a collection's source file) by its name; the log keeps the whole."""
    for path, name in _server_paths(settings):
        if path in message:
            message = re.sub(re.escape(path) + _PATH_ENDS, lambda _, name=name: name, message)
    return _ABSOLUTE_PATH.sub(_file_name, message)


def _public(request: Request, message: str, status: int) -> str:
    """``public(message)`` for ``request``'s server; the whole message goes to its log when it named the server's paths."""
    api = getattr(request.app.state, "api", None)
    if api is None:
        return message
    shown = public(message, api.settings)
    if shown != message:
        logger.warning("%s %s answered %d: %s", request.method, request.url.path, status, message)
    return shown


def _is_document_route(request: Request) -> bool:
    parts = request.url.path.split("/")
    return len(parts) > 3 and parts[1] == "collections" and parts[3] == "documents"


# The library's errors name the command that lists products; a client has a route for it.
_PRODUCTS_COMMAND = re.compile(r"`qa-system products(?: --collection ([a-z0-9][a-z0-9_.-]*))?`")


def products_route(message: str) -> str:
    """``message`` with `qa-system products [--collection NAME]` said as the route that lists them."""
    return _PRODUCTS_COMMAND.sub(lambda match: f"GET /products?collection={match[1]}" if match[1] else "GET /products", message)


# The library's errors name `ask`'s --retriever; a request names it as a field.
_RETRIEVER_FLAG = re.compile(r"--retriever (bm25|dense|hybrid)\b")


# The server's own troubles (a search server that does not answer, a full disk) are logged, once a minute each: the
# access log's 503 lines said nothing of why.
SERVER_TROUBLE_LOG_EVERY_S = 60.0
_troubles_logged: dict[str, float] = {}


def _log_server_trouble(request: Request, error: QAError) -> None:
    message, now = str(error), time.monotonic()
    if now - _troubles_logged.get(message, -math.inf) >= SERVER_TROUBLE_LOG_EVERY_S:
        if len(_troubles_logged) > 100:  # messages of long ago
            _troubles_logged.clear()
        _troubles_logged[message] = now
        logger.warning("%s %s answered %d: %s", request.method, request.url.path, status_of(error), message)


async def _library_error(request: Request, error: QAError) -> JSONResponse:
    if isinstance(error, (Unavailable, NoSpace)):
        _log_server_trouble(request, error)
    message = products_route(in_http_terms(str(error)) if _is_document_route(request) else str(error))
    message = _RETRIEVER_FLAG.sub(lambda match: f'"retriever": "{match[1]}"', message)
    return error_response(_public(request, message, status_of(error)), status_of(error))


async def _disk_error(request: Request, error: OSError) -> JSONResponse:
    """A disk of the server that is full or may not be written is one line (507, 503); any other OSError is unexpected (500)."""
    problem = disk_error(error, str(request.app.state.api.settings.home), "send the request again.")
    if problem is None:
        raise error  # Contained (guards.py) logs its traceback and answers its 500
    logger.error("%s %s: %s", request.method, request.url.path, problem)
    return error_response(_public(request, str(problem), status_of(problem)), status_of(problem))


async def _invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
    return error_response(one_line(error), 422)


async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    detail = str(error.detail)
    if "Fix:" not in detail:  # Starlette's own: an unknown route, or a method the route does not take
        detail = f"{detail}: {request.method} {request.url.path}. Fix: see the routes and their request bodies at /docs."
    return error_response(_public(request, detail, error.status_code), error.status_code, error.headers)


def add_error_handlers(app: FastAPI) -> None:
    """Every error ``app`` answers as one line: the library's, a request Pydantic refuses, Starlette's own."""
    app.add_exception_handler(QAError, _library_error)
    app.add_exception_handler(OSError, _disk_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
