"""A client of a running ``qa-system api``: ``qa-system ask --url`` asks the server's already loaded
service rather than loading the models in a new process for every question (0.5 s a question against 7-19 s).

Errors are the library's one line: a server that cannot be reached names ``qa-system api``; the
server's own refusals (its one-line ``detail``) are passed on as they are, a 404 as ``NotFound``.
Whatever answers at ``--url`` is not trusted: the whole exchange has a deadline (a server that sends a
byte a second never holds the command past it), the reply is read up to ``MAX_REPLY_BYTES`` once
decompressed (a gzip bomb stops there), and a reply that is not JSON of the ``/query`` shape is one line.
``check_item_at`` asks the server's ``GET /products`` whether it has a product (the shell's ``:item``).
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
import zlib
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from qa_system.errors import NotFound, QAError, Unavailable, shown
from qa_system.safe_text import public_url
from qa_system.serving.question import Question

# The longest an answer may take, all of it (connecting, the server's work, reading the reply): generous for a
# generated answer on a CPU, and a bound on a server that never finishes.
DEADLINE_S = 600.0
# A /query reply is some kilobytes (the answers and the reviews they come from); this is far above any real one.
MAX_REPLY_BYTES = 32 * 1024 * 1024
NOT_OUR_API = "is --url a qa-system API (`qa-system api`)?"
ANSWER_KINDS = ("span", "no_answer", "generated")
# Products asked for in one GET /products (the most the route gives in one page).
PRODUCTS_PAGE = 1000
# The longest one page of a product check (GET /products) may take.
PRODUCTS_DEADLINE_S = 60.0


def check_url(url: str) -> None:
    """A QAError when ``url`` cannot be a server's (a port that is not a number): said before the first question."""
    import httpx

    try:
        httpx.URL(url).port  # noqa: B018 - reading it is the check
    except httpx.InvalidURL as error:
        raise _not_a_url(url, error) from None


def _not_a_url(url: str, error: Exception) -> QAError:
    return QAError(
        f"The API's URL {public_url(url)} is not one ({str(error).replace(url, public_url(url))}).",
        "pass --url as the API serves on, e.g. http://127.0.0.1:8000.",
    )


def _error(status: int, detail: str) -> QAError:
    problem, _, fix = detail.partition(" Fix: ")
    kind = NotFound if status == 404 else Unavailable if status == 503 else QAError
    return kind(problem, fix or None)


def ask_server(
    url: str, question: Question, token: str | None = None, timeout: float = DEADLINE_S, max_bytes: int = MAX_REPLY_BYTES
) -> dict[str, Any]:
    """The API's response body (``QueryResponse`` as JSON) to ``question``, asked of the server at ``url``
    within ``timeout`` seconds in all, its reply at most ``max_bytes`` once decompressed."""
    # all_products only when set: a server from before it took the field still answers questions about one product.
    body = {k: v for k, v in asdict(question).items() if v is not None and k != "split" and (k != "all_products" or v)}
    if question.split is not None:
        raise QAError("A server answers from every split.", "leave out --split with --url, or ask without --url.")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return _checked_reply(_json_reply(url, *_exchange(url, body, headers, timeout, max_bytes)), url)
    except QAError as error:  # the server names its fields: said as the flags that set them
        raise type(error)(in_flag_terms(error.problem), error.fix and in_flag_terms(error.fix)) from None


# The question's fields in a server's messages, and the flags of `ask` / `shell` that set them.
_FIELD_FLAGS = {
    "top_k_reader": "--answers",
    "top_k": "--top-k",
    "no_answer_threshold": "--no-answer-threshold",
    "item_id": "--item",
    "filters": "--filter",
}
_FIELD = re.compile(rf"\b({'|'.join(_FIELD_FLAGS)})\b(=?)")


def in_flag_terms(message: str) -> str:
    """A server's message about a question's fields, said as the flags that set them ("pass top_k=1 to 50" -> "pass
    --top-k 1 to 50")."""
    return _FIELD.sub(lambda match: _FIELD_FLAGS[match[1]] + (" " if match[2] else ""), message)


