"""Haystack's OpenSearch store, whose searches a server refuses for their filter are one QAError.

Filters are checked before any store sees them (``retrieval/filters.py``), but only the server knows
that "soon" is no date, or that 10^29 does not fit its whole-number field: it refuses such a search
with a 400. That is the user's filter to fix, as the memory store's own refusal is, not a traceback
(CLI) or a 500 (API). A module of its own, so that importing ``qa_system.stores`` does not import the
OpenSearch client. It is serialised as Haystack's own store, which the retrievers' ``from_dict`` insists on:
an exported pipeline stays plain Haystack there.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

from haystack.core.serialization import generate_qualified_class_name
from haystack.document_stores.errors import DocumentStoreError
from haystack_integrations.document_stores.opensearch import OpenSearchDocumentStore
from opensearchpy.exceptions import ConnectionError as NoAnswer, NotFoundError, RequestError, TransportError

from qa_system.errors import NoSpace, QAError, Unavailable
from qa_system.safe_text import public_url
from qa_system.stores.index import IndexGone

FILTER_VALUE_FIX = (
    'compare each field with a value of its type: a whole number from -2^63 to 2^63-1, a number, or an ISO date such as "2024-01-31".'
)
# Elasticsearch quotes a value it cannot take as its UTF-8 bytes in hex: "Value [[31 30 30]] is out of range for a long".
_HEX_BYTES = re.compile(r"\[\[((?:[0-9a-f]{2} ?)+)\]\]")


# "failed to parse date field [soon] ...: [failed to parse date field [soon] ...]": the reason quoted again in brackets.
_REPEATED = re.compile(r"^(.+): \[\1\]$")


def refusal_reason(error: RequestError) -> str:
    """The server's own reason for refusing a request, in one line (its root cause, a value's bytes shown as text)."""
    info = error.info if isinstance(error.info, dict) else {}
    body = info.get("error") if isinstance(info.get("error"), dict) else {}
    causes = body.get("root_cause")
    reason = causes[0].get("reason") if isinstance(causes, list) and causes and isinstance(causes[0], dict) else None
    reason = " ".join(str(reason or error.error).split()).removeprefix("failed to create query: ")
    reason = _REPEATED.sub(r"\1", reason)
    reason = _HEX_BYTES.sub(lambda m: repr(bytes.fromhex(m.group(1).replace(" ", "")).decode("utf-8", "replace")), reason)
    return reason[:300]


_BULK_REASON = re.compile(r"'reason': '([^']{1,300})'")


def refused_writes(error: Exception) -> NoSpace | None:
    """The error of a write the server blocks (``cluster_block_exception``: a full disk makes it set its indices
    read-only), else None."""
    if isinstance(error, TransportError) and error.error == "cluster_block_exception":
        reason = refusal_reason(error)
    elif isinstance(error, DocumentStoreError) and "cluster_block_exception" in str(error):  # a bulk write's refused documents
        reason = next(iter(_BULK_REASON.findall(str(error))), "cluster_block_exception")
    else:
        return None
    return NoSpace(
        f"The search server refuses to write ({reason}): its disk is full, or the index was made read-only; "
        "nothing already indexed was lost.",
        "free disk space on the search server (it lifts the block itself once there is room; an older one needs "
        'PUT /_all/_settings {"index.blocks.read_only_allow_delete": null}), then make the change again.',
    )


def _fields(filters: Any) -> list[str]:
    """The fields a filter in Haystack's syntax compares, in order, once each."""
    if isinstance(filters, dict):
        own = [filters["field"]] if isinstance(filters.get("field"), str) else []
        return list(dict.fromkeys(own + [f for c in filters.get("conditions") or [] for f in _fields(c)]))
    return []


def _unavailable(store: OpenSearchDocumentStore) -> Unavailable:
    hosts = store._hosts if isinstance(store._hosts, list) else [store._hosts]
    return Unavailable(
        f"The search server at {', '.join(public_url(str(host)) for host in hosts)} does not answer (it stopped, or the network to it is down).",
        "start it again (questions are answered again once it answers), or set QA_OPENSEARCH_URL to a running one.",
    )


def _gone(store: OpenSearchDocumentStore) -> IndexGone:
    return IndexGone(
        f"The search server holds no collection '{store._index}' any more (it was deleted).",
        "pick one that `qa-system collections` lists, or index it again.",
    )


def _answered(method):
    """``method``, with a server that does not answer (a refused connection, a timeout) raised as ``Unavailable``:
    a one-line error (a 503 over HTTP), not a traceback (CLI) or a 500 (API); and an index deleted meanwhile as ``IndexGone``."""

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except NoAnswer:
            raise _unavailable(self) from None
        except NotFoundError as error:
            if error.error == "index_not_found_exception":
                raise _gone(self) from None
            raise
        except (TransportError, DocumentStoreError) as error:
            if (blocked := refused_writes(error)) is not None:
                raise blocked from None
            raise

    return checked


def _filter_refused(method):
    """``method`` (which takes ``filters``), with a request the server refuses (400) raised as a one-line QAError about
    the filter, and a server that does not answer as ``Unavailable``."""
    names = list(inspect.signature(method).parameters)

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except RequestError as error:
            given = dict(zip(names[1:], args)) | kwargs
            fields = ", ".join(_fields(given.get("filters")))
            where = f" on {fields}" if fields else ""
            raise QAError(f"The search server cannot apply the filter{where}: {refusal_reason(error)}.", FILTER_VALUE_FIX) from None

    return _answered(checked)


class CheckedOpenSearchDocumentStore(OpenSearchDocumentStore):
    """``OpenSearchDocumentStore`` whose filtered reads (the retrievers' searches, ``filter_documents``, counts) raise a
    QAError when the server refuses their filter, and whose reads and writes raise ``Unavailable`` when it does not answer
    and ``IndexGone`` when its index was deleted."""

    filter_documents = _filter_refused(OpenSearchDocumentStore.filter_documents)
    count_documents_by_filter = _filter_refused(OpenSearchDocumentStore.count_documents_by_filter)
    _bm25_retrieval = _filter_refused(OpenSearchDocumentStore._bm25_retrieval)
    _embedding_retrieval = _filter_refused(OpenSearchDocumentStore._embedding_retrieval)
    count_documents = _answered(OpenSearchDocumentStore.count_documents)
    write_documents = _answered(OpenSearchDocumentStore.write_documents)
    delete_documents = _answered(OpenSearchDocumentStore.delete_documents)

    def to_dict(self) -> dict[str, Any]:
        """Haystack's serialisation of the store, under Haystack's class name."""
        data = super().to_dict()
        data["type"] = generate_qualified_class_name(OpenSearchDocumentStore)
        return data
