"""Metadata filters in Haystack's filter syntax, and a fast path for the common per-product case.

Filters from users (``/query``'s ``filters``, ``--filter``, the page's box, ``QAPipeline.run(filters=...)``)
are checked by ``check_filters`` first (``qa_system.stores.filter_checks``, re-exported here): a malformed one
is one QAError naming the problem and the fix.

A list-valued field (a review's ``split``, when it sits in several) matches ``==`` when one of its
elements does, in the postings as in ``document_matches`` (``qa_system.stores.meta_filters``), and as in
Elasticsearch and OpenSearch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from haystack import Document

from qa_system.sources.columns import is_iso_date
from qa_system.stores.filter_checks import (
    FILTER_FIX,
    check_collection_filters,
    check_filters,
    combine_filters,
    filter_fields,
    parse_filters,
)
from qa_system.stores.meta_filters import document_matches

__all__ = [
    "FILTERABLE_FIELDS",
    "FILTER_FIX",
    "MetaPostings",
    "check_collection_filters",
    "check_filters",
    "combine_filters",
    "equality_conditions",
    "filter_fields",
    "make_filters",
    "parse_filters",
]

FILTERABLE_FIELDS = ("item_id", "split", "domain", "review_id")
# The values postings hold; a number matches whatever its type (2 finds a stored 2.0, as == does).
POSTED = (str, int, float, bool)


def make_filters(**meta: Any) -> dict | None:
    """``make_filters(item_id="B0074BW614", split="test")`` -> a Haystack AND filter (None if empty)."""
    conditions = []
    for name, value in meta.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple, set)):
            conditions.append({"field": f"meta.{name}", "operator": "in", "value": list(value)})
        else:
            conditions.append({"field": f"meta.{name}", "operator": "==", "value": value})
    if not conditions:
        return None
    return {"operator": "AND", "conditions": conditions}


def equality_conditions(filters: dict | None) -> list[tuple[str, Any]] | None:
    """[(meta field, value), ...] when ``filters`` is only an AND of ``==`` on meta fields, else None ([]: no filter).

    Retrievers answer such filters from precomputed postings instead of scanning every document. A
    field may come twice (the product scope and a user's filter on ``meta.item_id``): every pair must
    hold, so two different values of one field match nothing. A date is left to the scan, which compares
    it as a date ("2024-10-22T00:00:00" is the stored "2024-10-22"), as the stores do.
    """
    if not filters:
        return []
    conditions = filters.get("conditions", [filters]) if filters.get("operator") == "AND" else [filters]
    wanted = []
    for condition in conditions:
        field = condition.get("field", "")
        value = condition.get("value")
        if condition.get("operator") != "==" or not field.startswith("meta.") or not isinstance(value, POSTED):
            return None
        if isinstance(value, str) and is_iso_date(value):
            return None
        wanted.append((field.removeprefix("meta."), condition.get("value")))
    return wanted


class MetaPostings:
    """Positions of documents per (meta field, value): answers equality filters without a scan."""

    def __init__(self, entries: Iterable[tuple[int, Document]]):
        self._documents = list(entries)
        postings: dict[tuple[str, Any], set[int]] = {}
        for position, document in self._documents:
            for key, value in document.meta.items():
                for element in value if isinstance(value, list) else [value]:
                    if isinstance(element, POSTED):
                        postings.setdefault((key, element), set()).add(position)
        self._postings = {key: np.asarray(sorted(positions), dtype="int64") for key, positions in postings.items()}

    def allowed(self, filters: dict | None) -> np.ndarray | None:
        """Sorted positions that ``filters`` allows (None = no filter); other filters than equalities scan the documents."""
        wanted = equality_conditions(filters)
        if wanted == []:
            return None
        if wanted is None:
            return np.asarray(
                sorted(position for position, document in self._documents if document_matches(filters, document)), dtype="int64"
            )
        positions = None
        for key, value in wanted:
            posting = self._postings.get((key, value), np.empty(0, dtype="int64"))
            positions = posting if positions is None else np.intersect1d(positions, posting, assume_unique=True)
        return positions
