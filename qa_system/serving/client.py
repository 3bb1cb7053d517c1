"""A client of a running ``qa-system api``: ``qa-system ask --url`` asks the server's already loaded
service rather than loading the models in a new process for every question (0.5 s a question against 7-19 s).

Errors are the library's one line: a server that cannot be reached names ``qa-system api``; the
server's own refusals (its one-line ``detail``) are passed on as they are, a 404 as ``NotFound``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from qa_system.errors import NotFound, QAError, Unavailable
from qa_system.serving.question import Question


def _error(status: int, detail: str) -> QAError:
    problem, _, fix = detail.partition(" Fix: ")
    kind = NotFound if status == 404 else Unavailable if status == 503 else QAError
    return kind(problem, fix or None)


def ask_server(url: str, question: Question, token: str | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """The API's response body (``QueryResponse`` as JSON) to ``question``, asked of the server at ``url``."""
    import httpx

    # all_products only when set: a server from before it took the field still answers questions about one product.
    body = {k: v for k, v in asdict(question).items() if v is not None and k != "split" and (k != "all_products" or v)}
    if question.split is not None:
        raise QAError("A server answers from every split.", "leave out --split with --url, or ask without --url.")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.post(f"{url.rstrip('/')}/query", json=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as error:
        raise Unavailable(f"Cannot reach the API at {url} ({type(error).__name__}: {error}).", "start it with `qa-system api`, or pass the --url it serves on.") from None
    if response.status_code != 200:
        try:
            detail = str(response.json()["detail"])
        except (ValueError, KeyError, TypeError):
            detail = f"The server at {url} answered {response.status_code} without a message. Fix: is --url a qa-system API?"
        raise _error(response.status_code, detail)
    return response.json()
