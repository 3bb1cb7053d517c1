"""Haystack metadata filters over fields that may hold several values, matched as Elasticsearch does.

A review that sits in two splits is one document whose ``split`` is a list (``["dev", "test"]``).
Elasticsearch and OpenSearch match a term filter on an array field when any element matches, so
``split == "test"`` finds it there. Haystack's own matcher (``haystack.utils.filters``, used by
``InMemoryDocumentStore``) compares the whole list with the value and finds nothing. Here a list
value matches ``==`` / ``in`` when one of its elements does (``!=`` / ``not in`` when none does);
every other case is Haystack's matcher, unchanged. The in-memory store below and the project's
retrievers (``retrieval/filters.py``) use it, so a filter means the same in every backend.
"""

from __future__ import annotations

import threading
from dataclasses import fields, replace
from typing import Any

from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError
from haystack.utils.filters import COMPARISON_OPERATORS, document_matches_filter

# operator -> (the positive operator applied to each element, negated?)
_ELEMENTWISE = {"==": ("==", False), "in": ("in", False), "!=": ("==", True), "not in": ("in", True)}


def _field_value(document: Document, field: str) -> Any:
    """The document's value of ``field``, found as Haystack's matcher finds it (``meta.x.y``; a bare unknown name is a meta key)."""
    if "." in field:
        root, *path = field.split(".")
        value = getattr(document, root, None)
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return value
    if field not in {f.name for f in fields(document)}:
        return document.meta.get(field)
    return getattr(document, field)


def document_matches(filters: dict[str, Any], document: Document) -> bool:
    """Whether ``document`` passes ``filters`` (Haystack's syntax), a list-valued field matching by its elements."""
    if "field" not in filters:
        operator, conditions = filters.get("operator"), filters.get("conditions")
        if operator not in ("AND", "OR", "NOT") or not isinstance(conditions, list):
            raise FilterError(f"Malformed logical filter {filters}: it needs an operator AND, OR or NOT and a list of conditions.")
        results = (document_matches(condition, document) for condition in conditions)
        return any(results) if operator == "OR" else all(results) if operator == "AND" else not all(results)
    value = _field_value(document, filters["field"])
    operator = filters.get("operator")
    if not isinstance(value, list) or operator not in _ELEMENTWISE or "value" not in filters:
        return document_matches_filter(filters, document)
    positive, negated = _ELEMENTWISE[operator]
    compare = COMPARISON_OPERATORS[positive]
    # The whole list may be the value asked for (Haystack's own meaning), else any element.
    found = any(compare(value=candidate, filter_value=filters["value"], strict_datetime_comparison=False) for candidate in [value, *value])
    return found != negated


class MultiValueInMemoryDocumentStore(InMemoryDocumentStore):
    """Haystack's in-memory store whose filters match list-valued metadata by element (``document_matches``).

    Retrieval restricts the candidates with ``document_matches`` first and hands Haystack's search
    an id filter, so BM25 and embedding search keep Haystack's scoring.
    """

    # Haystack counts every document's terms as it is written, for its own BM25. A saved index is
    # filled with load_documents instead, which leaves the counting to the first use of that BM25:
    # the project's retrievers keep their own index, and counting took most of the time to open a
    # large collection (about 10 of 17 s for 161,590 passages).
    _terms_counted = True
    _counting = threading.Lock()

    def load_documents(self, documents: list[Document]) -> None:
        """Fill this empty store with a saved index's documents (a repeated id: the last one), terms not yet counted."""
        if self.storage:
            raise ValueError("load_documents fills an empty store; use write_documents to add to one.")
        if self._shared:  # counts live in process-global storage there: count now, as Haystack does
            self.write_documents(documents, policy=DuplicatePolicy.OVERWRITE)
            return
        self.storage.update((document.id, document) for document in documents)
        self._terms_counted = False

    def _count_terms(self) -> None:
        if self._terms_counted:  # the usual case, without taking the lock
            return
        with self._counting:
            if self._terms_counted:
                return
            # Counted by Haystack's own code in a scratch store, then taken over: the documents stay readable meanwhile.
            scratch = InMemoryDocumentStore(bm25_tokenization_regex=self.bm25_tokenization_regex, shared=False)
            scratch.write_documents(list(self.storage.values()), policy=DuplicatePolicy.OVERWRITE)
            self._local_bm25_attr, self._local_freq_vocab_for_idf = scratch._local_bm25_attr, scratch._local_freq_vocab_for_idf
            self._local_avg_doc_len = scratch._local_avg_doc_len
            self._terms_counted = True

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """The documents ``filters`` allows, a field that holds several values matching when any of them does."""
        if not filters:
            return super().filter_documents()
        self._validate_filters(filters)
        matching = [document for document in self.storage.values() if document_matches(filters, document)]
        return matching if self.return_embedding else [replace(document, embedding=None) for document in matching]

    def _by_id(self, filters: dict[str, Any] | None) -> dict[str, Any] | None:
        """The documents ``filters`` allows, as a filter on their ids Haystack's matcher applies (None = no filter)."""
        if not filters:
            return None
        self._validate_filters(filters)
        return {"field": "id", "operator": "in", "value": [d.id for d in self.storage.values() if document_matches(filters, d)]}

    def embedding_retrieval(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool | None = False,
    ) -> list[Document]:
        """Haystack's vector search, over the documents ``filters`` allows (matched as ``filter_documents`` does).

        The allowed documents are scored directly: handed to Haystack as an id filter, each document's id was looked up
        in the list of allowed ids, a cost of passages x allowed passages (seconds for a product of a few thousand).
        """
        if not filters:
            return super().embedding_retrieval(query_embedding, top_k=top_k, scale_score=scale_score, return_embedding=return_embedding)
        if len(query_embedding) == 0 or not isinstance(query_embedding[0], float):
            raise ValueError("query_embedding should be a non-empty list of floats.")
        self._validate_filters(filters)
        allowed = [d for d in self.storage.values() if d.embedding is not None and document_matches(filters, d)]
        if not allowed:
            return []
        scores = self._compute_query_embedding_similarity_scores(embedding=query_embedding, documents=allowed, scale_score=scale_score)
        keep = self.return_embedding if return_embedding is None else return_embedding
        best = sorted(zip(allowed, scores, strict=True), key=lambda pair: pair[1], reverse=True)[:top_k]
        return [replace(document, score=score, embedding=document.embedding if keep else None) for document, score in best]

    def bm25_retrieval(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10, scale_score: bool = False
    ) -> list[Document]:
        """Haystack's BM25 search, over the documents ``filters`` allows (matched as ``filter_documents`` does)."""
        self._count_terms()
        by_id = self._by_id(filters)
        if by_id is not None and not by_id["value"]:
            return []
        return super().bm25_retrieval(query, filters=by_id, top_k=top_k, scale_score=scale_score)
