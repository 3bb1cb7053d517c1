"""Metadata filters (Haystack's syntax) from every door, over the typed columns of a user's own CSV:
numbers and ISO dates stay typed at ingestion, so `meta.rating >= 4` means a number comparison in
the memory store and in a real search server alike; a malformed filter is one line naming the fix."""

from __future__ import annotations

import datetime
import json
import unicodedata
import uuid
from pathlib import Path

import pytest
from haystack import Document

from helpers.api import running, wait_ready
from helpers.filters import OPTIONS, rating, write_reviews
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion import IngestOptions, ingest, open_collection
from qa_system.ingestion.indexing import open_or_build_index
from qa_system.pipelines import build_retrieval_pipeline
from qa_system.retrieval.filters import MetaPostings, check_collection_filters, check_filters, combine_filters, make_filters, parse_filters
from qa_system.sources.columns import column_types, value_type

RATING_AT_LEAST_4 = {"field": "meta.overall", "operator": ">=", "value": 4}


@pytest.fixture
def reviews(tmp_path) -> Path:
    return write_reviews(tmp_path / "reviews.csv")


def test_a_column_is_typed_by_all_its_values():
    assert [
        value_type(v) for v in ("4", "-12", "4.5", "1e3", "007", "2013-09-01", "2013-09-01T10:00:00Z", "n/a", "NaN", "99999999999999999999")
    ] == ["integer", "integer", "number", "number", "text", "date", "date", "text", "text", "text"]
    assert column_types([{"a": "1", "b": "1", "c": "2013-01-01"}, {"a": "2", "b": "1.5", "c": "soon"}, {"a": "3"}]) == {
        "a": "integer",
        "b": "number",
        "c": "text",
    }


def test_ingestion_keeps_ratings_and_dates_typed(settings, reviews):
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    index = open_collection(settings, "amz", embeddings=False, progress=False)
    assert index.manifest["meta_types"] == {"overall": "integer", "price": "number", "reviewTime": "date", "zip": "text"}
    document = index.store.filter_documents({"field": "meta.document_id", "operator": "==", "value": "R003"})[0]
    assert document.meta["overall"] == rating(3) and isinstance(document.meta["overall"], int)
    assert document.meta["price"] == 3.5 and document.meta["zip"] == "00003" and document.meta["reviewTime"] == "2013-04-04"


def test_a_rating_filter_returns_only_matching_documents(settings, reviews):
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    documents = pipeline.run("battery screen", item_id="P1", filters=RATING_AT_LEAST_4, top_k=50)["documents"]
    expected = {f"R{n:03d}" for n in range(40) if n % 2 == 1 and rating(n) >= 4}
    assert {d.meta["document_id"] for d in documents} == expected and len(expected) >= 5

    either = {
        "operator": "OR",
        "conditions": [
            {"field": "meta.overall", "operator": "==", "value": 1},
            {"field": "meta.reviewTime", "operator": ">=", "value": "2013-12-01"},
        ],
    }
    documents = pipeline.run("battery", filters=either, top_k=50)["documents"]
    assert documents and all(d.meta["overall"] == 1 or d.meta["reviewTime"] >= "2013-12-01" for d in documents)
    assert len(documents) == len([n for n in range(40) if rating(n) == 1 or 1 + n % 12 == 12])


EQUALITIES = [
    {"field": "meta.price", "operator": "==", "value": 4},  # the column is typed number: stored 4.0
    {"field": "meta.price", "operator": "==", "value": 4.0},
    {"field": "meta.overall", "operator": "==", "value": 4.0},  # an integer column asked with a float
    {"field": "meta.reviewTime", "operator": "==", "value": "2013-05-05T00:00:00"},  # the stored date is "2013-05-05"
]


@pytest.mark.parametrize("condition", EQUALITIES)
def test_an_equality_filter_matches_as_the_store_does_whatever_the_values_form(settings, reviews, condition):
    # The retriever's fast path for equalities compared the stored value literally: found nothing, "no answer" at 100%
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    index = open_collection(settings, "amz", embeddings=False, progress=False)
    expected = {d.meta["document_id"] for d in index.store.filter_documents(condition)}
    documents = build_retrieval_pipeline("bm25", settings, index=index).run("battery", filters=condition, top_k=50)["documents"]
    assert expected and {d.meta["document_id"] for d in documents} == expected


def test_a_filter_built_in_python_may_hold_dates(settings, reviews):
    import datetime

    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    since = {"field": "meta.reviewTime", "operator": ">=", "value": datetime.date(2013, 12, 1)}
    documents = pipeline.run("battery", filters=since, top_k=50)["documents"]
    assert documents and all(d.meta["reviewTime"] >= "2013-12-01" for d in documents)
    on = {"field": "meta.reviewTime", "operator": "in", "value": [datetime.datetime(2013, 5, 5)]}
    assert {d.meta["reviewTime"] for d in pipeline.run("battery", filters=on, top_k=50)["documents"]} == {"2013-05-05"}
    assert since["value"] == datetime.date(2013, 12, 1)  # the caller's filter is left as it was


