"""Bytes -> text for the table readers: encodings, byte-order marks, and files that are not text at all.

UTF-8 is the default and a UTF-8 byte-order mark is dropped; a UTF-16 mark (Excel's "Unicode
text") selects UTF-16. Bytes that do not decode are one error naming the line, and the encoding
to pass (``--encoding latin-1``) or, when earlier lines were UTF-8, that the file mixes encodings.
A file that is binary (NUL bytes, or the signature of a PDF, a ZIP/Excel workbook, an image) is
named as such instead of being read as garbage rows.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from qa_system.errors import QAError

SNIFF_BYTES = 8192
_SIGNATURES = {
    b"%PDF": "a PDF document",
    b"PK\x03\x04": "a ZIP archive (an Excel .xlsx workbook?)",
    b"\xd0\xcf\x11\xe0": "an old Office file (an Excel .xls workbook?)",
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"\x1f\x8b": "a gzip archive",
    b"SQLite format 3": "an SQLite database",
}


class EncodingError(QAError):
    """Text that does not decode in the encoding it was read with. ``encoding`` is the one to read it with instead,
    when the bytes tell (``cp1252``, ``utf-16-le``); None: the file's real encoding, which they do not tell. The
    message names the CLI's flag; the other doors word their own fix from ``problem`` and ``encoding`` (the page's
    Encoding picker, the API's query parameter)."""

    def __init__(self, problem: str, fix: str, encoding: str | None = None):
        super().__init__(problem, fix)
        self.encoding = encoding


def check_encoding(encoding: str) -> str:
    """The canonical name of a text encoding (``utf8`` -> ``utf-8``); a QAError for an unknown name or a codec that is not text."""
    fix = "pass a text encoding such as utf-8, latin-1, cp1252 or utf-16 to --encoding."
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise QAError(f"Unknown encoding '{encoding}'.", fix) from None
    try:
        io.TextIOWrapper(io.BytesIO(), encoding=name)
    except LookupError:  # codecs also holds base64, zlib, rot13: bytes to bytes, or text to text
        raise QAError(f"'{encoding}' is not a text encoding.", fix) from None
    return name


def _head(binary: IO[bytes]) -> bytes:
    start = binary.tell()
    head = binary.read(SNIFF_BYTES)
    binary.seek(start)
    return head


def text_encoding(binary: IO[bytes], name: str, encoding: str, fix: str) -> str:
    """The codec to read ``binary`` with, after refusing binary files (``fix`` says what to pass instead)."""
    encoding = check_encoding(encoding)
    head = _head(binary)
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):  # before UTF-16's: UTF-32-LE's mark starts with it
        return "utf-32"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    kind = next((what for signature, what in _SIGNATURES.items() if head.startswith(signature)), None)
    if kind is None and b"\x00" in head and not encoding.startswith(("utf-16", "utf-32")):
        order = _utf16_without_mark(head)
        if order is not None:
            raise EncodingError(
                f"{name} looks like UTF-16 text without a byte-order mark (every other byte is NUL).",
                f"pass --encoding utf-16-{order}.",
                f"utf-16-{order}",
            )
        kind = "binary data (it holds NUL bytes)"
    if kind is not None:
        raise QAError(f"{name} is not a text file: it looks like {kind}.", fix)
    return "utf-8-sig" if encoding == "utf-8" else encoding


def _utf16_without_mark(head: bytes) -> str | None:
    """'le' or 'be' when (nearly) every other byte is NUL, as in UTF-16 text of Latin script saved without a mark."""
    for order, zeros, others in (("le", head[1::2], head[0::2]), ("be", head[0::2], head[1::2])):
        if len(zeros) > 1 and zeros.count(0) >= 0.9 * len(zeros) and others.count(0) <= 0.1 * len(others):
            return order
    return None


def _where_undecodable(binary: IO[bytes], encoding: str) -> tuple[int | None, int | None]:
    """(first line that does not decode, an earlier line with non-ASCII text that did), 1-based."""
    binary.seek(0)
    decoder_name = "utf-8" if encoding == "utf-8-sig" else encoding
    non_ascii = None
    for number, raw in enumerate(binary, 1):
        try:
            raw.decode(decoder_name)
        except UnicodeDecodeError:
            return number, non_ascii
        if non_ascii is None and not raw.isascii():
            non_ascii = number
    return None, non_ascii


@contextmanager
def decoded(binary: IO[bytes], name: str, encoding: str) -> Iterator[IO[str]]:
    """``binary`` as text in ``encoding``; a decoding error anywhere inside the block becomes one QAError."""
    text = io.TextIOWrapper(binary, encoding=encoding, newline="")
    try:
        yield text
    except UnicodeDecodeError as error:
        line, non_ascii = _where_undecodable(binary, encoding) if binary.seekable() else (None, None)
        at = f" line {line}" if line else ""
        if encoding.startswith("utf-8") and non_ascii is not None and line is not None and non_ascii < line:
            raise EncodingError(
                f"{name} mixes encodings: line {line} is not UTF-8 while line {non_ascii} is.",
                "re-save the whole file in one encoding (UTF-8), or pass --encoding cp1252 to read all of it as Windows-1252.",
                "cp1252",
            ) from None
        if encoding.startswith("utf-8"):
            # Windows-1252, not Latin-1: they differ only on 0x80-0x9f, Windows' quotes, dashes and euro sign,
            # which Latin-1 reads as invisible control characters.
            raise EncodingError(
                f"{name}{at} is not UTF-8 text (byte {error.object[error.start]:#04x}); it looks like Windows-1252 / Latin-1.",
                "pass --encoding cp1252 (Latin-1 with Windows' quotes and euro sign), or re-save the file as UTF-8.",
                "cp1252",
            ) from None
        raise EncodingError(
            f"{name}{at} is not {encoding} text ({error.reason}).", "pass the file's real encoding to --encoding."
        ) from None
    except UnicodeError as error:  # a codec's own refusal, such as UTF-16 without a byte-order mark
        unmarked = " (utf-16-le or utf-16-be for UTF-16 without a byte-order mark)" if encoding.startswith("utf-16") else ""
        raise EncodingError(
            f"{name} is not {encoding} text ({error}).", f"pass the file's real encoding to --encoding{unmarked}."
        ) from None
    finally:
        if not binary.closed:
            text.detach()  # the caller owns the binary file
