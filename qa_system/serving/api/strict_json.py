"""Strict requests: JSON bodies (RFC 8259) read by ``read_json``, and query parameters the route takes, each once;
the route class that checks both.

Python's parser takes NaN, Infinity and repeated keys, which other parsers (a proxy's, a client's) read
differently; these bodies are refused with the API's one-line 422 instead. So are a query parameter the
route does not take (a misspelt ``?limt=5`` was ignored, the default used) and a repeated one (which value
counts depends on who reads it).
"""

from __future__ import annotations

import difflib
import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute

from qa_system import strict_json


def read_json(body: bytes) -> Any:
    """A request body as strict JSON (RFC 8259): UTF-8 (a byte order mark ignored), no NaN / Infinity, no repeated
    key; else a JSONDecodeError naming the problem, which FastAPI turns into the API's one-line 422 (it answered
    other parse errors, such as a byte that is not UTF-8, with a bare 400)."""
    try:
        return strict_json.loads(body.decode("utf-8-sig"))
    except json.JSONDecodeError as error:  # its message names no place ("Invalid control character at"): said here
        problem = f"{error.msg}{'' if error.msg.endswith(' at') else ' at'} character {error.pos}"
    except UnicodeDecodeError as error:
        problem = f"byte 0x{body[error.start]:02x} at position {error.start} is not UTF-8"
        if body.startswith(b"\x1f\x8b"):  # gzip's magic: the server does not unpack compressed request bodies
            problem = "it is gzip-compressed, which this server does not unpack (send it uncompressed, without Content-Encoding)"
    except RecursionError:
        problem = "arrays or objects nested more deeply than the parser allows"
    except strict_json.Refused as error:
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


def check_query(request: Request, taken: list[str], route: str) -> None:
    """A RequestValidationError (the API's one-line 422) for a query parameter that ``route`` does not take (the
    close name it takes, if one is), or one given more than once."""
    names = [name for name, _ in request.query_params.multi_items()]
    problem = None
    for name, count in Counter(names).items():
        if name not in taken:
            close = difflib.get_close_matches(name, taken, n=1)
            takes = f"{route} takes {', '.join(taken)}" if taken else f"{route} takes no query parameter"
            fix = f"use {close[0]} ({takes})." if close else f"leave it out ({takes})."
            problem = f"Unknown query parameter '{name[:40]}'. Fix: {fix}"
        elif count > 1:
            problem = f"The query parameter '{name}' is given {count} times. Fix: give it once."
        if problem:
            raise RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": problem, "input": None}])


def _query_names(dependant: Dependant) -> list[str]:
    """The query parameters a route takes, its dependencies' included, in order."""
    names = [parameter.alias for parameter in dependant.query_params]
    for dependency in dependant.dependencies:
        names += [name for name in _query_names(dependency) if name not in names]
    return names


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is read by ``read_json``, and whose query parameters are checked by ``check_query``."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        """FastAPI's handler, given a ``StrictJSONRequest`` in place of the request, once its query is checked."""
        handler = super().get_route_handler()
        taken = _query_names(self.dependant)
        route = f"{'/'.join(sorted(self.methods))} {self.path}"

        async def strict(request: Request) -> Response:
            check_query(request, taken, route)
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