def _json_reply(url: str, status: int, data: bytes) -> Any:
    """The JSON of a 200 reply; the server's one-line ``detail`` as the library's error otherwise."""
    try:
        reply = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the parser
        reply = None
    if status != 200:
        detail = reply.get("detail") if isinstance(reply, dict) else None
        if not isinstance(detail, str) or not detail.strip():
            detail = f"The server at {public_url(url)} answered {status} without a message. Fix: {NOT_OUR_API}"
        raise _error(status, " ".join(detail.split()))
    if reply is None:
        raise QAError(f"The server at {public_url(url)} answered with something that is not JSON.", NOT_OUR_API)
    return reply


def check_item_at(
    url: str, item_id: str, collection: str | None = None, token: str | None = None, timeout: float = PRODUCTS_DEADLINE_S
) -> str:
    """``item_id`` as the server at ``url`` spells it, once its ``GET /products`` (page by page) lists it: itself, else
    the one product whose id it is once both are trimmed and in Unicode NFC, as the server matches them. NotFound
    when the collection has products and this is none of them; a collection without products takes any id."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    wanted = unicodedata.normalize("NFC", item_id.strip())
    matches, offset, name, total = [], 0, collection, 0
    while True:
        params = {"limit": PRODUCTS_PAGE, "offset": offset, **({"collection": collection} if collection else {})}
        page = _json_reply(url, *_exchange(url, None, headers, timeout, MAX_REPLY_BYTES, "GET", "/products", params))
        products = page.get("products") if isinstance(page, dict) else None
        if not isinstance(products, list) or not isinstance(page.get("total"), int):
            raise QAError(f"The server at {public_url(url)} answered GET /products without its products and total.", NOT_OUR_API)
        name, total = page.get("collection") or collection, page["total"]
        ids = [p.get("item_id") for p in products if isinstance(p, dict) and isinstance(p.get("item_id"), str)]
        if item_id in ids:
            return item_id
        matches += [i for i in ids if unicodedata.normalize("NFC", i.strip()) == wanted]
        offset += len(products)
        if not products or offset >= total:
            break
    if total == 0:  # a collection without products: the server asks every document whatever the id
        return item_id
    if len(matches) == 1:
        return matches[0]
    raise NotFound(
        f"Product '{shown(item_id)}' is not one of the {total:,} products of collection '{shown(str(name))}' at {public_url(url)}.",
        f"pick an item id that {public_url(url).rstrip('/')}/products?collection={quote(str(name))} lists, or ':item' alone to ask "
        "about all products.",
    )


def _exchange(
    url: str,
    body: dict | None,
    headers: dict,
    deadline_s: float,
    max_bytes: int,
    method: str = "POST",
    path: str = "/query",
    params: dict | None = None,
) -> tuple[int, bytes]:
    """POST ``body`` to ``url``/query (or ``method`` ``path`` with ``params``): the status and the decompressed reply,
    read in a thread that the deadline abandons.

    httpx's timeouts are per read: a server sending a byte a second (its headers or its body) resets them for ever.
    """
    import httpx

    done: dict[str, Any] = {}
    stop = threading.Event()
    client = httpx.Client(timeout=httpx.Timeout(deadline_s), headers={"Accept-Encoding": "gzip, deflate"})

    def run() -> None:
        try:
            with client, client.stream(method, f"{url.rstrip('/')}{path}", json=body, params=params, headers=headers) as response:
                done["reply"] = response.status_code, _read(response, url, max_bytes, stop)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            done["error"] = error

    worker = threading.Thread(target=run, name="qa-ask-url", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():  # the thread stops at the server's next byte, or its own timeout; its socket goes with it
        stop.set()
        raise Unavailable(
            f"The API at {public_url(url)} did not answer within {deadline_s:g} s.", "retry later, or ask another server (--url)."
        )
    error = done.get("error")
    if isinstance(error, QAError):
        raise error
    if isinstance(error, httpx.InvalidURL):
        raise _not_a_url(url, error) from None
    if isinstance(error, httpx.HTTPError):
        raise Unavailable(
            f"Cannot reach the API at {public_url(url)} ({type(error).__name__}: {str(error).replace(url, public_url(url))}).",
            "start it with `qa-system api`, or pass the --url it serves on.",
        ) from None
    if error is not None:
        raise error
    return done["reply"]


def _read(response, url: str, max_bytes: int, stop: threading.Event) -> bytes:
    """The reply's body, decompressed here (so that its size is bounded as it grows), at most ``max_bytes``."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS)
    elif encoding in ("identity", ""):
        decompressor = None
    else:
        raise QAError(
            f"The server at {public_url(url)} sent its reply compressed as {encoding!r}, which this client does not read.", NOT_OUR_API
        )
    body = bytearray()
    try:
        for chunk in response.iter_raw():
            while chunk and not stop.is_set():
                if decompressor is None:
                    piece, chunk = chunk, b""
                else:  # never more out of one step than the bound leaves room for
                    piece = decompressor.decompress(chunk, max_bytes + 1 - len(body))
                    chunk = decompressor.unconsumed_tail
                body += piece
                if len(body) > max_bytes:
                    raise QAError(f"The server at {public_url(url)} sent a reply of more than {max_bytes:,} bytes.", NOT_OUR_API)
                if decompressor is not None and not piece and decompressor.eof:
                    break
            if stop.is_set():
                break
    except zlib.error as error:
        raise QAError(f"The server at {public_url(url)} sent a reply that does not decompress ({error}).", NOT_OUR_API) from None
    return bytes(body)


