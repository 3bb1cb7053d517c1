"""What every reader yields: one ``Record`` per source document, and the counts of what it skipped.

A record's id is the ``--id-column`` value, or (by default) a hash of its text, item and metadata,
so that the same row read twice is the same document. Its *content hash* covers everything that
ends up in the index (text, item, metadata): an incremental run re-embeds a document exactly when
that hash changes.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Container
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from qa_system.errors import QAError, check_text, check_type

# A source: a path (file or folder), or an open binary file (an upload) with a name to tell its kind.
Source = str | Path | IO[bytes]
# Longest text a single document may have (a 10 MB one becomes about 9,000 passages); a longer one is
# refused with the limit in the message, before anything is split or embedded.
MAX_DOCUMENT_CHARS = 32_000_000
# How documents are split into passages unless told (or unless their collection was split otherwise).
PASSAGE_WORDS, PASSAGE_OVERLAP = 200, 40
# Metadata keys that the index itself uses: a column of that name is kept as "<name>_column".
RESERVED_META = ("document_id", "content_hash", "source_offset", "passage", "passages", "item_id", "id", "content", "embedding", "score")
# What the system itself adds to a document's metadata besides those: not a column of the user's source.
SYSTEM_META = (*RESERVED_META, "split", "domain", "review_id", "retriever_scores", "retrieval_score", "answerability", "source_index")


def user_metadata(meta: dict) -> dict:
    """A document's metadata from its source's own columns (rating, date, ...), without what the index adds."""
    return {key: value for key, value in meta.items() if key not in SYSTEM_META}


@dataclass(frozen=True)
class IngestOptions:
    """How to read a source: its format (None = from the file name) and which columns mean what."""

    format: str | None = None
    text_column: str | None = None  # None: "text", or "review" when there is no "text"
    id_column: str | None = None  # None: a hash of the content
    item_column: str | None = None  # None: no item (tables), the title (SQuAD), the file (folders)
    encoding: str = "utf-8"
    html: bool = False  # a table's text column holds HTML: its text is indexed (``markup.html_text``)
    passage_words: int | None = None  # None: as the collection was split, else PASSAGE_WORDS
    passage_overlap: int | None = None  # None: as the collection was split, else PASSAGE_OVERLAP

    def __post_init__(self) -> None:
        # From Python, a list or a number here would fail deep in a reader, or be taken as another option.
        for name in ("format", "text_column", "id_column", "item_column"):
            check_type(getattr(self, name), name, str, "a str or None", optional=True)
        check_type(self.encoding, "encoding", str, "the name of a text encoding (a str such as 'cp1252')")
        check_type(self.html, "html", bool, "True or False")
        for name in ("passage_words", "passage_overlap"):
            check_type(getattr(self, name), name, int, "a whole number or None", optional=True)

    def as_dict(self) -> dict:
        """The options as JSON-ready data (an index manifest keeps them)."""
        return asdict(self)


@dataclass
class Record:
    """One source document as a reader yields it: its text, item, metadata and where it came from.

    ``where`` ("reviews.csv line 12") names it in messages; ``id`` None means the content hash's id.
    """

    text: str
    item_id: str | None
    meta: dict[str, str]
    where: str  # "reviews.csv line 12": for messages
    id: str | None = None  # None: the content hash's id

    def __post_init__(self) -> None:
        # One product whatever the Unicode form its id was typed in ("café" with one code point for "é" or two): the
        # product list shows it once, and asking by either form reads all its documents.
        if self.item_id is not None:
            self.item_id = unicodedata.normalize("NFC", self.item_id)

    def checked(self) -> Record:
        """The record, once all its text is known to be UTF-8: JSON can escape half a character ("\\ud800"),
        which no tokenizer, store or file takes (it was a traceback at the content hash)."""
        try:
            for what, value in (
                ("text", self.text),
                ("id", self.id),
                ("item", self.item_id),
                *(("metadata", f"{k}{v}") for k, v in self.meta.items()),
            ):
                check_text(value, f"the {what} of {self.where}")  # "the ...": its capital never alters a file name
        except QAError as error:
            raise QAError(
                error.problem,
                "write the file as UTF-8 text, without \\ud800-\\udfff escapes (half a character), or leave that document out.",
            ) from None
        return self

    def content_hash(self) -> str:
        """A digest of everything the index keeps of the record (text, item, metadata): a change means re-embedding."""
        payload = json.dumps([self.text, self.item_id, sorted(self.meta.items())], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


@dataclass
class ReadCounts:
    """What a reader saw besides the records it yielded."""

    rows: int = 0
    empty_rows: int = 0
    empty_texts: int = 0
    html_texts: int = 0  # texts that hold HTML tags, read as written (without ``IngestOptions.html``)
    files_skipped: list[str] = field(default_factory=list)  # files of kinds no converter reads
    files_unreadable: list[str] = field(default_factory=list)  # "name: why" of a folder's files that could not be read
    links_skipped: list[str] = field(default_factory=list)  # links that lead outside the folder
    sidecars_unused: list[str] = field(default_factory=list)  # <name>.meta.json files beside no document <name>


def meta_key(name: str) -> str:
    """The metadata key of a source column: its name, ``<name>_column`` when the index itself uses that name, and
    ``unnamed_column`` for a JSON key of no name ("meta." is no field a filter can name)."""
    if not name.strip():
        return "unnamed_column"
    return f"{name}_column" if name in RESERVED_META else name


def metadata(values: dict, left_out: Container[str], where: str) -> dict[str, str]:
    """The metadata of a row (or a sidecar): every value not empty, under its ``meta_key``, but the fields ``left_out``;
    a QAError naming ``where`` when two fields would be kept under one key ("id" and "id_column"), one losing its values."""
    meta: dict[str, str] = {}
    names: dict[str, str] = {}
    for name, value in values.items():
        if name in left_out:
            continue
        key = meta_key(name)
        if names.setdefault(key, name) != name:
            raise QAError(
                f"{where}: the fields '{names[key]}' and '{name}' would both be kept as the metadata '{key}'.", "rename one of them."
            )
        if value not in (None, ""):
            meta[key] = meta_value(value)
    return meta


def meta_value(value) -> str:
    """Metadata as text: one type per field in every store (a number in one row and "n/a" in the next would break Elasticsearch's mapping)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def check_text_length(text: str, where: str) -> str:
    """``text``, once known to be at most ``MAX_DOCUMENT_CHARS`` long; else a QAError naming ``where``."""
    if len(text) > MAX_DOCUMENT_CHARS:
        raise QAError(
            f"{where}: the text is {len(text):,} characters long, more than the {MAX_DOCUMENT_CHARS:,} a document may have.",
            "split it into several documents (rows or files) first.",
        )
    return text
