"""The types of metadata columns: numbers and dates stay typed, so that they can be filtered on (``rating >= 4``).

A table's cells are text. A column is typed by everything it holds in the source (so that a field
has one type in every document, as Elasticsearch's and OpenSearch's mappings need): ``integer``
when every non-empty value is a whole number (``4``, ``-12``), ``number`` when every one is a
number and some have a fraction (``4.5``), ``date`` when every one is an ISO 8601 date or date and
time (``2024-01-31``, kept as that text: stores and Haystack's filters compare such text as dates),
else ``text``. Values with leading zeros (``007``, postcodes and ids) and numbers too large to be
exact in a double are text, and so is a column of JSON ``true`` / ``false``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

COLUMN_TYPES = ("integer", "number", "date", "text")
_INTEGER = re.compile(r"-?(0|[1-9]\d{0,15})")
_DECIMAL = re.compile(r"-?(0|[1-9]\d*)(\.\d+([eE][+-]?\d+)?|[eE][+-]?\d+)")  # a fraction or an exponent: whole numbers are _INTEGER's
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?")
MAX_EXACT = 2**53  # integers past this are not exact as a double (nor in a JSON reader that uses one): text
# A number written with a decimal comma (a European spreadsheet's "4,5", "1.250,5"): text here. Three digits after the
# comma ("1,024") may be an English thousand, and tell nothing.
_DECIMAL_COMMA = re.compile(r"-?(\d{1,3}(\.\d{3})+|\d+),(\d{1,2}|\d{4,})")
_THOUSANDS = re.compile(r"-?\d{1,3}(\.\d{3})+")  # "1.250" beside "1.250,5": a thousand, in the same notation


class DecimalCommas:
    """The text columns whose every value is a whole number or one written with a decimal comma, at least one of them
    such ("4,5"): typed as text, they are said in the report (``see`` each row's metadata, then ``columns``)."""

    def __init__(self, types: Mapping[str, str]):
        self._text = {key for key, kind in types.items() if kind == "text"}
        self._seen: set[str] = set()

    def see(self, meta: Mapping[str, Any]) -> None:
        """Take one row's metadata into account."""
        for key, value in meta.items():
            if key not in self._text or not isinstance(value, str):
                continue
            if _DECIMAL_COMMA.fullmatch(value.strip()):
                self._seen.add(key)
            elif value_type(value) != "integer" and not _THOUSANDS.fullmatch(value.strip()):
                self._text.discard(key)

    @property
    def columns(self) -> list[str]:
        """The columns seen so far that hold numbers written with a decimal comma, and only whole numbers besides."""
        return sorted(self._seen & self._text)


class StrayValues:
    """The text columns whose values are all dates, or all numbers, but for a few (``STRAY_SHARE`` at most) that are not
    ("2024-02-30", "31.01.2024", "n/a"): a column of one type for every value, they turned it to text, which a filter
    cannot compare with >= or <. ``see`` each row's metadata and where the row is, then read ``columns``."""

    def __init__(self, types: Mapping[str, str]):
        self._text = {key for key, kind in types.items() if kind == "text"}
        self._kinds: dict[str, dict[str, int]] = {}
        self._first: dict[str, tuple[str, str]] = {}  # column -> (its first stray value, where it is)

    def see(self, meta: Mapping[str, Any], where: str) -> None:
        """Take one row's metadata (at ``where``) into account."""
        for key in self._text.intersection(meta):
            value = meta[key]
            kind = value_type(value) if isinstance(value, str) else "text"
            kind = "number" if kind == "integer" else kind  # whole numbers and fractions make one numeric column
            counts = self._kinds.setdefault(key, {})
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "text" and key not in self._first:
                self._first[key] = (value, where)

    @property
    def columns(self) -> list[tuple[str, str, int, int, str, str]]:
        """Each such column: its name, the type of most of its values ("date" or "number"), how many are of it and how
        many not, and the first stray value with where it is."""
        found = []
        for key, counts in sorted(self._kinds.items()):
            stray = counts.get("text", 0)
            for kind in ("date", "number"):
                typed = counts.get(kind, 0)
                few = stray <= max(1, STRAY_SHARE * (typed + stray))  # one stray in five rows is still a stray
                if stray and typed >= MIN_TYPED and few and typed + stray == sum(counts.values()):
                    found.append((key, kind, typed, stray, *self._first[key]))
        return found


# A column is said to be of a type that a few stray values turned to text when it holds at least this many values of
# that type, and the strays are one, or at most this share of its values.
MIN_TYPED = 3
STRAY_SHARE = 0.1


def is_iso_date(text: str) -> bool:
    """Whether ``text`` is an ISO 8601 date, or date and time ("2024-01-31", "2024-01-31T12:00:00Z")."""
    if not _ISO_DATE.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def value_type(value: Any) -> str:
    """The narrowest column type ``value`` fits (a JSON number, or text as a table holds it)."""
    if isinstance(value, bool):
        return "text"
    if isinstance(value, int):
        return "integer" if abs(value) <= MAX_EXACT else "text"
    if isinstance(value, float):
        return "number" if math.isfinite(value) else "text"
    if not isinstance(value, str):
        return "text"
    text = value.strip()
    if _INTEGER.fullmatch(text):
        return "integer" if abs(int(text)) <= MAX_EXACT else "text"
    if _DECIMAL.fullmatch(text):
        return "number" if math.isfinite(float(text)) else "text"
    return "date" if is_iso_date(text) else "text"


def widen(known: str | None, found: str) -> str:
    """The type of a column that held ``known`` so far and now holds a value of type ``found``."""
    if known is None or known == found:
        return found
    return "number" if {known, found} == {"integer", "number"} else "text"


class ColumnTypes:
    """Collects the type of every metadata column over a source's rows (``see``), and types their values (``typed``)."""

    def __init__(self) -> None:
        self.types: dict[str, str] = {}

    def see(self, meta: Mapping[str, Any]) -> None:
        """Widen the column types by one row's metadata (empty values are skipped by the readers)."""
        for key, value in meta.items():
            self.types[key] = widen(self.types.get(key), value_type(value))


def typed_value(value: Any, kind: str | None) -> Any:
    """``value`` as its column's type: an int, a float, or text (dates stay ISO text)."""
    if kind == "integer":
        return int(value.strip()) if isinstance(value, str) else int(value)
    if kind == "number":
        return float(value.strip()) if isinstance(value, str) else float(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def typed_meta(meta: Mapping[str, Any], types: Mapping[str, str]) -> dict[str, Any]:
    """A record's metadata (text) with each column's value as its type."""
    return {key: typed_value(value, types.get(key)) for key, value in meta.items()}


def column_types(metas: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The type of every column over all the rows' metadata."""
    collected = ColumnTypes()
    for meta in metas:
        collected.see(meta)
    return dict(sorted(collected.types.items()))
