"""Any source -> a named collection, incrementally: ``ingest(settings, source, collection)``.

The source (a path, or an open binary file such as an upload) is read one record at a time; every
``BATCH`` records, the new and changed documents are split into passages, embedded and appended to
a staging file, so memory is bounded by a batch, not by the source. A document is *unchanged* when
its content hash (text, item, metadata) equals the saved one: it is neither split nor embedded
again. Only when the whole source has been read does the commit (``backends.commit``) swap in the
collection's next version; any error before that leaves the saved collection exactly as it was.

``sync`` deletes the documents that are gone from the source (else they stay); a run that would
keep fewer than ``MIN_KEPT_SHARE`` of the saved documents needs ``force``, as a re-index does.
When the encoder, the passage length, the choice of vectors or a metadata column's type changed,
every document is processed again from the source, so the source must hold them all (or ``sync``
drops the others): the report says why.
"""

from __future__ import annotations

import io
import json
import os
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from haystack import Document

from qa_system.config import INPUT_FORMATS, Settings, check_settings
from qa_system.disk_cache import held_if_free, remove_unheld_locks, taking_turns
from qa_system.errors import QAError, check_count, check_type, described, shown
from qa_system.ingestion.backends import commit, saved_passages, server_answering
from qa_system.ingestion.collections import check_collection_name, check_not_a_domain, check_own_collection_name, ingestion_lock
from qa_system.ingestion.freshness import recorded_sources, source_fingerprint
from qa_system.ingestion.indexing import MIN_KEPT_SHARE, embedding_backend, embeddings_match, settings_embedder
from qa_system.ingestion.splitting import PassageSplitter, passage_id
from qa_system.language import other_language
from qa_system.model_files import model_fingerprint
from qa_system.sources.columns import DecimalCommas, StrayValues, column_types, typed_meta
from qa_system.sources.files import SUFFIXES, check_folder_encodings, read_files, sidecar_types
from qa_system.sources.records import PASSAGE_OVERLAP, PASSAGE_WORDS, RESERVED_META, IngestOptions, ReadCounts, Record, Source, meta_key
from qa_system.sources.squad_documents import read_squad_documents
from qa_system.sources.tables import read_json_array, read_json_lines, read_table
from qa_system.stores import (
    Index,
    TemporaryOwner,
    opensearch_client,
    opensearch_has_knn,
    remove_leftover_indices,
    saved_manifest,
    temporary_owner,
    temporary_prefix,
)
from qa_system.stores.memory import document_line

BATCH = 256  # source documents per split / embed / stage step
EMBED_CHUNK = 256  # passages embedded between two progress reports: a batch of reviews in one call, a GPU's batch at least

_SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", **dict.fromkeys(SUFFIXES, "files")}


@dataclass(frozen=True)
class IngestProgress:
    """How far an ingestion run is, as handed to its progress callback."""

    documents: int  # source documents read so far
    embedded: int  # passages embedded so far
    fraction: float | None  # share of the source read, when known


ProgressCallback = Callable[[IngestProgress], None]


@dataclass
class IngestReport:
    """What an ingestion run did: documents read, added, changed, unchanged and deleted, passages embedded, what it skipped, and its time."""

    collection: str
    store: str
    source: str
    read: int = 0  # documents read from the source (after skipping empty and duplicate ones)
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    kept_missing: int = 0  # gone from the source and kept (no sync)
    embedded: int = 0  # passages embedded by this run
    embedded_documents: int = 0  # the documents they belong to
    staged: int = 0  # passages written by this run
    documents: int = 0  # in the collection after the run
    passages: int = 0
    empty_rows: int = 0
    empty_texts: int = 0
    duplicates: int = 0
    html_texts: int = 0  # texts that hold HTML tags, indexed as written (``IngestOptions.html`` reads their text)
    other_languages: dict[str, int] = field(default_factory=dict)  # documents read that look German, Spanish, ...
    files_skipped: list[str] = field(default_factory=list)
    files_unreadable: list[str] = field(default_factory=list)  # "name: why", each left out of a folder
    links_skipped: list[str] = field(default_factory=list)  # links that lead outside the folder, not followed
    sidecars_unused: list[str] = field(default_factory=list)  # metadata files beside no document of their name
    seconds: float = 0.0
    embedding_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def documents_per_s(self) -> float:
        """Source documents read per second of the run."""
        return self.read / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        """The report as JSON-ready data, the reading speed included."""
        return {**asdict(self), "documents_per_s": self.documents_per_s}

    def summary(self) -> list[str]:
        """The report for people, a line each: the collection, what changed, the speed, and what was skipped or left out."""
        lines = [
            f"Collection '{self.collection}' ({self.store}): {_files(self.documents, 'document')} in {_files(self.passages, 'passage')}.",
            f"  {self.read} read from {self.source}: {self.added} added, {self.changed} changed, {self.unchanged} unchanged; "
            f"{self.deleted} deleted, {self.kept_missing} no longer in the source but kept"
            + ("" if not self.kept_missing else " (--sync deletes them)")
            + ".",
            f"  {_files(self.embedded_documents, 'document')} embedded ({_files(self.embedded, 'passage')}); {self.seconds:.1f} s, "
            f"{self.documents_per_s:,.1f} documents/s" + (f" (embedding {self.embedding_s:.1f} s)" if self.embedding_s else "") + ".",
        ]
        skipped = [
            f"{n} {what}"
            for n, what in ((self.empty_rows, "empty rows"), (self.empty_texts, "empty texts"), (self.duplicates, "duplicate documents"))
            if n
        ]
        if skipped:
            lines.append(f"  skipped: {', '.join(skipped)}.")
        if self.files_skipped:
            lines.append(f"  {_files(len(self.files_skipped))} of other kinds left out (e.g. {self.files_skipped[0]}).")
        if self.links_skipped:
            lines.append(f"  {len(self.links_skipped)} links to outside the folder not followed: {_first(self.links_skipped)}.")
        if self.sidecars_unused:
            lines.append(
                f"  {_files(len(self.sidecars_unused), 'metadata file')} beside no document of their name, not read: {_first(self.sidecars_unused)} "
                "(a document's is named after its whole file name: manual.pdf.meta.json)."
            )
        if self.files_unreadable:
            lines.append(f"  {_files(len(self.files_unreadable))} could not be read and were left out:")
            lines += [f"    {entry}" for entry in self.files_unreadable[:LISTED]] + [
                f"    ... and {len(self.files_unreadable) - LISTED} more."
            ] * (len(self.files_unreadable) > LISTED)
        if self.html_texts:
            lines.append(
                f"  {self.html_texts} {'text holds' if self.html_texts == 1 else 'texts hold'} HTML tags (<p>, <br/>, ...), indexed "
                "and shown as written: --html indexes the text a browser shows instead."
            )
        if self.other_languages:
            languages = sorted(self.other_languages.items(), key=lambda kv: -kv[1])
            count = sum(self.other_languages.values())
            lines.append(
                f"  {_files(count, 'document')} {'seems' if count == 1 else 'seem'} to be in another language than English "
                f"({', '.join(f'{n} {language}' for language, n in languages)}): the reader and the encoder were trained on English, "
                "so answers from them are less often right than their chances say."
            )
        lines += [f"  note: {note}" for note in self.notes]
        return lines


