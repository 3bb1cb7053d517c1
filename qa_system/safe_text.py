"""Showing untrusted text as text: reviews, labels, report files, URL parameters, user input, and
the error messages that quote them.

Streamlit interprets almost every string it shows (``st.markdown``, ``st.error``/``warning``/``info``,
``st.caption``, ``st.subheader``, ``st.metric``, expander labels, image captions) as Markdown with
its own extensions: ``:red[...]`` colour directives, ``:material/...:`` icons, ``$...$`` maths, and
GitHub's autolinks (``http://...``, ``www.``, ``a@b.c``). A hostile review or link could thus show a
phishing link, fetch a remote image or restyle the page. Two ways to show such text safely:

* ``markdown_literal`` for the places that only take Markdown: every ASCII punctuation character
  is backslash-escaped (CommonMark allows it for all of them, so nothing starts a construct),
  ``<``, ``>`` and ``&`` become HTML entities, and an invisible word joiner breaks the autolinks,
  which Streamlit finds in the *unescaped* text and so no escape can stop.
* ``html_text`` (``html.escape``) for HTML shown with ``st.html``, which parses no Markdown at all.

Reports' CSV files open in spreadsheets, which run a cell starting with "=" (and "+", "-", "@") as a formula:
``spreadsheet_table`` writes such a cell of text with a leading "'", which shows it as text.
"""

from __future__ import annotations

import html
import re
import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # read by reports only: the pages and the CLI import this module without pandas
    import pandas as pd

# U+2060 WORD JOINER: invisible, and not a character an autolink's scheme, "www." or e-mail address can hold.
WORD_JOINER = "\u2060"
_AUTOLINK_STARTS = re.compile(r"(?i)(https?|ftp|www)(?=[:.])|(?=@)")
_HTML_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_ESCAPED = {c: _HTML_ENTITIES.get(c, "\\" + c) for c in string.punctuation}


def markdown_literal(text: object) -> str:
    """``text`` as Markdown that Streamlit shows literally (no link, image, heading, emphasis, colour, HTML)."""
    broken = _AUTOLINK_STARTS.sub(lambda m: (m.group(1) or "") + WORD_JOINER, str(text))
    return "".join(_ESCAPED.get(c, c) for c in broken)


def html_text(text: object) -> str:
    """``text`` for an HTML element's content or attribute value (``st.html`` parses no Markdown)."""
    return html.escape(str(text), quote=True)


# C0 controls (ESC starts colour, cursor and OSC 8 hyperlink sequences; CR rewrites the line; BS erases), DEL,
# C1 controls (U+009B is a one-character CSI, U+009D an OSC) and the bidirectional overrides that reorder what is shown.
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_TERMINAL_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: object, newlines: bool = True) -> str:
    """``text`` for a terminal: every control character shown as its escape (``\\x1b``), so that no stored review or
    server reply can colour, move, hide, retitle, link or clear what the terminal shows; tabs and (with ``newlines``) line breaks stay."""
    pattern = _TERMINAL_UNSAFE if newlines else _TERMINAL_UNSAFE_LINE
    text = str(text).replace("\r\n", "\n") if newlines else str(text)  # Windows' line break is a line break; a lone \r is escaped
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


# What a spreadsheet reads as the start of a formula; "+" and "-" start numbers too, which stay as they are.
_FORMULA_START = ("=", "@", "\t", "\r", "+", "-")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def spreadsheet_text(value: object) -> object:
    """``value`` for a CSV cell: text a spreadsheet would run as a formula ("=HYPERLINK(...)", "@SUM(1)", "-2+3") after a
    "'", which shows it as text; anything else, numbers written as text included, as it is."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def spreadsheet_table(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every cell and column name of text made safe to open in a spreadsheet (``spreadsheet_text``)."""
    import pandas as pd

    safe = table.rename(columns=spreadsheet_text)
    for column in safe.columns:
        if pd.api.types.is_object_dtype(safe[column]) or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = safe[column].map(spreadsheet_text)
    return safe


def public_url(url: str) -> str:
    """``url`` as messages show it: a password in it (``https://user:secret@host``, ``user:secret@host`` without a scheme)
    replaced by ``***``, in each of several comma-separated ones (a search server's hosts)."""
    return ",".join(_without_password(part) for part in url.split(","))


def _without_password(url: str) -> str:
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    host, slash, path = rest.partition("/")
    credentials, at, address = host.rpartition("@")  # the last "@": one unescaped in the password stays in what is hidden
    if not at:
        return url
    user, colon, _ = credentials.partition(":")
    return f"{scheme}{separator}{user}{':***' if colon else ''}@{address}{slash}{path}"