@pytest.mark.parametrize(
    "bad, message",
    [
        ([RATING_AT_LEAST_4], "The filter is an array, not an object."),
        ({"field": "overall", "operator": ">=", "value": 4}, "has the field 'overall': filters apply to 'meta.<name>'"),
        (
            {"field": "meta.overall", "operator": "=>", "value": 4},
            "has the operator '=>'. Fix: use one of: ==, !=, >, >=, <, <=, in, not in.",
        ),
        ({"field": "meta.overall", "operator": "in", "value": 4}, "The filter's 'in' on 'meta.overall' needs a list of values, not 4"),
        # said as JSON writes it: it was "not None"
        ({"field": "meta.overall", "operator": ">", "value": None}, "needs a number or an ISO date, not null."),
        ({"field": "meta.overall", "operator": "==", "value": {"a": True}}, 'needs a number, text, true/false or null, not {"a": true}.'),
        ({"field": "meta.overall", "operator": ">="}, "has no 'value'"),
        ({"operator": "AND", "conditions": []}, "needs a non-empty list of 'conditions'"),
        ({"operator": "XOR", "conditions": [RATING_AT_LEAST_4]}, "is neither a comparison"),
        ({"field": "meta.zip", "operator": ">=", "value": 4}, "compares 'meta.zip' with '>=', but the collection holds text there"),
        ({"field": "meta.overall", "operator": ">", "value": "four"}, "compares 'meta.overall', a number, with the text 'four'"),
        # == and in with a value of another type matched nothing, silently
        (
            {"field": "meta.zip", "operator": "==", "value": 42},
            "The filter's '==' compares 'meta.zip', which holds text in this collection, with the number 42",
        ),
        (
            {"field": "meta.overall", "operator": "in", "value": [4, "5"]},
            "The filter's 'in' compares 'meta.overall', an integer, with the text '5'",
        ),
        (
            {"field": "meta.reviewTime", "operator": "!=", "value": "soon"},
            "The filter's '!=' compares 'meta.reviewTime', a date, with the text 'soon'",
        ),
        ({"field": "meta.reviewTime", "operator": "==", "value": 2013}, "compares 'meta.reviewTime', a date, with the number 2013"),
        (  # it also said "compare with a number"
            {"field": "meta.reviewTime", "operator": ">", "value": "last year"},
            "the text 'last year', which is no ISO date. Fix: compare it with an ISO date such as \"2024-01-31\".",
        ),
        # a true / false column is text in the index: the JSON boolean matched nothing, silently
        (
            {"field": "meta.zip", "operator": "==", "value": True},
            "compares 'meta.zip', which holds text in this collection, with the boolean true. "
            'Fix: write the value as the source has it, e.g. "true"',
        ),
        (
            {"field": "meta.overall", "operator": "in", "value": [False]},
            "'meta.overall', which holds integers in this collection, with the boolean false",
        ),
    ],
)
def test_a_bad_filter_is_one_line_naming_the_fix(settings, reviews, bad, message):
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    with pytest.raises(QAError) as raised:
        pipeline.run("battery", filters=bad)
    assert message in str(raised.value) and "Fix: " in str(raised.value) and "\n" not in str(raised.value)


def test_a_filter_on_a_field_no_document_has_is_one_line_naming_the_fields_there_are(settings, reviews):
    """`meta.rating` (the README's example) on a collection without it matched nothing, and the answer was "no answer"."""
    from qa_system.ingestion.indexing import build_index

    rating_4 = {"field": "meta.rating", "operator": ">=", "value": 4}
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    with pytest.raises(QAError) as raised:
        pipeline.run("battery", filters={"operator": "OR", "conditions": [RATING_AT_LEAST_4, rating_4]})
    message = str(raised.value)
    assert message.startswith("The filter names 'meta.rating', a field no document of this collection has.") and "\n" not in message
    # the source's own fields, its product and id columns by their names (they listed meta.item_id, meta.document_id and
    # the index's own, meta.content_hash, meta.passage, ...)
    assert message.endswith("Fix: filter on one of: meta.overall, meta.price, meta.reviewTime, meta.zip, meta.asin, meta.reviewerID.")
    assert pipeline.run("battery", filters={"field": "id", "operator": "!=", "value": "x"}, top_k=1)[
        "documents"
    ]  # the id is no metadata field

    subjqa = build_retrieval_pipeline("bm25", settings, index=build_index(settings, "electronics", embed=False, progress=False))
    with pytest.raises(
        QAError,
        match=r"'meta.rating', a field no document .* Fix: filter on one of: meta.domain, meta.review_id, meta.split, meta.item_id\.",
    ):
        subjqa.run("battery", item_id="KINDLE", filters=rating_4)
    assert subjqa.run("battery", filters={"field": "meta.split", "operator": "==", "value": "dev"})["documents"]
    # A collection of thousands of fields names the first of them: the message was 1.2 MB
    wide = {f"field_{n:05d}": "text" for n in range(5000)}
    with pytest.raises(QAError) as raised:
        check_collection_filters(rating_4, {"meta_types": wide, "input": {"format": "jsonl"}})
    assert str(raised.value).endswith("meta.field_00049, ... (4,951 more).") and len(str(raised.value)) < 3000


