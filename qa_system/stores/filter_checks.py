"""Filters from users, checked before any store sees them: Haystack's syntax, one QAError naming the problem and the fix.

``/query``'s ``filters``, ``qa-system ask / search --filter``, the page's filter box, ``QAPipeline.run(filters=...)``
and the API's deletion by filter all go through ``check_filters``. Given a collection's metadata types
(``meta_types`` of its manifest, see ``qa_system.sources.columns``), it also refuses ordering a text
field, or comparing a number with text: such filters would compare strings in one store and fail in another.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from qa_system import strict_json
from qa_system.errors import QAError, check_text, json_kind, json_text, shown
from qa_system.sources.columns import is_iso_date, value_type

# What the index adds to every passage of a collection of your own, and what a SubjQA review carries.
PASSAGE_META = ("document_id", "content_hash", "source_offset", "passage", "passages")
SUBJQA_META = ("item_id", "review_id", "domain", "split")
# The types of those fields, which no source column gives.
BUILT_IN_TYPES = {
    **dict.fromkeys(("item_id", "review_id", "domain", "split", "document_id", "content_hash"), "text"),
    **dict.fromkeys(("source_offset", "passage", "passages"), "integer"),
}
COMPARISONS = ("==", "!=", ">", ">=", "<", "<=", "in", "not in")
LOGICAL = ("AND", "OR", "NOT")
ORDERING = (">", ">=", "<", "<=")
# Bounds on what one request may ask the store to evaluate.
MAX_FILTER_CONDITIONS = 100
MAX_FILTER_DEPTH = 8
# Fields named in the message of a filter on a field no document has (a collection may have thousands).
LISTED_FIELDS = 50
FILTER_FIX = (
    'write a condition {"field": "meta.rating", "operator": ">=", "value": 4} (operators '
    + ", ".join(COMPARISONS)
    + '), or {"operator": "AND" | "OR" | "NOT", "conditions": [...]} of them.'
)


def parse_filters(text: str | None) -> dict | None:
    """A filter given as JSON text (``--filter``, the page's box) -> the checked filter (None for empty text)."""
    if text is None or not text.strip():
        return None
    try:
        value = strict_json.loads(text)
    except json.JSONDecodeError as error:
        raise QAError(f"The filter is not JSON ({error.msg} at character {error.pos}).", FILTER_FIX) from None
    except RecursionError:
        raise QAError("The filter nests too deeply.", FILTER_FIX) from None
    except strict_json.Refused as error:  # a repeated key: which of its values was meant?
        raise QAError(f"The filter is not one filter: {error}.", FILTER_FIX) from None
    return check_filters(value, types_later=True)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))


def _check_condition(
    condition: dict,
    where: str,
    types: Mapping[str, str],
    fields: Collection[str] | None,
    listed: Sequence[str] | None = None,
    types_later: bool = False,
) -> None:
    extra = set(condition) - {"field", "operator", "value"}
    if extra:
        raise QAError(f"The filter's condition {where} has the unknown key(s) {', '.join(sorted(map(str, extra)))}.", FILTER_FIX)
    field, operator, value = condition.get("field"), condition.get("operator"), condition.get("value", ...)
    if not isinstance(field, str) or not (field == "id" or (field.startswith("meta.") and len(field) > 5)):
        raise QAError(f"The filter's condition {where} has the field {field!r}: filters apply to 'meta.<name>' (or 'id').", FILTER_FIX)
    check_text(field, "the filter's field")
    if fields is not None and field != "id" and field.removeprefix("meta.") not in fields:
        # No document has it: the filter would match nothing, and "no answer" would be said over reviews never read.
        names = list(listed) if listed is not None else sorted(fields, key=lambda name: (name in PASSAGE_META, name))
        more = f", ... ({len(names) - LISTED_FIELDS:,} more)" if len(names) > LISTED_FIELDS else ""
        raise QAError(
            f"The filter names '{shown(field)}', a field no document of this collection has.",
            f"filter on one of: {', '.join('meta.' + name for name in names[:LISTED_FIELDS])}{more}.",
        )
    if operator not in COMPARISONS:
        raise QAError(f"The filter's condition {where} has the operator {operator!r}.", f"use one of: {', '.join(COMPARISONS)}.")
    if value is ...:
        raise QAError(f"The filter's condition {where} on '{field}' has no 'value'.", FILTER_FIX)
    if operator in ("in", "not in"):
        if not isinstance(value, list) or not all(_is_scalar(v) for v in value):
            raise QAError(
                f"The filter's '{operator}' on '{field}' needs a list of values, not {json_text(value)}.",
                'write e.g. {"field": "meta.rating", "operator": "in", "value": [4, 5]}.',
            )
        values = value
    elif not _is_scalar(value):
        raise QAError(
            f"The filter's '{operator}' on '{field}' needs a number, text, true/false or null, not {json_text(value)}.", FILTER_FIX
        )
    else:
        values = [value]
    for element in values:
        if isinstance(element, str):
            check_text(element, "the filter's value")
    kind = types.get(field.removeprefix("meta."))
    if operator in ORDERING and not (types_later and isinstance(value, str)):  # text: which advice fits needs the field's type
        _check_ordering(field, operator, value, kind)
    else:
        _check_equality(field, operator, values, kind)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _refuse_a_number_for_a_date(field: str, value: Any) -> None:
    raise QAError(f"The filter compares '{field}', a date, with the number {value!r}.", 'compare it with an ISO date, e.g. "2024-01-31".')


