"""Metadata filters in Haystack's filter syntax, and a fast path for the common per-product case."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

FILTERABLE_FIELDS = ("item_id", "split", "domain", "review_id")


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


def equality_conditions(filters: dict | None) -> dict[str, Any] | None:
    """{meta field: value} when ``filters`` is only an AND of ``==`` on meta fields, else None.

    Retrievers answer such filters from precomputed postings instead of scanning every document.
    """
    if not filters:
        return {}
    conditions = filters.get("conditions", [filters]) if filters.get("operator") == "AND" else [filters]
    wanted = {}
    for condition in conditions:
        field = condition.get("field", "")
        if condition.get("operator") != "==" or not field.startswith("meta."):
            return None
        wanted[field.removeprefix("meta.")] = condition.get("value")
    return wanted


class MetaPostings:
    """Positions of documents per (meta field, value): answers equality filters without a scan."""

    def __init__(self, entries: Iterable[tuple[int, dict[str, Any]]]):
        postings: dict[tuple[str, Any], list[int]] = {}
        for position, meta in entries:
            for key, value in meta.items():
                if isinstance(value, (str, int, bool)):
                    postings.setdefault((key, value), []).append(position)
        self._postings = {key: np.asarray(sorted(positions), dtype="int64") for key, positions in postings.items()}

    def allowed(self, filters: dict | None, scan: Callable[[dict], Iterable[int]]) -> np.ndarray | None:
        """Sorted positions that ``filters`` allows (None = no filter); ``scan`` handles other filters."""
        wanted = equality_conditions(filters)
        if wanted == {}:
            return None
        if wanted is None:
            return np.asarray(sorted(scan(filters)), dtype="int64")
        positions = None
        for key, value in wanted.items():
            posting = self._postings.get((key, value), np.empty(0, dtype="int64"))
            positions = posting if positions is None else np.intersect1d(positions, posting, assume_unique=True)
        return positions