LISTED = 20  # files named one by one in a report; the rest are counted


def _files(count: int, noun: str = "file") -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _first(names: list[str], shown: int = LISTED) -> str:
    return ", ".join(names[:shown]) + (f", ... ({len(names) - shown} more)" if len(names) > shown else "")


def detect_format(name: str, binary: IO[bytes] | None, given: str | None) -> str:
    """csv | tsv | jsonl | json | squad | files, from ``given`` or the file's name (a .json file: an array of documents,
    SQuAD, or JSON lines)."""
    if given is not None:
        if given not in INPUT_FORMATS:
            raise QAError(f"Unknown format '{given}'.", f"use one of: {', '.join(INPUT_FORMATS)}.")
        return given
    suffix = Path(name).suffix.lower()
    if suffix == ".json" and binary is not None:
        start = binary.tell()
        first = binary.readline(1 << 20)
        binary.seek(start)
        if first.decode("utf-8-sig", "replace").lstrip().startswith("["):
            return "json"  # an array of documents
        try:  # one object per line without "data": JSON lines; a SQuAD file is one object (usually many lines)
            line = json.loads(first.decode("utf-8-sig"))
            return "jsonl" if isinstance(line, dict) and "data" not in line else "squad"
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # the SQuAD reader names what is wrong
            return "squad"
    if suffix not in _SUFFIX_FORMATS:
        raise QAError(f"Cannot tell the format of {name} from its name.", f"pass --format ({', '.join(INPUT_FORMATS)}).")
    return _SUFFIX_FORMATS[suffix]


def _records(fmt: str, binary: IO[bytes], name: str, options: IngestOptions, counts: ReadCounts) -> Iterator[Record]:
    if fmt in ("csv", "tsv"):
        return read_table(binary, name, options, counts, tsv=fmt == "tsv")
    if fmt == "jsonl":
        return read_json_lines(binary, name, options, counts)
    if fmt == "json":
        return read_json_array(binary, name, options, counts)
    return read_squad_documents(binary, name, options, counts)


@dataclass
class _Opened:
    records: Iterator[Record]
    counts: ReadCounts
    name: str
    format: str
    fraction: Callable[[], float | None]
    state: dict  # what the manifest records about the source
    types: dict = field(default_factory=dict)  # metadata column -> integer | number | date | text (tables, JSON, sidecars)


def _column_types(fmt: str, binary: IO[bytes], name: str, options: IngestOptions) -> dict[str, str]:
    """The types of a table's (or JSON lines file's) metadata columns, from a first read of the whole file (see ``sources.columns``).

    Read before any document is staged, so that a column has one type in every document; the
    file's errors are found here too, before any work."""
    if fmt not in ("csv", "tsv", "jsonl", "json"):
        return {}
    start = binary.tell()
    try:
        return column_types(record.meta for record in _records(fmt, binary, name, options, ReadCounts()))
    finally:
        binary.seek(start)