def _check_equality(field: str, operator: str, values: list, kind: str | None) -> None:
    """'==' and 'in' with a value of another type than the field's match nothing, silently: a number against a
    column that holds text (one value such as "4,5" makes a whole column text), or text against a number column."""
    for value in values:
        number = _is_number(value)
        if isinstance(value, bool) and kind is not None:  # a source's true / false is text (or 1 / 0) in the index
            as_written = "text" if kind == "text" else f"{kind}s"
            raise QAError(
                f"The filter's '{operator}' compares '{field}', which holds {as_written} in this collection, with the boolean {str(value).lower()}.",
                f'write the value as the source has it, e.g. "{str(value).lower()}" (metadata holds no booleans).',
            )
        if kind == "text" and number:
            raise QAError(
                f"The filter's '{operator}' compares '{field}', which holds text in this collection, with the number {value!r}.",
                f'write the value as text, e.g. "{value}" (or re-index the column with numbers only, to compare numbers).',
            )
        if kind in ("integer", "number", "date") and isinstance(value, str):
            if kind == "date" and is_iso_date(value):
                continue
            example = '"2024-01-31"' if kind == "date" else "4"
            raise QAError(
                f"The filter's '{operator}' compares '{field}', a{'n' if kind == 'integer' else ''} {kind}, with the text {value!r}.",
                f"write the value as a{' date' if kind == 'date' else ' number'}, e.g. {example}.",
            )
        if kind == "date" and number:
            _refuse_a_number_for_a_date(field, value)


def _check_ordering(field: str, operator: str, value: Any, kind: str | None) -> None:
    """'>' and friends compare numbers with numbers, and dates (ISO 8601 text) with dates."""
    number = _is_number(value)
    if not number and not isinstance(value, str):
        raise QAError(
            f"The filter's '{operator}' on '{field}' needs a number or an ISO date, not {json_text(value)}.",
            'write e.g. {"field": "meta.rating", "operator": ">=", "value": 4}.',
        )
    if kind == "text":
        raise QAError(
            f"The filter compares '{field}' with '{operator}', but the collection holds text there.",
            f"filter '{field}' with == or in, or re-index a column that holds only numbers or ISO dates.",
        )
    quoted = isinstance(value, str) and value_type(value.strip()) in ("integer", "number")  # "5": a number in quotes
    unquoted = (
        f'write the number without quotes: {{"field": "{field}", "operator": "{operator}", "value": {value.strip()}}}.' if quoted else ""
    )
    if kind in ("integer", "number") and not number:
        raise QAError(
            f"The filter compares '{field}', a number, with the {'date' if is_iso_date(value) else 'text'} {value!r}.",
            unquoted or f'compare it with a number, e.g. {{"field": "{field}", "operator": "{operator}", "value": 4}}.',
        )
    if kind == "date" and number:
        _refuse_a_number_for_a_date(field, value)
    if isinstance(value, str) and not is_iso_date(value):
        if kind == "date":
            raise QAError(
                f"The filter compares '{field}' with '{operator}' and the text {value!r}, which is no ISO date.",
                'compare it with an ISO date such as "2024-01-31".',
            )
        if quoted:
            fix = unquoted
        else:  # a collection whose types were not recorded: right for a field of numbers and for one of text
            fix = (
                f"'{operator}' compares numbers or dates: write a number (e.g. 4) or an ISO date (e.g. \"2024-01-31\"); "
                f"to match text, filter '{field}' with == or in."
            )
        raise QAError(
            f"The filter compares '{field}' with '{operator}' and the text {value!r}, which is neither a number nor an ISO date.", fix
        )


