"""``/docs``: the API's routes and schemas as one page rendered here, from the OpenAPI schema.

FastAPI's own ``/docs`` (Swagger UI) and ``/redoc`` load their scripts, styles and favicon from a CDN
(cdn.jsdelivr.net, fastapi.tiangolo.com): opening them told third parties that, and when, this server
was used, and showed nothing offline. This page has no script and loads nothing: its Content-Security-Policy
forbids every fetch. The complete schema is ``/openapi.json``, for any OpenAPI viewer or client generator.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

_METHODS = ("get", "post", "put", "delete", "patch")
# Nothing may be fetched from anywhere (not even this server): the page is its own HTML and inline style.
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;line-height:1.4}"
    "pre{background:#f5f5f5;padding:.6rem;overflow-x:auto;white-space:pre-wrap}"
    "h3{margin-bottom:.2rem}.method{font-family:monospace;font-weight:bold;text-transform:uppercase;margin-right:.5rem}"
)


def _schema_name(schema: dict[str, Any]) -> str | None:
    reference = schema.get("$ref", "") if isinstance(schema, dict) else ""
    return reference.rsplit("/", 1)[-1] if reference.startswith("#/components/schemas/") else None


def _operation(path: str, method: str, operation: dict[str, Any]) -> str:
    parts = [f'<h3><span class="method">{escape(method)}</span><code>{escape(path)}</code> {escape(operation.get("summary", ""))}</h3>']
    if operation.get("description"):
        parts.append(f"<pre>{escape(operation['description'])}</pre>")
    parameters = [
        f"<code>{escape(str(p.get('name')))}</code> ({escape(str(p.get('in')))}){': ' + escape(p['description']) if p.get('description') else ''}"
        for p in operation.get("parameters", [])
    ]
    if parameters:
        parts.append("<p>Parameters: " + "; ".join(parameters) + "</p>")
    bodies = []
    for kind, content in operation.get("requestBody", {}).get("content", {}).items():
        name = _schema_name(content.get("schema", {}))
        bodies.append(f"<code>{escape(kind)}</code>" + (f' (<a href="#schema-{escape(name)}">{escape(name)}</a>)' if name else ""))
    if bodies:
        parts.append("<p>Body: " + ", ".join(bodies) + "</p>")
    statuses = [
        f"{escape(str(status))} {escape(answer.get('description', ''))}" for status, answer in operation.get("responses", {}).items()
    ]
    if statuses:
        parts.append("<p>Answers: " + "; ".join(statuses) + "</p>")
    return "\n".join(parts)


def docs_page(schema: dict[str, Any]) -> str:
    """The HTML of ``/docs`` for an OpenAPI ``schema``: every route with its summary, parameters, bodies and answers, then the schemas."""
    info = schema.get("info", {})
    title = f"{info.get('title', 'API')} {info.get('version', '')}".strip()
    sections = [
        _operation(path, method, operation)
        for path, item in schema.get("paths", {}).items()
        for method, operation in item.items()
        if method in _METHODS
    ]
    components = schema.get("components", {}).get("schemas", {})
    schemas = [
        f'<h3 id="schema-{escape(name)}">{escape(name)}</h3>\n<pre>{escape(json.dumps(body, indent=2))}</pre>'
        for name, body in sorted(components.items())
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
            f"<h1>{escape(title)}</h1>",
            f"<pre>{escape(info.get('description', ''))}</pre>",
            '<p>The complete schema, for any OpenAPI viewer or client generator: <a href="/openapi.json">/openapi.json</a>.</p>',
            "<h2>Routes</h2>",
            *sections,
            "<h2>Schemas</h2>",
            *schemas,
            "</body></html>",
        ]
    )