# The card fields `ask --url` prints as text (``answer_views.AnswerCard``).
CARD_TEXTS = ("kind", "heading", "text", "label", "help", "note", "source")


def _checked_reply(reply: Any, url: str) -> dict[str, Any]:
    """``reply`` once it has the shape of ``/query``'s response in every field `ask --url` prints; else one QAError."""

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise QAError(f"The server at {public_url(url)} answered without {what}.", NOT_OUR_API)

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    need(isinstance(reply, dict), "a JSON object")
    timings = reply.get("timings")
    need(
        isinstance(timings, dict) and all(number(timings.get(k)) for k in ("retrieval_s", "answer_s")),
        "its timings (retrieval_s, answer_s)",
    )
    need(number(timings.get("queue_s", 0)), "a number of seconds in queue_s")
    need(all(isinstance(reply.get(k), str) for k in ("collection", "pipeline")), "the collection and pipeline it answered with")
    need(reply.get("item_id") is None or isinstance(reply.get("item_id"), str), "the product (item_id) as text")
    documents, answers = reply.get("documents"), reply.get("answers")
    need(
        isinstance(documents, list)
        and all(isinstance(d, dict) and isinstance(d.get("id"), str) and isinstance(d.get("meta", {}), dict) for d in documents),
        "a list of documents, each with an id",
    )
    need(all(number(d.get("meta", {}).get("passages", 1)) for d in documents), "a number as each document's passages")
    need(
        isinstance(answers, list) and all(isinstance(a, dict) and a.get("kind") in ANSWER_KINDS for a in answers),
        f"a list of answers, each of a kind ({', '.join(ANSWER_KINDS)})",
    )
    for answer in answers:
        need(
            all(answer.get(k) is None or number(answer.get(k)) for k in ("probability", "score")),
            "numbers as the answers' probability and score",
        )
        card = answer.get("card")
        need(
            isinstance(card, dict) and all(isinstance(card.get(k, ""), str) for k in CARD_TEXTS) and isinstance(card.get("number"), int),
            "each answer's card (its heading, text, label and note as text)",
        )
        supporting = answer.get("supporting_document_ids", [])
        need(isinstance(supporting, list) and all(isinstance(i, str) for i in supporting), "each answer's supporting document ids as text")
        if answer["kind"] == "span":
            fields = (answer.get("text"), answer.get("context"), answer.get("start"), answer.get("end"), answer.get("context_start"))
            need(
                isinstance(fields[0], str)
                and isinstance(fields[1], str)
                and all(isinstance(v, int) and not isinstance(v, bool) for v in fields[2:]),
                "each span's text, context and offsets",
            )
            need(answer.get("document_id") is None or isinstance(answer.get("document_id"), str), "each span's document id as text")
        elif answer["kind"] == "generated":
            cited = answer.get("cited_document_ids")
            need(
                isinstance(answer.get("text"), str) and isinstance(cited, list) and all(isinstance(i, str) for i in cited),
                "the generated answer's text and cited ids",
            )
    return reply