def filter_fields(manifest: Mapping[str, Any]) -> set[str] | None:
    """The metadata fields the documents of a collection hold, from its manifest; None where it does not tell
    (manifests written before columns were typed, or before a folder's sidecars were)."""
    if manifest.get("domains") and "meta_types" not in manifest:  # a SubjQA collection (documents given have their own)
        return set(SUBJQA_META)
    types = manifest.get("meta_types")
    if types is None or (manifest.get("input", {}).get("format") == "files" and "file" not in types):
        return None
    return {*PASSAGE_META, *(["item_id"] if manifest.get("item_counts") else []), *types}


def check_collection_filters(filters: Any, manifest: Mapping[str, Any]) -> dict | None:
    """``check_filters`` against a collection (its manifest): its metadata types, and the fields its documents hold.
    The column a collection takes its products from (``--item-column category``) is stored as ``item_id``, and its
    ids' (``--id-column ticket_id``) as ``document_id``: a filter on ``meta.category`` means ``meta.item_id``, and
    one on ``meta.ticket_id`` ``meta.document_id`` (the filter returned says so)."""
    options = (manifest.get("input") or {}).get("options") or {}
    fields = filter_fields(manifest)
    listed = None if fields is None else sorted(field for field in fields if field not in PASSAGE_META and field != "item_id")
    for option, stored in (("item_column", "item_id"), ("id_column", "document_id")):
        column = options.get(option)
        named = isinstance(column, str) and column != stored and fields is not None and column not in fields
        if named:
            filters = _field_renamed(filters, f"meta.{column}", f"meta.{stored}")
        if listed is not None and stored in fields:  # as the user knows it: the column it was read from
            listed.append(column if named else stored)
    types = manifest.get("meta_types")
    if fields is not None:  # the index's own fields have types too: "meta.item_id > 4" compares text
        types = {**{field: BUILT_IN_TYPES[field] for field in fields if field in BUILT_IN_TYPES}, **(types or {})}
    checked = check_filters(filters, types, fields, listed)
    return _either_unicode_form(_days_as_spans(checked, manifest.get("meta_types") or {}))


# A date without a time of day: compared with a field of dates and times, it means the whole day.
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _days_as_spans(node: Any, types: Mapping[str, str]) -> Any:
    """``node`` with each comparison of a date field with a day ("2024-01-05") made one with that day's span in UTC, as a
    search server compares them: ``==`` a time on that day, ``>`` after it, ``<=`` up to its end; a time without a zone is
    UTC. Haystack's in-memory matcher compares a day with a time as midnight, so "2024-01-05T12:00" was not "== 2024-01-05"
    there while it was on the search server (a copy where one is changed)."""
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("conditions"), list):
        return {**node, "conditions": [_days_as_spans(child, types) for child in node["conditions"]]}
    field, operator, value = node.get("field"), node.get("operator"), node.get("value")
    if not isinstance(field, str) or types.get(field.removeprefix("meta.")) != "date":
        return node
    days = value if operator in ("in", "not in") and isinstance(value, list) else [value]
    if not days or not all(isinstance(day, str) and _DAY.fullmatch(day.strip()) for day in days):
        return node

    def start(day: str, after: int = 0) -> str:
        return (datetime.date.fromisoformat(day.strip()) + datetime.timedelta(days=after)).isoformat() + "T00:00:00+00:00"

    def within(day: str) -> dict:
        return {"operator": "AND", "conditions": [
            {"field": field, "operator": ">=", "value": start(day)}, {"field": field, "operator": "<", "value": start(day, 1)},
        ]}  # fmt: skip

    if operator in ("==", "in", "!=", "not in"):
        spans = [within(day) for day in days]
        matched = spans[0] if len(spans) == 1 else {"operator": "OR", "conditions": spans}
        return matched if operator in ("==", "in") else {"operator": "NOT", "conditions": [matched]}
    bound = {">": (">=", 1), ">=": (">=", 0), "<": ("<", 0), "<=": ("<", 1)}.get(operator)
    return node if bound is None else {"field": field, "operator": bound[0], "value": start(value, bound[1])}


def _dates_as_text(node: Any, depth: int = 0) -> Any:
    """``node`` with Python dates and datetimes (``datetime.date``, pandas' ``Timestamp``) written as the ISO text
    the index holds (a copy where one is found): a filter built in Python may hold them, and JSON cannot."""
    if depth > MAX_FILTER_DEPTH + 1 or not isinstance(node, dict):
        return node
    if isinstance(node.get("conditions"), list):
        children = [_dates_as_text(child, depth + 1) for child in node["conditions"]]
        return node if all(a is b for a, b in zip(children, node["conditions"])) else {**node, "conditions": children}
    value = node.get("value")
    if isinstance(value, datetime.date):
        return {**node, "value": value.isoformat()}
    if isinstance(value, list) and any(isinstance(v, datetime.date) for v in value):
        return {**node, "value": [v.isoformat() if isinstance(v, datetime.date) else v for v in value]}
    return node