@contextmanager
def open_source(source: Source, options: IngestOptions, name: str | None = None) -> Iterator[_Opened]:
    """The records of a path (file or folder) or of an open binary file (``name``: its file name, for the format)."""
    counts = ReadCounts()
    if isinstance(source, (str, os.PathLike)):
        if isinstance(source, str) and not source.strip():  # Path("") is the working directory: every file under it would be read
            raise QAError("The input path is empty.", "pass an existing file or folder to --input.")
        path = Path(source).expanduser()
        if not path.exists():
            raise QAError(f"{path} does not exist.", "pass an existing file or folder to --input.")
        if not path.is_file() and not path.is_dir():  # opening a named pipe waits for a writer: forever
            raise QAError(
                f"{path} is not a regular file (a named pipe, socket or device?).",
                "save the data to a file and pass that file to --input, or pipe it to --input - with --format.",
            )
        if path.is_dir() and options.format not in (None, "files"):
            raise QAError(
                f"{path} is a folder, and --format {options.format} reads one file.",
                "pass the file itself, or leave out --format to read the folder's documents.",
            )
        if path.is_dir() or options.format == "files" or (options.format is None and path.suffix.lower() in SUFFIXES):
            _check_no_table_columns(path, options)
            if path.is_dir():
                check_folder_encodings(path, options.encoding)
            yield _Opened(
                read_files(path, options, counts),
                counts,
                str(path),
                "files",
                lambda: None,
                {"source": str(path), "path": str(path.resolve()), "source_fingerprint": source_fingerprint(path)},
                sidecar_types(path, options),
            )
            return
        with path.open("rb") as binary:
            fmt = detect_format(path.name, binary, options.format)
            size = path.stat().st_size
            state = {"source": str(path), "path": str(path.resolve()), "source_fingerprint": source_fingerprint(path)}
            types = _column_types(fmt, binary, str(path), options)
            yield _Opened(
                _records(fmt, binary, str(path), options, counts),
                counts,
                str(path),
                fmt,
                lambda: binary.tell() / size if size else None,
                state,
                types,
            )
        return
    binary = source
    name = name or Path(str(getattr(source, "name", "") or "upload")).name
    if not binary.seekable():
        binary = io.BytesIO(binary.read())
    fmt = detect_format(name, binary, options.format)
    if fmt == "files":
        raise QAError(
            f"{name}: documents (.txt, .md, .html, .pdf) are read from a path, not an upload.",
            "pass the file or its folder as --input, or upload a CSV / JSON lines file.",
        )
    start, size = binary.tell(), binary.seek(0, os.SEEK_END)
    binary.seek(start)
    types = _column_types(fmt, binary, name, options)
    yield _Opened(
        _records(fmt, binary, name, options, counts),
        counts,
        name,
        fmt,
        lambda: binary.tell() / size if size else None,
        {"source": name},
        types,
    )


def _check_no_table_columns(path: Path, options: IngestOptions) -> None:
    """Documents read from files have no columns: a text or id column asked for would be ignored, and a table saved as
    .txt (Excel's "Text (Tab delimited)") indexed as one document."""
    for flag, column in (("--text-column", options.text_column), ("--id-column", options.id_column)):
        if column is not None:
            raise QAError(
                f"{path} is read as documents (.txt, .md, .html, .pdf files: one document each), which have no {flag}.",
                f"for a table saved as .txt, pass --format tsv (or rename it .tsv); else leave out {flag}.",
            )


@dataclass
class _Saved:
    """The saved collection: its manifest, and per document (content hash, item, passage count).

    ``older_ids``: passages saved before document ids were escaped in passage ids ('%' or '#' in the
    document id), passage id -> document id; such a document is saved again under its current ids
    whenever the source holds it (``_Run._add``).
    """

    manifest: dict | None
    documents: dict[str, tuple[str | None, str | None, int]]
    older_ids: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.older_by_document: dict[str, list[str]] = {}
        for saved_id, document_id in self.older_ids.items():
            self.older_by_document.setdefault(document_id, []).append(saved_id)

    def passage_ids(self, document_id: str) -> list[str]:
        """The ids of the document's saved passages (never those of another document's)."""
        count = self.documents[document_id][2]
        current = [passage_id(document_id, n, count) for n in range(count)]
        return [i for i in current if i not in self.older_ids] + self.older_by_document.get(document_id, [])

    def saved_under_older_ids(self, document_id: str) -> bool:
        return document_id in self.older_by_document


def _saved(settings: Settings, collection: str) -> _Saved:
    manifest = saved_manifest(settings, collection)
    if manifest is not None and manifest.get("domains"):
        raise QAError(
            f"'{collection}' is the SubjQA collection that `qa-system index --domain` builds.", "give your data another --collection name."
        )
    documents, older_ids = {}, {}
    if manifest is not None:
        try:
            for saved_id, meta in saved_passages(settings, collection):
                document_id = meta.get("document_id", saved_id)
                count = int(meta.get("passages", 1))
                documents.setdefault(document_id, (meta.get("content_hash"), meta.get("item_id"), count))
                if ("%" in saved_id or "#" in saved_id) and saved_id != passage_id(document_id, int(meta.get("passage", 0)), count):
                    older_ids[saved_id] = document_id
        except (ValueError, KeyError, TypeError) as error:  # a truncated or foreign file (JSONDecodeError is a ValueError)
            raise QAError(
                f"The saved collection '{collection}' is unreadable ({error}).",
                f"delete it (`qa-system collections --delete {collection}`) and index the source again.",
            ) from error
    return _Saved(manifest, documents, older_ids)


def _rebuild_reasons(saved: _Saved, settings: Settings, embed: bool, splitter: dict) -> list[tuple[str, str]]:
    """Why every document must be processed again, as (cause, effect) pairs (none: only new and changed ones; a collection
    made empty, over HTTP, has none to process again)."""
    if saved.manifest is None or not saved.documents:
        return []
    reasons = []
    had_vectors = saved.manifest.get("embedding_model") is not None
    if embed and not had_vectors:
        reasons.append(("the collection had no vectors", "every document was embedded"))
    elif not embed and had_vectors:
        reasons.append(("indexed without embeddings", "the collection's vectors were dropped"))
    elif embed and not embeddings_match(Index(settings.store, "", None, saved.manifest), settings, backend=False):
        reasons.append(
            (
                f"the encoder changed ({saved.manifest.get('embedding_model')} -> {settings.embedding_model})",
                "every document was re-embedded",
            )
        )
    elif embed and not embeddings_match(Index(settings.store, "", None, saved.manifest), settings):
        reasons.append(
            (
                f"the embedding backend changed ({embedding_backend(saved.manifest)} -> {settings_embedder(settings).backend})",
                "every document was re-embedded",
            )
        )
    if saved.manifest.get("splitter") != splitter:
        reasons.append((f"the passage settings changed ({saved.manifest.get('splitter')} -> {splitter})", "every document was split again"))
    return reasons


