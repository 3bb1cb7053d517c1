"""Your own documents into named collections: every input format, passages mapped back to
their documents, incremental updates, collections, and one test per kind of bad input."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import zlib
from dataclasses import replace
from datetime import date, timedelta

import pytest

from helpers.ingestion import COLUMNS, REVIEWS, documents, pdf, write_csv
from helpers.models import tiny_model_dir
from helpers.qa_files import CONTEXT, MRQA_QAS, mrqa_lines
from helpers.subjqa import SPLIT_ROWS, write_subjqa
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import NotFound, QAError
from qa_system.ingestion import (
    IngestOptions,
    collection_manifest,
    delete_collection,
    document_text,
    ingest,
    list_collections,
    open_collection,
    source_span,
    source_text,
)
from qa_system.pipelines import build_qa_pipeline, build_retrieval_pipeline
from qa_system.serving.answer_views import answer_cards, answer_views
from qa_system.serving.api.schemas import AnswerOut


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ formats


def test_csv_with_its_own_column_names(home, tmp_path):
    report = ingest(home, write_csv(tmp_path / "reviews.csv"), "mine", COLUMNS, embed=False, progress=False)
    assert (report.added, report.read, report.documents, report.embedded) == (4, 4, 4, 0)
    docs = documents(home, "mine")
    assert docs["r1"].content == REVIEWS[0][2]
    assert docs["r1"].meta["item_id"] == "P1" and docs["r1"].meta["stars"] == 5 and docs["r1"].meta["document_id"] == "r1"
    assert "body" not in docs["r1"].meta and "product" not in docs["r1"].meta  # the text and the item are not metadata twice
    assert open_collection(home, "mine").item_counts() == {"P1": 2, "P2": 2}


def test_the_report_counts_documents_in_another_language_than_english(home, tmp_path):
    rows = [
        ("d1", "P1", "Die Maschine ist sehr laut und der Wassertank ist zu klein.", "2"),
        ("d2", "P1", "La máquina es muy ruidosa y el depósito es pequeño.", "2"),
        ("d3", "P1", "Der Kaffee ist gut, aber die Milchschaumdüse ist nicht leicht zu reinigen.", "4"),
        *REVIEWS,
    ]
    report = ingest(home, write_csv(tmp_path / "mixed.csv", rows), "mixed", COLUMNS, embed=False, progress=False)
    assert report.other_languages == {"German": 2, "Spanish": 1}
    assert (
        "  3 documents seem to be in another language than English (2 German, 1 Spanish): the reader and the encoder were trained "
        "on English, so answers from them are less often right than their chances say."
    ) in report.summary()
    english = ingest(home, write_csv(tmp_path / "r.csv"), "english", COLUMNS, embed=False, progress=False)
    assert english.other_languages == {} and not any("language" in line for line in english.summary())
    last = open_collection(home, "english").manifest["last_update"]  # it said 0 passages and 0 documents/s
    assert "passages" not in last and last["documents_per_s"] > 0 and last["read"] == english.read
    single = ingest(home, write_csv(tmp_path / "one.csv", REVIEWS[:1]), "one", COLUMNS, embed=False, progress=False)
    assert single.summary()[0] == "Collection 'one' (memory): 1 document in 1 passage."  # not "1 documents in 1 passages"


def test_tsv_defaults_to_the_review_column_and_content_hash_ids(home, tmp_path):
    path = write_csv(tmp_path / "reviews.tsv", [(r[2], r[1]) for r in REVIEWS], header=("review", "asin"), delimiter="\t")
    ingest(home, path, "tsv", IngestOptions(item_column="asin"), embed=False, progress=False)
    docs = documents(home, "tsv")
    assert sorted(d.content for d in docs.values()) == sorted(r[2] for r in REVIEWS)
    assert all(len(i) == 32 and d.meta["content_hash"] == i for i, d in docs.items())  # id = content hash


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_a_column_named_item_id_is_the_item_without_a_flag(home, tmp_path, suffix):
    # as an upload's item_id and a sidecar's are: not metadata named item_id_column with no product to ask about
    path = tmp_path / f"reviews.{suffix}"
    rows = [(r[2], r[1], "acme") for r in REVIEWS]
    if suffix == "csv":
        write_csv(path, rows, header=("text", "item_id", "brand"))
    else:
        path.write_text("".join(json.dumps({"text": t, "item_id": i, "brand": b}) + "\n" for t, i, b in rows), encoding="utf-8")
    ingest(home, path, "plain", IngestOptions(), embed=False, progress=False)
    assert open_collection(home, "plain").item_counts() == {"P1": 2, "P2": 2}
    spreadsheet = tmp_path / f"Export.{suffix}"  # a spreadsheet's header in other case
    spreadsheet.write_text(path.read_text(encoding="utf-8").replace("item_id", "Item_ID"), encoding="utf-8")
    ingest(home, spreadsheet, "export", IngestOptions(), embed=False, progress=False)
    assert open_collection(home, "export").item_counts() == {"P1": 2, "P2": 2}
    assert not any("item_id_column" in d.meta for d in documents(home, "plain").values())
    # a column --item-column names still wins, and the item_id column is kept as metadata
    ingest(home, path, "brands", IngestOptions(item_column="brand"), embed=False, progress=False)
    assert open_collection(home, "brands").item_counts() == {"acme": 4}
    assert {d.meta["item_id_column"] for d in documents(home, "brands").values()} == {"P1", "P2"}


@pytest.mark.parametrize("column", ["id", "Document_ID", "uuid"])
def test_a_column_named_as_ids_without_id_column_is_noted_once(home, tmp_path, column):
    """A file edited and indexed again added a second copy of each edited row, without a word: its "id" column is
    metadata unless --id-column names it."""
    path = tmp_path / "notes.jsonl"
    path.write_text(
        "".join(json.dumps({column: f"n{i}", "text": text}) + "\n" for i, (*_, text, _) in enumerate(REVIEWS)), encoding="utf-8"
    )
    (note,) = [n for n in ingest(home, path, "notes", IngestOptions(), embed=False, progress=False).notes if "looks like" in n]
    assert note.startswith(f"column '{column}' looks like the documents' ids, but it is kept as metadata")
    assert note.endswith(f"index with --id-column {column} (the API's id_column={column}).")
    again = ingest(home, path, "notes", IngestOptions(), embed=False, progress=False)  # said when the collection is made
    assert not any("looks like" in n for n in again.notes)
    by_id = ingest(home, path, "by-id", IngestOptions(id_column=column), embed=False, progress=False)
    assert not any("looks like" in n for n in by_id.notes)


def test_a_column_of_dates_or_numbers_that_a_few_values_turn_to_text_is_noted_with_the_first(home, tmp_path):
    """One "2024-02-30" turned a column of 145 dates to text without a word; every date filter then failed."""
    rows = [f"Review {i}: the battery is fine.,2024-01-{i % 28 + 1:02d},{i % 5 + 1},{i % 3}" for i in range(20)]
    rows[5], rows[8] = "Review 5 has a bad date.,2024-02-30,3,0", "Review 8 has no rating.,2024-01-09,n/a,1"
    path = tmp_path / "gaps.csv"
    path.write_text("text,date,rating,mixed\n" + "\n".join(rows) + "\n", encoding="utf-8")
    notes = [n for n in ingest(home, path, "gaps", IngestOptions(), embed=False, progress=False).notes if "that is not" in n]
    assert [note.replace(f"{tmp_path}/", "") for note in notes] == [
        "column 'date' holds 19 dates and 1 value that is not (the first: '2024-02-30', gaps.csv line 7): it is kept as text, "
        "which a filter cannot compare with >= or <; to filter on it, write each of its values as an ISO 8601 date (2024-01-31), "
        "or leave the cell empty where there is none.",
        "column 'rating' holds 19 numbers and 1 value that is not (the first: 'n/a', gaps.csv line 10): it is kept as text, "
        "which a filter cannot compare with >= or <; to filter on it, write each of its values as a number (4, or 4.5 with a "
        "decimal point), or leave the cell empty where there is none.",
    ]
    small = tmp_path / "small.csv"  # one stray in a small file is a stray too
    small.write_text("text,date\n" + "".join(f"Review {i}.,2024-01-0{i + 1}\n" for i in range(4)) + "Review 4.,soon\n", encoding="utf-8")
    assert any(
        "column 'date' holds 4 dates and 1 value" in n
        for n in ingest(home, small, "small", IngestOptions(), embed=False, progress=False).notes
    )
    text = tmp_path / "text.csv"  # a text column with a few numbers or dates in it is text, and nothing is said
    text.write_text("text,colour\n" + "".join(f"Review {i}.,{'red' if i % 4 else i}\n" for i in range(20)), encoding="utf-8")
    assert not any("that is not" in n for n in ingest(home, text, "text", IngestOptions(), embed=False, progress=False).notes)


def test_the_first_documents_of_a_collection_made_empty_change_no_settings(home, tmp_path):
    """The first upload into a collection made over HTTP said "the passage settings changed (None -> {'words': 200, ...})"."""
    from qa_system.ingestion.changes import create_collection

    create_collection(home, "made-empty")
    report = ingest(home, write_csv(tmp_path / "r.csv"), "made-empty", COLUMNS, embed=False, progress=False)
    assert report.added == len(REVIEWS) and not [note for note in report.notes if "changed" in note or "again" in note]


def test_json_lines_keep_other_keys_as_metadata_numbers_typed(home, tmp_path):
    path = tmp_path / "reviews.jsonl"
    lines = [{"text": t, "sku": item, "rating": int(stars), "tags": ["a", "b"]} for _, item, t, stars in REVIEWS]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n", encoding="utf-8")
    report = ingest(home, path, "jsonl", IngestOptions(item_column="sku"), embed=False, progress=False)
    assert report.read == 4 and report.empty_rows == 1
    meta = next(d.meta for d in documents(home, "jsonl").values() if d.content == REVIEWS[0][2])
    assert meta["item_id"] == "P1" and meta["rating"] == 5 and meta["tags"] == '["a", "b"]'  # a number stays one, a list is JSON text
    # a key of no name was a field "meta." that no filter could name
    path.write_text(json.dumps({"text": "Fine.", "": "blank key"}) + "\n", encoding="utf-8")
    ingest(home, path, "unnamed", IngestOptions(), embed=False, progress=False)
    (document,) = documents(home, "unnamed").values()
    assert document.meta["unnamed_column"] == "blank key" and "" not in document.meta


def test_two_fields_kept_under_one_metadata_key_are_refused_not_one_dropped(home, tmp_path):
    # "id" is kept as "id_column" (the index has its own id), "" as "unnamed_column": beside a field of that name, one
    # of the two lost its values without a word.
    table = tmp_path / "t.csv"
    table.write_text("text,id,id_column\nGreat screen.,7,A-7\n", encoding="utf-8")
    with pytest.raises(QAError, match=r"t.csv line 2: the fields 'id' and 'id_column' would both be kept as the metadata 'id_column'"):
        ingest(home, table, "collide", IngestOptions(), embed=False, progress=False)
    lines = tmp_path / "t.jsonl"
    lines.write_text(json.dumps({"text": "Fine.", "unnamed_column": "x", "": "y"}) + "\n", encoding="utf-8")
    with pytest.raises(QAError, match=r"line 1: the fields 'unnamed_column' and '' would both be kept as the metadata 'unnamed_column'"):
        ingest(home, lines, "collide", IngestOptions(), embed=False, progress=False)
    assert "collide" not in [info.name for info in list_collections(home)]  # nothing of either file was saved
    ingest(home, table, "collide", IngestOptions(id_column="id"), embed=False, progress=False)  # "id" is the id: no clash
    assert documents(home, "collide")["7"].meta["id_column"] == "A-7"
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("The tent kept us dry.", encoding="utf-8")
    (folder / "a.txt.meta.json").write_text(json.dumps({"id": 1, "id_column": 2}), encoding="utf-8")
    with pytest.raises(QAError, match=r"a.txt.meta.json: the fields 'id' and 'id_column' would both be kept"):
        ingest(home, folder, "collide-docs", embed=False, progress=False)


def test_a_json_array_of_documents_reads_as_json_lines_do(home, tmp_path, capsys, monkeypatch):
    path = tmp_path / "export.json"  # pandas' to_json(orient="records"), most APIs' exports
    rows = [{"id": review_id, "sku": item, "text": text, "rating": int(stars)} for review_id, item, text, stars in REVIEWS]
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    report = ingest(home, path, "array", IngestOptions(item_column="sku", id_column="id"), embed=False, progress=False)
    assert (report.read, report.documents) == (4, 4)
    docs = documents(home, "array")
    assert docs["r1"].content == REVIEWS[0][2] and docs["r1"].meta["item_id"] == "P1" and docs["r1"].meta["rating"] == 5
    path.write_text(json.dumps([{"text": "The hinge squeaks after a week.", "id": "a1"}]), encoding="utf-8")
    ingest(home, path, "no-items", progress=False, embed=False)
    monkeypatch.setenv("QA_HOME", str(home.home))
    assert main(["search", "hinge", "--collection", "no-items"]) == 0  # a document of no product: no "(None)" beside it
    assert re.search(r"^1\. score [\d.]+  document \w+  \(id_column a1\)$", capsys.readouterr().out, re.MULTILINE)
    path.write_text(json.dumps([rows[0], "a string"]), encoding="utf-8")
    with pytest.raises(QAError, match=r"export\.json \[1\] is a string, not an object\. Fix: "):
        ingest(home, path, "array", IngestOptions(item_column="sku", id_column="id"), embed=False, progress=False)
    assert len(documents(home, "array")) == 4


def test_squad_contexts_are_documents_with_the_title_as_item(home, tmp_path):
    squad = {
        "version": "v2.0",
        "data": [
            {
                "title": "KINDLE",
                "paragraphs": [{"context": "The screen is sharp.", "qas": []}, {"context": "Battery lasts a week.", "qas": []}],
            },
            {"title": "MOUSE", "paragraphs": [{"context": "The wheel squeaks.", "qas": [{"id": "q", "question": "?", "answers": []}]}]},
        ],
    }
    (tmp_path / "squad.json").write_text(json.dumps(squad, indent=1), encoding="utf-8")
    ingest(home, tmp_path / "squad.json", "squad", embed=False, progress=False)
    assert sorted((d.meta["item_id"], d.content) for d in documents(home, "squad").values()) == [
        ("KINDLE", "Battery lasts a week."),
        ("KINDLE", "The screen is sharp."),
        ("MOUSE", "The wheel squeaks."),
    ]


def test_a_manual_saved_as_a_web_page_or_markdown_keeps_its_steps_headings_and_table_rows(home, tmp_path):
    """A manual's .html lost every numbered step and heading, and its .md kept tables as "| Weight | 3.9 kg |"; a table
    row read "Every month" as the side brush's replacement, from the column before."""
    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "robot.html").write_text(
        "<html><body><h2>4. Setting up the dock</h2>"
        "<ol><li>Place the dock against a wall.</li><li>Plug it in.<ul><li>Use the cable supplied.</li></ul></li></ol>"
        "<table><thead><tr><th>Part</th><th>Clean</th><th>Replace</th></tr></thead><tbody>"
        "<tr><td>Side brush</td><td>Every month</td><td>Every 3 to 6 months</td></tr>"
        "<tr><td>HEPA<br>filter</td><td></td><td>Every year</td></tr></tbody></table>"
        "<table><tr><th>Weight</th><td>3.9 kg</td></tr></table><p>Questions? Call us.</p></body></html>",
        encoding="utf-8",
    )
    (folder / "filter.md").write_text(
        "# Filter\n\n## Specifications\n\n| Specification | Value |\n|---|---|\n| Standby power | 0.4 W |\n\n"
        "3. Open the door.\n4. Check the **cartridges**.\n",
        encoding="utf-8",
    )
    ingest(home, folder, "manuals", embed=False, progress=False)
    docs = documents(home, "manuals")
    assert docs["robot.html"].content == (
        "4. Setting up the dock\n1. Place the dock against a wall.\n2. Plug it in.\nUse the cable supplied.\n"
        "Part: Side brush, Clean: Every month, Replace: Every 3 to 6 months\nPart: HEPA filter, Replace: Every year\n"
        "Weight: 3.9 kg\nQuestions? Call us."
    )
    assert docs["filter.md"].content == (
        "Filter\nSpecifications\nSpecification: Standby power, Value: 0.4 W\n3. Open the door.\n4. Check the cartridges."
    )