def test_a_filter_on_the_product_column_by_its_own_name_filters_the_products(settings, reviews):
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)  # --item-column asin
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    # It was "'meta.asin', a field no document of this collection has": the column is stored as meta.item_id.
    nested = {"operator": "OR", "conditions": [{"field": "meta.asin", "operator": "==", "value": "P1"}]}
    for by_its_name in ({"field": "meta.asin", "operator": "==", "value": "P1"}, nested):
        documents = pipeline.run("battery screen", filters=by_its_name, top_k=50)["documents"]
        assert len(documents) == 20 and {d.meta["item_id"] for d in documents} == {"P1"}
    # the id column too (--id-column reviewerID), stored as meta.document_id
    ids = {"field": "meta.reviewerID", "operator": "in", "value": ["R001", "R004"]}
    assert sorted(d.meta["document_id"] for d in pipeline.run("battery", filters=ids, top_k=50)["documents"]) == ["R001", "R004"]


def test_an_index_built_from_documents_given_is_filtered_on_their_own_fields(settings):
    from qa_system.ingestion.indexing import build_index

    tickets = [
        Document(id=f"t{n}", content=f"Ticket {n}: the sync failed.", meta={"created": f"2025-0{n}-01", "priority": "high", "item_id": "A"})
        for n in range(1, 5)
    ]
    index = build_index(settings, documents=tickets, name="tickets", embed=False, progress=False)
    pipeline = build_retrieval_pipeline("bm25", settings, index=index)
    since = {"field": "meta.created", "operator": ">=", "value": "2025-03-01"}  # refused: "a field no document has"
    assert sorted(d.id for d in pipeline.run("sync", filters=since, top_k=10)["documents"]) == ["t3", "t4"]
    with pytest.raises(
        QAError,
        match=r"'meta.nope', a field no document .* Fix: filter on one of: meta.created, meta.priority, meta.item_id, meta.document_id\.",
    ):
        pipeline.run("sync", filters={"field": "meta.nope", "operator": "==", "value": 1})


def test_a_column_of_numbers_with_a_decimal_comma_is_said_in_the_report(settings, tmp_path):
    # a European spreadsheet's "4,5": kept as text, and nothing said until a filter with >= was refused
    source = tmp_path / "excel.csv"
    source.write_text(
        "id;stars;weight;votes;price;text\nr1;4,5;1.250,5;1,024;1,000;Great.\nr2;2;980,0;12;12;Loud.\nr3;3,0;1.020,0;3,500;n/a;Fine.\n",
        encoding="utf-8",
    )  # votes: "1,024" may be an English thousand, and no advice to write "1.024"
    report = ingest(settings, source, "excel", IngestOptions(id_column="id"), embed=False, progress=False)
    commas = [note for note in report.notes if "decimal comma" in note]
    assert [note.split("'")[1] for note in commas] == ["stars", "weight"]
    assert commas[0].startswith("column 'stars' holds numbers written with a decimal comma (4,5): it is kept as text")
    assert open_collection(settings, "excel").manifest["meta_types"]["stars"] == "text"  # price holds "n/a": no note for it