def _either_unicode_form(node: Any) -> Any:
    """``node`` with each text compared for (in)equality in both Unicode forms, composed and decomposed (NFC and NFD):
    "Café" typed with one code point for "é" matches one stored with two, as product ids are matched (a copy)."""
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("conditions"), list):
        return {**node, "conditions": [_either_unicode_form(child) for child in node["conditions"]]}
    operator, value = node.get("operator"), node.get("value")
    if operator not in ("==", "!=", "in", "not in"):
        return node
    values = value if isinstance(value, list) else [value]
    forms = list(dict.fromkeys(f for v in values for f in _forms(v)))
    if len(forms) == len(values):  # nothing to add: the fast path keeps its plain equality
        return node
    return {**node, "operator": "in" if operator in ("==", "in") else "not in", "value": forms}


def _forms(value: Any) -> list[Any]:
    if not isinstance(value, str):
        return [value]
    return list(dict.fromkeys([value, unicodedata.normalize("NFC", value), unicodedata.normalize("NFD", value)]))


def _field_renamed(node: Any, old: str, new: str) -> Any:
    """``node`` with every condition on the field ``old`` made one on ``new`` (a copy; anything else as it is)."""
    if not isinstance(node, dict):
        return node
    if node.get("field") == old:
        return {**node, "field": new}
    if isinstance(node.get("conditions"), list):
        return {**node, "conditions": [_field_renamed(child, old, new) for child in node["conditions"]]}
    return node


def check_filters(
    filters: Any,
    types: Mapping[str, str] | None = None,
    fields: Collection[str] | None = None,
    listed: Sequence[str] | None = None,
    types_later: bool = False,
) -> dict | None:
    """``filters`` once known to be a well-formed filter in Haystack's syntax; else a one-line QAError naming the problem.

    ``types``: the collection's metadata types (``meta_types`` of its manifest: ``integer``, ``number``,
    ``date`` or ``text``), to refuse ordering a text field, or comparing a number with text. ``fields``: the
    metadata fields its documents hold (``filter_fields``), to refuse a field none has, naming ``listed`` (default:
    ``fields``, the source's own first). ``types_later``: the collection's types are checked afterwards
    (``check_collection_filters``), so text ordered with '>' is left to that check, which knows what advice fits.
    """
    if filters is None:
        return None
    if not isinstance(filters, dict):
        raise QAError(f"The filter is {json_kind(filters)}, not an object.", FILTER_FIX)
    filters = _dates_as_text(filters)
    conditions = [0]

    def walk(node: Any, where: str, depth: int) -> None:
        if not isinstance(node, dict):
            raise QAError(f"The filter's condition {where} is {json_kind(node)}, not an object.", FILTER_FIX)
        conditions[0] += 1
        if depth > MAX_FILTER_DEPTH or conditions[0] > MAX_FILTER_CONDITIONS:
            raise QAError(
                f"The filter has more than {MAX_FILTER_CONDITIONS} conditions or {MAX_FILTER_DEPTH} levels.", "write a shorter filter."
            )
        if "field" in node:
            _check_condition(node, where, types or {}, fields, listed, types_later)
            return
        extra = set(node) - {"operator", "conditions"}
        if node.get("operator") not in LOGICAL or extra:
            raise QAError(
                f"The filter's condition {where} is neither a comparison (field, operator, value) nor AND / OR / NOT of conditions.",
                FILTER_FIX,
            )
        children = node.get("conditions")
        if not isinstance(children, list) or not children:
            raise QAError(f"The filter's {node['operator']} {where} needs a non-empty list of 'conditions'.", FILTER_FIX)
        for position, child in enumerate(children):
            walk(child, f"{where}.conditions[{position}]", depth + 1)

    walk(filters, "at the top", 0)
    return filters


def combine_filters(*filters: dict | None) -> dict | None:
    """Every given filter must hold (an AND, flattened so that equality filters keep their fast path); None when none is given."""
    conditions: list[dict] = []
    for part in filters:
        if not part:
            continue
        conditions += part["conditions"] if part.get("operator") == "AND" and "field" not in part else [part]
    if not conditions:
        return None
    return conditions[0] if len(conditions) == 1 else {"operator": "AND", "conditions": conditions}
