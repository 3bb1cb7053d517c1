"""One SQuAD validator (sources/squad.py): the labels reader, the documents reader and the MRQA reader
check a file with the same public functions, so the same bad file gets the same one-line error."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from qa_system.errors import QAError
from qa_system.sources import mrqa, squad_documents
from qa_system.sources.records import IngestOptions, ReadCounts
from qa_system.sources.squad import checked_field, checked_list, load_squad_json, read_squad, squad_paragraphs

GOOD = {
    "version": "v2.0",
    "data": [
        {
            "title": " Kindle ",
            "paragraphs": [
                {
                    "context": "Great for reading at night.",
                    "qas": [{"id": "q1", "question": "Good for reading?", "answers": [{"text": "Great for reading", "answer_start": 0}]}],
                },
                {"context": "   ", "qas": []},
            ],
        }
    ],
}

BAD = {
    "not JSON": (b"{not json", "is not valid JSON (line 1:"),
    "nested too deeply": (b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests JSON arrays or objects too deeply to read"),
    "no data list": (b'{"version": "v2.0"}', "has no top-level 'data' list."),
    "an article without paragraphs": (json.dumps({"data": [{"title": "t"}]}).encode(), "data[0] has no 'paragraphs'."),
    "a context that is not text": (
        json.dumps({"data": [{"paragraphs": [{"context": 3, "qas": []}]}]}).encode(),
        "data[0].paragraphs[0].context is a number, not a string.",
    ),
    "half a character in a context": (
        b'{"data": [{"paragraphs": [{"context": "a \\ud800 b", "qas": []}]}]}',
        "The context at data[0].paragraphs[0] of",
    ),
    "not UTF-8": ('{"data": [{"paragraphs": [{"context": "caf\u00e9", "qas": []}]}]}'.encode("latin-1"), "is not utf-8 text"),
}


def documents(data: bytes, name: str = "file.json") -> list:
    return list(squad_documents.read_squad_documents(io.BytesIO(data), name, IngestOptions(), ReadCounts()))


def test_the_documents_and_the_labels_of_a_file_come_from_the_same_paragraphs(tmp_path):
    data = json.dumps(GOOD).encode()
    paragraphs = list(squad_paragraphs(load_squad_json(data, "file.json"), "file.json"))
    assert [(p.title, p.where) for p in paragraphs] == [(" Kindle ", "data[0].paragraphs[0]"), (" Kindle ", "data[0].paragraphs[1]")]
    records = documents(data)
    assert [(r.text, r.item_id) for r in records] == [
        ("Great for reading at night.", "Kindle")
    ]  # the empty context is counted, not indexed
    path = tmp_path / "file.json"
    path.write_bytes(b"\xef\xbb\xbf" + data)  # a byte-order mark is fine for both
    examples, report = read_squad(path)
    assert [(e.id, e.title, e.context) for e in examples] == [("q1", " Kindle ", "Great for reading at night.")]
    assert report.format == "SQuAD v2.0"


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_the_same_one_line_error_for_labels_and_documents(tmp_path, case):
    data, expected = BAD[case]
    path = tmp_path / "file.json"
    path.write_bytes(data)
    with pytest.raises(QAError) as as_labels:
        read_squad(path)
    with pytest.raises(QAError) as as_documents:
        documents(data, str(path))
    assert str(as_labels.value) == str(as_documents.value), case
    message = str(as_labels.value)
    assert expected in message and "\n" not in message and "Fix:" in message, message


def test_mrqa_reads_its_records_with_the_public_field_checks(tmp_path):
    assert mrqa.checked_field is checked_field and mrqa.checked_list is checked_list
    record = {"qid": 7, "question": "?", "flag": True}
    assert checked_field(record, "qid", (str, int), "line 2", Path("x.jsonl"), "MRQA") == 7
    with pytest.raises(QAError, match=r"x.jsonl: line 2.flag is true, not a number. Fix: fix that record \(MRQA format\)."):
        checked_field(record, "flag", int, "line 2", Path("x.jsonl"), "MRQA")
    with pytest.raises(QAError, match="line 2 has no 'detected_answers'"):
        checked_list(record, "detected_answers", "line 2", Path("x.jsonl"), "MRQA")
