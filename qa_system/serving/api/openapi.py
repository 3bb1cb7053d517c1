"""The API's OpenAPI schema as this API answers (one-line errors, the event stream's data, the document routes'
JSON body), and the /docs page that shows it without loading anything from elsewhere."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

from qa_system.serving.api import documents as document_routes
from qa_system.serving.api.docs_page import CSP, docs_page
from qa_system.serving.api.error_mapping import ERROR_MEANINGS
from qa_system.serving.api.schemas import EVENT_SCHEMAS

DESCRIPTION = """Answers questions about a product from its reviews: the retrieved reviews, the answer spans at
their character offsets (or a generated answer citing the reviews), and the time each stage took.
Every request but `/health` and these docs carries `Authorization: Bearer <token>` when the server
has a token (`QA_API_TOKEN`)."""


async def docs(request: Request) -> HTMLResponse:
    """The routes and schemas as a page that loads nothing from anywhere."""
    return HTMLResponse(docs_page(request.app.openapi()), headers={"Content-Security-Policy": CSP})


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
                operation["responses"]["422"] = {
                    "description": ERROR_MEANINGS[422],
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
                }
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        return schema

    return openapi