def test_filters_combine_flat_and_parse_from_json():
    item = {"operator": "AND", "conditions": [{"field": "meta.item_id", "operator": "==", "value": "P1"}]}
    assert combine_filters(item, RATING_AT_LEAST_4) == {"operator": "AND", "conditions": [*item["conditions"], RATING_AT_LEAST_4]}
    assert combine_filters(None, None) is None and combine_filters(None, RATING_AT_LEAST_4) == RATING_AT_LEAST_4
    assert parse_filters('{"field": "meta.overall", "operator": ">=", "value": 4}') == RATING_AT_LEAST_4 and parse_filters("  ") is None
    with pytest.raises(QAError, match=r"^The filter is not JSON \(Expecting value at character 0\)\. Fix: "):
        parse_filters("rating >= 4")
    # a key given twice was read as its last value, unsaid (the API refused it)
    with pytest.raises(QAError, match=r"^The filter is not one filter: the key 'value' appears twice\. Fix: "):
        parse_filters('{"field": "meta.overall", "operator": ">=", "value": 4, "value": 1}')
    # Text ordered with '>' is judged against the collection's types, which know what advice fits: read before them, it
    # said "compare with a number, or an ISO date" (refused again on a text field), then "filter with == or in" (refused
    # again on a number field), and "write the number without quotes" for "4" on a text field.
    later = parse_filters('{"field": "meta.verified", "operator": ">", "value": "a"}')
    for kind, message in (
        ("text", r"compares 'meta\.verified' with '>', but the collection holds text there\. Fix: filter 'meta\.verified' with == or in"),
        ("integer", r"compares 'meta\.verified', a number, with the text 'a'\. Fix: compare it with a number"),
    ):
        with pytest.raises(QAError, match=message):
            check_collection_filters(later, {"meta_types": {"verified": kind}})
    quoted = parse_filters('{"field": "meta.stars", "operator": "<", "value": "5"}')
    with pytest.raises(QAError, match=r"but the collection holds text there\."):
        check_collection_filters(quoted, {"meta_types": {"stars": "text"}})
    with pytest.raises(  # the advice to use == led to another refusal
        QAError, match=r"Fix: write the number without quotes: \{\"field\": \"meta.stars\", \"operator\": \"<\", \"value\": 5\}\.$"
    ):
        check_collection_filters(quoted, {"meta_types": {"stars": "integer"}})
    neither = (  # a collection whose types were never recorded: advice for either kind of field
        r"which is neither a number nor an ISO date\. Fix: '>' compares numbers or dates: write a number \(e\.g\. 4\) or an ISO "
        r"date \(e\.g\. \"2024-01-31\"\); to match text, filter 'meta\.verified' with == or in\.$"
    )
    with pytest.raises(QAError, match=neither):
        check_collection_filters(later, {})
    # the index's own fields have types too: "write a number" was advised for meta.item_id, which the store then refused
    # (and OpenSearch matched every document)
    own = {"meta_types": {"stars": "integer"}, "item_counts": {"P1": 2}, "input": {"format": "csv"}}
    for value in ("P1", 4):
        with pytest.raises(QAError, match=r"^The filter compares 'meta\.item_id' with '>', but the collection holds text there\."):
            check_collection_filters({"field": "meta.item_id", "operator": ">", "value": value}, own)
    with pytest.raises(QAError, match=r"^The filter compares 'meta\.stars', a number, with the date '2024-01-31'\."):
        check_collection_filters({"field": "meta.stars", "operator": ">", "value": datetime.date(2024, 1, 31)}, own)
    deep = {"operator": "NOT", "conditions": [RATING_AT_LEAST_4]}
    for _ in range(10):
        deep = {"operator": "NOT", "conditions": [deep]}
    with pytest.raises(QAError, match="more than 100 conditions or 8 levels"):
        check_filters(deep)


def test_a_column_that_turns_to_text_is_retyped_everywhere(settings, tmp_path, reviews):
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    changed = tmp_path / "changed.csv"
    changed.write_text(reviews.read_text(encoding="utf-8").replace(",3,2013", ",n/a,2013"), encoding="utf-8")
    report = ingest(settings, changed, "amz", OPTIONS, embed=False, progress=False)
    assert any("overall: integer -> text" in note for note in report.notes)
    index = open_collection(settings, "amz", embeddings=False, progress=False)
    assert index.manifest["meta_types"]["overall"] == "text"
    assert {type(d.meta["overall"]) for d in index.store.filter_documents()} == {str}  # the unchanged documents too


