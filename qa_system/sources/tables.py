"""CSV / TSV, JSON lines and JSON arrays -> Records, one row at a time (a JSON array is read whole).

The text column is ``--text-column``, else ``text``, else ``review``; ``--id-column`` names the document id
column, ``--item-column`` (else a column named ``item_id``, in any case) the item (product); every other non-empty column
is kept as metadata. Empty rows and rows with an empty text are skipped and counted. A missing
column is an error that lists the columns the file has. ``--html``: the text column holds HTML, of which the
text is read (``markup``); without it, texts that hold tags are counted.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import IO, Any

from qa_system import strict_json
from qa_system.errors import QAError, json_kind
from qa_system.sources.decoding import decoded, text_encoding
from qa_system.sources.markup import has_tags, html_text
from qa_system.sources.records import MAX_DOCUMENT_CHARS, IngestOptions, ReadCounts, Record, check_text_length, meta_value, metadata

DEFAULT_TEXT_COLUMNS = ("text", "review")
# The name the index, the API's uploads and sidecar files give the item: a table's column of that name is its item too.
DEFAULT_ITEM_COLUMN = "item_id"
TABLE_FIX = "pass a CSV / TSV file (or JSON lines), saved as text; export spreadsheets as CSV (UTF-8)."
# Columns a file may have: every other one is metadata of every document, and a search server maps at most
# 1,000 fields an index; a header of 40,000 columns (349 KB) is a mistake, not a table to index.
MAX_COLUMNS = 1000
COLUMNS_FIX = (
    "keep the columns you need (the text, the id, the product and the metadata to filter by), e.g. in a spreadsheet, and export it again."
)


def repeated_names(names: list[str]) -> list[str]:
    """The names that appear more than once in ``names``, sorted (counted in one pass: headers can be long)."""
    return sorted(name for name, times in Counter(names).items() if times > 1)


def _check_column_count(count: int, what: str) -> None:
    if count > MAX_COLUMNS:
        raise QAError(f"{what} has {count:,} columns; at most {MAX_COLUMNS:,} are read.", COLUMNS_FIX)


def _columns(available: list[str], options: IngestOptions, name: str) -> tuple[str, str | None, str | None]:
    """(text, id, item) column names, each checked against the file's columns."""
    shown = ", ".join(available) if available else "(none)"
    text = options.text_column or next((c for c in DEFAULT_TEXT_COLUMNS if c in available), None)
    if text is None:
        raise QAError(
            f"{name} has no 'text' or 'review' column; its columns are: {shown}.", "pass --text-column with the column that holds the text."
        )
    for flag, column in (("--text-column", text), ("--id-column", options.id_column), ("--item-column", options.item_column)):
        if column is not None and column not in available:
            raise QAError(f"{name} has no column '{column}' ({flag}); its columns are: {shown}.", f"pass {flag} with one of those columns.")
    item = options.item_column or next((c for c in available if c.lower() == DEFAULT_ITEM_COLUMN), None)  # "Item_ID" too
    return text, options.id_column, item


def _record(values: dict, columns: tuple[str, str | None, str | None], where: str, counts: ReadCounts, html: bool = False) -> Record | None:
    text_column, id_column, item_column = columns
    text = values.get(text_column)
    text = "" if text is None else meta_value(text)
    if html:
        text = html_text(text)
    elif has_tags(text):
        counts.html_texts += 1
    if not text.strip():
        counts.empty_texts += 1
        return None
    record_id = item = None
    if id_column is not None:
        record_id = meta_value(values.get(id_column) or "").strip()
        if not record_id:
            raise QAError(
                f"{where} has an empty id (--id-column {id_column}).",
                "give every row an id, or leave out --id-column to identify rows by their content.",
            )
    if item_column is not None:
        item = meta_value(values.get(item_column) or "").strip() or None
    meta = metadata(values, columns, where)
    return Record(check_text_length(text, where), item, meta, where, record_id)


def header_delimiter(header_line: str, tsv: bool = False) -> str:
    """The delimiter of a table whose header row is ``header_line`` (a tab with ``tsv``)."""
    if tsv:
        return "\t"
    # A ".csv" from a European spreadsheet often uses ";" (or a tab): take the one the header uses.
    return max((",", ";", "\t"), key=header_line.count) if header_line.count(",") == 0 else ","


