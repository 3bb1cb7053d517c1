"""The API's document routes: create and delete collections, add or update documents (a JSON list, or a
file as its body, indexed in the background: poll the task), delete documents by id or by filter.

Off unless the server is started with ``QA_API_DOCUMENTS=1`` (``Settings.api_documents``; 403 naming
it otherwise), and behind the bearer token like every route: without one the server does not start,
unless ``QA_API_DOCUMENTS_OPEN=1`` opens them to anyone who reaches it. Each change is logged with its client. The work is ``serving.documents``'s,
that is the ingestion library's, with the rules and one-line errors of `qa-system index --input`.
"""

from __future__ import annotations

import json
import logging
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from qa_system.config import Settings
from qa_system.errors import QAError, shown
from qa_system.ingestion import IngestOptions
from qa_system.serving.api.error_mapping import in_http_terms, public
from qa_system.serving.api.guards import client_of
from qa_system.serving.api.schemas import Filters, Text
from qa_system.serving.documents import DocumentChanges

logger = logging.getLogger(__name__)

# A file sent as the body, by its content type; JSON is a list of documents ({"documents": [...]}).
FILE_FORMATS = {"text/csv": "csv", "text/tab-separated-values": "tsv", "application/x-ndjson": "jsonl", "application/jsonl": "jsonl"}
FILE_SUFFIXES = {"csv": ".csv", "tsv": ".tsv", "jsonl": ".jsonl", "json": ".json", "squad": ".json"}


class DocumentsRequest(BaseModel):
    """Documents to add or update, each an object as a line of a JSON lines file: its text, id, product and metadata."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"documents": [{"id": "r1", "text": "The battery lasts two days.", "item_id": "P1", "rating": 5}]}]
        },
    )

    documents: list[dict[str, Any]] = Field(
        description="the first object's keys are the columns; numbers and ISO dates stay typed (filterable)"
    )


class CollectionRequest(BaseModel):
    """A new, empty collection."""

    model_config = ConfigDict(extra="forbid")

    name: Text = Field(description="lowercase letters, digits, '-', '_' and '.', e.g. my-reviews; not subjqa-..., SubjQA's own names")


class CollectionChanged(BaseModel):
    """A collection created (empty) or deleted, with the documents it held."""

    name: str
    documents: int


class DeleteRequest(BaseModel):
    """The documents to delete: by their ids, or every document with a passage that the filter matches."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Text] | None = Field(None, description="document ids (the id column's values)")
    filters: Filters = Field(None, description="a metadata filter, as /query's")
    force: StrictBool = Field(False, description="delete by a filter that leaves fewer than half the collection's documents (else a 422)")


class DeleteOut(BaseModel):
    """What a deletion did."""

    collection: str
    deleted: list[str] = Field(description="the ids of the documents deleted")
    passages_deleted: int
    not_found: list[str] = Field(description="ids asked for that the collection does not hold")
    documents: int = Field(description="documents left in the collection")
    passages: int


class TaskOut(BaseModel):
    """Documents being added in the background: running (with progress), done (with the ingestion report) or failed (with the error)."""

    task_id: str
    collection: str
    documents: int = Field(description="documents in the request")
    status: str = Field(description="running | done | failed")
    progress: dict[str, int] = Field(description="documents read and passages embedded so far")
    report: dict[str, Any] | None = Field(
        description="done: what changed (added, changed, unchanged, deleted, ...), as `qa-system index --input` reports it"
    )
    error: str | None = Field(description="failed: one line naming the problem and the fix")
    error_status: int | None = Field(description="failed: the status a request doing this at once would have had")


EXTRA_SCHEMAS = (DocumentsRequest,)
UPLOAD_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/DocumentsRequest"}},
        **{kind: {"schema": {"type": "string", "format": "binary"}} for kind in FILE_FORMATS},
        "application/octet-stream": {
            "schema": {"type": "string", "format": "binary", "description": "a file whose format `format` or `filename` names"}
        },
    },
}


def check_guarded(settings: Settings) -> None:
    """Document routes on a server with a bearer token, or explicitly open to anyone who reaches it (a warning);
    else a QAError at start: anonymous clients would create and delete collections."""
    if not settings.api_documents or settings.api_token:
        return
    if not settings.api_documents_open:
        raise QAError(
            "Document changes over HTTP are on (QA_API_DOCUMENTS=1) but the server has no bearer token: anyone who reaches it could create and delete collections.",
            "set QA_API_TOKEN, or QA_API_DOCUMENTS_OPEN=1 to let anyone who reaches the server change documents.",
        )
    logger.warning("Document changes over HTTP are open to anyone who reaches this server (QA_API_DOCUMENTS_OPEN=1, no QA_API_TOKEN).")


