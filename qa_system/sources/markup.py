"""HTML in a table's text column (reviews scraped or exported from a web page: ``<p>``, ``<br/>``, ``<b>``), as text.

Indexed as written, the tags are words the reader reads and answers show; ``html_text`` keeps the text a browser
shows (entities decoded, a line for each paragraph, break or list item, scripts and styles left out), and
``has_tags`` tells a text that holds such tags, for the ingestion report to name the option (``--html``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Tags that start a new line of text where a browser shows them.
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br dd div dl dt figcaption footer h1 h2 h3 h4 h5 h6 header hr li ol p pre section table td th tr ul".split()
)
_HIDDEN_TAGS = frozenset(("script", "style", "template"))
# A tag of the kinds web text holds; a lone "<" or "a <b> c" in prose is rare next to these.
_TAG = re.compile(r"</?(?:p|br|b|i|u|em|strong|div|span|a|ul|ol|li|h[1-6]|table|tr|td|img|font|small)\b[^<>]{0,200}>", re.IGNORECASE)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_text(markup: str) -> str:
    """The text of ``markup`` as a browser shows it: tags dropped, entities decoded, spaces within a line squeezed, one
    line for each paragraph, break or list item (no empty ones)."""
    parser = _Text()
    parser.feed(markup)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    return "\n".join(line for line in lines if line)


def has_tags(text: str) -> bool:
    """Whether ``text`` holds HTML tags of the kinds web text has (``<p>``, ``<br/>``, ``<b>``, ``<a href=...>``)."""
    return _TAG.search(text) is not None
