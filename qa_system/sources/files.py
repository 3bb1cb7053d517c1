"""A folder (or one file) of .txt, .md, .html and .pdf files -> Records: PDFs through Haystack's converter, web pages
and Markdown as the text a reader sees (``sources.markup``: every heading, step and table row kept).

Each file is a document whose id is its path inside the folder, so that an edited file is a
*changed* document on the next run. The file is the item, unless a sidecar ``<file>.meta.json``
(a JSON object of metadata) names one: its ``item_id`` key, or the key ``--item-column`` gives.
Haystack's PDF converter logs and skips a file it cannot read; here that is an error naming the file,
as is a PDF without a text layer (a scan), for a file given alone; in a folder such a file is left
out, named with its reason, and the rest is read. A folder's text files that do not decode are the
exception: ``--encoding`` reads them, so the folder is refused, naming them all, before any is read.
Files of other kinds are skipped and counted, and links that lead outside the folder are not
followed (a link to /etc/passwd must not become searchable).
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from haystack.dataclasses import ByteStream

from qa_system.errors import QAError
from qa_system.sources.columns import column_types
from qa_system.sources.decoding import EncodingError, check_encoding
from qa_system.sources.markup import html_text, markdown_text
from qa_system.sources.records import IngestOptions, ReadCounts, Record, check_text_length, meta_value, metadata

SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")
SIDECAR = ".meta.json"
FILES_NAMED = 5  # undecodable files named in one line; the rest are counted
# The converters' and pypdf's warnings about a file only repeat what the error or the report says about it.
for _library in ("haystack.components.converters", "pypdf"):
    logging.getLogger(_library).setLevel(logging.ERROR)


# The optional packages (the `files` extra: pip install 'qa_system[files]') that reading each kind needs.
FILES_EXTRA = "pip install 'qa_system[files]'"
_CONVERTER_PACKAGES = {".pdf": ("pypdf",), ".md": ("markdown_it",), ".markdown": ("markdown_it",)}


def check_converters(suffixes: Iterable[str]) -> None:
    """A QAError naming the ``files`` extra when a converter for one of ``suffixes`` lacks its package (checked before any file is read)."""
    for suffix in sorted({s.lower() for s in suffixes}):
        missing = [name for name in _CONVERTER_PACKAGES.get(suffix, ()) if not _installed(name)]
        if missing:
            raise QAError(f"Reading {suffix} files needs {', '.join(missing)}, which is not installed.", f"{FILES_EXTRA}.")


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a module without a spec
        return False


def _as_text(suffix: str, text: str) -> str:
    """A decoded file's text as a reader sees it (plain text as it is)."""
    if suffix in (".md", ".markdown"):
        return markdown_text(text)
    if suffix in (".html", ".htm"):
        return html_text(text)
    return text


def _decode(data: bytes, path: Path, encoding: str, utf8_first: bool = False) -> str:
    """``utf8_first``: a file that is UTF-8 is read as UTF-8 whatever ``encoding`` says (a folder's files mix encodings,
    and UTF-8 text read as Latin-1 would be garbled without an error, while text in another encoding is almost never
    valid UTF-8)."""
    if b"\x00" in data[:8192] and not encoding.startswith("utf-16"):
        raise QAError(
            f"{path} is not a text file (it holds NUL bytes).", "leave it out of the folder, or give it its real suffix (.pdf, ...)."
        )
    try:
        return _text(data, encoding, utf8_first)
    except UnicodeDecodeError as error:
        hint = "; --encoding names its encoding, e.g. cp1252" if utf8_first else ""  # a folder's report lists problems, not fixes
        raise QAError(
            f"{path} is not {encoding} text (byte {data[error.start]:#04x} at offset {error.start}{hint}).",
            "pass --encoding with the file's encoding (e.g. cp1252 for Windows' Western text; the folder's UTF-8 files stay UTF-8), "
            "or re-save it as UTF-8.",
        ) from None