def logged(request: Request, change: str) -> None:
    """A change to the documents, in the server's log with the client that asked for it."""
    logger.info("%s (client %s).", change, client_of(request.scope))


def changes(request: Request) -> DocumentChanges:
    """The app's ``DocumentChanges``, once the service is loaded; 403 when the server does not take document changes."""
    api = request.app.state.api
    if not api.settings.api_documents:
        raise HTTPException(403, "Document changes are off on this server. Fix: start it with QA_API_DOCUMENTS=1 (and a QA_API_TOKEN).")
    api.loaded()
    return request.app.state.documents


Changes = Annotated[DocumentChanges, Depends(changes)]


async def _json(request: Request, model: type[BaseModel]) -> Any:
    """The body as ``model``: read by the router's strict JSON reader (``app.StrictJSONRequest``), checked by pydantic."""
    try:
        return model.model_validate(await request.json())
    except json.JSONDecodeError as error:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error", "ctx": {"error": error.msg}}]
        ) from None
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from None


async def upload(
    request: Request,
    collection: str,
    fmt: str | None,
    filename: str | None,
    options: IngestOptions,
) -> tuple[bytes, IngestOptions, str]:
    """The request's documents as a file's bytes, how to read them, and the file's name (for messages and the report)."""
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        from qa_system.ingestion.changes import documents_file

        rows = (await _json(request, DocumentsRequest)).documents
        first = rows[0] if rows and isinstance(rows[0], dict) else {}
        id_column = options.id_column or ("id" if "id" in first else None)
        item_column = options.item_column or ("item_id" if "item_id" in first else None)
        lines = await request.app.state.api.changing_documents(documents_file, rows)  # a long list's JSON: not on the event loop
        return (
            lines.getvalue(),
            IngestOptions(**{**options.as_dict(), "format": "jsonl", "id_column": id_column, "item_column": item_column}),
            "documents.jsonl",
        )
    fmt = fmt or FILE_FORMATS.get(kind)
    if fmt is None and filename is None:  # the body's name would be the collection's: say what names a format
        raise QAError(
            f"Cannot tell the format of the body from its content type ({shown(kind) or 'none'}).",
            f'send it as {", ".join(FILE_FORMATS)} (a file) or application/json ({{"documents": [...]}}), '
            f"or name its format: format=csv|tsv|jsonl|json|squad, or filename=NAME.csv (.tsv, .jsonl, .json).",
        )
    # A client's name for its file, without the folders it may hold ("../../etc/passwd.csv" is listed as passwd.csv).
    name = PurePosixPath(filename.replace("\\", "/")).name if filename else ""
    name = name or f"{collection}{FILE_SUFFIXES.get(fmt or '', '')}"
    return body, IngestOptions(**{**options.as_dict(), "format": fmt}), name


# ------------------------------------------------------------------------------------- endpoints


async def create_collection(body: CollectionRequest, request: Request, documents: Changes) -> JSONResponse:
    """Create an empty collection, served at once; add documents to it with POST /collections/{name}/documents."""
    created = CollectionChanged(**await request.app.state.api.changing_documents(documents.create, body.name))
    logged(request, f"Collection '{body.name}' created")
    return JSONResponse(created.model_dump(), status_code=201, headers={"Location": f"/collections/{body.name}"})


async def delete_collection(name: str, request: Request, documents: Changes) -> CollectionChanged:
    """Delete a collection of your own with all its documents (not a SubjQA one, nor the server's default)."""
    deleted = CollectionChanged(**await request.app.state.api.changing_documents(documents.drop, name))
    logged(request, f"Collection '{name}' deleted ({deleted.documents} document{'s' * (deleted.documents != 1)})")
    return deleted


