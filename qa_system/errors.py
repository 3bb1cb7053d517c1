"""One error type for everything a user can get wrong.

Each error names the problem and the fix in one line, so that the CLI and the UI can show it
as-is instead of a traceback. ``check_count`` / ``check_number`` / ``check_text`` are the one
place where counts, thresholds and text from any door are checked.
"""

import errno
import json
import math
import unicodedata
from numbers import Integral, Real


class QAError(Exception):
    """A problem the user can fix; ``str(error)`` is a one-line message naming the fix."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} Fix: {fix}" if fix else problem)


class NotFound(QAError):
    """A QAError about a name that does not exist (a product, a collection, a document): an API answers 404."""


class Conflict(QAError):
    """A QAError about a change that clashes with what exists or runs (a collection created twice, two changes to one
    collection at once): an API answers 409."""


class Unavailable(QAError):
    """A QAError about a server the system relies on (a search engine, a generator endpoint) that did
    not answer as it should: the request was fine, so an API answers 503."""


class NoSpace(QAError):
    """A QAError about a full disk: the request was fine but could not be stored, so an API answers 507 (Insufficient Storage)."""


# The errnos of a disk that takes no more (no space, a full quota) and of a place the process may not write.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
NOT_PERMITTED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def disk_error(error: OSError, place: str, then: str) -> QAError | None:
    """``error`` as one line when it is the disk's: no space left (``NoSpace``) or no permission (``Unavailable``) on
    the disk of ``place`` (what was being written), with ``then`` after the fix; None for any other OSError.
    A write that finds the disk full names no file (``error.filename`` is None): ``place`` says where it was."""
    where = f" ({error.filename})" if error.filename not in (None, "") else ""
    if error.errno in NO_SPACE:
        return NoSpace(f"No space left on the disk of {place}{where}.", f"free space there, then {then}")
    if error.errno in NOT_PERMITTED:
        return Unavailable(
            f"This process may not write to {place}{where} ({error.strerror}).", f"let it write there (or point it elsewhere), then {then}"
        )
    return None


# Longest piece of a request quoted back in an error: a 60,000-character product id is named, not repeated.
QUOTED_CHARS = 200


def https_refused(shown_url: str, reason: str, url_setting: str) -> QAError:
    """A search server asked over https that did not complete it (``reason``, the TLS library's): a plain-HTTP server, or a
    certificate this machine does not trust; ``url_setting`` names where the URL is set ("QA_ES_URL or --es-url")."""
    if "WRONG_VERSION_NUMBER" in reason:
        return QAError(f"{shown_url} answers plain HTTP, not https.", f"write the URL with http:// ({url_setting}).")
    return QAError(
        f"The https connection to {shown_url} failed: {reason.splitlines()[0] if reason else 'no reason given'}.",
        "give this machine the server's certificate authority (e.g. SSL_CERT_FILE), or use http:// if the server speaks it.",
    )


def shown(value: object, limit: int = QUOTED_CHARS) -> str:
    """``value`` as text to quote in a message: whole up to ``limit`` characters, else its start and end around
    "…" with its length (an id's end often tells it apart from its neighbours)."""
    text = str(value)
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[: limit - tail - 1]}…{text[-tail:]} ({len(text):,} characters)"


def _fix(name: str, bound: object, how: str) -> str:
    # A flag takes its value after a space (--top-k 1), a Python argument after "=" (top_k=1).
    return f"pass {name}{' ' if name.startswith('-') else '='}{bound} {how}."


def check_count(value: object, name: str, minimum: int = 1, maximum: int | None = None, *, optional: bool = False) -> int | None:
    """``value`` as an int when it is a whole number in [minimum, maximum]; else a QAError naming ``name``.

    Every door (CLI flags, the page, the Python API) checks counts here, so that ``top_k=0`` or
    ``limit=-1`` is one clear message rather than an empty answer or a silently shortened list.
    Text (a flag, an environment variable) is parsed; ``optional`` lets None through.
    """
    if value is None and optional:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            pass
    elif isinstance(value, float) and value.is_integer():  # JSON from a client whose numbers are floats: 3.0
        value = int(value)
    # bool is an int to Python: no count.
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum or (maximum is not None and value > maximum):
        within = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
        fix = _fix(name, minimum, f"to {maximum}") if maximum is not None else _fix(name, minimum, "or more")
        raise QAError(f"{name} must be a whole number {within}, not {value!r}.", fix)
    return int(value)


def check_number(
    value: object, name: str, minimum: float | None = None, *, above: bool = False, maximum: float | None = None, optional: bool = False
) -> float | None:
    """``value`` as a finite float (at least ``minimum``, or above it with ``above``; at most ``maximum``); else a QAError naming ``name``.

    NaN compares false with everything, so a NaN threshold would silently disable a check; infinities likewise.
    """
    if value is None and optional:
        return None
    number: float | None = None
    if isinstance(value, (str, Real)) and not isinstance(value, bool):
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except ValueError:
            pass
    too_low = minimum is not None and number is not None and (number <= minimum if above else number < minimum)
    too_high = maximum is not None and number is not None and number > maximum
    if number is None or not math.isfinite(number) or too_low or too_high:
        if minimum is not None and maximum is not None and not above:
            bound, example = f" from {minimum:g} to {maximum:g}", (minimum + maximum) / 2
        else:
            lower = [] if minimum is None else [f"{'above' if above else 'of at least'} {minimum:g}"]
            upper = [] if maximum is None else [f"at most {maximum:g}"]
            bound = f" {' and '.join(lower + upper)}" if lower or upper else ""
            example = maximum if maximum is not None else (minimum or 0) + (1 if above else 0)
        fix = f"pass a finite number{bound}, e.g. {name}{' ' if name.startswith('-') else '='}{example:g}."
        raise QAError(f"{name} must be a finite number{bound}, not {value!r}.", fix)
    return number


# Longest question read, in characters: questions are a sentence, and a reader window must keep room for the review.
MAX_QUESTION_CHARS = 1000


def check_question_length(question: object) -> None:
    """A question is at most ``MAX_QUESTION_CHARS`` long, whichever door asks it (or judges it in feedback)."""
    if isinstance(question, str) and len(question) > MAX_QUESTION_CHARS:
        raise QAError(f"The question is {len(question)} characters long.", f"ask in at most {MAX_QUESTION_CHARS} characters.")


def has_visible_text(text: str) -> bool:
    """Whether ``text`` holds a character a reader sees: not only spaces, control and format characters (zero-width
    space, soft hyphen, byte-order mark) or combining marks, which tokenizers drop, leaving a question of no tokens."""
    return any(unicodedata.category(character)[0] not in "CZ" and unicodedata.category(character) not in ("Mn", "Me") for character in text)


def check_question_text(question: object) -> None:
    """A question is UTF-8 text of at most ``MAX_QUESTION_CHARS`` characters with something to read in it."""
    check_text(question, "the question")
    check_question_length(question)
    if not isinstance(question, str) or not has_visible_text(question):
        raise QAError("The question is empty.", 'type a question, e.g. "Is it good for reading?".')


def check_text(value: object, name: str) -> object:
    """``value`` when it is not a str, or a str that can be written as UTF-8; else a QAError naming ``name``.

    JSON's "\\ud800" escape and a command-line byte that is not UTF-8 (Python keeps b"\\xff" as "\\udcff")
    both make a lone surrogate: a str that no tokenizer, database or response body can take.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            code = ord(value[error.start])
            byte = f": the byte 0x{code - 0xDC00:02x} of another encoding" if 0xDC80 <= code <= 0xDCFF else ""
            problem = f"{name} is not UTF-8 text: character {error.start + 1} is a lone surrogate (\\u{code:04x}{byte})."
            raise QAError(problem[:1].upper() + problem[1:], f"send {name} as UTF-8 text.") from None
    return value


def described(value: object) -> str:
    """A value as a message about a wrong argument names it: "None", "an int (5)", "a list (['a.csv'])"."""
    if value is None:
        return "None"
    kind = type(value).__name__
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind} ({shown(repr(value), 80)})"


def json_kind(value: object) -> str:
    """What a value read from JSON is, in JSON's words: "an object", "an array", "a string", "a number", "true", "null"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    kinds = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}
    return next((kind for python, kind in kinds.items() if isinstance(value, python)), f"a {type(value).__name__}")


def json_text(value: object) -> str:
    """A value read from JSON as JSON writes it (null, true, "text", [1, 2]), shortened as ``shown`` does."""
    try:
        return shown(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):  # not JSON's (a date of a Python caller's filter)
        return shown(repr(value))


def check_type(value: object, name: str, types: type | tuple[type, ...], takes: str, *, optional: bool = False):
    """``value`` when it is one of ``types`` (or None, with ``optional``); else a QAError naming the argument ``name``,
    what it got and what it takes. The Python API's entry points check here: the other doors hand over text."""
    expected = types if isinstance(types, tuple) else (types,)
    # bool is an int to Python: True is no passage length.
    if (value is None and optional) or (isinstance(value, expected) and not (isinstance(value, bool) and bool not in expected)):
        return value
    raise QAError(f"{name} must be {takes}, not {described(value)}.", f"pass {takes} as {name}.")
