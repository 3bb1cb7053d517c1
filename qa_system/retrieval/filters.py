"""Metadata filters in Haystack's filter syntax, and a fast path for the common per-product case."""

from __future__ import annotations

from typing import Any

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