def test_a_question_that_no_document_passes_says_so_and_a_split_needs_labelled_splits(settings, reviews):
    from qa_system.pipelines import build_qa_pipeline
    from qa_system.serving.answer_views import NO_DOCUMENTS_NOTE, answer_cards, answer_views

    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    pipeline = build_qa_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    nothing = pipeline.run("Is it sturdy?", filters={"field": "meta.overall", "operator": ">", "value": 5})
    assert nothing["documents"] == []
    (card,) = answer_cards(answer_views(nothing["answers"]))  # not a calibrated guess about reviews that were never read
    assert card.kind == "no_answer" and card.note == NO_DOCUMENTS_NOTE and card.label == "nothing was read"
    # Asked of every document, none holds a word of it: it blamed "the product, filters and split", none asked, at "99%"
    unmatched = pipeline.run("Grösse xyzzy?")
    (card,) = answer_cards(answer_views(unmatched["answers"]))
    assert unmatched["documents"] == [] and card.label == "nothing was read"
    assert card.note == (  # indexed without vectors: the dense retriever cannot run on it
        "There was nothing to read: no document holds a word of the question. Ask with other words: finding documents "
        "by meaning (the dense or hybrid retriever) needs vectors, which this collection was indexed without."
    )
    # A SubjQA domain is embedded when a dense question first needs it
    subjqa = build_qa_pipeline("bm25", settings, index=open_or_build_index(settings, ["electronics"], embeddings=False, progress=False))
    (card,) = answer_cards(answer_views(subjqa.run("Grösse xyzzy?")["answers"]))
    assert card.note == (
        "There was nothing to read: no document holds a word of the question. "
        "Ask with other words, or with the dense or hybrid retriever, which find documents by meaning."
    )
    with pytest.raises(QAError, match=r"^Collection 'amz' has no labelled splits: its documents have no 'split' field\. Fix: "):
        pipeline.run("Is it sturdy?", split="train")