def read_table(binary: IO[bytes], name: str, options: IngestOptions, counts: ReadCounts, tsv: bool = False) -> Iterator[Record]:
    """Records from a CSV (or with ``tsv``, TSV) file, one row at a time; blank rows are counted in ``counts`` and skipped.

    The header row names the columns (``options`` says which hold the text, id and item). A row with
    more or fewer fields than the header, or a header that repeats a name, is a QAError naming the line.
    """
    encoding = text_encoding(binary, name, options.encoding, TABLE_FIX)
    csv.field_size_limit(MAX_DOCUMENT_CHARS + 1)  # csv's default (128 kB) would refuse long documents
    with decoded(binary, name, encoding) as text:
        lines = iter(text)
        header_line, header_start = next(lines, ""), 0  # header_start: blank lines above the header
        while header_line and not header_line.strip():
            header_line, header_start = next(lines, ""), header_start + 1
        if not header_line:
            return
        # strict: a quote left open is an error at the end of the file (or where a later quote closes it), not a
        # field that silently swallows every row after it.
        reader = csv.reader(itertools.chain([header_line], lines), delimiter=header_delimiter(header_line, tsv), strict=True)
        line = header_start + 1  # where the row being read starts
        try:
            # A column without a name (a trailing delimiter in the header) is named by its position.
            given = [column.strip() for column in next(reader)]
            _check_column_count(len(given), f"The header of {name}")
            repeated = repeated_names([column for column in given if column])
            if repeated:
                raise QAError(
                    f"{name} repeats the column name(s) {', '.join(repeated)}.", "give every column a unique name in the header row."
                )
            header = [column or f"column_{n}" for n, column in enumerate(given, 1)]
            if taken := next((n for n, column in enumerate(given, 1) if not column and f"column_{n}" in given), None):
                raise QAError(
                    f"The header of {name} leaves column {taken} without a name, and the name it would get, column_{taken}, is "
                    "another column's.",
                    f"name column {taken} in the header row.",
                )
            columns = _columns(header, options, name)
            while True:
                line = header_start + reader.line_num + 1
                fields = next(reader, None)
                if fields is None:
                    return
                counts.rows += 1
                if not any(f.strip() for f in fields):
                    counts.empty_rows += 1
                    continue
                if len(fields) != len(header):
                    how = "fewer" if len(fields) < len(header) else "more"
                    raise QAError(
                        f"{name} line {line}: the row has {how} fields ({len(fields)}) than the header ({len(header)}).",
                        "repair that row (quote fields that hold the delimiter, a quote or a line break).",
                    )
                record = _record(dict(zip(header, fields)), columns, f"{name} line {line}", counts, options.html)
                if record is not None:
                    yield record
        except csv.Error as error:
            if "field larger than field limit" in str(error):  # also a file of no line break read as a table
                raise QAError(
                    f"{name}: a field of the row that starts on line {line} is longer than a document may be "
                    f"({MAX_DOCUMENT_CHARS:,} characters).",
                    "split that text into several rows, or check --format (a file of one long line is no table).",
                ) from error
            raise QAError(
                f"{name}: the row that starts on line {line} is not readable CSV ({error}).",
                'close the quote that opens in that row (a quote inside a quoted field is written twice: ""), or check --format.',
            ) from error


def read_json_lines(binary: IO[bytes], name: str, options: IngestOptions, counts: ReadCounts) -> Iterator[Record]:
    """Records from a JSON lines file, one object per line; the first object's keys are the file's columns.

    A line that is not a JSON object is a QAError naming the line; blank lines are counted in ``counts``.
    """
    encoding = text_encoding(binary, name, options.encoding, "pass a JSON lines file (one JSON object per line), saved as text.")

    def objects(text: IO[str]) -> Iterator[tuple[str, Any]]:
        for number, line in enumerate(text, 1):
            counts.rows += 1
            if not line.strip():
                counts.empty_rows += 1
                continue
            try:
                yield f"{name} line {number}", strict_json.loads(line, constants=True)
            except strict_json.Refused as error:  # which of a repeated key's values was meant?
                raise QAError(f"{name} line {number} is not one document: {error}.", "give each key once.") from None
            except json.JSONDecodeError as error:
                raise QAError(
                    f"{name} line {number} is not JSON ({error.msg}).",
                    "write one JSON object per line (JSON lines), or pass --format squad for a SQuAD file.",
                ) from None
            except RecursionError:  # json's parser recurses: arrays in arrays thousands deep
                raise QAError(
                    f"{name} line {number} nests JSON arrays or objects too deeply to read.",
                    'write one flat JSON object per line, e.g. {"text": "..."}.',
                ) from None

    with decoded(binary, name, encoding) as text:
        yield from _object_records(objects(text), name, options, counts)


def read_json_array(binary: IO[bytes], name: str, options: IngestOptions, counts: ReadCounts) -> Iterator[Record]:
    """Records from a JSON file that is one array of objects (as spreadsheets, pandas' ``to_json(orient="records")`` and
    many APIs export), read whole; the first object's keys are the file's columns, as in JSON lines."""
    encoding = text_encoding(binary, name, options.encoding, "pass a JSON file of one array of objects, saved as text.")
    with decoded(binary, name, encoding) as text:
        try:
            array = strict_json.loads(text.read(), constants=True)
        except strict_json.Refused as error:
            raise QAError(f"{name} holds a document that is not one: {error}.", "give each key of a document once.") from None
        except json.JSONDecodeError as error:
            raise QAError(
                f"{name} is not valid JSON (line {error.lineno}: {error.msg}).", "repair the file, or write it as JSON lines."
            ) from None
        except RecursionError:
            raise QAError(
                f"{name} nests JSON arrays or objects too deeply to read.", 'write an array of flat objects, e.g. [{"text": "..."}].'
            ) from None
    if not isinstance(array, list):
        raise QAError(f"{name} is {json_kind(array)}, not an array of documents.", 'write an array of objects, e.g. [{"text": "..."}].')
    counts.rows += len(array)
    yield from _object_records(((f"{name} [{position}]", values) for position, values in enumerate(array)), name, options, counts)


def _object_records(objects: Iterable[tuple[str, Any]], name: str, options: IngestOptions, counts: ReadCounts) -> Iterator[Record]:
    """Records of JSON objects, each with where it was read; the first object's keys are the columns."""
    columns = None
    for where, values in objects:
        if not isinstance(values, dict):
            raise QAError(f"{where} is {json_kind(values)}, not an object.", 'write each document as a JSON object, e.g. {"text": "..."}.')
        _check_column_count(len(values), where)
        if columns is None:
            columns = _columns(list(values), options, name)
        if columns[0] not in values:  # a misspelt key, not an empty text: the document would be skipped unseen
            raise QAError(
                f"{where} has no '{columns[0]}' key for its text; its keys are: {', '.join(values) or '(none)'}.",
                f"give every document its text under '{columns[0]}', or pass --text-column.",
            )
        record = _record(values, columns, where, counts, options.html)
        if record is not None:
            yield record
