"""HTML and Markdown as the text a reader sees: documents saved as web pages or Markdown, and HTML in a table's text
column (reviews scraped or exported from a web page: ``<p>``, ``<br/>``, ``<b>``).

Indexed as written, the tags are words the reader reads and answers show; ``html_text`` keeps the text a browser
shows (entities decoded, a line for each paragraph, break, heading or list item, scripts, styles and navigation left
out) and keeps all of it: a manual's numbered steps keep their numbers, and each row of a table is one line that
names its columns ("Part: Side brush, Clean: Every month, Replace: Every 3 to 6 months"), so that the reader can tell
one column's value from another's and an answer shows its row. ``markdown_text`` reads Markdown (tables included) the same way, and ``has_tags``
tells a text that holds such tags, for the ingestion report to name the option (``--html``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Tags that start a new line of text where a browser shows them.
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br caption dd div dl dt figcaption footer h1 h2 h3 h4 h5 h6 header hr li ol p pre "
    "section table ul".split()
)
_HIDDEN_TAGS = frozenset(("script", "style", "template", "nav"))
_CELL_TAGS = frozenset(("td", "th"))
# A tag of the kinds web text holds; a lone "<" or "a <b> c" in prose is rare next to these.
_TAG = re.compile(r"</?(?:p|br|b|i|u|em|strong|div|span|a|ul|ol|li|h[1-6]|table|tr|td|img|font|small)\b[^<>]{0,200}>", re.IGNORECASE)


def _squeezed(text: str) -> str:
    return " ".join(text.split())


class _Table:
    """The rows of one table as they are read: cells of the current row, and the header row's cells."""

    def __init__(self) -> None:
        self.header: list[str] = []
        self.row: list[str] = []
        self.row_is_header = True
        self.cell: list[str] | None = None
        self.body_seen = False

    def line(self) -> str:
        """The current row as one line ("" for the header row, which names the columns of the rows after it)."""
        cells, self.row = [_squeezed(cell) for cell in self.row], []
        if not any(cells):
            return ""
        if self.row_is_header and not self.body_seen and not self.header:
            self.header = cells
            return ""
        self.body_seen = True
        if len(cells) == 2:  # a label and its value: "Weight: 3.9 kg"
            return f"{cells[0]}: {cells[1]}" if cells[0] and cells[1] else cells[0] or cells[1]
        if len(self.header) == len(cells):
            return ", ".join(f"{name}: {cell}" if name else cell for name, cell in zip(self.header, cells) if cell)
        return ", ".join(cell for cell in cells if cell)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0
        self.lists: list[int | None] = []  # the next number of each open list (None: a list without numbers)
        self.tables: list[_Table] = []

    def _write(self, text: str, outside: int = 0) -> None:
        """Text into the open cell of the innermost table (``outside`` tables further out: a row's line goes around its
        own table), or into the text when no table is open."""
        tables = self.tables[: len(self.tables) - outside]
        if not tables:
            self.parts.append(text)
        elif tables[-1].cell is not None:
            tables[-1].cell.append(text.replace("\n", " "))  # a cell's lines stay in its row's line
        # text between a table's cells is only its layout

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden += 1
        elif tag == "table":
            self._write("\n")
            self.tables.append(_Table())
        elif self.tables and tag == "tr":
            self.tables[-1].row, self.tables[-1].row_is_header = [], True
        elif self.tables and tag in _CELL_TAGS:
            table = self.tables[-1]
            table.cell = []
            table.row_is_header &= tag == "th"
        elif tag in ("ol", "ul"):
            start = dict(attrs).get("start") if tag == "ol" else None
            self.lists.append(int(start) if start and start.strip().lstrip("-").isdigit() else 1 if tag == "ol" else None)
            self._write("\n")
        elif tag == "li":
            self._write("\n")
            if self.lists and self.lists[-1] is not None:
                self._write(f"{self.lists[-1]}. ")
                self.lists[-1] += 1
        elif tag in _BLOCK_TAGS:
            self._write("\n")

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag in _BLOCK_TAGS:
            self._write("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden = max(0, self.hidden - 1)
        elif tag == "table" and self.tables:
            line = self.tables[-1].line() if self.tables[-1].row else ""  # a last row left open
            self._write(f"\n{line}\n", outside=1)
            self.tables.pop()
        elif self.tables and tag in _CELL_TAGS and self.tables[-1].cell is not None:
            table = self.tables[-1]
            table.row.append("".join(table.cell))
            table.cell = None
        elif self.tables and tag == "tr":
            line = self.tables[-1].line()
            if line:
                self._write(f"\n{line}\n", outside=1)
        elif tag in ("ol", "ul"):
            if self.lists:
                self.lists.pop()
            self._write("\n")
        elif tag in _BLOCK_TAGS:
            self._write("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self._write(data)


def html_text(markup: str) -> str:
    """The text of ``markup`` as a browser shows it: tags dropped, entities decoded, spaces within a line squeezed, one
    line for each paragraph, break, heading or list item (no empty ones), an ordered list's items numbered, and each
    table row one line naming its columns (``_Table.line``)."""
    parser = _Text()
    parser.feed(markup)
    parser.close()
    lines = (_squeezed(line) for line in "".join(parser.parts).split("\n"))
    return "\n".join(line for line in lines if line)


def markdown_text(markdown: str) -> str:
    """The text of a Markdown document as ``html_text`` reads it once rendered (CommonMark with tables)."""
    from markdown_it import MarkdownIt

    return html_text(MarkdownIt("commonmark").enable("table").render(markdown))


def has_tags(text: str) -> bool:
    """Whether ``text`` holds HTML tags of the kinds web text has (``<p>``, ``<br/>``, ``<b>``, ``<a href=...>``)."""
    return _TAG.search(text) is not None
