"""HTML and Markdown as the text a reader sees: documents saved as web pages or Markdown, and HTML in a table's text
column (reviews scraped or exported from a web page: ``<p>``, ``<br/>``, ``<b>``).

Indexed as written, the tags are words the reader reads and answers show; ``html_text`` keeps the text a browser
shows (entities decoded, a line for each paragraph, break, heading or list item, scripts and styles left out) and
keeps all of it: a manual's numbered steps keep their numbers, and each row of a table is one line that
names its columns ("Part: Side brush, Clean: Every month, Replace: Every 3 to 6 months"), so that the reader can tell
one column's value from another's and an answer shows its row. ``markdown_text`` reads Markdown (tables included) the same way, and ``has_tags``
tells a text that holds such tags, for the ingestion report to name the option (``--html``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# Tags that start a new line of text where a browser shows them.
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br caption dd div dl dt figcaption footer h1 h2 h3 h4 h5 h6 header hr li nav ol p pre "
    "section table td th title tr ul".split()
)
# Blocks that make a table cell a page's layout rather than a value: its row is read as text, not as one line.
_LAYOUT_TAGS = frozenset("article blockquote div h1 h2 h3 h4 h5 h6 ol p pre section table ul".split())
# What a browser does not show. An unclosed one hides the rest of the page in a browser too.
_HIDDEN_TAGS = frozenset(("script", "style", "template"))
_CELL_TAGS = frozenset(("td", "th"))
# A tag of the kinds web text holds; a lone "<" or "a <b> c" in prose is rare next to these.
_TAG = re.compile(r"</?(?:p|br|b|i|u|em|strong|div|span|a|ul|ol|li|h[1-6]|table|tr|td|img|font|small)\b[^<>]{0,200}>", re.IGNORECASE)


def _squeezed(text: str) -> str:
    return " ".join(text.split())


class _Cell:
    """One table cell as it is read: its text so far, whether it is a header cell, the columns it spans."""

    def __init__(self, header: bool, columns: int = 1) -> None:
        self.parts: list[str] = []
        self.header = header
        self.columns = columns  # its colspan
        self.layout = False  # holds paragraphs, headings, lists or a table: a page laid out in a table


class _Table:
    """One table as it is read: its header row's cells, the current row's cells, the open cell."""

    def __init__(self) -> None:
        self.header: list[str] = []
        self.row: list[_Cell] = []
        self.cell: _Cell | None = None
        self.body_seen = False

    def close_cell(self) -> None:
        if self.cell is not None:
            self.row.append(self.cell)
            self.cell = None

    def end_row(self) -> list[str]:
        """The current row as the lines it reads as: one line naming its columns ("Part: Brush, Clean: Weekly"), its
        cells' text for a row of layout, nothing for the header row (it names the columns of the rows after it)."""
        self.close_cell()
        cells, self.row = self.row, []
        if any(cell.layout for cell in cells):
            return ["".join(cell.parts) for cell in cells]
        # A cell across several columns names (or fills) each of them, so that the columns still line up.
        texts = [_squeezed("".join(cell.parts)) for cell in cells]
        values = [value for cell, text in zip(cells, texts) for value in [text] + [""] * (cell.columns - 1)]
        filled = [value for value in values if value]
        if len(filled) > 1 and all(cell.header for cell in cells) and not self.body_seen and not self.header:
            self.header = [text for cell, text in zip(cells, texts) for _ in range(cell.columns)]
            return []
        if len(cells) == 1 or not filled:  # a title or a note across the table; an empty row
            return filled
        self.body_seen = True
        if len(self.header) == len(values):
            return [", ".join(f"{name}: {value}" if name else value for name, value in zip(self.header, values) if value)]
        if len(values) == 2:  # a label and its value: "Weight: 3.9 kg"
            return [f"{values[0]}: {values[1]}"]
        return [", ".join(filled)]

    def unread_header(self) -> list[str]:
        """The header row of a table that had no other row: its only text."""
        return [", ".join(name for name in self.header if name)] if self.header and not self.body_seen else []


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0
        self.lists: list[int | None] = []  # the next number of each open list (None: a list without numbers)
        self.tables: list[_Table] = []

    def _emit(self, text: str, depth: int) -> None:
        """``text`` into the open cell of the innermost of the outer ``depth`` tables that has one, else into the text."""
        for table in reversed(self.tables[:depth]):
            if table.cell is not None:
                table.cell.parts.append(text)
                return
        self.parts.append(text)

    def _write(self, text: str) -> None:
        """Text where the parser is: into the open cell, or the page's text. Text inside a table but outside its cells
        (a caption, a page whose table was never closed) is shown before the table, as browsers show it."""
        table = self.tables[-1] if self.tables else None
        if table is None or table.cell is not None:
            self._emit(text, len(self.tables))
        elif text.strip():
            self._emit(f"\n{text}\n", len(self.tables) - 1)

    def _end_row(self) -> None:
        for line in self.tables[-1].end_row():
            self._emit(f"\n{line}\n", len(self.tables) - 1)

    def _end_table(self) -> None:
        self._end_row()
        for line in self.tables[-1].unread_header():
            self._emit(f"\n{line}\n", len(self.tables) - 1)
        self.tables.pop()
        self._emit("\n", len(self.tables))

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden += 1
            return
        table = self.tables[-1] if self.tables else None
        if table is not None and table.cell is not None and tag in _LAYOUT_TAGS:
            table.cell.layout = True
        if tag == "table":
            self._write("\n")
            self.tables.append(_Table())
        elif table is not None and tag == "tr":  # a row's end tag may be left out: the next row ends it
            self._end_row()
        elif table is not None and tag in _CELL_TAGS:  # so may a cell's
            table.close_cell()
            span = str(dict(attrs).get("colspan") or "1").strip()
            table.cell = _Cell(header=tag == "th", columns=min(int(span), 100) if span.isdigit() and int(span) > 0 else 1)
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
        if tag in _BLOCK_TAGS and tag not in _CELL_TAGS and tag not in ("tr", "table"):
            self._write("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden = max(0, self.hidden - 1)
            return
        table = self.tables[-1] if self.tables else None
        if tag == "table" and table is not None:
            self._end_table()
        elif table is not None and tag in _CELL_TAGS:
            table.close_cell()
        elif table is not None and tag == "tr":
            self._end_row()
        elif tag in ("ol", "ul"):
            if self.lists:
                self.lists.pop()
            self._write("\n")
        elif tag in _BLOCK_TAGS:
            self._write("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self._write(data)

    def close(self) -> None:
        super().close()
        while self.tables:  # a table left open at the end of the page: its rows are kept
            self._end_table()


def html_text(markup: str) -> str:
    """The text of ``markup`` as a browser shows it: tags dropped, entities decoded, spaces within a line squeezed, one
    line for each paragraph, break, heading or list item (no empty ones), an ordered list's items numbered, and each
    table row one line naming its columns (``_Table.end_row``). Cells and rows whose end tags were left out, and a
    table never closed, are read as browsers read them: nothing of the page is lost."""
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