def _text(data: bytes, encoding: str, utf8_first: bool) -> str:
    """``data`` decoded as ``_decode`` says; a UnicodeDecodeError when it does not decode."""
    if utf8_first and b"\x00" not in data:  # UTF-16 text is often valid UTF-8, with a NUL in every other byte
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError:
            pass
    return data.decode("utf-8-sig" if encoding == "utf-8" else encoding)


def check_folder_encodings(root: Path, encoding: str) -> None:
    """An EncodingError naming every text file of the folder ``root`` that does not decode, before any is read: left
    out, they would be lost behind a run that succeeds, and one ``--encoding`` reads them all (UTF-8 files stay UTF-8)."""
    encoding = check_encoding(encoding)
    undecodable = []
    for path in document_files(root, ReadCounts()):
        if path.suffix.lower() == ".pdf":  # PDFs carry their own encodings
            continue
        try:
            data = path.read_bytes()
        except OSError:  # read_files names it
            continue
        if b"\x00" in data[:8192] and not encoding.startswith("utf-16"):  # binary: read_files names it
            continue
        try:
            _text(data, encoding, utf8_first=True)
        except UnicodeDecodeError as error:
            undecodable.append(f"{path.relative_to(root).as_posix()} (byte {data[error.start]:#04x} at offset {error.start})")
    if not undecodable:
        return
    more = len(undecodable) - FILES_NAMED
    listed = ", ".join(undecodable[:FILES_NAMED]) + (f", ... ({more} more)" if more > 0 else "")
    files, are, they, them = (
        (f"{len(undecodable)} files", "are", "they are", "them") if len(undecodable) > 1 else ("1 file", "is", "it is", "it")
    )
    if encoding == "utf-8":
        raise EncodingError(
            f"{files} of {root} {are} not UTF-8 text: {listed}; nothing was indexed.",
            f"pass --encoding cp1252 if {they} Windows' Western text (Latin-1 with Windows' quotes and euro sign; "
            f"the folder's UTF-8 files stay UTF-8), or re-save {them} as UTF-8.",
            "cp1252",
        )
    raise EncodingError(
        f"{files} of {root} {are} neither UTF-8 nor {encoding} text: {listed}; nothing was indexed.",
        f"pass their real encoding to --encoding (the folder's UTF-8 files stay UTF-8), or re-save {them} as UTF-8.",
    )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:  # gone since the folder was listed, or not readable
        raise QAError(
            f"{path} could not be read ({error.strerror or error}).", "check that it exists and can be read, or leave it out."
        ) from None


def convert(path: Path, encoding: str = "utf-8", utf8_first: bool = False) -> str:
    """The text of one file; a QAError when it has none that can be read. ``utf8_first``: see ``_decode``."""
    suffix = path.suffix.lower()
    data = _read(path)
    if suffix == ".pdf":
        if not data.startswith(b"%PDF"):
            raise QAError(f"{path} is not a PDF file.", "give it its real suffix, or leave it out.")
        from haystack.components.converters import PyPDFToDocument

        documents = PyPDFToDocument().run(sources=[ByteStream(data)])["documents"]
        if not documents:
            raise QAError(
                f"{path} could not be read as a PDF (damaged or encrypted?).", "repair or decrypt it, or leave it out of the folder."
            )
        text = documents[0].content or ""
        if not text.replace("\f", "").strip():
            raise QAError(
                f"{path} has no text layer (a scanned PDF?).", "run OCR on it first (e.g. ocrmypdf), or leave it out of the folder."
            )
        return text
    return _as_text(suffix, _decode(data, path, encoding, utf8_first))


