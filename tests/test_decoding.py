"""Bytes that do not decode (``qa_system.sources.decoding``): the error names the encoding to read them with as
data too, so that each door words its own fix (the CLI's flag, the page's Encoding picker, the API's parameter)."""

from __future__ import annotations

import pytest

from qa_system.ingestion import IngestOptions, ingest
from qa_system.sources.decoding import EncodingError

CASES = {  # bytes, the encoding read with, the encoding suggested, the CLI's fix as it was
    "Windows-1252": (b"text\n\x93Smart\x94 and Caf\xe9\n", "utf-8", "cp1252", "Fix: pass --encoding cp1252 (Latin-1 with"),
    "mixed encodings": ("text\nCrème brûlée\n".encode() + b"Caf\xe9\n", "utf-8", "cp1252", "or pass --encoding cp1252 to read all of it"),
    "UTF-16 without a byte-order mark": ("text\nbattery\n".encode("utf-16-le"), "utf-8", "utf-16-le", "Fix: pass --encoding utf-16-le."),
    "not the encoding named": (b"text\nbattery\n", "utf-16", None, "Fix: pass the file's real encoding to --encoding"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_encoding_error_names_the_encoding_to_read_the_file_with(home, tmp_path, case):
    data, encoding, suggested, cli_fix = CASES[case]
    (tmp_path / "tickets.csv").write_bytes(data)
    with pytest.raises(EncodingError) as refused:
        ingest(home, tmp_path / "tickets.csv", "tickets", IngestOptions(encoding=encoding), embed=False, progress=False)
    assert refused.value.encoding == suggested
    assert cli_fix in str(refused.value) and str(refused.value) == f"{refused.value.problem} Fix: {refused.value.fix}"


@pytest.mark.parametrize("encoding, written", [("utf-8", "utf-32"), ("utf-32-le", "utf-32-le")], ids=["with its mark", "named"])
def test_utf32_text_is_read(home, tmp_path, encoding, written):
    # its mark was taken for UTF-16's ("no 'text' column; its columns are: \x00t\x00e..."), and named it was "binary data"
    from helpers.ingestion import documents

    (tmp_path / "notes.csv").write_bytes("text\nDie Größe passt.\n".encode(written))
    ingest(home, tmp_path / "notes.csv", "notes", IngestOptions(encoding=encoding), embed=False, progress=False)
    assert [d.content for d in documents(home, "notes").values()] == ["Die Größe passt."]