def test_a_web_page_written_loosely_loses_no_text():
    """Cells and rows whose end tags are left out (valid HTML), a table never closed, a caption, a cell across two
    columns and a page laid out in a table: all of it read as a browser shows it (the first version dropped such rows,
    and an unclosed table took the rest of the page with it)."""
    from qa_system.sources.markup import html_text

    legacy = "<p>Codes:</p><table><tr><th>Code<th>Meaning<th>Fix<tr><td>F3<td>Boiled dry<td>Refill it</table><p>Call us.</p>"
    assert html_text(legacy) == "Codes:\nCode: F3, Meaning: Boiled dry, Fix: Refill it\nCall us."
    unclosed = "<h1>Blender</h1><table><tr><td>Speed</td><td>1-5</td></tr><h2>Warranty</h2><p>The motor is covered for 7 years.</p>"
    assert html_text(unclosed) == "Blender\nSpeed: 1-5\nWarranty\nThe motor is covered for 7 years."
    spanned = (
        "<table><caption>Filter life</caption><tr><th>Part</th><th colspan=2>Interval</th></tr>"
        "<tr><td>Brush</td><td>Clean monthly</td><td></td></tr><tr><td colspan=3>Keep all parts dry</td></tr></table>"
    )
    assert html_text(spanned) == "Filter life\nPart: Brush, Interval: Clean monthly\nKeep all parts dry"
    assert html_text("<table><tr><th>A</th><th>B</th><th>C</th></tr></table>") == "A, B, C"  # a header alone is kept
    layout = "<table><tr><td><h1>Kettle</h1><ol><li>Fill</li><li>Switch on</li></ol></td><td><p>Offers</p></td></tr></table>"
    assert html_text(layout) == "Kettle\n1. Fill\n2. Switch on\nOffers"  # a page laid out in a table reads as a page
    assert html_text("<tr><td>a</td><td>b</td></tr>") == "a\nb"  # a row cut out of its table (an HTML text column)
    assert html_text("<nav><a>Home</a><p>Real content</p>") == "Home\nReal content"  # menus are text too: none is lost


def test_a_folder_of_documents_through_haystack_converters(home, tmp_path):
    folder = tmp_path / "docs"
    (folder / "manuals").mkdir(parents=True)
    (folder / "notes.txt").write_text("Plain notes: charge it overnight.", encoding="utf-8")
    (folder / "guide.md").write_text("# Guide\n\nPress **the button** twice.", encoding="utf-8")
    (folder / "page.html").write_text(
        "<html><body><article><h1>FAQ</h1><p>The warranty lasts two years from the date of purchase, "
        "and covers every defect of the hardware.</p></article></body></html>",
        encoding="utf-8",
    )
    (folder / "manuals" / "kindle.pdf").write_bytes(pdf("Hold the power button for ten seconds."))
    (folder / "manuals" / "kindle.pdf.meta.json").write_text(json.dumps({"item_id": "KINDLE", "language": "en"}), encoding="utf-8")
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / ".hidden.txt").write_text("not read", encoding="utf-8")
    report = ingest(home, folder, "docs", embed=False, progress=False)
    docs = documents(home, "docs")
    assert sorted(docs) == ["guide.md", "manuals/kindle.pdf", "notes.txt", "page.html"]
    assert report.files_skipped == ["photo.png"]
    assert "Press the button twice." in docs["guide.md"].content and "**" not in docs["guide.md"].content
    assert "warranty lasts two years" in docs["page.html"].content and "<p>" not in docs["page.html"].content
    assert "power button for ten seconds" in docs["manuals/kindle.pdf"].content
    assert docs["manuals/kindle.pdf"].meta["item_id"] == "KINDLE" and docs["manuals/kindle.pdf"].meta["language"] == "en"
    assert docs["notes.txt"].meta["item_id"] == "notes.txt"  # the file is the item


def test_a_folders_sidecar_metadata_is_typed_and_filtered_like_a_tables_columns(home, tmp_path):
    folder = tmp_path / "tents"
    folder.mkdir()
    for name, rating, text in (("a.txt", 4, "The tent kept us dry."), ("b.txt", 2, "The tent leaked."), ("c.txt", None, "A tent.")):
        (folder / name).write_text(text, encoding="utf-8")
        if rating is not None:
            (folder / f"{name}.meta.json").write_text(json.dumps({"item_id": "TENT", "rating": rating}), encoding="utf-8")
    ingest(home, folder, "tents", embed=False, progress=False)
    index = open_collection(home, "tents", embeddings=False, progress=False)
    assert index.manifest["meta_types"] == {"file": "text", "rating": "integer"}
    assert documents(home, "tents")["a.txt"].meta["rating"] == 4  # a number, not the text "4"
    retrieval = build_retrieval_pipeline("bm25", home, index=index)
    kept = retrieval.run("tent", filters={"field": "meta.rating", "operator": ">=", "value": 3})["documents"]
    assert [d.id for d in kept] == ["a.txt"]
    with pytest.raises(QAError, match="'meta.stars', a field no document of this collection has"):
        retrieval.run("tent", filters={"field": "meta.stars", "operator": "==", "value": 4})


def test_a_metadata_file_named_after_no_document_is_named_in_the_report(home, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "fridge.txt").write_text("The fridge keeps 4 degrees.", encoding="utf-8")
    (tmp_path / "docs" / "fridge.meta.json").write_text('{"item_id": "FRIDGE-1"}', encoding="utf-8")  # not fridge.txt.meta.json
    report = ingest(home, tmp_path / "docs", "sidecars", embed=False, progress=False)
    assert report.sidecars_unused == ["fridge.meta.json"] and documents(home, "sidecars")["fridge.txt"].meta["item_id"] == "fridge.txt"
    assert "  1 metadata file beside no document of their name, not read: fridge.meta.json " in "\n".join(report.summary())


def test_an_upload_is_read_from_a_file_object_with_progress(home, tmp_path):
    import io

    heard = []
    upload = io.BytesIO(write_csv(tmp_path / "r.csv").read_bytes())
    report = ingest(home, upload, "upload", COLUMNS, name="my reviews.csv", embed=False, progress=False, on_progress=heard.append)
    assert report.documents == 4 and report.source == "my reviews.csv"
    assert heard and heard[-1].documents == 4 and heard[-1].fraction == 1.0


# ------------------------------------------------------------------ passages and offsets