def ingest(
    settings: Settings,
    source: Source,
    collection: str,
    options: IngestOptions = IngestOptions(),
    *,
    name: str | None = None,
    embed: bool = True,
    sync: bool = False,
    force: bool = False,
    progress: bool = True,
    on_progress: ProgressCallback | None = None,
) -> IngestReport:
    """Read ``source`` into the collection ``collection`` (created, or updated incrementally) and report what changed.

    ``source``: a CSV / TSV / JSON lines / JSON array / SQuAD JSON file, a folder or file of .txt / .md / .html /
    .pdf documents, or an open binary file (an upload; ``name`` gives its file name). ``on_progress``
    hears an ``IngestProgress`` after every batch and every chunk of passages embedded (the search page's progress bar).
    """
    check_settings(settings)
    _check_source_type(source)
    check_type(options, "options", IngestOptions, "a qa_system.IngestOptions")
    check_type(name, "name", str, "a file name (str) or None", optional=True)
    for flag, value in (("embed", embed), ("sync", sync), ("force", force), ("progress", progress)):
        check_type(value, flag, bool, "True or False")
    if on_progress is not None and not callable(on_progress):
        raise QAError(f"on_progress must be a function or None, not {described(on_progress)}.", "pass a function of one IngestProgress.")
    lock = ingestion_lock(settings, check_own_collection_name(collection))
    # Ingestions into one collection take turns: each reads what the collection holds when it starts
    # (changes, counts, the manifest), so two at once would each commit from the same old state and the
    # last would undo part of the first. The lock covers the processes of one machine sharing QA_HOME
    # (for Elasticsearch / OpenSearch, not other machines writing to the server).
    with (
        taking_turns(lock, f"Waiting for another ingestion into '{collection}' to finish.", remove=True),
        server_answering(settings, collection),
    ):
        staging_dir = settings.index_dir / "staging"
        staging_dir.mkdir(parents=True, exist_ok=True)
        cleaned = _remove_what_killed_runs_left(staging_dir, lock)
        if settings.store == "opensearch":  # listed as no collection meanwhile, but they hold disk space on the server
            left = remove_leftover_indices(settings, collection)
            cleaned += [f"removed the search server index {i}, which an unfinished ingestion left." for i in left]
        run = _Run(settings, collection, options, embed, on_progress, notes=cleaned, force=force, sync=sync)
        # Named after the lock that guards it: the file is a live run's exactly while that lock is held.
        fd, staging_name = tempfile.mkstemp(prefix=temporary_prefix(lock.stem), suffix=".jsonl", dir=staging_dir)
        staging = Path(staging_name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as staged, open_source(source, options, name) as opened:
                run.read(opened, staged, progress)
            return run.commit(staging, opened, sync, force)
        finally:
            staging.unlink(missing_ok=True)


def _check_source_type(source: object) -> None:
    """A source is a path or an open binary file: anything else would fail deep in a reader, or read the wrong thing."""
    if isinstance(source, io.TextIOBase):
        raise QAError(
            f"source must be a path or a file opened in binary mode, not a file opened as text ({shown(getattr(source, 'name', ''))}).",
            "open it with open(path, 'rb'), or pass its path.",
        )
    if type(source).__name__ == "DataFrame":
        raise QAError(
            "source must be a path or an open binary file, not a DataFrame.",
            "write it as a table first: df.to_csv('reviews.csv', index=False), or pass io.BytesIO(df.to_csv(index=False).encode()) "
            "with name='reviews.csv'.",
        )
    if not isinstance(source, (str, os.PathLike)) and not callable(getattr(source, "read", None)):
        raise QAError(
            f"source must be a path (str or pathlib.Path) or an open binary file, not {described(source)}.",
            "pass one file or folder per call (a folder is read whole), e.g. ingest(settings, 'data/reviews.csv', 'mine').",
        )
    if isinstance(source, (str, os.PathLike)) and not os.fspath(source).strip():  # Path("") is the current folder
        raise QAError("The input path is empty.", "name the file or folder to index (--input PATH); a variable left unset gives ''.")


def check_source(
    source: Source,
    options: IngestOptions = IngestOptions(),
    name: str | None = None,
    into: tuple[str, dict | None] | None = None,
    sync: bool = False,
    force: bool = False,
) -> int:
    """Read ``source`` through without indexing anything: how many documents it holds, or the QAError that
    `index --input` would give for it (a missing column, a bad row, a repeated id, no documents at all; ``into``, the
    collection's name and saved manifest: the ids it takes from a column that the source has, left unread, a
    metadata column whose type changed, which means processing every document again, in a source that holds fewer
    documents than the collection, unless ``sync``, and with ``sync`` a source that would leave fewer than
    ``MIN_KEPT_SHARE`` of them, unless ``force``)."""
    seen: dict[str, str] = {}
    with open_source(source, options, name) as opened:
        if into is not None:
            _check_same_ids(into[1], into[0], options, opened)
        for record in opened.records:
            record.checked()
            if record.id is not None and record.id in seen:
                raise QAError(
                    f"{record.where}: the id '{record.id}' was already used by {seen[record.id]}.", "give every document a unique id."
                )
            seen[record.id or record.content_hash()] = record.where
    if not seen:
        raise QAError(f"{opened.name} holds no documents.", "check the file (and its text column and format).")
    if into is not None:
        collection, manifest = into
        _, changed = changed_types(manifest, opened.types, opened.format)
        held = (manifest or {}).get("source_documents") or (manifest or {}).get("documents") or 0
        if not sync and changed and len(seen) < held:
            raise reprocessing_refused(collection, retyped_cause(changed), f"{opened.name} holds {len(seen)} of its {held} documents", True)
        if sync and not force and held and len(seen) < MIN_KEPT_SHARE * held:
            raise shrink_refused(collection, len(seen), held)
    return len(seen)


def shrink_refused(collection: str, left: int, held: int, unread: str = "") -> QAError:
    """The refusal of a run that would leave ``left`` of the ``held`` documents of ``collection`` (under ``MIN_KEPT_SHARE``)."""
    return QAError(
        f"The new data would leave {left} documents where collection '{collection}' holds {held}{unread}; it was left as it was.",
        "check the source (a truncated file?), or pass --force to apply it anyway.",
    )


def changed_types(manifest: dict | None, found: dict[str, str], source_format: str) -> tuple[dict[str, str], list[str]]:
    """The saved collection's metadata types (of ``manifest``; None: a new collection), and each column of ``found`` whose
    type changed ("rating: integer -> text")."""
    saved = (manifest or {}).get("meta_types")
    untyped = saved is None or (source_format == "files" and "file" not in saved and found)  # before sidecars were typed
    if manifest is not None and untyped:  # written before columns were typed: all text
        return {}, [f"{column}: text -> {kind}" for column, kind in found.items() if kind != "text"]
    saved = saved or {}
    return saved, [f"{column}: {saved[column]} -> {kind}" for column, kind in found.items() if column in saved and saved[column] != kind]


def retyped_cause(changed: list[str]) -> str:
    """Why every document is processed again when the columns ``changed`` (``changed_types``) changed type."""
    return f"the types of metadata columns changed ({', '.join(changed)})"


def reprocessing_refused(collection: str, causes: str, shortfall: str, retyped: bool) -> QAError:
    """The refusal of a run that must process every document of ``collection`` again (``causes``) from a source that
    does not hold them all (``shortfall``); ``retyped``: a column's type changed, which other values undo."""
    fix = "index a source that holds all of them, or pass --sync to keep only this source's documents"
    return QAError(
        f"Every document of collection '{collection}' must be processed again ({causes}), but {shortfall}; it was left as it was.",
        f"{fix} (or give the columns named values of the types they had)." if retyped else f"{fix}.",
    )


def _check_same_ids(manifest: dict | None, collection: str, options: IngestOptions, opened: _Opened) -> None:
    """A source that has the column the collection takes its document ids from (``--id-column``), read without it or
    with another id column, would add each of its rows again, under another id: refused (the other way round, see
    ``_Run._check_not_held_by_content``)."""
    column = (((manifest or {}).get("input") or {}).get("options") or {}).get("id_column")
    if not column or options.id_column == column or meta_key(column) not in opened.types:
        return
    read = "without --id-column" if options.id_column is None else f"with --id-column {options.id_column}"
    raise QAError(
        f"Collection '{collection}' takes its document ids from the column '{column}', which {opened.name} has: "
        f"read {read}, each of its rows would be added again as a new document; it was left as it was.",
        f"pass --id-column {column}"
        + (", or another column of unique ids." if options.id_column is None else " (or index into a new collection to use other ids)."),
    )


# Column names that say they hold a document's id.
ID_COLUMN_NAMES = frozenset({"id", "doc_id", "docid", "document_id", "uuid"})


def _id_like_column(types: dict[str, str], options: IngestOptions, manifest: dict | None) -> str | None:
    """A column of the source named as its documents' ids ("id", "document_id", ...) while they take their ids from their
    text: the first indexing of a collection without --id-column (one holding documents keeps how it takes ids)."""
    if options.id_column is not None or (manifest or {}).get("source_documents"):
        return None
    for key in types:
        column = key.removesuffix("_column") if key.endswith("_column") and key.removesuffix("_column") in RESERVED_META else key
        if column.lower() in ID_COLUMN_NAMES:
            return column
    return None


def _remove_what_killed_runs_left(staging_dir: Path, own_lock: Path) -> list[str]:
    """Remove the lock files no run holds and the staging files of killed ingestions (into any collection):
    a line for each staging file (they can be large) and one for the lock files."""
    lines = []
    locks = remove_unheld_locks(own_lock.parent)
    if locks:
        lines.append(f"removed {len(locks)} lock file{'s' * (len(locks) > 1)} that no process held ({', '.join(p.name for p in locks)}).")
    for path in sorted(staging_dir.glob(".*")):
        owner = temporary_owner(path.name)
        if owner is None or not _staging_file_dead(owner, own_lock):
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:  # its run ended meanwhile
            continue
        lines.append(f"removed the staging file of a killed ingestion: {path.name} ({size / 1e6:.1f} MB).")
    return lines


def _staging_file_dead(owner: TemporaryOwner, own_lock: Path) -> bool:
    """A staging file is written only while the lock it is named after is held, and the kernel drops a lock
    when its process dies: one whose lock is free is dead, whatever process ids it carries (another
    container sharing QA_HOME has other ones). The dotted form of older releases goes by its process id."""
    if owner.dotted:
        return not owner.alive()
    lock = own_lock.with_name(f"{owner.name}.lock")
    if lock == own_lock:
        return True  # held by this run, which has made no staging file yet
    with held_if_free(lock) as free:
        if free:
            lock.unlink(missing_ok=True)  # (re)made by this look, held: see remove_unheld_locks
        return free


class _Run:
    """One ingestion: the source read batch by batch into a staging file, then the commit."""

    def __init__(
        self,
        settings: Settings,
        collection: str,
        options: IngestOptions,
        embed: bool,
        on_progress: ProgressCallback | None,
        notes: list[str],
        force: bool = False,
        sync: bool = False,
    ):
        self.started, self.notes, self.force, self.sync = time.perf_counter(), notes, force, sync
        self.settings, self.collection, self.options, self.on_progress = settings, check_collection_name(collection), options, on_progress
        self.saved = _saved(settings, collection)
        if self.saved.manifest is None:
            check_not_a_domain(settings, collection)
        self.splitter_state = self._splitter_state(options)
        self.vector_search = None
        if settings.store == "opensearch":
            # Without the k-NN plugin the index holds no vectors: BM25 only (as `index --domain` does).
            self.vector_search = opensearch_has_knn(opensearch_client(settings))
            embed = embed and self.vector_search
        if settings.store == "faiss" and not embed:
            raise QAError(
                "A FAISS collection holds vectors, so it cannot be built with --no-embed.", "drop --no-embed, or use --store memory."
            )
        self.embed = embed
        self.reasons = _rebuild_reasons(self.saved, settings, embed, self.splitter_state)
        self.rebuild = bool(self.reasons)
        self.splitter = PassageSplitter(**self.splitter_state)
        self.embedder = None  # loaded when the first batch needs it: an unchanged source loads no model
        self.seen: dict[str, str] = {}  # document id -> where it was read (for the duplicate-id message)
        self.staged_documents: set[str] = set()
        self.taken_ids: dict[str, str] = {}  # staged passage id -> its document, where a document saved under older ids has that id
        self.items: Counter = Counter()
        self.batch: list[tuple[str, str, dict]] = []  # (document id, text, metadata) of new and changed documents
        self.to_embed = self.split_documents = 0  # passages split for embedding so far (report.embedded of them are), of how many documents
        # A document read from a file is named by its path in the folder given: the file each one was read from
        # tells another folder's file of the same name apart from a new version of it.
        self.files_root: Path | None = None
        self.files: dict[str, str] = {}  # document id -> the file this run read it from
        self.dropped: set[str] = set()

    def _splitter_state(self, options: IngestOptions) -> dict[str, int]:
        """The passage settings: as given, else as the collection is split (a run that leaves them unsaid would split
        every document again), else the defaults."""
        saved = (self.saved.manifest or {}).get("splitter") or {}
        words = options.passage_words if options.passage_words is not None else saved.get("words", PASSAGE_WORDS)
        overlap = options.passage_overlap if options.passage_overlap is not None else saved.get("overlap", PASSAGE_OVERLAP)
        words = check_count(words, "passage_words", 10)
        state = {"words": words, "overlap": check_count(overlap, "passage_overlap", 0, words - 1)}
        kept = [
            f"{what} {state[key]}"
            for key, what in (("words", "words"), ("overlap", "shared"))
            if getattr(options, f"passage_{key}") is None
        ]
        if kept and saved and state != {"words": PASSAGE_WORDS, "overlap": PASSAGE_OVERLAP}:
            self.notes.append(f"split into passages as the collection is: {', '.join(kept)}")
        return state

    def read(self, opened: _Opened, staged: IO[str], progress: bool) -> None:
        from qa_system.progress import Progress

        self._type_columns(opened.types, opened.format)
        self.decimal_commas = DecimalCommas(opened.types)
        self.stray_values = StrayValues(opened.types)
        _check_same_ids(self.saved.manifest, self.collection, self.options, opened)
        if opened.format == "files":
            self.files_root = Path(opened.state["path"])
        self.report = report = IngestReport(
            self.collection,
            self.settings.store,
            opened.name,
            notes=[*self.notes, *(f"{cause}: {effect}" for cause, effect in self.reasons)],
        )
        if self.vector_search is False:
            report.notes.append("no vectors: the server has no k-NN plugin, so only --retriever bm25 runs on this collection")
        if (id_like := _id_like_column(opened.types, self.options, self.saved.manifest)) is not None:
            report.notes.append(
                f"column '{id_like}' looks like the documents' ids, but it is kept as metadata and documents are told apart by "
                "their text: a row edited later is added as a new document beside the old one. To update documents by it, "
                f"index with --id-column {id_like} (the API's id_column={id_like})."
            )

        def done() -> float | None:
            """The share of the work done: of the source read, and of its passages (split so far, and as many again a
            document for those read but not split yet), embedded; a few long documents are read at once, and embedded
            for minutes."""
            read = opened.fraction()
            if read is None or not self.embed:
                return read
            per_document = self.to_embed / self.split_documents if self.split_documents else 1.0
            expected = self.to_embed + len(self.batch) * per_document
            return read * report.embedded / expected if expected else read

        # The total is unknown (the source is read as a stream): the share of the work done gives the time left.
        with Progress(None, f"indexing {self.collection}", "documents", enabled=progress, fraction=done) as bar:

            def embedded() -> None:  # the count of documents read stands still meanwhile: the figure shown at once
                bar.set_postfix(refresh=True, embedded=report.embedded)
                if self.on_progress is not None:
                    self.on_progress(IngestProgress(report.read, report.embedded, opened.fraction()))

            for record in opened.records:
                if self._add(record):
                    bar.update()
                if len(self.batch) >= BATCH:
                    self._flush(staged, embedded)
            if self.batch:
                self._flush(staged, embedded)
        counts = opened.counts
        report.empty_rows, report.empty_texts, report.files_skipped = counts.empty_rows, counts.empty_texts, counts.files_skipped
        report.html_texts = counts.html_texts
        for column in self.decimal_commas.columns:
            report.notes.append(
                f"column '{column}' holds numbers written with a decimal comma (4,5): it is kept as text, which a filter "
                "cannot compare with >= or <; to filter on it, write its numbers with a decimal point (4.5), e.g. by exporting "
                "the spreadsheet with a point as its decimal separator."
            )
        for column, kind, typed, stray, value, where in self.stray_values.columns:
            if column in self.decimal_commas.columns:
                continue
            written = "an ISO 8601 date (2024-01-31)" if kind == "date" else "a number (4, or 4.5 with a decimal point)"
            report.notes.append(
                f"column '{column}' holds {typed} {kind}s and {stray} value{'s' * (stray > 1)} that {'are' if stray > 1 else 'is'} "
                f"not (the first: '{shown(value, 40)}', {where}): it is kept as text, which a filter cannot compare with >= or <; "
                f"to filter on it, write each of its values as {written}, or leave the cell empty where there is none."
            )
        report.files_unreadable, report.links_skipped = counts.files_unreadable, counts.links_skipped
        report.sidecars_unused = counts.sidecars_unused
        if not self.seen:
            skipped = f" ({counts.empty_rows} empty rows and {counts.empty_texts} empty texts skipped)" if counts.rows else ""
            fix = "check the file (and --text-column / --format), or pass a folder that holds .txt, .md, .html or .pdf files."
            if counts.files_unreadable:
                skipped = f": {_files(len(counts.files_unreadable))} could not be read ({_first(counts.files_unreadable, 1)})"
                fix = "repair, decrypt or convert those files (a scanned PDF needs OCR, e.g. ocrmypdf), or pass --encoding for text in another encoding."
            raise QAError(f"{opened.name} holds no documents{skipped}; collection '{self.collection}' was left as it was.", fix)

    def _type_columns(self, found: dict[str, str], source_format: str) -> None:
        """The metadata types of the collection after this run; a column whose type changed means processing every document again."""
        saved, changed = changed_types(self.saved.manifest, found, source_format)
        self.types = {**saved, **found}
        self.retyped = bool(changed)
        if changed:
            self.reasons.append((retyped_cause(changed), "every document was processed again"))
            self.rebuild = True

    def _check_not_held_by_content(self, record: Record) -> None:
        """A row read with ``--id-column`` that the collection holds under the id its content gave it (indexed before
        without the flag: its id column then metadata) would be added again beside itself: refused, unless ``--sync``."""
        column = self.options.id_column
        as_before = replace(record, id=None, meta={**record.meta, meta_key(column): record.id}).content_hash()
        if as_before in self.saved.documents:
            raise QAError(
                f"{record.where}: collection '{self.collection}' holds this row under an id taken from its content (indexed "
                f"without --id-column); read with --id-column {column}, it would be added again beside itself. Nothing was changed.",
                f"pass --sync as well, to replace the collection's documents with this source's, identified by {column}; "
                "or leave out --id-column.",
            )

    def _add(self, record: Record) -> bool:
        """Count the record, and queue it when it is new or changed; False for a duplicate."""
        report = self.report
        content_hash = record.checked().content_hash()
        document_id = record.id or content_hash
        if document_id in self.seen:
            if record.id is not None:
                raise QAError(
                    f"{record.where}: the id '{document_id}' was already used by {self.seen[document_id]}.",
                    "give every document a unique --id-column value, or leave out --id-column to identify documents by their content.",
                )
            report.duplicates += 1
            return False
        self.seen[document_id] = record.where
        report.read += 1
        self.decimal_commas.see(record.meta)
        self.stray_values.see(record.meta, record.where)
        if (language := other_language(record.text)) is not None:
            report.other_languages[language] = report.other_languages.get(language, 0) + 1
        if record.item_id is not None:
            self.items[record.item_id] += 1
        before = self.saved.documents.get(document_id)
        if self.options.id_column is not None and before is None and not self.sync and self.saved.documents:
            self._check_not_held_by_content(record)  # a folder's files have ids (their paths) without --id-column
        if self.files_root is not None:
            self._check_same_file(document_id, before is not None and before[0] != content_hash)
        if before is not None and before[0] == content_hash:
            report.unchanged += 1
            if not self.rebuild and not self.saved.saved_under_older_ids(document_id):
                return True
        elif before is not None:
            report.changed += 1
        else:
            report.added += 1
        meta = {**typed_meta(record.meta, self.types), "content_hash": content_hash}
        if record.item_id is not None:
            meta["item_id"] = record.item_id
        self.batch.append((document_id, record.text, meta))
        return True

    def _check_same_file(self, document_id: str, changed: bool) -> None:
        """A file of another folder that has the name (path in its folder) of a saved document, with other text, would
        replace it: refused unless ``force`` (a folder that moved, its files edited)."""
        path = str(self.files_root if self.files_root.is_file() else self.files_root / document_id)
        self.files[document_id] = path
        saved_from = (self.saved.manifest or {}).get("files", {}).get(document_id)
        if changed and saved_from not in (None, path) and not self.force:
            raise QAError(
                f"{path} has the name of document '{document_id}' of collection '{self.collection}', which was read from "
                f"{saved_from}, and other text: it would replace that document; the collection was left as it was.",
                "index the folder that holds both (each is then named by its path there) with --sync, "
                "or pass --force if this file is the new version of that one (a folder that moved).",
            )

    def _flush(self, staged: IO[str], progressed: Callable[[], None]) -> None:
        """Split, embed and stage the queued documents; ``progressed`` hears of every chunk embedded, and of the end."""
        report = self.report
        batch, self.batch = self.batch, []  # the next documents read queue behind it
        passages = [passage for document in batch for passage in self.splitter.passages(*document)]
        if self.embed:
            self.to_embed, self.split_documents = self.to_embed + len(passages), self.split_documents + len(batch)
            self.embedder = self.embedder or settings_embedder(self.settings)
            began = time.perf_counter()
            # In chunks, each reported: a batch of long documents is thousands of passages, minutes on a CPU.
            for start in range(0, len(passages), EMBED_CHUNK):
                chunk = passages[start : start + EMBED_CHUNK]
                embedded = self.embedder.run(documents=[Document(id=p["id"], content=p["content"]) for p in chunk])["documents"]
                for passage, document in zip(chunk, embedded):
                    passage["embedding"] = document.embedding
                report.embedded += len(chunk)
                if start + EMBED_CHUNK < len(passages):
                    progressed()
            report.embedding_s += time.perf_counter() - began
            report.embedded_documents += len(batch)
        for passage in passages:
            staged.write(document_line(passage) + "\n")
            if passage["id"] in self.saved.older_ids:
                self.taken_ids[passage["id"]] = passage["meta"]["document_id"]
        report.staged += len(passages)
        self.staged_documents.update(document_id for document_id, _, _ in batch)
        progressed()

    def commit(self, staging: Path, opened: _Opened, sync: bool, force: bool) -> IngestReport:
        """After the whole source was read: the shrink guard, the manifest, and the commit (skipped when nothing changed)."""
        report, saved = self.report, self.saved
        vanished = [d for d in saved.documents if d not in self.seen]
        # A file read through a link that now leads outside the folder (indexed before links were checked) goes even without sync.
        dropped = set(vanished) if sync else set(vanished) & set(report.links_skipped)
        kept = [d for d in vanished if d not in dropped]
        # Files of the folder that could not be read (a broken sidecar, a damaged PDF) are missing for that reason.
        unread = (
            f" ({_files(len(report.files_unreadable))} could not be read: {_first(report.files_unreadable, 1)})"
            if report.files_unreadable
            else ""
        )
        if self.rebuild and kept:
            # Processing again needs each document's source: those missing from this one would be lost.
            causes = "; ".join(cause for cause, _ in self.reasons)
            lacking = f"{opened.name} lacks {len(kept)} of its {len(saved.documents)} documents{unread}"
            raise reprocessing_refused(self.collection, causes, lacking, self.retyped)
        self.dropped = dropped
        report.deleted, report.kept_missing = len(dropped), len(kept)
        self.items.update(saved.documents[d][1] for d in kept if saved.documents[d][1] is not None)
        report.documents = len(self.seen) + len(kept)
        if saved.documents and report.documents < MIN_KEPT_SHARE * len(saved.documents) and not force:
            raise shrink_refused(self.collection, report.documents, len(saved.documents), unread)
        replaced = (self.staged_documents & saved.documents.keys()) | dropped
        self._check_taken_ids(replaced)
        saved_files = (saved.manifest or {}).get("files", {})
        moved = any(saved_files.get(d) != path for d, path in self.files.items())  # kept, to tell a later file of the same name
        # Files touched but not changed: recorded as they are now, so that asking no longer says they changed.
        recorded = recorded_sources(saved.manifest or {}).get(opened.state.get("path"), {})
        touched = "path" in opened.state and recorded.get("source_fingerprint") != opened.state.get("source_fingerprint")
        if saved.manifest is not None and not replaced and not report.staged and not moved and not touched:
            report.passages = int(saved.manifest.get("documents", 0))
            report.notes.append("nothing changed: the collection was left as it was")
        else:
            manifest = self._manifest(opened, staging, sync)
            replaced_passages = [p for d in replaced for p in saved.passage_ids(d)]
            report.passages = commit(self.settings, self.collection, staging, replaced, replaced_passages, manifest, self.rebuild)
        report.seconds = time.perf_counter() - self.started
        return report

    def _check_taken_ids(self, replaced: set[str]) -> None:
        """A new passage must not take the id of a document that is kept as saved under an older id (it would replace it)."""
        for taken, document_id in self.taken_ids.items():
            owner = self.saved.older_ids[taken]
            if not self.rebuild and owner != document_id and owner not in replaced:
                raise QAError(
                    f"Passage '{taken}' of document '{document_id}' has the id under which document '{owner}' was saved by an older version; "
                    f"collection '{self.collection}' was left as it was.",
                    f"index a source that holds document '{owner}' too (it is saved again under an id of its own), or pass --sync to delete it.",
                )

    def _manifest(self, opened: _Opened, staging: Path, sync: bool) -> dict:
        old = self.saved.manifest or {}
        now = datetime.now(UTC).isoformat()
        read = {**opened.state, "format": opened.format, "options": self.options.as_dict()}
        # Every file or folder whose documents it holds, so that a change to any is noticed (--sync keeps this one's only).
        sources = ({} if sync or self.rebuild else recorded_sources(old)) | ({read["path"]: read} if "source_fingerprint" in read else {})
        manifest = {
            **{k: v for k, v in old.items() if k == "calibration"},  # fitted fusion, re-ranking and chances stay
            "input": read,
            "sources": sources,
            "splitter": self.splitter_state,
            "created": old.get("created", now),
            "updated": now,
            "source_documents": self.report.documents,
            "item_counts": dict(self.items),
            "meta_types": dict(opened.types) if sync else self.types,  # --sync keeps this source's documents only
            "files": {d: f for d, f in old.get("files", {}).items() if d not in self.dropped} | self.files,
            "machine": {"platform": platform.platform(), "python": platform.python_version()},
        }
        if self.vector_search is not None:
            manifest["vector_search"] = self.vector_search
        if self.embed:
            manifest.update(
                embedding_model=self.settings.embedding_model, embedding_fingerprint=model_fingerprint(self.settings.embedding_model)
            )
            # Nothing embedded in this run (no document changed): the saved vectors' backend stays.
            manifest["embedding_backend"] = self.embedder.backend if self.embedder is not None else embedding_backend(old)
            manifest["embedding_dim"] = _embedding_dim(staging) or old.get("embedding_dim")
        seconds = self.report.seconds = time.perf_counter() - self.started  # its speed too, as the report says it
        # The passages are counted as the collection is committed, after this: the manifest's "documents" holds them.
        manifest["last_update"] = {key: value for key, value in self.report.as_dict().items() if key != "passages"}
        manifest["build_timings"] = {"total_s": seconds, "embedding_s": self.report.embedding_s}
        return manifest


def _embedding_dim(staging: Path) -> int | None:
    with staging.open(encoding="utf-8") as handle:
        first = handle.readline()
    embedding = json.loads(first).get("embedding") if first else None
    return len(embedding) if embedding else None