async def add_documents(
    name: str,
    request: Request,
    documents: Changes,
    format: str | None = Query(
        None,
        description="a file's format (csv, tsv, jsonl, json: an array of documents, squad); default: from the content type or filename",
    ),  # noqa: A002
    filename: str | None = Query(None, description="the file's name, for messages and the report (and its format, by its suffix)"),
    text_column: str | None = Query(None, description="as --text-column (default: text, else review)"),
    id_column: str | None = Query(
        None, description="as --id-column (default for JSON: id, when the documents have one; else a hash of the content)"
    ),
    item_column: str | None = Query(None, description="as --item-column (default for JSON: item_id, when the documents have one)"),
    encoding: str = Query("utf-8", description="a file's text encoding"),
    html: bool = Query(False, description="the text holds HTML: its text is indexed, without the tags (as --html)"),
    sync: bool = Query(False, description="also delete the documents that are not in this request (as --sync)"),
    force: bool = Query(False, description="apply a sync that leaves fewer than half the collection's documents (as --force)"),
) -> JSONResponse:
    """Add documents, or update those whose id is there already (upsert), in the background: 202 with a task id to poll
    (GET /tasks/{task_id}). The body is `{"documents": [...]}` (JSON) or a file (CSV, TSV, JSON lines: its content type, or `format`).
    It is read through first, so a file that `qa-system index --input` refuses is refused here at once, with its message."""
    options = IngestOptions(text_column=text_column, id_column=id_column, item_column=item_column, encoding=encoding, html=html)
    source, options, file_name = await upload(request, name, format, filename, options)
    api = request.app.state.api
    change = await api.changing_documents(documents.add, name, source, options, file_name, sync, force)
    logged(request, f"Adding {change.documents} document{'s' * (change.documents != 1)} to collection '{name}' (task {change.id})")
    body = task_out(change.status(), documents.settings)
    return JSONResponse(body.model_dump(), status_code=202, headers={"Location": f"/tasks/{change.id}"})


async def delete_documents(name: str, body: DeleteRequest, request: Request, documents: Changes) -> DeleteOut:
    """Delete documents by their ids, or every document with a passage that `filters` matches (with all its passages)."""
    report = await request.app.state.api.changing_documents(documents.delete, name, body.ids, body.filters, body.force)
    logged(request, f"{len(report.deleted)} documents deleted from collection '{name}'")
    return DeleteOut(**report.as_dict())


async def delete_document(name: str, document_id: str, request: Request, documents: Changes) -> DeleteOut:
    """Delete one document (all its passages) by its id; 404 when the collection holds none of that id."""
    report = await request.app.state.api.changing_documents(documents.delete, name, [document_id], None)
    if report.deleted:  # none: a 404, which the access log shows
        logged(request, f"Document '{shown(document_id)}' deleted from collection '{name}'")
    if report.not_found:
        raise HTTPException(
            404,
            f"No document '{shown(document_id)}' in collection '{name}'. Fix: send an id the collection holds (the documents of POST /query's answers show them).",
        )
    return DeleteOut(**report.as_dict())


async def task(task_id: str, documents: Changes) -> TaskOut:
    """How far adding documents is: running (with progress), done (with the report) or failed (with the one-line error)."""
    return task_out(documents.task(task_id), documents.settings)


def task_out(status: dict[str, Any], settings: Settings) -> TaskOut:
    """A task's status as the API sends it: its error in HTTP's terms, naming no path of the server."""
    return TaskOut(**{**status, "error": status["error"] and public(in_http_terms(status["error"]), settings)})


def register(router: APIRouter, dependencies: list, errors) -> None:
    """Add the document routes to ``router`` (the app's, whose JSON bodies are read strictly); ``errors(*statuses)``: their error responses."""
    guarded = (401, 403, 429, 503)
    routes = [
        ("/collections", create_collection, "POST", 201, CollectionChanged, "create an empty collection", (409, 413, 422, 507)),
        (
            "/collections/{name}",
            delete_collection,
            "DELETE",
            200,
            CollectionChanged,
            "delete a collection and its documents",
            (404, 409, 422, 507),
        ),
        (
            "/collections/{name}/documents",
            add_documents,
            "POST",
            202,
            TaskOut,
            "add or update documents (in the background)",
            (404, 409, 413, 422, 507),
        ),
        (
            "/collections/{name}/documents/delete",
            delete_documents,
            "POST",
            200,
            DeleteOut,
            "delete documents by id or by filter",
            (404, 409, 413, 422, 507),
        ),
        # :path: an id may hold "/" (a file's path in its folder, "manuals/kindle.pdf"), sent as %2F or as is
        (
            "/collections/{name}/documents/{document_id:path}",
            delete_document,
            "DELETE",
            200,
            DeleteOut,
            "delete one document",
            (404, 409, 422, 507),
        ),
        ("/tasks/{task_id}", task, "GET", 200, TaskOut, "the status of documents being added", (404,)),
    ]
    for path, endpoint, method, status, model, summary, statuses in routes:
        extra = {"requestBody": UPLOAD_BODY} if endpoint is add_documents else None
        router.add_api_route(
            path,
            endpoint,
            methods=[method],
            status_code=status,
            response_model=model,
            summary=summary,
            tags=["documents"],
            dependencies=dependencies,
            responses=errors(*guarded, *statuses),
            openapi_extra=extra,
        )