def test_search_says_why_it_found_nothing_as_ask_does(settings, reviews, capsys, monkeypatch):
    """It printed "0 document(s) for all documents" alone."""
    monkeypatch.setenv("QA_HOME", str(settings.home))
    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    assert main(["search", "Grösse xyzzy?", "--collection", "amz"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "There was nothing to read: no document holds a word of the question. Ask with other words: finding documents "
        "by meaning (the dense or hybrid retriever) needs vectors, which this collection was indexed without."
    )
    assert main(["search", "battery", "--collection", "amz", "--filter", '{"field": "meta.overall", "operator": ">", "value": 5}']) == 0
    assert (
        capsys.readouterr().out.splitlines()[1] == "There was nothing to read: no document passes the product, filters and split asked for."
    )


def test_cli_ask_and_search_take_a_filter(settings, reviews, capsys, monkeypatch):
    monkeypatch.setenv("QA_HOME", str(settings.home))
    assert (
        main(
            [
                "index",
                "--input",
                str(reviews),
                "--collection",
                "amz",
                "--text-column",
                "reviewText",
                "--item-column",
                "asin",
                "--id-column",
                "reviewerID",
                "--no-embed",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "search",
                "battery",
                "--collection",
                "amz",
                "--item",
                "P0",
                "--top-k",
                "50",
                "--filter",
                '{"field": "meta.overall", "operator": "==", "value": 5}',
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    expected = [f"R{n:03d}" for n in range(40) if n % 2 == 0 and rating(n) == 5]
    assert f"{len(expected)} document(s) for P0" in out and all(f"document {i}" in out for i in expected)
    assert main(["search", "battery", "--collection", "amz", "--filter", "{rating: 4}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: The filter is not JSON") and len(err.strip().splitlines()) == 1
    assert (
        main(["ask", "battery", "--collection", "amz", "--item", "P0", "--filter", '{"field": "meta.zip", "operator": "<", "value": 3}'])
        == 2
    )
    assert "holds text there" in capsys.readouterr().err


@pytest.mark.opensearch
def test_a_rating_filter_on_a_real_search_server(opensearch_url, tmp_path, tiny_subjqa, reviews):
    from qa_system.stores import delete_opensearch_index

    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="opensearch", opensearch_url=opensearch_url)
    name = f"qa-filters-{uuid.uuid4().hex[:8]}"
    try:
        ingest(settings, reviews, name, OPTIONS, embed=False, progress=False)
        pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, name, embeddings=False, progress=False))
        documents = pipeline.run("battery screen", item_id="P1", filters=RATING_AT_LEAST_4, top_k=50)["documents"]
        assert {d.meta["document_id"] for d in documents} == {f"R{n:03d}" for n in range(40) if n % 2 == 1 and rating(n) >= 4}
        cheap = {
            "operator": "AND",
            "conditions": [
                {"field": "meta.price", "operator": "<", "value": 10},
                {"field": "meta.reviewTime", "operator": "<", "value": "2013-06-01"},
            ],
        }
        documents = pipeline.run("battery", filters=cheap, top_k=50)["documents"]
        assert sorted(d.meta["document_id"] for d in documents) == [f"R{n:03d}" for n in range(10) if 1 + n % 12 < 6]
        memory = settings.with_(store="memory")
        ingest(memory, reviews, name, OPTIONS, embed=False, progress=False)
        in_memory = build_retrieval_pipeline("bm25", memory, index=open_collection(memory, name, embeddings=False, progress=False))
        for condition in EQUALITIES:  # the same documents as in the memory store
            found = [
                {d.meta["document_id"] for d in p.run("battery", filters=condition, top_k=50)["documents"]} for p in (pipeline, in_memory)
            ]
            assert found[0] and found[0] == found[1], condition
    finally:
        delete_opensearch_index(settings, name)


OTHER_PRODUCT = {"field": "meta.item_id", "operator": "==", "value": "P1"}


def test_a_filter_on_another_product_ands_with_the_product_scope(settings, reviews, capsys, monkeypatch):
    """Two '==' on meta.item_id were one {field: value}, the user's value winning: P0's search served P1's reviews."""
    postings = MetaPostings(enumerate([Document(content="a", meta={"item_id": "P0"}), Document(content="b", meta={"item_id": "P1"})]))
    assert postings.allowed(combine_filters(make_filters(item_id="P0"), OTHER_PRODUCT)).tolist() == []
    assert postings.allowed(combine_filters(make_filters(item_id="P1"), OTHER_PRODUCT)).tolist() == [1]

    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    assert pipeline.run("battery", item_id="P0", filters=OTHER_PRODUCT, top_k=50)["documents"] == []
    same = pipeline.run("battery", item_id="P1", filters=OTHER_PRODUCT, top_k=50)["documents"]
    assert sorted(d.meta["document_id"] for d in same) == [f"R{n:03d}" for n in range(40) if n % 2 == 1]

    monkeypatch.setenv("QA_HOME", str(settings.home))
    assert (
        main(
            [
                "search",
                "battery",
                "--collection",
                "amz",
                "--item",
                "P0",
                "--top-k",
                "50",
                "--filter",
                '{"field": "meta.item_id", "operator": "==", "value": "P1"}',
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "0 document(s) for P0" in out and "document R" not in out


@pytest.mark.opensearch
def test_a_filter_on_another_product_on_a_real_search_server(opensearch_url, tmp_path, tiny_subjqa, reviews):
    from qa_system.stores import delete_opensearch_index

    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="opensearch", opensearch_url=opensearch_url)
    name = f"qa-filters-{uuid.uuid4().hex[:8]}"
    try:
        ingest(settings, reviews, name, OPTIONS, embed=False, progress=False)
        pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, name, embeddings=False, progress=False))
        assert pipeline.run("battery", item_id="P0", filters=OTHER_PRODUCT, top_k=50)["documents"] == []
        same = pipeline.run("battery", item_id="P1", filters=OTHER_PRODUCT, top_k=50)["documents"]
        assert sorted(d.meta["document_id"] for d in same) == [f"R{n:03d}" for n in range(40) if n % 2 == 1]
    finally:
        delete_opensearch_index(settings, name)


def test_a_product_whose_reviews_hold_no_word_of_the_question_is_read_as_in_the_memory_store_on_a_real_search_server(
    opensearch_url, settings, reviews
):
    """A search server's BM25 returned only documents holding a word of the question, the memory store every one the
    product's filter allows (unmatched ones at score 0): the same question was answered in one store and not the other.
    Without a filter a word must still match, and a filter that no document passes still says so."""
    from qa_system.pipelines import build_qa_pipeline
    from qa_system.serving.answer_views import NO_DOCUMENTS_NOTE, answer_cards, answer_views
    from qa_system.stores import delete_opensearch_index

    ingest(settings, reviews, "amz", OPTIONS, embed=False, progress=False)
    in_memory = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "amz", embeddings=False, progress=False))
    server = settings.model_copy(update={"store": "opensearch", "opensearch_url": opensearch_url})
    name = f"qa-filters-{uuid.uuid4().hex[:8]}"
    try:
        ingest(server, reviews, name, OPTIONS, embed=False, progress=False)
        index = open_collection(server, name, embeddings=False, progress=False)
        retrieval = build_retrieval_pipeline("bm25", server, index=index)
        for question in ("Grösse xyzzy?", "Is the battery good?"):
            expected = in_memory.run(question, item_id="P1", top_k=50)["documents"]
            found = retrieval.run(question, item_id="P1", top_k=50)["documents"]
            assert len(found) == len(expected) == 20
            assert {d.meta["document_id"] for d in found} == {d.meta["document_id"] for d in expected}
            assert sum(d.score > 0 for d in found) == sum(d.score > 0 for d in expected)
        assert all(d.score == 0 for d in retrieval.run("Grösse xyzzy?", item_id="P1", top_k=50)["documents"])
        pipeline = build_qa_pipeline("bm25", server, index=index)
        unmatched = pipeline.run("Grösse xyzzy?")  # no product asked: a word must match
        (card,) = answer_cards(answer_views(unmatched["answers"]))
        assert unmatched["documents"] == [] and card.note.startswith("There was nothing to read: no document holds a word of the question.")
        nothing = pipeline.run("Is it sturdy?", filters={"field": "meta.overall", "operator": ">", "value": 5})
        (card,) = answer_cards(answer_views(nothing["answers"]))
        assert nothing["documents"] == [] and card.note == NO_DOCUMENTS_NOTE
    finally:
        delete_opensearch_index(server, name)