def long_text(words: int = 900) -> str:
    sentences = [f"Sentence {n} talks about feature number {n}." for n in range(words // 7)]
    sentences[len(sentences) * 2 // 3] = "The hidden hinge is made of polished titanium and never squeaks."
    return "  ".join(sentences) + "\n\nThe end."


def test_long_documents_are_split_and_map_back_to_their_offsets(home, tmp_path):
    text = long_text()
    (tmp_path / "manual.txt").write_text(text, encoding="utf-8")
    ingest(home, tmp_path / "manual.txt", "manual", IngestOptions(passage_words=100, passage_overlap=20), embed=False, progress=False)
    passages = list(documents(home, "manual").values())
    assert len(passages) > 5 and {p.meta["passages"] for p in passages} == {len(passages)}
    for passage in passages:
        start = passage.meta["source_offset"]
        assert text[start : start + len(passage.content)] == passage.content
        assert passage.meta["document_id"] == "manual.txt" and passage.id.startswith("manual.txt#")
    assert source_text(passages) == text

    answer = "polished titanium"
    hinge = next(p for p in passages if answer in p.content)
    start = hinge.content.index(answer)
    document_id, begin, end = source_span(hinge, start, start + len(answer))
    assert document_id == "manual.txt" and text[begin:end] == answer and hinge.meta["source_offset"] > 0


def test_an_answer_read_from_a_passage_maps_into_the_source_document(home, tmp_path):
    text = long_text()
    (tmp_path / "manual.txt").write_text(text, encoding="utf-8")
    ingest(home, tmp_path / "manual.txt", "manual", IngestOptions(passage_words=100, passage_overlap=20), embed=False, progress=False)
    pipeline = build_qa_pipeline("bm25", home, index=open_collection(home, "manual"))
    answers = [a for a in pipeline.run("What is the hidden hinge made of?", top_k=2)["answers"] if a.data]
    assert answers
    for answer in answers:
        document_id, begin, end = source_span(answer.document, answer.document_offset.start, answer.document_offset.end)
        assert document_id == "manual.txt" and text[begin:end] == answer.data
        assert document_text(pipeline.index, document_id) == text  # where the page highlights it
    # Every door says where the answer is in the document, not only in its passage.
    views = [view for view in answer_views(answers) if view.kind == "span"]
    for view, card in zip(views, answer_cards(views)):
        body = AnswerOut.of(view, card)
        assert body.review_id == "manual.txt" and text[body.review_start : body.review_end] == view.text
        assert view.document.content[body.start : body.end] == view.text and view.document.meta["source_offset"] > 0
        assert card.source == f"document manual.txt (answer at character {body.review_start})"


def test_a_product_id_typed_in_another_unicode_form_or_with_spaces_is_the_stored_one(home, tmp_path):
    nfd, nfc = "Cafe\u0301-2", "Caf\u00e9-2"  # the same "Café-2": "e" and a combining accent, or one code point
    rows = [
        {"item": nfd, "text": "The espresso machine heats up in forty seconds."},
        {"item": "Padded-3", "text": "The kettle boils a litre in three minutes."},
    ]
    (tmp_path / "shop.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    ingest(home, tmp_path / "shop.jsonl", "shop", IngestOptions(item_column="item"), embed=False, progress=False)
    pipeline = build_qa_pipeline("bm25", home, index=open_collection(home, "shop"))
    # Both were "Product ... has no reviews" though `qa-system products` listed them, looking the same. The id is stored
    # composed (NFC), whatever form the source wrote it in; either form typed finds it.
    for typed, stored in ((nfc, nfc), (nfd, nfc), (" Padded-3 ", "Padded-3")):
        documents = pipeline.run("How fast does it heat?", item_id=typed, top_k=5)["documents"]
        assert documents and {d.meta["item_id"] for d in documents} == {stored}, typed


def test_across_look_alike_documents_the_answer_comes_from_the_one_the_question_names(home, tmp_path):
    features = ["Dark mode", "Inventory tracking", "Payroll export to ADP", "Multi-currency invoices", "Bank feeds", "Faster closing"]
    features += ["Recurring bills", "A tax report", "Project budgets", "Receipt scanning", "Two-factor sign-in", "Server mode"]
    released = {minor: (date(2023, 1, 9) + timedelta(days=41 * minor)).isoformat() for minor in range(len(features))}
    for minor, feature in enumerate(features):
        (tmp_path / f"ledger-pro-3.{minor}.md").write_text(
            f"# Ledger Pro 3.{minor}\n\nReleased on {released[minor]}.\n\n## New features\n\n- {feature}.\n\n"
            f"Ledger Pro 3.{minor} is a free update for customers with an active maintenance plan.\n",
            encoding="utf-8",
        )
    ingest(home, tmp_path, "releases", embed=False, progress=False)  # each file its own product: asked across all of them
    pipeline = build_qa_pipeline("bm25", home, index=open_collection(home, "releases"))
    # Every note says "Released on ...": 5 of the 12 answered with another version's date (3.3's for 3.7, 3.10 and 3.11).
    for minor, day in released.items():
        first = pipeline.run(f"When was Ledger Pro 3.{minor} released?")["answers"][0]
        assert first.document.meta["document_id"] == f"ledger-pro-3.{minor}.md" and day in first.data, (minor, first.data)


def test_an_faqs_own_questions_are_not_its_answers(home, tmp_path):
    (tmp_path / "faq.md").write_text(
        "# Nova Mesh Router FAQ\n\n## How do I update the firmware?\n\nOpen the Nova app, go to Settings, then System, and tap Update."
        "\n\n## What does a red light mean?\n\nA red light means the node has lost its internet connection."
        "\n\n## How many devices can connect?\n\nEach node handles up to 120 devices at once.\n",
        encoding="utf-8",
    )
    ingest(home, tmp_path / "faq.md", "faq", embed=False, progress=False)
    pipeline = build_qa_pipeline("bm25", home, index=open_collection(home, "faq"))
    for question, answer in (
        ("How do I update the firmware?", "Open the Nova app, go to Settings, then System, and tap Update"),  # not the heading run into it
        ("How many devices can connect?", "120"),  # not the heading that asks it
    ):
        cards = [a.data for a in pipeline.run(question, top_k=1)["answers"]]
        assert cards[0] == answer and not any("How" in (card or "") for card in cards), cards


def test_passages_are_those_of_haystacks_document_splitter():
    import random

    from haystack import Document
    from haystack.components.preprocessors import DocumentSplitter

    from qa_system.ingestion import PassageSplitter

    rng = random.Random(1)
    pieces = ["alpha", "beta.", "gamma\n", "delta  ", "eps!", "\n\nzeta", "eta,", "théta", "", " "]
    for _ in range(200):
        text = "".join(rng.choice(pieces) + (" " if rng.random() < 0.8 else "") for _ in range(rng.randint(50, 600)))
        words = rng.randint(10, 40)
        overlap = rng.randint(0, words - 1)
        haystack = DocumentSplitter(split_by="word", split_length=words, split_overlap=overlap).run([Document(content=text)])["documents"]
        expected = [(d.meta["split_idx_start"], d.content) for d in haystack if d.content.strip()]
        assert PassageSplitter(words, overlap).spans(text) == (expected if len(haystack) > 1 else [(0, text)])


def test_a_10_mb_document_is_split_into_passages(home, tmp_path):
    text = ("This long manual repeats itself about batteries and screens. " * 170_000)[:10_000_000]
    write_csv(tmp_path / "big.csv", [("big", "P", text, "1")])
    report = ingest(home, tmp_path / "big.csv", "big", COLUMNS, embed=False, progress=False)
    passages = documents(home, "big")
    assert report.documents == 1 and report.passages == len(passages) > 5000
    assert all(len(p.content) < 3000 for p in passages.values())
    assert source_text(passages.values()) == text


# ------------------------------------------------------------------ incremental updates


def test_changes_are_added_and_sync_deletes_what_is_gone(home, tmp_path):
    path = write_csv(tmp_path / "r.csv")
    ingest(home, path, "inc", COLUMNS, embed=False, progress=False)
    rows = [REVIEWS[0], ("r2", "P1", "The screen is bright even in sunlight.", "4"), REVIEWS[2], ("r5", "P3", "A sturdy tripod.", "5")]
    write_csv(path, rows)
    report = ingest(home, path, "inc", COLUMNS, embed=False, progress=False)
    assert (report.added, report.changed, report.unchanged, report.deleted, report.kept_missing, report.documents) == (1, 1, 2, 0, 1, 5)
    docs = documents(home, "inc")
    assert docs["r2"].content.startswith("The screen is bright") and "r4" in docs
    report = ingest(home, path, "inc", COLUMNS, embed=False, sync=True, progress=False)
    assert (report.added, report.changed, report.unchanged, report.deleted, report.documents) == (0, 0, 4, 1, 4)
    assert sorted(documents(home, "inc")) == ["r1", "r2", "r3", "r5"]
    assert open_collection(home, "inc").item_counts() == {"P1": 2, "P2": 1, "P3": 1}
    retrieval = build_retrieval_pipeline("bm25", home, index=open_collection(home, "inc"))
    assert retrieval.run("sunlight", item_id="P1", top_k=1)["documents"][0].id == "r2"


def test_a_pipeline_built_before_an_update_answers_from_the_documents_as_they_are_now(home, tmp_path):
    # a notebook holds its pipeline while it updates the collection: it answered from deleted and old documents
    path = write_csv(tmp_path / "r.csv")
    ingest(home, path, "live", COLUMNS, embed=False, progress=False)
    index = open_collection(home, "live")
    retrieval = build_retrieval_pipeline("bm25", home, index=index)
    assert {d.id for d in retrieval.run("battery screen cable bass", top_k=10)["documents"]} == {"r1", "r2", "r3", "r4"}
    rows = [("r1", "P1", "The battery now lasts a month.", "5"), *REVIEWS[2:]]
    ingest(home, write_csv(path, rows), "live", COLUMNS, embed=False, sync=True, progress=False)  # r2 deleted, r1 changed
    found = {d.id: d.content for d in retrieval.run("battery screen cable bass", top_k=10)["documents"]}
    assert sorted(found) == ["r1", "r3", "r4"] and found["r1"] == "The battery now lasts a month."
    assert retrieval.index.item_counts() == {"P1": 1, "P2": 2}
    assert repr(retrieval) == (  # one line in a notebook, not the manifest and the graph (3,200 characters)
        "QAPipeline(retriever='bm25', answer_stage='retrieval', rerank=False, collection='live' (memory), top_k=8, top_k_reader=3)"
    )
    kept = retrieval.pipeline
    retrieval.run("battery", top_k=1)
    assert retrieval.pipeline is kept  # opened again only when saved again
    served = build_retrieval_pipeline("bm25", home, index=index, follow_saved_changes=False)  # a service reopens its own
    assert "r2" in {d.id for d in served.run("battery screen cable bass", top_k=10)["documents"]}
    # Deleted, it answered on from the documents it held; now it says so, as a collection that is not there does.
    delete_collection(home, "live")
    with pytest.raises(NotFound, match=r"^The collection 'live' was deleted since this pipeline opened it\. Fix: "):
        retrieval.run("battery", top_k=1)


def test_a_file_added_that_needs_every_document_processed_again_is_refused_unless_it_holds_them_all(home, tmp_path):
    ingest(home, write_csv(tmp_path / "r.csv"), "add", COLUMNS, embed=False, progress=False)
    saved = home.index_dir / "memory" / "add.json"
    before = digest(saved)
    # A new review whose rating is a word turns the column to text: every document would be typed again.
    more = write_csv(tmp_path / "more.csv", [("r9", "P3", "A sturdy tripod.", "four")])
    for run in (
        dict(options=COLUMNS, embed=False, force=True),  # --force answers the shrink guard, not this
        dict(options=IngestOptions(text_column="body", id_column="review_id", item_column="product", passage_words=50), embed=False),
    ):
        with pytest.raises(QAError, match=r"^Every document of collection 'add' must be processed again \(the (types|passage)") as caught:
            ingest(home, more, "add", run.pop("options"), progress=False, **run)
        assert "more.csv lacks 4 of its 4 documents; it was left as it was. Fix: " in str(caught.value) and "--sync" in str(caught.value)
        assert digest(saved) == before
    assert "stars: integer -> text" in str(pytest.raises(QAError, ingest, home, more, "add", COLUMNS, embed=False, progress=False).value)
    # All of them in the source: typed again, none lost.
    write_csv(tmp_path / "all.csv", [*REVIEWS, ("r9", "P3", "A sturdy tripod.", "four")])
    report = ingest(home, tmp_path / "all.csv", "add", COLUMNS, embed=False, progress=False)
    assert report.documents == 5 and {type(d.meta["stars"]) for d in documents(home, "add").values()} == {str}
    # --sync keeps only the source's documents, as asked (the shrink guard still wants --force).
    report = ingest(home, more, "add", IngestOptions(text_column="body", id_column="review_id", item_column="product", passage_words=50),
                    embed=False, sync=True, force=True, progress=False)  # fmt: skip
    assert report.deleted == 4 and sorted(documents(home, "add")) == ["r9"]


@pytest.mark.parametrize("overlap", [2, 0])
def test_a_run_that_leaves_the_passage_settings_unsaid_splits_as_the_collection_is(home, tmp_path, overlap):
    rows = [(*row[:2], row[2] + " It charges in an hour and the case feels solid in the hand.", row[3]) for row in REVIEWS]
    path = write_csv(tmp_path / "r.csv", rows)
    first = ingest(home, path, "kept", replace(COLUMNS, passage_words=10, passage_overlap=overlap), embed=False, progress=False)
    assert first.documents == 4 and first.passages > 4
    # Another file, the flags forgotten: added to them, split the same way (not every document split again, nor refused).
    more = write_csv(tmp_path / "more.csv", [("r9", "P3", "A sturdy tripod that folds down small enough for a backpack pocket.", "5")])
    added = ingest(home, more, "kept", COLUMNS, embed=False, progress=False)
    assert (added.added, added.kept_missing, added.documents) == (1, 4, 5)
    assert f"split into passages as the collection is: words 10, shared {overlap}" in added.notes
    docs = documents(home, "kept")
    assert {d.meta["document_id"] for d in docs.values()} == {"r1", "r2", "r3", "r4", "r9"}
    assert max(len(d.content.split()) for d in docs.values()) == 10
    assert collection_manifest(home, "kept")["splitter"] == {"words": 10, "overlap": overlap}


def test_a_table_read_again_without_the_id_column_its_collection_uses_is_refused(home, tmp_path):
    path = write_csv(tmp_path / "r.csv")
    ingest(home, path, "ids", COLUMNS, embed=False, progress=False)
    saved = home.index_dir / "memory" / "ids.json"
    before = digest(saved)
    forgot = IngestOptions(text_column="body", item_column="product")  # every row would be added again under a content id
    with pytest.raises(QAError, match=r"^Collection 'ids' takes its document ids from the column 'review_id', which .*r\.csv has: "):
        ingest(home, path, "ids", forgot, embed=False, progress=False)
    assert digest(saved) == before
    other_ids = IngestOptions(text_column="body", id_column="body", item_column="product")  # it doubled every document
    with pytest.raises(
        QAError, match=r"read with --id-column body, each of its rows would be added again .* Fix: pass --id-column review_id"
    ):
        ingest(home, path, "ids", other_ids, embed=False, progress=False)
    assert digest(saved) == before
    # A file without that column is read as before (its documents identified by their content).
    other = write_csv(tmp_path / "other.csv", [("P3", "A sturdy tripod.", "5")], header=("product", "body", "stars"))
    assert ingest(home, other, "ids", forgot, embed=False, progress=False).added == 1


def test_a_table_read_again_with_an_id_column_its_collection_did_not_use_is_refused_unless_synced(home, tmp_path):
    """Indexed first by content, then with --id-column: every row was added again, and after --sync a filter on the id
    column found nothing (the dropped documents' metadata columns were still listed)."""
    path = write_csv(tmp_path / "r.csv")
    by_content = IngestOptions(text_column="body", item_column="product")
    ingest(home, path, "rekeyed", by_content, embed=False, progress=False)
    saved = home.index_dir / "memory" / "rekeyed.json"
    before = digest(saved)
    refused = r"line 2: collection 'rekeyed' holds this row under an id taken from its content .* Fix: pass --sync as well"
    with pytest.raises(QAError, match=refused):
        ingest(home, path, "rekeyed", COLUMNS, embed=False, progress=False)
    copy = tmp_path / "copy.csv"  # another file of the same rows, or an upload of them: the same refusal
    copy.write_bytes(path.read_bytes())
    with pytest.raises(QAError, match=refused):
        ingest(home, copy, "rekeyed", COLUMNS, embed=False, progress=False)
    with open(path, "rb") as upload, pytest.raises(QAError, match=refused):
        ingest(home, upload, "rekeyed", COLUMNS, name="upload.csv", embed=False, progress=False)
    assert digest(saved) == before
    synced = ingest(home, path, "rekeyed", COLUMNS, embed=False, sync=True, progress=False)
    assert (synced.added, synced.deleted, synced.documents) == (len(REVIEWS), len(REVIEWS), len(REVIEWS))
    assert "review_id" not in collection_manifest(home, "rekeyed")["meta_types"]  # no document holds it as metadata now
    retrieval = build_retrieval_pipeline("bm25", home, index=open_collection(home, "rekeyed", embeddings=False, progress=False))
    found = retrieval.run(REVIEWS[1][2], filters={"field": "meta.review_id", "operator": "==", "value": REVIEWS[1][0]})["documents"]
    assert [d.id for d in found] == [REVIEWS[1][0]]


def test_a_new_collection_does_not_take_a_subjqa_domains_name(home, tmp_path):
    """`index --collection electronics` was accepted, and the REST API serving that domain hid it."""
    from qa_system.ingestion.changes import create_collection

    home = home.model_copy(update={"data_dir": tmp_path / "data"})  # never the real data: the fixture's is the shared SubjQA
    write_subjqa(home.data_dir)  # electronics
    path = write_csv(tmp_path / "r.csv")
    for make in (
        lambda: ingest(home, path, "electronics", COLUMNS, embed=False, progress=False),
        lambda: create_collection(home, "electronics"),
    ):
        with pytest.raises(
            QAError,
            match=r"^'electronics' is the name of the SubjQA domain in .* Fix: name your own collection otherwise, e\.g\. my-electronics\.$",
        ):
            make()
    assert "electronics" not in [info.name for info in list_collections(home)]
    assert ingest(home, path, "my-electronics", COLUMNS, embed=False, progress=False).added == len(REVIEWS)


def test_a_file_of_another_folder_with_a_saved_documents_name_does_not_replace_it(home, tmp_path):
    for vendor, text in (("alpha", "The Alpha router has four antennas."), ("beta", "The Beta router has two antennas.")):
        (tmp_path / vendor).mkdir()
        (tmp_path / vendor / "README.md").write_text(text, encoding="utf-8")
        (tmp_path / vendor / "README.md.meta.json").write_text(json.dumps({"item_id": vendor.upper()}), encoding="utf-8")
    ingest(home, tmp_path / "alpha", "vendors", embed=False, progress=False)
    saved = home.index_dir / "memory" / "vendors.json"
    before = digest(saved)
    for source in (tmp_path / "beta", tmp_path / "beta" / "README.md"):
        with pytest.raises(
            QAError, match=r"README\.md has the name of document 'README\.md' of collection 'vendors', which was read from .*alpha"
        ):
            ingest(home, source, "vendors", embed=False, progress=False)
        assert digest(saved) == before
    # Indexed from the folder above both, each is named by its path there (--sync drops the old name).
    report = ingest(home, tmp_path, "vendors", embed=False, sync=True, force=True, progress=False)
    assert sorted(documents(home, "vendors")) == ["alpha/README.md", "beta/README.md"] and report.deleted == 1
    # A folder that moved is the same documents: unchanged ones follow it, an edited one then updates without --force.
    (tmp_path / "alpha").rename(tmp_path / "alpha-moved")
    ingest(home, tmp_path / "alpha-moved", "solo", embed=False, progress=False)
    (tmp_path / "alpha-moved").rename(tmp_path / "alpha-again")
    assert ingest(home, tmp_path / "alpha-again", "solo", embed=False, progress=False).unchanged == 1
    (tmp_path / "alpha-again" / "README.md").write_text("The Alpha router has six antennas.", encoding="utf-8")
    assert ingest(home, tmp_path / "alpha-again", "solo", embed=False, progress=False).changed == 1
    # --force: this file is the new version of that one.
    assert ingest(home, tmp_path / "beta", "solo", embed=False, force=True, progress=False).changed == 1
    assert documents(home, "solo")["README.md"].meta["item_id"] == "BETA"


def test_a_refused_run_names_the_files_that_could_not_be_read(home, tmp_path):
    folder = tmp_path / "side"
    folder.mkdir()
    for name, version in (("care", "three"), ("setup", 3)):  # the column is text: one value is a word
        (folder / f"{name}.md").write_text(f"Grinder {name}: clean the burrs every two weeks.", encoding="utf-8")
        (folder / f"{name}.md.meta.json").write_text(json.dumps({"item_id": "ZX2", "version": version}), encoding="utf-8")
    ingest(home, folder, "side", embed=False, progress=False)
    (folder / "care.md.meta.json").write_text('{"item_id": "ZX2", version: "three"}', encoding="utf-8")  # a key left unquoted
    # Without care.md, the column holds numbers only: every document would be typed again, and care.md is missing.
    with pytest.raises(
        QAError, match=r"lacks 1 of its 2 documents \(1 file could not be read: care\.md: .*/side/care\.md\.meta\.json is not valid JSON"
    ):
        ingest(home, folder, "side", embed=False, progress=False)


def test_only_new_and_changed_documents_are_embedded(home, tmp_path):
    path = write_csv(tmp_path / "r.csv")
    assert ingest(home, path, "vec", COLUMNS, progress=False).embedded == 4
    saved = home.index_dir / "memory" / "vec.json"
    before = digest(saved)
    unchanged = ingest(home, path, "vec", COLUMNS, progress=False)
    assert unchanged.embedded == 0 and unchanged.unchanged == 4 and digest(saved) == before
    write_csv(path, [REVIEWS[0], ("r2", "P1", "Its speakers crackle at high volume.", "2"), *REVIEWS[2:]])
    changed = ingest(home, path, "vec", COLUMNS, progress=False)
    assert (changed.embedded_documents, changed.embedded, changed.changed, changed.unchanged) == (1, 1, 1, 3)
    dense = build_retrieval_pipeline("dense", home, index=open_collection(home, "vec"))
    assert dense.run("Do the speakers crackle?", item_id="P1", top_k=1)["documents"][0].id == "r2"


def test_embedding_a_long_document_reports_progress_as_it_goes(home, tmp_path, monkeypatch):
    module = importlib.import_module("qa_system.ingestion.ingest")  # the package exports a function of that name
    monkeypatch.setattr(module, "EMBED_CHUNK", EMBED_CHUNK := 16)  # a short test of a long document
    (tmp_path / "manual.txt").write_text(long_text(3 * EMBED_CHUNK * 20), encoding="utf-8")  # one document, ~50 passages
    heard = []
    report = ingest(
        home, tmp_path / "manual.txt", "long", IngestOptions(passage_words=20, passage_overlap=0), progress=False, on_progress=heard.append
    )
    assert report.embedded > 2 * EMBED_CHUNK
    # Before: one report, after the whole batch was embedded. Now one a chunk, then the batch's.
    assert [p.embedded for p in heard] == [*range(EMBED_CHUNK, report.embedded, EMBED_CHUNK), report.embedded]


def test_asking_a_collection_whose_folder_changed_since_indexing_says_so_with_the_command(cli_home, tmp_path, capsys, monkeypatch):
    import qa_system.ingestion.freshness as freshness

    monkeypatch.setattr(freshness, "CHECK_EVERY_S", 0)  # an edit is seen on the next question, not a while later
    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "kettle.txt").write_text("The kettle boils a litre in three minutes.", encoding="utf-8")
    (folder / "lamp.txt").write_bytes("The lamp\u2019s light is warm.".encode("cp1252"))
    index = ["index", "--input", str(folder), "--collection", "manuals", "--no-embed", "--encoding", "cp1252"]
    assert main(index) == 0
    search = ["search", "How fast does the kettle boil?", "--collection", "manuals"]
    capsys.readouterr()
    assert main(search) == 0 and "note:" not in capsys.readouterr().err
    command = f"qa-system index --input {folder} --collection manuals --encoding cp1252 --store memory --no-embed"
    # A file added: it was answered from the old files without a word.
    (folder / "toaster.txt").write_text("The toaster browns bread evenly.", encoding="utf-8")
    assert main(search) == 0
    assert capsys.readouterr().err == (
        f"note: Collection 'manuals' is answered as last indexed, and files of {folder} were added, removed or edited since "
        f"(3 files now, 2 then). Fix: run `{command}` to update it (only what changed is processed again).\n"
    )
    assert main(["collections"]) == 0 and "(3 files now, 2 then)" in capsys.readouterr().err  # the listing says so too
    assert main(["collections", "--json"]) == 0 and "(3 files now, 2 then)" in json.loads(capsys.readouterr().out)[0]["source_notice"]
    assert main(shlex.split(command)[1:]) == 0
    capsys.readouterr()
    assert main(search) == 0 and "note:" not in capsys.readouterr().err
    assert main(["collections"]) == 0 and "note:" not in capsys.readouterr().err
    # A file edited: the same.
    (folder / "kettle.txt").write_text("The kettle boils a litre in two minutes.", encoding="utf-8")
    assert main(search) == 0 and f"were added, removed or edited since. Fix: run `{command}`" in capsys.readouterr().err
    # Touched without a change: indexing again finds nothing to do, and records the files as they are now.
    assert main(shlex.split(command)[1:]) == 0
    os.utime(folder / "lamp.txt")
    assert main(search) == 0 and "note:" in capsys.readouterr().err
    assert main(shlex.split(command)[1:]) == 0 and "0 added, 0 changed, 3 unchanged" in capsys.readouterr().out
    assert main(search) == 0 and "note:" not in capsys.readouterr().err


def test_a_change_to_any_file_a_collection_was_indexed_from_is_noticed(cli_home, tmp_path, capsys):
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text("id,text\n1,The kettle boils a litre in three minutes.\n", encoding="utf-8")
    second.write_text("id,text\n2,The lamp's light is warm.\n", encoding="utf-8")
    for source in (first, second):
        assert main(["index", "--input", str(source), "--collection", "both", "--no-embed", "--id-column", "id"]) == 0
    search = ["search", "How fast does the kettle boil?", "--collection", "both"]
    capsys.readouterr()
    assert main(search) == 0 and "note:" not in capsys.readouterr().err
    # The first file edited: only the file indexed last was watched, so nothing was said.
    first.write_text("id,text\n1,The kettle boils a litre in two minutes.\n", encoding="utf-8")
    assert main(search) == 0
    assert (
        f"{first} was edited since. Fix: run `qa-system index --input {first} --collection both --id-column id" in capsys.readouterr().err
    )
    # --sync keeps only its own source's documents, so only that source is watched from then on.
    assert main(["index", "--input", str(second), "--collection", "both", "--no-embed", "--id-column", "id", "--sync"]) == 0
    capsys.readouterr()
    assert main(search) == 0 and "note:" not in capsys.readouterr().err


def test_a_run_that_fails_late_leaves_the_collection_as_it_was(home, tmp_path):
    path = write_csv(tmp_path / "r.csv")
    ingest(home, path, "safe", COLUMNS, embed=False, progress=False)
    saved = home.index_dir / "memory" / "safe.json"
    before = digest(saved)
    rows = [(f"n{i}", "P9", f"New review number {i}.", "3") for i in range(700)]  # several batches staged first
    write_csv(path, [*REVIEWS, *rows])
    with path.open("a", encoding="utf-8") as handle:
        handle.write('bad,row,"with too many",fields,here\n')
    with pytest.raises(QAError, match="line 706: the row has more fields"):
        ingest(home, path, "safe", COLUMNS, embed=False, progress=False)
    assert digest(saved) == before
    assert list((home.index_dir / "staging").iterdir()) == []


@pytest.mark.parametrize("kill", ["SIGKILL", "SIGTERM"])
def test_a_signal_while_saving_keeps_the_collection(home, tmp_path, kill):
    """kill -9 stops the run where it is; SIGTERM (a service manager, `kill`) ended `index` with exit -15 and not a word,
    where Ctrl+C said what was saved: now it says so too, exit 143."""
    from qa_system.cli.main import TERMINATED

    path = write_csv(tmp_path / "r.csv")
    ingest(home, path, "killed", COLUMNS, embed=False, progress=False)
    saved = home.index_dir / "memory" / "killed.json"
    before = digest(saved)
    write_csv(path, [*REVIEWS, ("r5", "P3", "A sturdy tripod.", "5")])
    script = textwrap.dedent(f"""
        import os, signal, sys
        os.fsync = lambda *args: os.kill(os.getpid(), signal.{kill})
        from qa_system.cli import main
        sys.exit(main(["index", "--input", {str(path)!r}, "--collection", "killed", "--text-column", "body",
                       "--id-column", "review_id", "--no-embed"]))
    """)
    killed = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "QA_HOME": str(home.home)}, capture_output=True, text=True, timeout=300
    )
    if kill == "SIGKILL":
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    else:
        assert killed.returncode == 143 and killed.stderr.strip().splitlines()[-1] == TERMINATED, killed.stderr
    assert digest(saved) == before
    assert ingest(home, path, "killed", COLUMNS, embed=False, progress=False).added == 1
    assert sorted(p.name for p in saved.parent.iterdir()) == ["killed.json"]


@pytest.mark.parametrize("then", ["finishes", "goes on", "passes on an interrupt"])
def test_a_sigterm_swallowed_by_code_that_catches_everything_still_stops(home, tmp_path, then):
    """ONNX Runtime, loading the encoder, caught the stop and `index` went on to its end, exit 0 (a timing a helper met
    in 4 of 13 tries). A cache that finds its load failed meanwhile passes the stop on as an interrupt: still a SIGTERM."""
    from qa_system.cli.main import TERMINATED

    path = write_csv(tmp_path / "r.csv")
    # "goes on": past the run's timeout, unless the process is ended
    after = {"finishes": "pass", "goes on": "time.sleep(3600)", "passes on an interrupt": "raise KeyboardInterrupt"}[then]
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        def swallowing(*args):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
            except BaseException:
                pass
            {after}
        os.fsync = swallowing
        from qa_system.cli import main
        sys.exit(main(["index", "--input", {str(path)!r}, "--collection", "swallowed", "--text-column", "body",
                       "--id-column", "review_id", "--no-embed"]))
    """)
    stopped = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "QA_HOME": str(home.home)}, capture_output=True, text=True, timeout=300
    )
    assert stopped.returncode == 143 and stopped.stderr.strip().splitlines()[-1] == TERMINATED, stopped.stderr


def test_a_damaged_collection_file_is_one_line_naming_the_fix(home, tmp_path):
    path = write_csv(tmp_path / "r.csv")
    ingest(home, path, "damaged", COLUMNS, embed=False, progress=False)
    saved = home.index_dir / "memory" / "damaged.json"
    lines = saved.read_text(encoding="utf-8").splitlines(keepends=True)
    saved.write_text("".join(lines[:2] + ["{broken\n"] + lines[3:]), encoding="utf-8")
    with pytest.raises(QAError, match="collection 'damaged' is unreadable.*collections --delete damaged"):
        ingest(home, path, "damaged", COLUMNS, embed=False, progress=False)


# ------------------------------------------------------------------ collections


def test_collections_list_and_delete(cli_home, tmp_path, capsys):
    write_csv(tmp_path / "r.csv")
    assert (
        main(
            [
                "index",
                "--input",
                str(tmp_path / "r.csv"),
                "--collection",
                "shop",
                "--text-column",
                "body",
                "--id-column",
                "review_id",
                "--item-column",
                "product",
                "--no-embed",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "4 added" in out and "documents/s" in out
    assert main(["collections"]) == 0
    listing = capsys.readouterr().out
    assert "shop" in listing and "none (BM25 only)" in listing
    [info] = list_collections(cli_home)
    assert "updated (UTC)" in listing and info.updated[:16].replace("T", " ") in listing  # when a collection last changed
    assert (info.name, info.documents, info.kind, info.encoder) == ("shop", 4, "ingested", None) and info.size_bytes > 0
    assert main(["products", "--collection", "shop"]) == 0
    assert capsys.readouterr().out.splitlines() == ["P1\t2 documents", "P2\t2 documents"]  # counted as documents, not reviews
    assert main(["search", "cable", "--collection", "shop", "--item", "P2", "--top-k", "1"]) == 0
    assert "document r4" in capsys.readouterr().out
    assert main(["search", "cable", "--collection", "shop", "--item", "p2"]) == 2  # typed in another case: the id is named
    assert capsys.readouterr().err.strip() == (
        "error: Item 'p2' has no documents in collection 'shop'. "
        "Fix: pick 'P2' (ids are matched as written), or another item id that `qa-system products --collection shop` lists."
    )
    assert list(cli_home.bm25_cache_of("shop").iterdir())  # the search left its BM25 index for the next one
    assert main(["collections", "--delete", "shop"]) == 0
    assert list_collections(cli_home) == [] and not cli_home.bm25_cache_of("shop").exists()  # its cache goes with it
    assert main(["collections", "--delete", "shop"]) == 2
    err = capsys.readouterr().err  # deleting what is not there: building it is no fix
    assert "No memory collection named 'shop'" in err and err.endswith(
        "Fix: name one that `qa-system collections` lists; one in another store is named with --store (elasticsearch, opensearch, faiss).\n"
    )


def test_deleting_a_collection_waits_for_the_ingestion_into_it(home, tmp_path):
    import threading

    from qa_system.disk_cache import taking_turns
    from qa_system.ingestion.collections import ingestion_lock

    ingest(home, write_csv(tmp_path / "r.csv"), "busy", COLUMNS, embed=False, progress=False)
    deleted = threading.Event()
    with taking_turns(ingestion_lock(home, "busy"), "a test holds the turn", remove=True):  # an ingestion into it is running
        thread = threading.Thread(target=lambda: (delete_collection(home, "busy"), deleted.set()))
        thread.start()
        assert not deleted.wait(2)  # it would otherwise be saved again by that ingestion, with only its documents
        assert [c.name for c in list_collections(home)] == ["busy"]
    thread.join(60)
    assert deleted.is_set() and list_collections(home) == []


def test_a_faiss_collection_updates_incrementally(tmp_path):
    settings = Settings.from_env(home=tmp_path / "home", store="faiss")
    path = write_csv(tmp_path / "r.csv")
    ingest(settings, path, "vectors", COLUMNS, progress=False)
    write_csv(path, [("r2", "P1", "Its speakers crackle at high volume.", "2"), *REVIEWS[2:]])
    report = ingest(settings, path, "vectors", COLUMNS, sync=True, progress=False)
    assert (report.embedded, report.deleted, report.documents, report.passages) == (1, 1, 3, 3)
    dense = build_retrieval_pipeline("dense", settings, index=open_collection(settings, "vectors"))
    assert dense.run("Do the speakers crackle?", item_id="P1", top_k=1)["documents"][0].id == "r2"
    assert [c.name for c in list_collections(settings)] == ["vectors"]
    delete_collection(settings, "vectors")
    assert list_collections(settings) == [] and not any((tmp_path / "home" / "indexes" / "faiss").iterdir())


@pytest.mark.parametrize("damage", ["index.faiss missing", "index.json missing", "index.faiss truncated"])
def test_a_damaged_faiss_collection_is_named_as_such_and_neither_answers_nor_is_rebuilt_from_nothing(tmp_path, damage):
    settings = Settings.from_env(home=tmp_path / "home", store="faiss")
    path = write_csv(tmp_path / "r.csv")
    for name in ("good", "broken"):
        ingest(settings, path, name, COLUMNS, progress=False)
    folder = tmp_path / "home" / "indexes" / "faiss" / "broken"
    file, how = damage.split(" ")
    if how == "missing":
        (folder / file).unlink()
    else:
        os.truncate(folder / file, 100)
    message = r"^The saved FAISS collection 'broken' is damaged.* Fix: delete it \(`qa-system collections --store faiss --delete broken`\)"
    with pytest.raises(QAError, match=message):
        open_collection(settings, "broken")
    more = write_csv(tmp_path / "more.csv", [("r9", "P3", "A sturdy tripod.", "5")])
    with pytest.raises(QAError, match=message):  # not an empty collection that the new file would be all of
        ingest(settings, more, "broken", COLUMNS, progress=False)
    # The others are listed and served; the damaged one is listed (read from its manifest alone, a truncated file is
    # found when it opens), so that it can be deleted.
    broken = "unreadable" if how == "missing" else "ingested"
    assert {c.name: c.kind for c in list_collections(settings)} == {"broken": broken, "good": "ingested"}
    assert open_collection(settings, "good").store.count_documents() == 4
    delete_collection(settings, "broken")
    assert [c.name for c in list_collections(settings)] == ["good"]


def test_the_subjqa_domain_is_a_collection_too(settings, monkeypatch, capsys):
    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    assert main(["index", "--domain", "electronics", "--no-embed"]) == 0
    capsys.readouterr()
    [info] = list_collections(settings)
    assert (info.name, info.kind, info.documents) == (
        "subjqa-electronics",
        "subjqa",
        6,
    )  # one document per review, a review in two splits included
    assert main(["search", "Is the screen sharp?", "--collection", "subjqa-electronics", "--item", "KINDLE", "--top-k", "1"]) == 0
    assert "review r-kindle-1" in capsys.readouterr().out
    with pytest.raises(QAError, match="SubjQA collection"):
        ingest(settings, settings.data_dir / "electronics" / "splits" / "test.csv", "subjqa-electronics", embed=False, progress=False)
    # CSV labels name a review as `search` shows it (its review id), or by its stored id: the same document.
    from qa_system.ingestion.labels import load_labels

    labels = settings.home / "labels.csv"
    labels.write_text(
        "question,answer,document_id\nIs the screen sharp?,The screen is sharp,r-kindle-1\nIs it sharp?,sharp,electronics/r-kindle-1\n",
        encoding="utf-8",
    )
    questions = load_labels(labels, settings, "subjqa-electronics").questions
    assert [q.document_id for q in questions] == ["electronics/r-kindle-1"] * 2 and questions[0].item_id == "KINDLE"


def test_no_collection_of_your_own_takes_a_subjqa_name(settings, tmp_path, monkeypatch, capsys):
    """Every door takes the same rule: a name the REST API refuses for your documents is refused by the CLI (and the page,
    which calls the same ``ingest``), before SubjQA's domain is built under it."""
    monkeypatch.setenv("QA_HOME", str(settings.home))
    source = tmp_path / "mine.csv"
    source.write_text("id,text\n1,Great battery life.\n")
    assert main(["index", "--input", str(source), "--collection", "subjqa-books", "--no-embed"]) == 2
    assert "'subjqa-books' is reserved for the SubjQA collections" in capsys.readouterr().err
    with pytest.raises(QAError, match="reserved for the SubjQA collections"):
        ingest(settings, source, "subjqa-electronics", embed=False, progress=False)
    assert list_collections(settings) == []


# ------------------------------------------------------------------ bad input: one line, exit 2, the collection untouched


BAD_INPUTS = {
    "latin-1": (b"review_id,product,body\nr9,P1,Caf\xe9 au lait was great\n", "csv", [], "--encoding cp1252"),
    "mixed encodings": (
        "review_id,product,body\nr8,P1,Crème brûlée\n".encode() + b"r9,P1,Caf\xe9\n",
        "csv",
        [],
        "mixes encodings: line 3 is not UTF-8 while line 2 is",
    ),
    "duplicate ids": (b"review_id,product,body\nr1,P1,one\nr2,P1,two\nr1,P2,three\n", "csv", [], "the id 'r1' was already used by"),
    "missing column": (
        b"review_id,product,comment\nr1,P1,text\n",
        "csv",
        [],
        "has no column 'body' (--text-column); its columns are: review_id, product, comment",
    ),
    "binary renamed .csv": (b"\x00\x01\x02binary\x00" * 100, "csv", [], "is not a text file: it looks like binary data"),
    "an Excel workbook renamed .csv": (
        b"PK\x03\x04" + b"\x00" * 100,
        "csv",
        [],
        "is not a text file: it looks like a ZIP archive (an Excel .xlsx workbook?)",
    ),
    "zero documents": (b"review_id,product,body\n,,\nr2,P1,\n", "csv", [], "holds no documents (1 empty rows and 1 empty texts skipped)"),
    "header only": (b"review_id,product,body\n", "csv", [], "holds no documents"),
    "an empty file": (b"", "csv", [], "holds no documents"),
    "PDF without a text layer": (pdf(None), "pdf", [], "has no text layer (a scanned PDF?)"),
    "JSON lines with a broken line": (
        b'{"body": "fine", "review_id": "a", "product": "P1"}\n{"body": broken}\n',
        "jsonl",
        [],
        "line 2 is not JSON",
    ),
    "unknown encoding": (b"review_id,product,body\nr1,P1,x\n", "csv", ["--encoding", "klingon"], "Unknown encoding 'klingon'"),
    "a quote left open": (  # read as one field swallowing every row after it
        b'review_id,product,body\nr1,P1,"open\nr2,P1,two\nr3,P1,three\n',
        "csv",
        [],
        "the row that starts on line 2 is not readable CSV (unexpected end of data)",
    ),
    "a JSON line with a key twice": (  # its last value was kept, unsaid
        b'{"body": "fine", "review_id": "a", "product": "P1", "product": "P2"}\n',
        "jsonl",
        [],
        "line 1 is not one document: the key 'product' appears twice. Fix: give each key once.",
    ),
    "one line longer than a document may be": (  # was "close the quote", where there is none
        b"x" * 32_000_010 + b"\n",
        "csv",
        [],
        "a field of the row that starts on line 1 is longer than a document may be (32,000,000 characters). Fix: split that text",
    ),
    "a JSON line whose text key is misspelt": (  # was skipped as an empty text
        b'{"body": "fine", "review_id": "a", "product": "P1"}\n{"Body": "lost", "review_id": "b", "product": "P1"}\n',
        "jsonl",
        [],
        "line 2 has no 'body' key for its text; its keys are: Body, review_id, product",
    ),
    "UTF-8 read as UTF-16": (b"review_id,product,body\nr1,P1,x\n", "csv", ["--encoding", "utf-16"], "does not start with BOM"),
    "Windows quotes": (b"review_id,product,body\nr9,P1,\x93Smart\x94 \x80 5\n", "csv", [], "--encoding cp1252"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_keeps_the_collection(cli_home, tmp_path, capsys, case):
    data, suffix, extra, message = BAD_INPUTS[case]
    good = write_csv(tmp_path / "good.csv")
    columns = ["--text-column", "body", "--id-column", "review_id", "--item-column", "product"]
    assert main(["index", "--input", str(good), "--collection", "kept", *columns, "--no-embed"]) == 0
    saved = cli_home.index_dir / "memory" / "kept.json"
    before = digest(saved)
    capsys.readouterr()
    bad = tmp_path / f"bad.{suffix}"
    bad.write_bytes(data)
    assert main(["index", "--input", str(bad), "--collection", "kept", *(columns if suffix != "pdf" else []), "--no-embed", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Fix:" in err and err.count("\n") == 1, err
    assert digest(saved) == before


@pytest.mark.parametrize("name", ["../outside", "a/b", "..", "Upper", ""])
def test_collection_names_never_point_outside_the_index_directory(cli_home, tmp_path, capsys, name):
    write_csv(tmp_path / "r.csv")
    assert main(["index", "--input", str(tmp_path / "r.csv"), "--collection", name, "--text-column", "body", "--no-embed"]) == 2
    err = capsys.readouterr().err
    fix = "Fix: write it in lowercase: 'upper'." if name == "Upper" else "Fix: use lowercase letters"  # the name meant
    assert "collection name" in err and fix in err and err.count("\n") == 1
    assert not (cli_home.home / "outside.json").exists() and not (cli_home.index_dir / "outside.json").exists()
    for door in (["ask", "Is it good?", "--collection", name], ["collections", "--delete", name]):
        assert main(door) == 2
        assert "collection name" in capsys.readouterr().err


def test_a_table_saved_as_txt_with_columns_named_is_refused_not_read_as_one_document(cli_home, tmp_path, capsys):
    export = tmp_path / "reviews.txt"  # Excel's "Text (Tab delimited)"
    export.write_text("review_id\tproduct\tbody\nr1\tP1\tGreat battery.\nr2\tP1\tDim screen.\n", encoding="utf-8")
    columns = ["--text-column", "body", "--id-column", "review_id", "--item-column", "product", "--no-embed"]
    assert main(["index", "--input", str(export), "--collection", "txt", *columns]) == 2
    assert (
        "is read as documents (.txt, .md, .html, .pdf files: one document each), which have no --text-column. Fix: for a table saved as .txt, pass --format tsv"
        in capsys.readouterr().err
    )
    assert main(["index", "--input", str(export), "--collection", "txt", *columns, "--format", "tsv"]) == 0
    assert sorted(documents(cli_home, "txt")) == ["r1", "r2"]


def test_an_empty_input_path_or_a_dataframe_is_refused_naming_the_fix(cli_home, tmp_path, capsys, monkeypatch):
    import pandas as pd

    (tmp_path / "stray.txt").write_text("A note that is no document of the collection.", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # "" was the current folder: its stray files were indexed
    assert main(["index", "--input", "", "--collection", "stray", "--no-embed"]) == 2
    assert capsys.readouterr().err.startswith("error: The input path is empty. Fix: name the file or folder to index")
    assert not (cli_home.index_dir / "memory" / "stray.json").exists()
    with pytest.raises(QAError, match=r"not a DataFrame\. Fix: write it as a table first: df\.to_csv\('reviews\.csv', index=False\)"):
        ingest(cli_home, pd.DataFrame({"text": ["Great battery."]}), "frame", embed=False, progress=False)


def test_an_interrupt_after_the_save_does_not_say_nothing_was_changed(cli_home, tmp_path, capsys, monkeypatch):
    from qa_system.cli.main import INTERRUPTED
    from qa_system.ingestion.ingest import IngestReport

    def interrupted(self):
        raise KeyboardInterrupt  # Ctrl-C as the report is printed: the collection is saved already

    monkeypatch.setattr(IngestReport, "summary", interrupted)
    command = [
        "index",
        "--input",
        str(write_csv(tmp_path / "r.csv")),
        "--collection",
        "late",
        "--text-column",
        "body",
        "--id-column",
        "review_id",
        "--no-embed",
    ]
    assert main(command) == 130
    assert capsys.readouterr().err.strip() == INTERRUPTED and "whole" in INTERRUPTED and "nothing" not in INTERRUPTED
    assert sorted(documents(cli_home, "late")) == ["r1", "r2", "r3", "r4"]  # it said "nothing saved was changed"


def test_a_collection_name_too_long_says_so(cli_home, tmp_path, capsys):
    write_csv(tmp_path / "r.csv")
    assert main(["index", "--input", str(tmp_path / "r.csv"), "--collection", "a" * 201, "--text-column", "body", "--no-embed"]) == 2
    assert (
        capsys.readouterr().err
        == "error: The collection name is 201 characters long; at most 200 are taken. Fix: pick a shorter name, e.g. my-reviews.\n"
    )


def test_a_utf8_byte_order_mark_and_latin_1_on_request(home, tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfreview_id,product,body\nr1,P1,Caf\xc3\xa9 au lait\n")
    ingest(home, path, "bom", COLUMNS, progress=False, embed=False)
    assert documents(home, "bom")["r1"].content == "Café au lait"
    path.write_bytes(b"review_id,product,body\nr1,P1,Caf\xe9 au lait\n")
    ingest(home, path, "latin", IngestOptions(text_column="body", id_column="review_id", encoding="latin-1"), progress=False, embed=False)
    assert documents(home, "latin")["r1"].content == "Café au lait"


def test_a_folder_with_a_file_in_another_encoding_is_refused_whole_until_encoding_names_it(cli_home, tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "new.txt").write_bytes("Crème brûlée: the torch reaches 1300 °C.".encode())
    (folder / "plain.md").write_text("The kettle boils a litre in three minutes.", encoding="utf-8")
    assert main(["index", "--input", str(folder), "--collection", "enc", "--no-embed"]) == 0
    saved = documents(cli_home, "enc")
    (folder / "old.txt").write_bytes("Café \u201ccrème\u201d \u2013 served hot.".encode("cp1252"))  # Windows' Western text
    capsys.readouterr()
    # It indexed the UTF-8 files, left old.txt out and exited 0.
    assert main(["index", "--input", str(folder), "--collection", "enc", "--no-embed"]) == 2
    assert capsys.readouterr().err == (
        f"error: 1 file of {folder} is not UTF-8 text: old.txt (byte 0xe9 at offset 3); nothing was indexed. "
        "Fix: pass --encoding cp1252 if it is Windows' Western text (Latin-1 with Windows' quotes and euro sign; "
        "the folder's UTF-8 files stay UTF-8), or re-save it as UTF-8.\n"
    )
    assert documents(cli_home, "enc").keys() == saved.keys()
    assert main(["index", "--input", str(folder), "--collection", "enc", "--no-embed", "--encoding", "cp1252"]) == 0
    assert sorted(d.content for d in documents(cli_home, "enc").values()) == [
        "Café \u201ccrème\u201d \u2013 served hot.",
        "Crème brûlée: the torch reaches 1300 °C.",
        "The kettle boils a litre in three minutes.",
    ]


PYTHON_API_MISUSE = {
    "no source": (
        lambda api, s, f: api.ingest(s, None, "mine"),
        "source must be a path (str or pathlib.Path) or an open binary file, not None.",
    ),
    "a number as the path": (
        lambda api, s, f: api.ingest(s, 5, "mine"),
        "source must be a path (str or pathlib.Path) or an open binary file, not an int (5).",
    ),
    "a list of paths": (
        lambda api, s, f: api.ingest(s, [str(f)], "mine"),
        "source must be a path (str or pathlib.Path) or an open binary file, not a list (['",
    ),
    "a file opened as text": (
        lambda api, s, f: api.ingest(s, f.open(encoding="utf-8"), "mine", name="r.csv"),
        "source must be a path or a file opened in binary mode",
    ),
    "an empty path": (lambda api, s, f: api.ingest(s, "", "mine"), "The input path is empty."),
    "no settings": (
        lambda api, s, f: api.ingest(None, f, "mine"),
        "settings must be a qa_system.Settings (qa_system.Settings.from_env()), not None.",
    ),
    "a list as the collection": (lambda api, s, f: api.ingest(s, f, ["mine"]), "The collection name must be a str, not a list (['mine'])."),
    "options as a dict": (
        lambda api, s, f: api.ingest(s, f, "mine", {"text_column": "body"}),
        "options must be a qa_system.IngestOptions, not a dict ({'text_column': 'body'}).",
    ),
    "embed as text": (lambda api, s, f: api.ingest(s, f, "mine", COLUMNS, embed="no"), "embed must be True or False, not a str ('no')."),
    "a list as a column": (
        lambda api, s, f: api.IngestOptions(text_column=["body"]),
        "text_column must be a str or None, not a list (['body']).",
    ),
    "a number as the encoding": (
        lambda api, s, f: api.IngestOptions(encoding=1252),
        "encoding must be the name of a text encoding (a str such as 'cp1252'), not an int (1252).",
    ),
    "no settings to list": (lambda api, s, f: api.list_collections(None), "settings must be a qa_system.Settings"),
    "a number as the name to open": (lambda api, s, f: api.open_collection(s, 5), "The collection name must be a str, not an int (5)."),
    "no name to delete": (lambda api, s, f: api.delete_collection(s, None), "The collection name must be a str, not None."),
    "no domain to build": (
        lambda api, s, f: api.build_index(s, None),
        "domains must be a SubjQA domain's name (a str) or a list of them, not None.",
    ),
    "a number as the domain to open": (
        lambda api, s, f: api.open_index(s, 5),
        "domains must be a SubjQA domain's name (a str) or a list of them, not an int (5).",
    ),
}


@pytest.mark.parametrize("call, message", PYTHON_API_MISUSE.values(), ids=PYTHON_API_MISUSE.keys())
def test_the_python_api_refuses_an_argument_of_the_wrong_type_in_one_line_naming_it(home, tmp_path, call, message):
    import qa_system

    path = write_csv(tmp_path / "r.csv")
    ingest(home, path, "mine", COLUMNS, embed=False, progress=False)
    saved = digest(home.index_dir / "memory" / "mine.json")
    # They were AttributeErrors and TypeErrors from deep inside (or "The collection name is empty." for a list).
    with pytest.raises(QAError) as refused:
        call(qa_system, home, path)
    assert str(refused.value).startswith(message) and " Fix: " in str(refused.value) and "\n" not in str(refused.value)
    assert digest(home.index_dir / "memory" / "mine.json") == saved


def test_empty_rows_and_texts_are_skipped_and_counted(home, tmp_path):
    path = tmp_path / "gaps.csv"
    path.write_text("review_id,product,body\n\nr1,P1,kept\n,,\nr2,P1,   \nr3,P2,also kept\n", encoding="utf-8")
    report = ingest(home, path, "gaps", COLUMNS, progress=False, embed=False)
    assert (report.read, report.empty_rows, report.empty_texts) == (2, 2, 1)  # a blank line and ",," are empty rows
    assert "  skipped: 2 empty rows, 1 empty texts." in report.summary()


def test_a_document_over_the_limit_is_refused_with_the_limit(home, tmp_path, monkeypatch):
    import qa_system.sources.records as records

    monkeypatch.setattr(records, "MAX_DOCUMENT_CHARS", 1000)
    (tmp_path / "huge.txt").write_text("word " * 300, encoding="utf-8")
    with pytest.raises(QAError, match="1,500 characters long, more than the 1,000 a document may have"):
        ingest(home, tmp_path / "huge.txt", "huge", progress=False, embed=False)


def test_a_compressed_file_is_named_as_such(home, tmp_path):
    (tmp_path / "reviews.csv").write_bytes(b"\x1f\x8b" + zlib.compress(b"review_id,body\nr1,text\n"))
    with pytest.raises(QAError, match="looks like a gzip archive"):
        ingest(home, tmp_path / "reviews.csv", "gz", progress=False, embed=False)


# ------------------------------------------------------------------ SubjQA domains with dev and test only (books, movies)


def test_a_domain_with_only_dev_and_test_indexes_and_evaluates(tmp_path, monkeypatch, capsys, tiny_reader):
    books = {split: [dict(r, domain="books") for r in SPLIT_ROWS[split]] for split in ("dev", "test")}
    data_dir = write_subjqa(tmp_path / "subjqa", books, domain="books")
    monkeypatch.setenv("QA_DATA_DIR", str(data_dir))
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    assert main(["index", "--domain", "books", "--no-embed"]) == 0
    assert "into the memory index 'subjqa-books'" in capsys.readouterr().out
    manifest = open_collection(Settings.from_env(), "subjqa-books").manifest
    assert manifest["splits"] == ["dev", "test"] and manifest["documents"] == 4  # r-kindle-3 is in dev and test: one document
    out = tmp_path / "reports"
    assert main(["eval", "retriever", "--domain", "books", "--retriever", "bm25", "--k", "1", "3", "--out", str(out / "retriever")]) == 0
    assert json.loads((out / "retriever" / "report.json").read_text())["questions"] == 4
    assert main(["eval", "pipeline", "--domain", "books", "--reader", str(tiny_reader), "--out", str(out / "pipeline")]) == 0
    assert (out / "pipeline" / "report.md").is_file()
    capsys.readouterr()
    assert main(["eval", "reader", "--domain", "books", "--split", "train", "--reader", str(tiny_reader)]) == 2
    err = capsys.readouterr().err
    assert "No 'train' split for domain 'books'" in err and "Fix: use one of: dev, test." in err


# ------------------------------------------------------------------ search servers


@pytest.mark.opensearch
def test_an_opensearch_collection_updates_behind_its_alias(opensearch_url, tmp_path):
    import uuid

    from qa_system.stores import delete_opensearch_index, opensearch_client

    settings = Settings.from_env(home=tmp_path / "home", store="opensearch", opensearch_url=opensearch_url)
    name = f"qa-ingest-test-{uuid.uuid4().hex[:8]}"
    path = write_csv(tmp_path / "r.csv")
    try:
        first = ingest(settings, path, name, COLUMNS, progress=False)  # the test server has no k-NN: BM25 only
        assert first.documents == first.passages == 4
        write_csv(path, [REVIEWS[0], ("r2", "P1", "The screen is bright even in sunlight.", "4"), REVIEWS[2]])
        update = ingest(settings, path, name, COLUMNS, sync=True, progress=False)
        assert (update.changed, update.unchanged, update.deleted, update.passages) == (1, 2, 1, 3)
        retrieval = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, name))
        found = retrieval.run("bright sunlight", item_id="P1", top_k=2)["documents"]
        assert found[0].id == "r2" and found[0].content.startswith("The screen is bright")
        assert [d.id for d in retrieval.run("cable broke months", top_k=3)["documents"]] == []  # r4 went with --sync
        info = next(c for c in list_collections(settings) if c.name == name)
        assert (info.documents, info.passages, info.kind) == (3, 3, "ingested") and info.size_bytes > 0
        before = opensearch_client(settings).indices.get_alias(name=name)
        bad = tmp_path / "bad.csv"
        bad.write_bytes(b"review_id,product,body\nr1,P1,ok\nr1,P1,again\n")
        with pytest.raises(QAError, match="already used"):
            ingest(settings, bad, name, COLUMNS, progress=False)
        assert opensearch_client(settings).indices.get_alias(name=name) == before  # the same index serves
        delete_collection(settings, name)
        assert all(c.name != name for c in list_collections(settings))
    finally:
        delete_opensearch_index(settings, name)
        opensearch_client(settings).indices.delete(index=f"{name}*", ignore_unavailable=True)


# ------------------------------------------------------------------ evaluation on your own labels


def test_csv_labels_name_the_collection_documents(home, tmp_path):
    from qa_system.ingestion.labels import load_labels

    ingest(home, write_csv(tmp_path / "r.csv"), "labelled", COLUMNS, embed=False, progress=False)
    path = tmp_path / "labels.csv"
    path.write_text(
        "question,answer,document_id,item_id\nHow long does it last?,a whole week,r1,P1\nHow long does it last?,a week,r1,P1\n"
        "Is it loud?,,r3,\nWhat broke?,The cable broke,r4,P2\n",
        encoding="utf-8",
    )
    labels = load_labels(path, home, "labelled")
    by_question = {q.question: q for q in labels.questions}
    assert [(a.text, a.start) for a in by_question["How long does it last?"].answers] == [("a whole week", 24), ("a week", None)]
    # the answer not in its document's text is named, so that it can be mended
    assert labels.notes == [
        "1 answer is not found in its document's text (it still counts, as text): 'a week' (labels-2: 'How long does it last?')."
    ]
    assert by_question["Is it loud?"].no_answer and by_question["Is it loud?"].item_id == "P2"  # the document's item
    assert by_question["What broke?"].context == REVIEWS[3][2] and by_question["What broke?"].split is None
    path.write_text("question,answer,document_id\nWhy?,because,r404\n", encoding="utf-8")
    with pytest.raises(QAError, match="line 2: document 'r404' is not in collection 'labelled'"):
        load_labels(path, home, "labelled")
    path.write_text("question,reply,doc\nWhy?,because,r1\n", encoding="utf-8")
    with pytest.raises(QAError, match="has no column.s. answer, document_id; its columns are: question, reply, doc"):
        load_labels(path, home, "labelled")
    # A product that is not the document's was taken as it was: the question asked of it never found its document (0).
    path.write_text("question,answer,document_id,item_id\nHow long does it last?,a whole week,r1,p1\n", encoding="utf-8")
    with pytest.raises(QAError, match=r"labels.csv line 2: item_id 'p1' is not the product of document 'r1' \('P1'\)\. Fix: leave"):
        load_labels(path, home, "labelled")
    path.write_text("question,answer,document_id,item_id\nHow long does it last?,a whole week,r1, P1 \n", encoding="utf-8")
    assert load_labels(path, home, "labelled").questions[0].item_id == "P1"
    # a spreadsheet saved in Europe separates its columns with ";", as `index` reads them
    path.write_text("question;answer;document_id\nHow long does it last?;a whole week, or more;r1\n", encoding="utf-8")
    assert [a.text for a in load_labels(path, home, "labelled").questions[0].answers] == ["a whole week, or more"]
    # a row whose question is blank is said, not dropped unseen; a header naming a column twice is refused, as a table's is
    path.write_text("question,answer,document_id\n   ,a week,r1\n,,\nWhat broke?,The cable broke,r4\n", encoding="utf-8")
    labels = load_labels(path, home, "labelled")
    assert len(labels.questions) == 1 and labels.notes == ["labels.csv: 1 row without a question was left out."]
    path.write_text("question,question,answer,document_id\nWhy?,How?,because,r1\n", encoding="utf-8")
    with pytest.raises(QAError, match=r"labels.csv repeats the column name\(s\) question\. Fix: give every column a unique name"):
        load_labels(path, home, "labelled")
    # a row of more fields than the header was read as if it had not; no question at all told to index the labels file
    path.write_text("question,answer,document_id\nHow long does it last?,a week, or more,r1\n", encoding="utf-8")
    with pytest.raises(QAError, match=r"labels.csv line 2: the row has 4 fields where the header has 3\. Fix: quote a field"):
        load_labels(path, home, "labelled")
    for text, rows in (
        ("question,answer,document_id\n", ""),
        ("question,answer,document_id\n ,a week,r1\n", " (1 row without a question)"),
    ):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(QAError, match=rf"labels.csv holds no labelled question{re.escape(rows)}\. Fix: write one question a row"):
            load_labels(path, home, "labelled")


def test_retrievers_are_evaluated_on_a_collection_without_items(cli_home, tmp_path, capsys, monkeypatch):
    # the questions are asked of every document: the chance baseline's candidates were a crash (no filter to match)
    columns = ["--text-column", "body", "--id-column", "review_id", "--no-embed"]
    assert main(["index", "--input", str(write_csv(tmp_path / "r.csv")), "--collection", "unlabelled-items", *columns]) == 0
    path = tmp_path / "labels.csv"
    path.write_text(
        "question,answer,document_id\nWhat broke?,The cable broke,r4\nHow long does it last?,a whole week,r1\n", encoding="utf-8"
    )
    out = tmp_path / "report"
    command = ["eval", "retriever", "--collection", "unlabelled-items", "--labels", str(path), "--retriever", "bm25", "--out", str(out)]
    assert main(command) == 0, capsys.readouterr().err
    rows = [r for r in json.loads((out / "report.json").read_text())["metrics"] if r["group"] == "all" and r["definition"] == "strict"]
    assert {r["retriever"]: r["n"] for r in rows} == {"bm25": 2, "chance (random order)": 2}
    assert next(r for r in rows if r["retriever"] == "chance (random order)")["recall@1"] == pytest.approx(1 / len(REVIEWS))
    # without --out, the report of a collection goes beside SubjQA's, not over it
    monkeypatch.chdir(tmp_path)
    assert main(command[: command.index("--out")]) == 0
    assert (tmp_path / "reports" / "unlabelled-items-retriever" / "report.json").is_file() and not (
        tmp_path / "reports" / "retriever"
    ).exists()
    from qa_system import evaluate_retrievers

    with pytest.raises(QAError, match=r"labels is a str \(.*labels.csv\), not labels read from a file. Fix: pass qa_system.load_labels"):
        evaluate_retrievers(cli_home, labels=str(path))  # was an AttributeError from deep inside


def test_the_documented_python_evaluation_runs_as_written(cli_home, monkeypatch):
    """docs/evaluation.md's Python block on the README's sample collection, run as written from the repository root."""
    from qa_system.config import REPO_ROOT

    monkeypatch.setenv("QA_READER_BACKEND", "torch")  # the same reader without its int8 export, built once per machine
    monkeypatch.chdir(REPO_ROOT)
    columns = ["--text-column", "body", "--id-column", "review_id", "--item-column", "product", "--no-embed"]
    assert main(["index", "--input", "data/reviews.csv", "--collection", "sample", *columns]) == 0
    code = (REPO_ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8").split("```python\n")[1].split("```")[0]
    namespace: dict = {}
    exec(compile(code, "evaluation.md", "exec"), namespace)
    labelled = len(namespace["labels"].questions)
    retrieval, answers = namespace["retrieval"]["metrics"], namespace["answers"]["metrics"]
    assert labelled >= 20 and set(retrieval[retrieval["group"] == "all"]["n"]) == {labelled}
    f1 = answers["f1"].dropna()
    assert len(f1) > 0 and f1.between(0, 1).all()


def squad_file(path, paragraphs):
    data = [{"title": title, "paragraphs": [{"context": context, "qas": qas}]} for title, context, qas in paragraphs]
    path.write_text(json.dumps({"version": "v2.0", "data": data}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny_long_reader(tmp_path_factory):
    """A tiny random reader (its answers are noise, its offsets real) whose positions cover 384-token windows."""
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-long-reader"), max_positions=512)


def test_squad_labels_round_trip_through_a_collection(home, tmp_path, tiny_long_reader, capsys, monkeypatch):
    """The reader given each question's document from the collection (a long one put back together from its
    passages) scores exactly as given the file's own contexts; the pipeline and retriever evaluate the collection."""
    context = long_text(150)
    answer = "polished titanium"
    qas = [
        {"id": "q1", "question": "What is the hinge made of?", "answers": [{"text": answer, "answer_start": context.index(answer)}]},
        {"id": "q2", "question": "Is it red?", "answers": [], "is_impossible": True},
    ]
    path = squad_file(tmp_path / "squad.json", [("HINGE", context, qas), ("OTHER", "Short review about the colour.", [])])
    ingest(home, path, "round", IngestOptions(passage_words=20, passage_overlap=5), embed=False, progress=False)
    monkeypatch.setenv("QA_HOME", str(home.home))
    outs = {}
    for name, extra in (("direct", []), ("collection", ["--collection", "round"])):
        outs[name] = tmp_path / name
        assert main(["eval", "reader", "--labels", str(path), *extra, "--reader", str(tiny_long_reader), "--out", str(outs[name])]) == 0
    direct, collected = (json.loads((outs[n] / "report.json").read_text()) for n in ("direct", "collection"))
    scores = [{k: v for k, v in m.items() if k != "latency_ms"} for m in direct["metrics"]]
    assert scores == [{k: v for k, v in m.items() if k != "latency_ms"} for m in collected["metrics"]] and direct["questions"] == 2
    predictions = {n: json.loads(next(outs[n].glob("predictions-*.json")).read_text()) for n in outs}
    assert predictions["direct"] == predictions["collection"]
    assert (
        main(
            [
                "eval",
                "pipeline",
                "--collection",
                "round",
                "--labels",
                str(path),
                "--reader",
                str(tiny_long_reader),
                "--out",
                str(tmp_path / "p"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "eval",
                "retriever",
                "--collection",
                "round",
                "--labels",
                str(path),
                "--retriever",
                "bm25",
                "--k",
                "1",
                "3",
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 0
    )
    strict = next(
        m
        for m in json.loads((tmp_path / "r" / "report.json").read_text())["metrics"]
        if m["definition"] == "strict" and m["group"] == "all"
    )
    assert strict["recall@3"] == 1.0  # the hinge question's passages belong to its document
    capsys.readouterr()
    assert main(["eval", "retriever", "--labels", str(path)]) == 2
    assert "Retrieval is evaluated on a collection" in capsys.readouterr().err


def test_mrqa_labels_are_matched_to_a_collection_too(home, tmp_path):
    from qa_system.ingestion.labels import load_labels

    ingest(
        home, write_csv(tmp_path / "c.csv", rows=[("c1", "KINDLE", CONTEXT, "5"), *REVIEWS]), "mrqa", COLUMNS, embed=False, progress=False
    )
    path = tmp_path / "toy.jsonl"
    path.write_text(
        mrqa_lines(MRQA_QAS)
        + mrqa_lines(
            [{"qid": "x1", "question": "why?", "detected_answers": [{"text": "no", "char_spans": [[0, 1]]}]}],
            context="no such review",
            header=False,
        )
    )
    labels = load_labels(path, home, "mrqa")
    assert labels.format == "MRQA" and labels.title == "toy.jsonl (MRQA) on collection 'mrqa'"
    assert [(q.id, q.document_id, q.item_id) for q in labels.questions] == [("m1", "c1", "KINDLE"), ("m2", "c1", "KINDLE")]
    assert (
        labels.questions[0].answers[0].text == "battery lasts" and labels.questions[1].answers[0].text == "Battery"
    )  # the span, as read_qa_file gives it
    assert any("1 questions whose context is no document of collection 'mrqa'" in note for note in labels.notes)


def test_two_ingestions_into_one_collection_at_once_lose_nothing(home, tmp_path):
    """Two processes index different files into one collection at the same moment (a page upload and
    `qa-system index`, say): the second waits for the first and adds to what it wrote, rather than
    both starting from the same old collection and the last one's swap dropping the other's documents."""
    sources = []
    for part in ("a", "b"):
        rows = [(f"{part}{n}", f"P{n % 7}", f"Review {n} of part {part}: the lamp number {n} is bright.", "4") for n in range(400)]
        sources.append(write_csv(tmp_path / f"{part}.csv", rows))
    env = {**os.environ, "QA_HOME": str(home.home), "QA_STORE": "memory"}
    command = [
        sys.executable,
        "-m",
        "qa_system.cli.main",
        "index",
        "--collection",
        "shop",
        "--text-column",
        "body",
        "--id-column",
        "review_id",
        "--item-column",
        "product",
    ]
    processes = [
        subprocess.Popen([*command, "--input", str(source)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for source in sources
    ]
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    ids = set(documents(home, "shop"))
    assert len(ids) == 800 and {"a0", "a399", "b0", "b399"} <= ids
    manifest = collection_manifest(home, "shop")  # what `collections` and `products` report
    assert manifest["source_documents"] == 800 and sum(manifest["item_counts"].values()) == 800


def test_html_in_a_text_column_is_counted_and_with_html_indexed_as_the_text_a_browser_shows(cli_home, tmp_path, capsys, monkeypatch):
    """Answers showed "<p>The <b>cancellation policy</b> ..." from a CSV of scraped pages; the report did not say why."""
    import qa_system.ingestion.freshness as freshness
    from qa_system.sources.markup import has_tags, html_text

    assert html_text("<p>Free &amp; easy <b>cancellation</b><br/>up to <i>48 hours</i>.</p><script>x = 1</script>") == (
        "Free & easy cancellation\nup to 48 hours."
    )
    assert has_tags('see <a href="x">the policy</a>') and not has_tags("5 < 6 and 7 > 3; I <3 it")
    monkeypatch.setattr(freshness, "CHECK_EVERY_S", 0)
    source = tmp_path / "faq.csv"
    source.write_text(
        'id,hotel,text\nf1,city,"<p>The <b>cancellation policy</b>: free up to <i>48 hours</i> before arrival.</p>"\n'
        "f2,city,Breakfast is served from 7 am.\n",
        encoding="utf-8",
    )
    index = ["index", "--input", str(source), "--collection", "faq", "--id-column", "id", "--item-column", "hotel", "--no-embed"]
    assert main(index) == 0
    assert "  1 text holds HTML tags (<p>, <br/>, ...), indexed and shown as written: --html indexes the text a browser shows instead." in (
        capsys.readouterr().out
    )
    assert documents(cli_home, "faq")["f1"].content.startswith("<p>The <b>cancellation policy</b>")
    assert main([*index, "--html"]) == 0
    out = capsys.readouterr().out
    assert "1 changed, 1 unchanged" in out and "HTML tags" not in out
    assert documents(cli_home, "faq")["f1"].content == "The cancellation policy: free up to 48 hours before arrival."
    source.write_text(source.read_text(encoding="utf-8") + "f3,city,Parking costs $20 a night.\n", encoding="utf-8")
    assert main(["search", "parking", "--collection", "faq", "--item", "city"]) == 0  # the command that indexes it again reads HTML
    assert (
        f"run `qa-system index --input {source} --collection faq --id-column id --item-column hotel --html --store memory --no-embed`"
        in (capsys.readouterr().err)
    )