def _sidecar(path: Path) -> dict:
    sidecar = path.with_name(path.name + SIDECAR)
    if not sidecar.is_file():
        return {}
    try:
        meta = json.loads(_read(sidecar).decode("utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise QAError(
            f"{sidecar} is not valid JSON ({error}).", 'write a JSON object of metadata, e.g. {"item_id": "B0074BW614"}.'
        ) from None
    if not isinstance(meta, dict):
        raise QAError(f"{sidecar} is not a JSON object.", 'write a JSON object of metadata, e.g. {"item_id": "B0074BW614"}.')
    return meta


def document_files(root: Path, counts: ReadCounts) -> list[Path]:
    """The readable files under ``root`` (or ``root`` itself), in a stable order; others are counted as skipped,
    and links that lead outside ``root`` are named and not followed."""
    if root.is_file():
        if root.suffix.lower() not in SUFFIXES:  # only with --format files
            raise QAError(
                f"--format files reads documents ({', '.join(SUFFIXES)}), and {root} is none.",
                "leave out --format (the file's name tells it), or pass csv, tsv, jsonl or squad.",
            )
        return [root]
    inside = root.resolve()
    files = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.name.endswith(SIDECAR):
            # Named after its document's whole name ("fridge.txt.meta.json"): one that is not ("fridge.meta.json") is read by none.
            if not path.with_name(path.name.removesuffix(SIDECAR)).is_file():
                counts.sidecars_unused.append(relative.as_posix())
            continue
        if not path.resolve().is_relative_to(inside):
            counts.links_skipped.append(relative.as_posix())
        elif path.is_file() and path.suffix.lower() in SUFFIXES:
            files.append(path)
        elif not path.is_dir():
            counts.files_skipped.append(relative.as_posix())
    return files


def _relative(root: Path, path: Path) -> str:
    """A document's id: its path in the folder (its name, when ``root`` is the file itself)."""
    return path.name if root.is_file() else path.relative_to(root).as_posix()


def read_files(root: Path, options: IngestOptions, counts: ReadCounts) -> Iterator[Record]:
    """Records from a folder of .txt, .md, .html and .pdf files (or one file), one per file, its path the item by default.

    A sidecar ``<name>.meta.json`` beside a document gives its metadata. A file that cannot be read is listed in
    ``counts.files_unreadable`` and skipped (a single file given alone raises instead).
    """
    encoding = check_encoding(options.encoding)
    files = document_files(root, counts)
    check_converters(path.suffix for path in files)
    for path in files:
        relative = _relative(root, path)
        counts.rows += 1
        try:
            text = convert(path, encoding, utf8_first=not root.is_file())
            sidecar = _sidecar(path)
            record = _record(text, sidecar, relative, options).checked() if text.strip() else None
        except QAError as error:
            if root.is_file():
                raise
            counts.files_unreadable.append(
                f"{relative}: {error.problem.removeprefix(f'{path} ').rstrip('.')}"
            )  # one file does not sink the folder
            continue
        if record is None:
            counts.empty_texts += 1
            continue
        yield record


def _record(text: str, sidecar: dict, relative: str, options: IngestOptions) -> Record:
    item, meta = _item_and_meta(sidecar, relative, options)
    return Record(check_text_length(text, relative), item, meta, relative, relative)


def _item_and_meta(sidecar: dict, relative: str, options: IngestOptions) -> tuple[str, dict[str, str]]:
    item_key = options.item_column or "item_id"
    item = meta_value(sidecar[item_key]) if sidecar.get(item_key) not in (None, "") else relative
    meta = {"file": relative, **metadata(sidecar, (item_key,), f"{relative}{SIDECAR}")}
    return item, meta


def sidecar_types(root: Path, options: IngestOptions) -> dict[str, str]:
    """The types of the metadata the folder's sidecars give (``sources.columns``), from their files alone (no document
    is converted): a rating of 4 is a number to filter with ``>=``, as a table's column of numbers is."""
    metas = []
    for path in document_files(root, ReadCounts()):
        try:
            sidecar = _sidecar(path)
        except QAError:  # read_files names it, and skips its document
            continue
        metas.append(_item_and_meta(sidecar, _relative(root, path), options)[1])
    return column_types(metas)