DATED = [  # a day, a time that day, a time the day before, a time in another zone that is that day in UTC, the next day
    ("d1", "2024-01-05T12:00:00"),
    ("d2", "2024-01-05"),
    ("d3", "2023-12-31T23:59:59Z"),
    ("d4", "2024-01-04T22:00:00-05:00"),
    ("d5", "2024-01-06"),
]
DAY_FILTERS = {
    "==": ("2024-01-05", ["d1", "d2", "d4"]),
    ">": ("2024-01-05", ["d5"]),
    "<": ("2024-01-05", ["d3"]),
    ">=": ("2024-01-05", ["d1", "d2", "d4", "d5"]),
    "<=": ("2024-01-05", ["d1", "d2", "d3", "d4"]),
    "!=": ("2024-01-05", ["d3", "d5"]),
    "in": (["2024-01-05", "2024-01-06"], ["d1", "d2", "d4", "d5"]),
    "not in": (["2024-01-05", "2024-01-06"], ["d3"]),
}


def test_a_day_filters_dates_and_times_alike_in_the_memory_store_and_on_a_search_server(opensearch_url, settings, tmp_path):
    """The memory store compared "2024-01-05" with "2024-01-05T12:00:00" as midnight (not equal, earlier), the search
    server as that day: the same filter found other documents in each."""
    from qa_system.stores import delete_opensearch_index

    source = tmp_path / "dated.csv"
    source.write_text("id,product,date,text\n" + "".join(f"{i},P,{date},lid {i}\n" for i, date in DATED), encoding="utf-8")
    options = IngestOptions(id_column="id", item_column="product")
    server = settings.model_copy(update={"store": "opensearch", "opensearch_url": opensearch_url})
    name = f"qa-dates-{uuid.uuid4().hex[:8]}"
    try:
        found = {}
        for where in (settings, server):
            ingest(where, source, name, options, embed=False, progress=False)
            retrieval = build_retrieval_pipeline("bm25", where, index=open_collection(where, name, embeddings=False, progress=False))
            found[where.store] = {
                operator: sorted(d.id for d in retrieval.run("lid", filters={"field": "meta.date", "operator": operator, "value": day}, top_k=10)["documents"])
                for operator, (day, _) in DAY_FILTERS.items()
            }  # fmt: skip
        assert found["memory"] == found["opensearch"] == {operator: ids for operator, (_, ids) in DAY_FILTERS.items()}
    finally:
        delete_opensearch_index(server, name)


# Values the filter checks let through, that only the server knows it cannot compare with its field.
SERVER_REFUSED = [
    ({"field": "meta.overall", "operator": "in", "value": [4, 10**30]}, f"meta.overall: Value '{10**30}' is out of range for a long"),
    ({"field": "meta.overall", "operator": "==", "value": 10**29}, f"meta.overall: Value '{10**29}' is out of range for a long"),
]


@pytest.mark.opensearch
def test_a_filter_the_search_server_refuses_is_one_line_from_every_door(
    opensearch_url, tmp_path, tiny_subjqa, tiny_reader, reviews, capsys, monkeypatch
):
    """The server's 400 was a traceback (CLI exit 1) and a 500 (/query, deletion by filter); the documents stay."""
    import httpx

    from qa_system.ingestion.changes import delete_documents
    from qa_system.serving.api import create_app
    from qa_system.serving.service import QAService, ServedCollection
    from qa_system.stores import delete_opensearch_index

    home = tmp_path / "home"
    settings = Settings.from_env(
        data_dir=tiny_subjqa,
        home=home,
        store="opensearch",
        opensearch_url=opensearch_url,
        reader_model=str(tiny_reader),
        reader_backend="torch",
        api_rate_limit=0,
        api_documents=True,
        api_token="t0ken",
    )
    name = f"qa-filters-{uuid.uuid4().hex[:8]}"
    try:
        ingest(settings, reviews, name, OPTIONS, embed=False, progress=False)
        pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, name, embeddings=False, progress=False))
        for bad, message in SERVER_REFUSED:
            with pytest.raises(QAError) as raised:
                pipeline.run("battery", filters=bad)
            assert str(raised.value).startswith(
                f"The search server cannot apply the filter on {message}"
            ) and "Fix: compare each field" in str(raised.value)
            assert "\n" not in str(raised.value) and raised.value.__cause__ is None
            with pytest.raises(QAError, match="cannot apply the filter"):
                delete_documents(settings, name, filters=bad)

        monkeypatch.setenv("QA_HOME", str(home))
        for bad, message in SERVER_REFUSED:
            assert (
                main(
                    [
                        "search",
                        "battery",
                        "--collection",
                        name,
                        "--store",
                        "opensearch",
                        "--opensearch-url",
                        opensearch_url,
                        "--filter",
                        json.dumps(bad),
                    ]
                )
                == 2
            )
            err = capsys.readouterr().err
            assert (
                err.startswith("error: The search server cannot apply the filter") and message in err and len(err.strip().splitlines()) == 1
            )

        service = QAService(settings, [ServedCollection(name)])
        with running(create_app(settings, service=service)) as url:
            assert wait_ready(url).status_code == 200
            auth = {"Authorization": "Bearer t0ken"}
            for bad, message in SERVER_REFUSED:
                query = httpx.post(
                    f"{url}/query",
                    json={"query": "battery", "collection": name, "item_id": "P0", "filters": bad},
                    headers=auth,
                    timeout=120,
                )
                assert query.status_code == 422 and message in query.json()["detail"], query.text
                deleted = httpx.post(f"{url}/collections/{name}/documents/delete", json={"filters": bad}, headers=auth, timeout=120)
                assert deleted.status_code == 422 and message in deleted.json()["detail"], deleted.text
        assert open_collection(settings, name, embeddings=False, progress=False).store.count_documents() == 40
    finally:
        delete_opensearch_index(settings, name)


