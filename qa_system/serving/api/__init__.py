"""The REST API (``qa-system api``): FastAPI over the library's ``QAService``.

``app.py`` makes the app, ``routes/`` holds the endpoints (``documents.py`` the document routes),
``schemas.py`` the request and response bodies, ``guards.py`` the token, rate and size limits and the
metrics, ``server.py`` how it is run. FastAPI, uvicorn and prometheus_client are imported only by
these modules.
"""

from qa_system.serving.api.app import create_app
from qa_system.serving.api.server import run_api, serve_api

__all__ = ["create_app", "run_api", "serve_api"]
