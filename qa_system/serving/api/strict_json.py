"""Strict JSON for request bodies (RFC 8259): ``read_json``, and the route class that reads every body with it.

Python's parser takes NaN, Infinity and repeated keys, which other parsers (a proxy's, a client's) read
differently; these bodies are refused with the API's one-line 422 instead.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute


class Refused(ValueError):
    """What ``read_json`` refuses in a body that Python's parser would take."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):  # which value a repeated key means depends on the parser: a proxy may have read the other
        keys = [key for key, _ in pairs]
        raise Refused(f"the key {next(k for k in keys if keys.count(k) > 1)!r} appears twice")
    return found


def _no_constant(name: str) -> None:
    raise Refused(f"{name} is not a JSON number")


def read_json(body: bytes) -> Any:
    """A request body as strict JSON (RFC 8259): UTF-8 (a byte order mark ignored), no NaN / Infinity, no repeated
    key; else a JSONDecodeError naming the problem, which FastAPI turns into the API's one-line 422 (it answered
    other parse errors, such as a byte that is not UTF-8, with a bare 400)."""
    try:
        return json.loads(body.decode("utf-8-sig"), parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as error:
        problem = f"byte 0x{body[error.start]:02x} at position {error.start} is not UTF-8"
    except RecursionError:
        problem = "arrays or objects nested more deeply than the parser allows"
    except Refused as error:
        problem = str(error)
    except ValueError:  # the one other: an integer longer than Python converts
        problem = f"a number of more than {sys.get_int_max_str_digits()} digits"
    raise json.JSONDecodeError(problem, "", 0) from None


class StrictJSONRequest(Request):
    """A request whose JSON body is read by ``read_json`` (strict JSON, one-line errors)."""

    async def json(self) -> Any:
        """The body parsed by ``read_json``, once per request."""
        if not hasattr(self, "_json"):
            self._json = read_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is read by ``read_json``."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        """FastAPI's handler, given a ``StrictJSONRequest`` in place of the request."""
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