def _shops(tmp_path) -> Path:
    """Two shops, one stored composed (NFC, "é" one code point), one decomposed (NFD, "e" and a combining accent)."""
    path = tmp_path / "shops.csv"
    path.write_text(
        "id,text,shop\n"
        f"1,The battery lasts a week.,{unicodedata.normalize('NFC', 'Café Nord')}\n"
        f"2,The battery lasts a day.,{unicodedata.normalize('NFD', 'Crème Sud')}\n",
        encoding="utf-8",
    )
    return path


def _shops_found(pipeline) -> dict[str, list[str]]:
    """The documents each filter on the shop finds, the value typed in the other Unicode form than the one stored."""
    typed = {
        "==": ("==", unicodedata.normalize("NFD", "Café Nord")),
        "!=": ("!=", unicodedata.normalize("NFD", "Café Nord")),
        "in": ("in", [unicodedata.normalize("NFC", "Crème Sud")]),
        "not in": ("not in", [unicodedata.normalize("NFC", "Crème Sud")]),
    }
    return {
        name: sorted(
            d.content
            for d in pipeline.run("battery", filters={"field": "meta.shop", "operator": operator, "value": value}, top_k=10)["documents"]
        )
        for name, (operator, value) in typed.items()
    }


WEEK, DAY = ["The battery lasts a week."], ["The battery lasts a day."]
SHOPS_FOUND = {"==": WEEK, "!=": DAY, "in": DAY, "not in": WEEK}


def test_a_filter_value_matches_the_stored_text_in_either_unicode_form(settings, tmp_path):
    ingest(settings, _shops(tmp_path), "shops", embed=False, progress=False)
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, "shops", embeddings=False, progress=False))
    assert _shops_found(pipeline) == SHOPS_FOUND


def test_a_product_id_typed_in_two_unicode_forms_is_one_product(settings, tmp_path):
    # it was two products named "café" in the list, and asking one form read half the reviews
    path = tmp_path / "cafe.jsonl"
    forms = [unicodedata.normalize(form, "café") for form in ("NFC", "NFD", "NFC")]
    path.write_text(
        "".join(json.dumps({"text": f"Review {n}: the coffee is good.", "item_id": f}) + "\n" for n, f in enumerate(forms)), "utf-8"
    )
    ingest(settings, path, "cafe", embed=False, progress=False)
    index = open_collection(settings, "cafe", embeddings=False, progress=False)
    assert index.item_counts() == {unicodedata.normalize("NFC", "café"): 3}
    pipeline = build_retrieval_pipeline("bm25", settings, index=index)
    for typed in forms[:2]:
        assert len(pipeline.run("coffee", item_id=typed, top_k=10)["documents"]) == 3


@pytest.mark.opensearch
def test_a_filter_value_matches_the_stored_text_in_either_unicode_form_on_a_real_search_server(opensearch_url, tmp_path, tiny_subjqa):
    from qa_system.stores import delete_opensearch_index

    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="opensearch", opensearch_url=opensearch_url)
    name = f"qa-shops-{uuid.uuid4().hex[:8]}"
    try:
        ingest(settings, _shops(tmp_path), name, embed=False, progress=False)
        pipeline = build_retrieval_pipeline("bm25", settings, index=open_collection(settings, name, embeddings=False, progress=False))
        assert _shops_found(pipeline) == SHOPS_FOUND
    finally:
        delete_opensearch_index(settings, name)
