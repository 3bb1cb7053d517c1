"""JSON read strictly (RFC 8259): no repeated key, and no NaN or Infinity.

Python's parser takes both, which other parsers (a proxy's, a client's, a spreadsheet's export) read differently or
not at all. A filter, a document or a label written with a key twice meant one of its values, and which one depends
on who reads it: it is refused.
"""

from __future__ import annotations

import json
from typing import Any


class Refused(ValueError):
    """What ``loads`` refuses in text that Python's parser would take."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        keys = [key for key, _ in pairs]
        raise Refused(f"the key {next(k for k in keys if keys.count(k) > 1)!r} appears twice")
    return found


def _no_constant(name: str) -> None:
    raise Refused(f"{name} is not a JSON number")


def loads(text: str, constants: bool = False) -> Any:
    """``json.loads`` of ``text``, refusing a repeated key and (unless ``constants``: a document's values, which Python's
    own ``json.dumps`` writes so) NaN / Infinity, as ``Refused`` (a ValueError); the parser's own errors
    (``json.JSONDecodeError``, ``RecursionError``) as they are."""
    return json.loads(text, parse_constant=None if constants else _no_constant, object_pairs_hook=_unique_keys)
