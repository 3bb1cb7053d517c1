"""The REST API as its clients see it: a real uvicorn server on a free loopback port, a real HTTP
client (httpx), on a tiny index the tests build; RAG answers come from a real OpenAI-compatible
server (tests/helpers/openai_stub.py) whose replies can be made slow."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.api import api_settings_for, running, sse_events, wait_ready
from helpers.openai_stub import OpenAIStub
from helpers.subjqa import write_subjqa
from qa_system.bench.api import wait_all_ready
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import QAError, check_count
from qa_system.ingestion import IngestOptions, ingest
from qa_system.serving.api import create_app, serve_api
from qa_system.serving.api.schemas import public_model_name
from qa_system.serving.feedback import Feedback, FeedbackStore
from qa_system.serving.service import QAService, ServedCollection
from qa_system.serving.webapp import free_port
from qa_system.stores import delete_opensearch_index


class Gate:
    """Holds the generator's replies to questions that say "slowly" until the test opens it, counting those held."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.held, self.opened = 0, False

    def hold(self) -> None:  # in the generator's request thread
        with self._changed:
            self.held += 1
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.opened, timeout=120)

    def until_held(self, count: int) -> int:
        """How many replies are held once ``count`` are (or after a minute, when fewer ever arrive)."""
        with self._changed:
            self._changed.wait_for(lambda: self.held >= count, timeout=60)
            return self.held

    def open(self) -> None:
        with self._changed:
            self.opened = True
            self._changed.notify_all()


SLOW_REPLIES = Gate()
HELD_REPLIES = Gate()  # a gate of its own: a Gate opens once
ENDLESS_SENTENCES = 2000  # an answer to "endlessly": 12,000 streamed words, minutes of writing at the test's drip


def stub_reply(body: dict) -> str:
    question = body["messages"][-1]["content"].rsplit("Question: ", 1)[1]
    if "slowly" in question:
        SLOW_REPLIES.hold()
    if "held up" in question:
        HELD_REPLIES.hold()
    if "endlessly" in question:
        return " ".join(["The sound is tinny and quiet [1]."] * ENDLESS_SENTENCES)
    if "everything" in question:
        return " ".join(["The sound is tinny and quiet [1]."] * 8)
    if "sound" in question:
        return "The sound is tinny and quiet [1]."
    return "I don't know."


@pytest.fixture(scope="module")
def generator():
    with OpenAIStub(stub_reply, max_requests=200, deadline_s=900) as server:
        yield server


@pytest.fixture(scope="module")
def api_settings(tmp_path_factory, tiny_reader, generator) -> Settings:
    return api_settings_for(tmp_path_factory.mktemp("api"), tiny_reader, generator.url)


@pytest.fixture(scope="module")
def api(api_settings) -> Iterator[str]:
    """The API over the tiny corpus, ready (its first start indexes it)."""
    with running(create_app(api_settings)) as url:
        assert wait_ready(url).status_code == 200
        yield url


QUESTION = {"query": "Is it good for reading?", "item_id": "KINDLE"}


def ask(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/query", json={**QUESTION, **body}, timeout=60)


# ------------------------------------------------------------------------------ readiness and data


def test_health_is_503_until_the_models_and_index_are_loaded(api, api_settings):
    service = QAService(api_settings)
    loading, release = service.load, threading.Event()
    service.load = lambda report=None: (release.wait(60), loading(report))  # holds the (real) loading until the test has looked
    with running(create_app(api_settings, service=service)) as url:
        before = httpx.get(f"{url}/health")
        assert before.status_code == 503 and before.json()["status"] == "loading"
        assert httpx.head(f"{url}/health").status_code == 503  # a probe asking with HEAD was told 405
        for response in (httpx.get(f"{url}/collections"), ask(url)):
            assert response.status_code == 503 and "still loading" in response.json()["detail"]
        release.set()
        after = wait_ready(url)
        assert after.status_code == 200
        head = httpx.head(f"{url}/health")
        assert head.status_code == 200 and head.content == b""
        assert (
            after.json()["status"] == "ready"
            and after.json()["collections"] == ["electronics"]
            and after.json()["reader_backend"] == "torch"
        )


def test_a_failed_load_is_503_with_the_reason(api_settings, tmp_path, caplog):
    broken = api_settings.model_copy(update={"data_dir": tmp_path / "no-such-data", "home": tmp_path / "home"})
    with caplog.at_level("ERROR", logger="qa_system.serving.loading"), running(create_app(broken)) as url:
        deadline = time.monotonic() + 60
        while (health := httpx.get(f"{url}/health")).json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "$QA_DATA_DIR does not exist" in health.json()["error"] and str(tmp_path) not in health.text  # no path of the server
        refused = ask(url)
        assert refused.status_code == 503 and refused.json()["detail"].startswith("The server failed to load: ")
    # In the log too, in one line: a server of several processes answers /health from one of them.
    (logged,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Loading failed")]
    assert "no-such-data" in logged and "\n" not in logged


@pytest.mark.opensearch
def test_a_search_server_that_comes_up_late_is_waited_for(opensearch_url, tiny_reader, tmp_path):
    """The API starts before its search server (as containers do): /health says it is waiting and
    why, and once the server answers the load goes on without a restart."""
    from helpers.search_server import LateServer

    late = LateServer(opensearch_url)
    settings = Settings.from_env(
        data_dir=write_subjqa(tmp_path / "subjqa"),
        home=tmp_path / "home",
        store="opensearch",
        opensearch_url=late.url,
        reader_model=str(tiny_reader),
        reader_backend="torch",
    )
    service = QAService(settings, retry_first_s=0.2, retry_max_s=0.5)
    try:
        with running(create_app(settings, service=service)) as url:
            deadline = time.monotonic() + 30
            while "waiting" not in (health := httpx.get(f"{url}/health").json()) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert health["status"] == "loading" and health["waiting"]["error"].startswith(
                f"OpenSearch at {late.url} is unreachable. Fix: "
            )
            assert 0 <= health["waiting"]["retry_in_s"] <= 0.5
            refused = ask(url)
            assert refused.status_code == 503 and refused.json()["detail"].startswith(
                "The server is waiting for its search server: OpenSearch at "
            )
            late.open()
            assert wait_ready(url, timeout=120).status_code == 200
            answered = ask(url, query="How is the sound?")
            assert answered.status_code == 200 and answered.json()["documents"][0]["meta"]["item_id"] == "KINDLE"
    finally:
        late.close()
        delete_opensearch_index(settings.model_copy(update={"opensearch_url": opensearch_url}), "subjqa-electronics")


def test_a_port_in_use_is_a_one_line_error(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["api", "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Cannot listen on 127.0.0.1:") and "Fix: pass another --port" in err and len(err.strip().splitlines()) == 1


def test_collections_and_products_with_review_counts(api, api_settings):
    (collection,) = httpx.get(f"{api}/collections").json()
    assert collection["name"] == "electronics" and collection["index"] == "subjqa-electronics" and collection["store"] == "memory"
    assert collection["products"] == 3 and collection["documents"] == 6  # one document per review, a review in two splits included
    assert collection["embedding_model"] is None  # served for BM25: embedded only when a dense question first needs it
    assert (
        httpx.post(
            f"{api}/query", json={"query": "How is the bass?", "item_id": "HEADPHONES", "retriever": "dense"}, timeout=300
        ).status_code
        == 200
    )
    (collection,) = httpx.get(f"{api}/collections").json()
    assert (
        collection["embedding_model"] == public_model_name(api_settings.embedding_model)
        and str(api_settings.home.anchor) not in collection["embedding_model"]
    )  # the encoder by name, not its folder on the server

    products = httpx.get(f"{api}/products", params={"collection": "electronics"}).json()
    assert products["total"] == 3
    assert products["products"] == [
        {"item_id": "KINDLE", "reviews": 3},
        {"item_id": "HEADPHONES", "reviews": 2},
        {"item_id": "MOUSE", "reviews": 1},
    ]
    assert httpx.get(f"{api}/products", params={"limit": 1, "offset": 1}).json()["products"] == [{"item_id": "HEADPHONES", "reviews": 2}]


def test_query_returns_spans_at_their_offsets_the_reviews_and_stage_timings(api):
    response = ask(api, top_k=2, top_k_reader=2)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["collection"], body["item_id"], body["retriever"], body["mode"]) == ("electronics", "KINDLE", "bm25", "extractive")
    documents = body["documents"]
    assert [d["meta"]["item_id"] for d in documents] == ["KINDLE", "KINDLE"]
    assert documents[0]["meta"]["review_id"] == "r-kindle-1"  # "reading" is only in this review
    assert documents[0]["score"] >= documents[1]["score"]

    contents = {d["id"]: d["content"] for d in documents}
    spans = [a for a in body["answers"] if a["kind"] == "span"]
    assert spans and len([a for a in body["answers"] if a["kind"] == "no_answer"]) == 1
    for answer in spans:  # the tiny reader's spans are noise, but their offsets are real
        content = contents[answer["document_id"]]
        assert content[answer["start"] : answer["end"]] == answer["text"]
        assert answer["context"] == content[answer["context_start"] : answer["context_start"] + len(answer["context"])]
        assert answer["context"][answer["start"] - answer["context_start"] :].startswith(answer["text"])
        assert 0 <= answer["score"] <= 1
    assert body["no_answer"] == (body["answers"][0]["kind"] == "no_answer")
    timings = body["timings"]
    assert {"sparse_retriever", "reader", "retrieval_s", "answer_s", "total_s", "queue_s"} <= set(timings)
    assert timings["total_s"] == pytest.approx(timings["retrieval_s"] + timings["answer_s"]) and timings["reader"] > 0
    assert body["pipeline"].startswith("bm25 + extractive")


def test_dense_retrieval_on_request(api):
    body = ask(api, retriever="dense", top_k=3).json()
    assert body["retriever"] == "dense" and len(body["documents"]) == 3 and {d["meta"]["item_id"] for d in body["documents"]} == {"KINDLE"}


def test_rag_answers_and_streams_server_sent_events(api):
    question = {"query": "How is the sound?", "mode": "rag"}
    whole = ask(api, **question).json()
    (answer,) = whole["answers"]
    assert answer["kind"] == "generated" and answer["text"] == "The sound is tinny and quiet [1]."
    assert answer["cited_document_ids"] == [whole["documents"][0]["id"]] and whole["no_answer"] is False

    for streamed in (
        ask(api, **question, stream=True),
        httpx.post(f"{api}/query", json={**question, "item_id": "KINDLE"}, headers={"Accept": "text/event-stream"}),
    ):
        assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
        events = sse_events(streamed.text)
        tokens = [data["text"] for event, data in events if event == "token"]
        assert len(tokens) > 1 and "".join(tokens) == answer["text"]  # word by word, as the generator wrote it
        assert events[-1][0] == "result" and events[-1][1]["answers"] == whole["answers"]

    unanswerable = ask(api, query="Is it waterproof?", mode="rag").json()
    assert unanswerable["no_answer"] is True and unanswerable["answers"][0]["kind"] == "no_answer"
    assert unanswerable["answers"][0]["no_answer_reason"] == "the generator found no answer in the reviews"


# ------------------------------------------------------------------------------ your own collections

SHOP = [  # review_id, product, text
    ("s1", "LAMP", "The lamp is bright enough to read by and the switch is easy to find in the dark."),
    ("s2", "LAMP", "It arrived with a cracked shade."),
    ("s3", "KETTLE", "The kettle boils water in two minutes and switches itself off."),
]


@pytest.fixture(scope="module")
def own_collections(api_settings, tmp_path_factory) -> Iterator[str]:
    """The API serving two ingested collections and a SubjQA domain: 'shop' (reviews of products) first, so the default;
    'notes' (documents about no product in particular)."""
    root = tmp_path_factory.mktemp("own")
    shop, notes = root / "shop.csv", root / "notes.jsonl"
    shop.write_text("review_id,product,body\n" + "".join(f"{i},{item},{text}\n" for i, item, text in SHOP), encoding="utf-8")
    notes.write_text(
        "\n".join(json.dumps({"text": t}) for t in ("The office opens at nine and closes at five.", "Parking is behind the building.")),
        encoding="utf-8",
    )
    ingest(
        api_settings,
        shop,
        "shop",
        IngestOptions(text_column="body", id_column="review_id", item_column="product"),
        embed=False,
        progress=False,
    )
    ingest(api_settings, notes, "notes", embed=False, progress=False)
    served = [ServedCollection("shop"), ServedCollection("electronics", subjqa_domain=True), ServedCollection("notes")]
    with running(create_app(api_settings, served)) as url:
        assert wait_ready(url).status_code == 200
        yield url


def test_an_error_names_no_file_of_the_server_and_a_request_field_for_a_flag(own_collections, api_settings):
    # 'notes' was indexed without vectors: the fix named the command, with the source file's full path on the server
    asked = httpx.post(
        f"{own_collections}/query", json={"query": "When does the office open?", "collection": "notes", "retriever": "dense"}
    )
    detail = asked.json()["detail"]
    assert asked.status_code == 422 and "--input notes.jsonl --collection notes" in detail, detail
    assert "/" not in detail.split("--input ")[1].split()[0] and detail.endswith('or use "retriever": "bm25".')


def test_ingested_collections_are_listed_beside_a_domain_with_their_products(own_collections):
    url = own_collections
    assert httpx.get(f"{url}/health").json()["collections"] == ["shop", "electronics", "notes"]
    listed = {c["name"]: c for c in httpx.get(f"{url}/collections").json()}
    assert {k: listed["shop"][k] for k in ("index", "kind", "documents", "passages", "products")} == {
        "index": "shop",
        "kind": "ingested",
        "documents": 3,
        "passages": 3,
        "products": 2,
    }
    assert {k: listed["notes"][k] for k in ("kind", "documents", "products")} == {"kind": "ingested", "documents": 2, "products": 0}
    assert (listed["electronics"]["index"], listed["electronics"]["kind"], listed["electronics"]["documents"]) == (
        "subjqa-electronics",
        "subjqa",
        6,
    )
    default = httpx.get(f"{url}/products").json()  # the first collection named
    assert default["collection"] == "shop" and default["products"] == [
        {"item_id": "LAMP", "reviews": 2},
        {"item_id": "KETTLE", "reviews": 1},
    ]
    assert httpx.get(f"{url}/products", params={"collection": "notes"}).json()["total"] == 0


def test_questions_are_answered_from_an_ingested_collection(own_collections):
    url = own_collections
    body = httpx.post(f"{url}/query", json={"query": "Is it bright enough to read?", "item_id": "LAMP", "top_k": 2}, timeout=60).json()
    assert (body["collection"], body["item_id"]) == ("shop", "LAMP")
    assert body["documents"][0]["id"] == "s1" and all(d["meta"]["item_id"] == "LAMP" for d in body["documents"])
    contents = {d["id"]: d["content"] for d in body["documents"]}
    for answer in (a for a in body["answers"] if a["kind"] == "span"):
        assert contents[answer["document_id"]][answer["start"] : answer["end"]] == answer["text"]

    # A collection without products is asked as a whole; one with products needs the product.
    whole = httpx.post(f"{url}/query", json={"query": "Where can I park?", "collection": "notes"}, timeout=60)
    assert whole.status_code == 200 and whole.json()["item_id"] is None
    assert whole.json()["documents"][0]["content"] == "Parking is behind the building."
    refused = httpx.post(f"{url}/query", json={"query": "Is it bright?"})
    assert refused.status_code == 422 and refused.json()["detail"].startswith(
        "The question names no product (item_id), and collection 'shop' holds 2 products."
    )
    unknown = httpx.post(f"{url}/query", json={"query": "Is it bright?", "item_id": "KINDLE"})  # a product of electronics, not of shop
    assert unknown.status_code == 404 and unknown.json()["detail"] == (  # the route that lists them, not the command line's
        "Item 'KINDLE' has no documents in collection 'shop'. Fix: pick an item id that GET /products?collection=shop lists."
    )
    # An item asked of a collection without items: not found either (it answered "no answer" at 100%).
    itemless = httpx.post(f"{url}/query", json={"query": "Where can I park?", "collection": "notes", "item_id": "LAMP"})
    assert itemless.status_code == 404 and itemless.json()["detail"].startswith(
        "Collection 'notes' has no items: none of its documents names one, so item 'LAMP' has none."
    )


def test_feedback_on_an_answer_from_an_ingested_collection(own_collections, api_settings):
    url = own_collections
    body = httpx.post(f"{url}/query", json={"query": "How fast does it boil?", "item_id": "KETTLE", "top_k": 1}, timeout=60).json()
    span = next(a for a in body["answers"] if a["kind"] == "span")
    click = {
        "verdict": "wrong_span",
        "question": body["query"],
        "answer": span["text"],
        "start": span["start"],
        "end": span["end"],
        "document_id": span["document_id"],
        "click_id": "own/1",
    }
    assert httpx.post(f"{url}/feedback", json=click).status_code == 201
    (row,) = [f for f in FeedbackStore(api_settings.feedback_db).all() if f.click_id == "own/1"]
    assert (row.document_id, row.context, row.item_id, row.verdict, row.collection) == (
        "s3",
        SHOP[2][2],
        "KETTLE",
        "wrong_span",
        "shop",  # the collection first served, which a click naming none is about
    )  # read from the collection
    elsewhere = httpx.post(f"{url}/feedback", json={**click, "collection": "notes", "click_id": None})
    assert elsewhere.status_code == 404 and elsewhere.json()["detail"].startswith("No document 's3' in collection 'notes'.")


def test_an_unknown_collection_is_one_line_naming_the_collections_command(api_settings, capsys):
    with running(create_app(api_settings, [ServedCollection("nope")])) as url:
        deadline = time.monotonic() + 60
        while (health := httpx.get(f"{url}/health")).json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert health.status_code == 503 and health.json()["status"] == "failed"
        error = health.json()["error"]
        assert error.startswith("No memory collection named 'nope'") and "`qa-system collections`" in error and "\n" not in error
        # From the command line the name is checked before the server starts (on this busy port, a start would fail otherwise).
        port = url.rsplit(":", 1)[1]
        assert main(["api", "--collection", "nope", "--home", str(api_settings.home), "--port", port]) == 2
        err = capsys.readouterr().err
        assert "No memory collection named 'nope'" in err and len(err.strip().splitlines()) == 1
    assert main(["api", "--collection", "../etc"]) == 2  # refused before anything starts
    err = capsys.readouterr().err
    assert "holds '/' or '..'" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(QAError, match="'electronics' names both a SubjQA domain and a collection to serve"):
        QAService(api_settings, [ServedCollection("electronics", subjqa_domain=True), ServedCollection("electronics")])


# ------------------------------------------------------------------------------ feedback and metrics


def test_feedback_is_stored_once_per_click_and_exported_as_squad(api, api_settings, tmp_path, monkeypatch):
    body = ask(api).json()
    span = next(a for a in body["answers"] if a["kind"] == "span")
    click = {
        "verdict": "correct",
        "question": body["query"],
        "answer": span["text"],
        "start": span["start"],
        "end": span["end"],
        "document_id": span["document_id"],
        "score": span["score"],
        "pipeline": body["pipeline"],
        "click_id": "client-1/click-1",
    }
    saved = httpx.post(f"{api}/feedback", json=click)
    assert saved.status_code == 201 and saved.json()["verdict"] == "correct"
    again = httpx.post(f"{api}/feedback", json=click)
    assert again.status_code == 200 and again.json()["id"] == saved.json()["id"]  # a retried click is one row, and says so
    for blank in ("", "   ", "\x00"):  # one blank id sent by every client made each later click "sent again": dropped
        refused = httpx.post(f"{api}/feedback", json={**click, "click_id": blank})
        assert refused.status_code == 422 and "click_id" in refused.json()["detail"] and "Fix: send a unique id" in refused.json()["detail"]

    (row,) = [f for f in FeedbackStore(api_settings.feedback_db).all() if f.click_id == "client-1/click-1"]  # the page's store
    document = next(d for d in body["documents"] if d["id"] == span["document_id"])
    assert row.context == document["content"] and row.item_id == "KINDLE" and row.review_id == document["meta"]["review_id"]

    export = httpx.get(f"{api}/feedback/export")
    assert export.status_code == 200 and "labelled questions" in export.headers["x-feedback-summary"]
    qas = [qa for article in export.json()["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    assert {"text": span["text"], "answer_start": span["start"]} in next(qa["answers"] for qa in qas if qa["question"] == body["query"])

    monkeypatch.setenv("QA_HOME", str(api_settings.home))  # the CLI exports the same store
    assert main(["export-feedback", "--out", str(tmp_path / "feedback.json")]) == 0
    assert span["text"] in (tmp_path / "feedback.json").read_text(encoding="utf-8")

    moved = httpx.post(f"{api}/feedback", json={**click, "start": span["start"] + 1, "click_id": None})
    assert moved.status_code == 422 and "is not at offsets" in moved.json()["detail"]
    unknown = httpx.post(f"{api}/feedback", json={**click, "document_id": "electronics/test/nope", "click_id": None})
    assert unknown.status_code == 404 and "No document 'electronics/test/nope'" in unknown.json()["detail"]


def test_metrics_count_requests_and_time_them_in_prometheus_format(api):
    def samples() -> dict[tuple, float]:
        response = httpx.get(f"{api}/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        found = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return found

    before = samples()
    assert ask(api).status_code == 200 and ask(api, top_k=0).status_code == 422
    httpx.get(f"{api}/no/such/path")
    after = samples()
    ok = ("qa_api_requests_total", (("method", "POST"), ("route", "/query"), ("status", "200")))
    refused = ("qa_api_requests_total", (("method", "POST"), ("route", "/query"), ("status", "422")))
    assert after[ok] == before.get(ok, 0) + 1 and after[refused] == before.get(refused, 0) + 1
    assert after[("qa_api_requests_total", (("method", "GET"), ("route", "other"), ("status", "404")))] >= 1  # never the raw path
    timed = ("qa_api_request_duration_seconds_count", (("method", "POST"), ("route", "/query")))
    assert after[timed] == before[timed] + 2 if timed in before else after[timed] >= 2
    assert after[("qa_api_stage_duration_seconds_count", (("stage", "retrieval"),))] >= 1
    assert after[("qa_api_ready", ())] == 1.0


# ------------------------------------------------------------------------------ bad requests


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"top_k": 0}, 422, "top_k must be a whole number from 1 to 50, not 0."),
        ({"top_k": "three"}, 422, "top_k must be a whole number from 1 to 50, not 'three'."),
        ({"top_k": 2.5}, 422, "top_k must be a whole number from 1 to 50, not 2.5."),
        ({"top_k": True}, 422, "top_k must be a whole number from 1 to 50, not True."),
        ({"top_k": 51}, 422, "top_k must be a whole number from 1 to 50, not 51."),
        ({"top_k_reader": -1}, 422, "top_k_reader must be a whole number from 1 to 20, not -1."),
        ({"no_answer_threshold": "nan"}, 422, "no_answer_threshold must be a finite number, not 'nan'."),
        ({"query": "   "}, 422, "The question is empty."),
        ({"query": "\u200b\ufeff\u00ad\u0301 \u0000"}, 422, "The question is empty."),  # no character a tokenizer keeps
        ({"query": "why? " * 400}, 422, "The question is 2000 characters long."),
        ({"query": None}, 422, "Invalid 'query': Input should be a valid string."),
        ({"item_id": "NOPE"}, 404, "Product 'NOPE' has no reviews in index 'subjqa-electronics'."),
        # a long id is named by its ends, not repeated whole (60,000 characters came back)
        ({"item_id": "A" * 59_999 + "Z"}, 404, f"Product '{'A' * 149}…{'A' * 49}Z (60,000 characters)' has no reviews"),
        ({"collection": "x" * 5000}, 404, f"Unknown collection '{'x' * 149}…{'x' * 50} (5,000 characters)'."),
        ({"collection": "garden"}, 404, "Unknown collection 'garden'."),
        ({"retriever": "sparse"}, 422, "Invalid 'retriever': Input should be 'bm25', 'dense' or 'hybrid'."),
        ({"mode": "abstractive"}, 422, "Invalid 'mode': Input should be 'extractive' or 'rag'."),
        ({"topk": 3}, 422, "Unknown field 'topk' in the request."),
        ({"stream": "yes"}, 422, "Invalid 'stream': Input should be a valid boolean."),
        ({"all_products": "yes"}, 422, "Invalid 'all_products': Input should be a valid boolean."),
    ],
)
def test_bad_queries_get_one_line_4xx_naming_the_fix(api, body, status, message):
    response = ask(api, **body)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail.startswith(message) and "Fix:" in detail and "\n" not in detail


def test_a_count_is_a_whole_number_however_a_client_writes_it():
    assert [check_count(value, "top_k") for value in (3, "3", " 3 ", 3.0)] == [3, 3, 3, 3]  # 3.0: a client whose numbers are floats
    for value in (2.5, True, "three", float("inf"), float("nan"), 0):
        with pytest.raises(QAError, match=rf"^top_k must be a whole number of at least 1, not {re.escape(repr(value))}\."):
            check_count(value, "top_k")


def test_a_saved_collection_the_server_does_not_serve_says_how_to_serve_it(api, api_settings, tmp_path):
    from qa_system.ingestion import ingest

    source = tmp_path / "notes.csv"
    source.write_text("text\nThe lamp is bright.\n", encoding="utf-8")
    ingest(api_settings, source, "saved-elsewhere", embed=False, progress=False)  # `qa-system index`, the server not started with it
    response = ask(api, collection="saved-elsewhere")
    assert response.status_code == 404 and response.json()["detail"] == (  # it was "Unknown collection", and it is on disk
        "Collection 'saved-elsewhere' is not served here (this server serves: electronics). "
        "Fix: start the server with it too (`qa-system api --collection saved-elsewhere`), or ask one of those."
    )


def test_malformed_or_incomplete_bodies_are_one_line_422(api):
    broken = httpx.post(f"{api}/query", content=b'{"query": "Is it good?", ', headers={"Content-Type": "application/json"})
    assert broken.status_code == 422 and broken.json()["detail"].startswith("The request body is not valid JSON (Expecting property name")
    control = httpx.post(f"{api}/query", content=b'{"query": "Is it\x01 good?"}', headers={"Content-Type": "application/json"})
    assert control.json()["detail"].startswith("The request body is not valid JSON (Invalid control character at character 16).")
    missing = httpx.post(f"{api}/query", json={"query": "Is it good?"})
    assert missing.status_code == 422 and missing.json()["detail"] == (
        "The question names no product (item_id), and collection 'electronics' holds 3 products. "
        "Fix: send the item_id of one (GET /products lists them), or all_products: true to ask every document (each answer names its product)."
    )
    assert (
        httpx.get(f"{api}/products", params={"limit": 0}).json()["detail"].startswith("limit must be a whole number from 1 to 1000, not 0.")
    )
    assert httpx.get(f"{api}/products", params={"collection": "garden"}).status_code == 404


def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(api, api_settings):
    padding = "x" * api_settings.api_max_body_bytes
    declared = ask(api, query=padding)
    assert declared.status_code == 413 and declared.json()["detail"] == (
        f"The request body is larger than {api_settings.api_max_body_bytes} bytes. Fix: send a shorter question (QA_API_MAX_BODY_BYTES sets the limit)."
    )
    body = json.dumps({"query": padding, "item_id": "KINDLE"}).encode()
    chunked = httpx.post(
        f"{api}/query", content=iter([body[i : i + 4096] for i in range(0, len(body), 4096)]), headers={"Content-Type": "application/json"}
    )
    assert "content-length" not in chunked.request.headers and chunked.status_code == 413


# ------------------------------------------------------------------------------ hostile input


def post_raw(url: str, path: str, body: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.post(f"{url}{path}", content=body, headers={"Content-Type": content_type}, timeout=60)


def refused(response: httpx.Response, status: int, start: str) -> str:
    """The one-line detail of a refusal, checked: its status, how it starts, and that it names a fix."""
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail.startswith(start) and "Fix:" in detail and "\n" not in detail, detail
    return detail


@pytest.fixture(scope="module")
def span_click(api) -> tuple[dict, str]:
    """A valid feedback body on a span answer of the module's server, and the text of its review."""
    body = ask(api).json()
    span = next(a for a in body["answers"] if a["kind"] == "span")
    content = next(d["content"] for d in body["documents"] if d["id"] == span["document_id"])
    click = {
        "verdict": "correct",
        "question": body["query"],
        "answer": span["text"],
        "start": span["start"],
        "end": span["end"],
        "document_id": span["document_id"],
    }
    return click, content


@pytest.mark.parametrize(
    "path, field",
    [("/query", field) for field in ("query", "item_id", "collection", "retriever", "mode")]
    + [("/feedback", field) for field in ("verdict", "question", "answer", "document_id", "collection", "pipeline", "click_id")],
)
def test_text_that_is_not_utf8_is_a_one_line_422_naming_the_field(api, span_click, path, field):
    """A lone surrogate (JSON's "\\ud800") was a 500 from the tokenizer, SQLite or the error's own JSON."""
    body = {"query": "Is it good for reading?", "item_id": "KINDLE"} if path == "/query" else dict(span_click[0])
    body[field] = "is it \ud800 good"
    detail = refused(
        post_raw(api, path, json.dumps(body).encode()), 422, f"'{field}' is not UTF-8 text: character 7 is a lone surrogate (\\ud800)."
    )
    assert detail.endswith(f"Fix: send '{field}' as UTF-8 text.")


@pytest.mark.parametrize("path", ["/query", "/feedback"])
def test_a_body_that_is_not_utf8_is_one_line_naming_the_fix(api, path):
    detail = refused(post_raw(api, path, b'{"query": "is it \xff good", "item_id": "KINDLE"}'), 422, "The request body is not valid JSON (")
    assert "0xff" in detail and "not UTF-8" in detail
    import gzip

    packed = gzip.compress(json.dumps({"query": "Is it good?", "item_id": "KINDLE"}).encode())  # "byte 0x8b ... is not UTF-8"
    detail = refused(post_raw(api, path, packed), 422, "The request body is not valid JSON (it is gzip-compressed, which this server")
    assert "send it uncompressed" in detail


def test_a_keep_alive_connection_survives_a_500(api_settings, tmp_path, monkeypatch):
    """An unexpected error is one line, and the client's connection stays open for its next request
    (the error used to be raised again after its 500 was sent, and uvicorn then closed the connection)."""
    from qa_system.serving.feedback import FeedbackStore

    def bug(self, feedback):  # stands in for a defect of the server's own code
        raise RuntimeError("a defect")

    connections: list[tuple] = []
    hooks = {"response": [lambda response: connections.append(response.extensions["network_stream"].get_extra_info("client_addr"))]}
    with running(create_app(api_settings.model_copy(update={"feedback_file": tmp_path}))) as url:  # a folder: SQLite cannot open it
        assert wait_ready(url).status_code == 200
        with httpx.Client(event_hooks=hooks, timeout=60) as client:
            unusable = client.post(f"{url}/feedback", json={"verdict": "wrong", "question": "Is it good?", "answer": "Yes."})
            monkeypatch.setattr(FeedbackStore, "record_click", bug)
            failed = client.post(f"{url}/feedback", json={"verdict": "wrong", "question": "Is it good?", "answer": "Yes."})
            after = client.get(f"{url}/health")
    # A database that cannot be opened is the server's state, said in one line with the fix.
    assert unusable.status_code == 503 and unusable.json()["detail"].startswith("The feedback database $QA_FEEDBACK_DB cannot be used (")
    assert unusable.json()["detail"].endswith("Fix: point QA_FEEDBACK_DB at a file this process can write.")
    assert failed.status_code == 500 and failed.json() == {"detail": "Internal error (RuntimeError). Fix: see the server's log."}
    assert after.status_code == 200 and connections[0] == connections[1] == connections[2], "a later request needed a new connection"


@pytest.mark.parametrize(
    "change, start",
    [
        ({"answer": None, "start": 2**63, "end": 2**63}, "start must be a whole number from 0 to "),  # was a 500 (OverflowError in SQLite)
        ({"verdict": "wrong", "answer": "Yes.", "start": None, "end": 2**63}, "end must be a whole number from 0 to "),
        ({"start": -10, "end": -1}, "start must be a whole number from 0 to "),  # was stored, and exported at answer_start -10
        ({"answer": "", "start": 50, "end": 5}, "The answer '' is not at offsets 50-5 of its review."),
        ({"answer": "", "start": 5, "end": 5}, "The answer '' is not at offsets 5-5 of its review."),
        ({"question": "why? " * 400}, "The question is 2000 characters long."),  # as /query; 60,000 were stored
    ],
)
def test_feedback_offsets_and_question_are_bounded(api, api_settings, span_click, change, start):
    click, content = span_click
    if change.get("start") == -10:
        change = {**change, "answer": content[-10:-1]}  # the text Python's negative slice finds there
    before = len(FeedbackStore(api_settings.feedback_db).all())
    refused(httpx.post(f"{api}/feedback", json={**click, **change}), 422, start)
    assert len(FeedbackStore(api_settings.feedback_db).all()) == before


def test_concurrent_exports_each_get_the_whole_export(api, api_settings):
    """20 clients export at once, five times over, from 600 clicks: each gets the whole export, and no
    file is written (each request rewrote one shared file and read it back: 29 of 100 got a 500)."""
    store = FeedbackStore(api_settings.feedback_db)
    review = "The screen is sharp and great for reading books at night."
    for n in range(600):
        store.record(Feedback("correct", f"Is it sharp, take {n}?", "sharp", 14, 19, f"electronics/race/{n}", context=review))
    export_file = api_settings.feedback_export
    export_file.unlink(missing_ok=True)
    with ThreadPoolExecutor(20) as clients:
        responses = [r for _ in range(5) for r in clients.map(lambda _: httpx.get(f"{api}/feedback/export", timeout=120), range(20))]
    assert [r.status_code for r in responses] == [200] * 100
    first = responses[0].json()
    assert all(r.json() == first for r in responses)
    questions = [qa["question"] for article in first["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    assert sum(q.startswith("Is it sharp, take ") for q in questions) == 600
    assert not export_file.exists()


@pytest.mark.parametrize(
    "path, body, content_type, status, start",
    [
        (
            "/query",
            b'{"query": "Is it good?", "item_id": "KINDLE", "no_answer_threshold": NaN}',
            "application/json",
            422,
            "The request body is not valid JSON (NaN is not a JSON number",
        ),
        (
            "/feedback",
            b'{"verdict": "wrong", "question": "Is it good?", "answer": "Yes.", "score": Infinity}',
            "application/json",
            422,
            "The request body is not valid JSON (Infinity is not a JSON number",
        ),
        (
            "/feedback",
            b'{"verdict": "wrong", "question": "Is it good?", "answer": "Yes.", "score": 1e400}',
            "application/json",
            422,
            "score must be a finite number, not inf.",
        ),
        (
            "/query",
            b'{"query": "Is it good?", "query": "   ", "item_id": "KINDLE"}',
            "application/json",
            422,
            "The request body is not valid JSON (the key 'query' appears twice",
        ),
        (
            "/query",
            b'{"query": ' + b"[" * 10000 + b"]" * 10000 + b"}",
            "application/json",
            422,
            "The request body is not valid JSON (arrays or objects nested more deeply than the parser allows).",
        ),
        (
            "/query",
            b'{"query": "Is it good?", "item_id": "KINDLE", "top_k": ' + b"9" * 5000 + b"}",
            "application/json",
            422,
            "The request body is not valid JSON (a number of more than",
        ),
        ("/query", b'{"query": "Is it good?", "item_id": "KINDLE", "\\ud800": 1}', "application/json", 422, "Invalid 'body'"),
        ("/query", b'{"query": "Is it good?", "item_id": "KINDLE"}', "text/plain", 422, "The request body is not a JSON object."),
        ("/query", b'["Is it good?"]', "application/json", 422, "The request body is not a JSON object."),
    ],
    ids=["nan", "infinity", "overflowing-float", "repeated-key", "deep-nesting", "5000-digit-int", "surrogate-key", "text-plain", "array"],
)
def test_hostile_bodies_are_one_line_422_naming_the_fix(api, path, body, content_type, status, start):
    refused(post_raw(api, path, body, content_type), status, start)


def test_unknown_routes_and_methods_name_the_fix(api):
    refused(httpx.get(f"{api}/no/such/path"), 404, "Not Found: GET /no/such/path.")
    refused(httpx.get(f"{api}/query"), 405, "Method Not Allowed: GET /query.")
    # Query strings are decoded with replacement characters: a surrogate or a stray byte cannot reach the code.
    refused(httpx.get(f"{api}/products?collection=%ED%A0%80%FF"), 404, "Unknown collection '\ufffd\ufffd\ufffd\ufffd'.")


def test_the_docs_page_loads_nothing_from_another_host(api):
    """FastAPI's /docs loaded Swagger UI's scripts, styles and favicon from cdn.jsdelivr.net and fastapi.tiangolo.com."""
    page = httpx.get(f"{api}/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    html = page.text
    assert "<script" not in html and "@import" not in html and "url(" not in html
    links = re.findall(r"""(?:src|href|action)\s*=\s*["']?([^"' >]+)""", html, flags=re.I)
    assert links and all(link.startswith(("/", "#")) and not link.startswith("//") for link in links), links
    assert "/collections/{name}/documents" in html and 'id="schema-QueryRequest"' in html  # the routes and their bodies
    assert httpx.get(f"{api}/redoc").status_code == 404


def test_a_token_is_required_when_one_is_set(api, api_settings):
    with running(create_app(api_settings.model_copy(update={"api_token": "s3cret"}))) as url:
        assert wait_ready(url).status_code == 200  # probes need no token
        assert httpx.get(f"{url}/docs").status_code == 200
        assert "HTTPBearer" in httpx.get(f"{url}/openapi.json").json()["components"]["securitySchemes"]
        for headers, problem in (
            ({}, "A bearer token is required."),
            ({"Authorization": "Bearer wrong"}, "The bearer token is not this server's."),
            ({"Authorization": "Basic s3cret"}, "The Authorization header is not a bearer token."),
        ):
            refused = httpx.post(f"{url}/query", json={"query": "Is it good?", "item_id": "KINDLE"}, headers=headers)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            assert refused.json()["detail"] == f"{problem} Fix: send the header 'Authorization: Bearer <QA_API_TOKEN>'."
            assert httpx.get(f"{url}/metrics", headers=headers).status_code == 401
        accepted = httpx.post(
            f"{url}/query", json={"query": "Is it good?", "item_id": "KINDLE"}, headers={"Authorization": "Bearer s3cret"}, timeout=60
        )
        assert accepted.status_code == 200 and accepted.json()["documents"]


def test_wrong_token_guesses_are_rate_limited_on_every_route(api, api_settings):
    app = create_app(api_settings.model_copy(update={"api_token": "s3cret", "api_rate_limit": 5}))
    with running(app) as url:
        guesses = [httpx.get(f"{url}/collections", headers={"Authorization": f"Bearer guess-{n}"}) for n in range(6)]
        assert [guess.status_code for guess in guesses] == [401] * 5 + [429]
        assert guesses[-1].json()["detail"].startswith("Too many requests from this client (limit 5 a minute).")
        assert (
            httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer guess-6"}).status_code == 429
        )  # a route scrapers call unlimited
        assert httpx.get(f"{url}/health").status_code in (200, 503)  # probes still answer
    assert "429" in app.openapi()["paths"]["/metrics"]["get"]["responses"]


def test_a_client_over_the_rate_limit_gets_429_and_probes_still_answer(api, api_settings):
    with running(create_app(api_settings.model_copy(update={"api_rate_limit": 3}))) as url:
        assert wait_ready(url).status_code == 200
        statuses = [httpx.get(f"{url}/collections").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        limited = httpx.get(f"{url}/products")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert limited.json()["detail"].startswith("Too many requests from this client (limit 3 a minute).")
        assert httpx.get(f"{url}/health").status_code == 200 and httpx.get(f"{url}/metrics").status_code == 200


# ------------------------------------------------------------------------------ concurrency and the command


def test_two_slow_questions_are_answered_at_the_same_time(api):
    """Both questions are inside the generator at once (each held there until the test lets them go),
    and a health check is answered meanwhile: neither question waits for the other, nor does the probe."""
    assert ask(api, query="How is the sound?", mode="rag").status_code == 200  # the RAG pipeline is built on first use
    results: list[httpx.Response] = []

    def slow() -> None:
        results.append(ask(api, query="How is the sound, slowly?", mode="rag"))

    threads = [threading.Thread(target=slow) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        assert SLOW_REPLIES.until_held(2) == 2, "only one question reached the generator: the other waited for it"
        health = httpx.get(f"{api}/health", timeout=60)
        assert health.status_code == 200 and not SLOW_REPLIES.opened  # answered while both answers were being written
    finally:
        SLOW_REPLIES.open()
        for thread in threads:
            thread.join()
    assert [r.status_code for r in results] == [200, 200]
    assert all(r.json()["answers"][0]["text"] == "The sound is tinny and quiet [1]." for r in results)


def test_a_slow_rag_answer_never_holds_up_an_extractive_one(api_settings):
    """One worker thread: a RAG answer held inside the generator runs in a thread of its own, so an extractive
    question (and the health check) is answered while it is still being written."""
    with running(create_app(api_settings.model_copy(update={"api_workers": 1}))) as url:
        assert wait_ready(url).status_code == 200
        assert ask(url, query="How is the sound?", mode="rag").status_code == 200  # the RAG pipeline is built on first use
        results: list[httpx.Response] = []
        slow = threading.Thread(target=lambda: results.append(ask(url, query="How is the sound, held up?", mode="rag")))
        slow.start()
        try:
            assert HELD_REPLIES.until_held(1) == 1
            extractive = ask(url, query="How is the sound?")
            assert extractive.status_code == 200 and not HELD_REPLIES.opened  # answered while the RAG answer is held
        finally:
            HELD_REPLIES.open()
            slow.join()
        assert results[0].status_code == 200


def test_a_client_that_leaves_stops_the_generator_and_frees_its_worker(api_settings, generator):
    """With one worker thread, an endless answer (minutes of writing) holds it until the generator ends:
    a client that leaves (after the first streamed word, or at its own timeout) must stop the generator,
    so that the next question gets the worker while the abandoned answer is still being written."""
    generator.drip_s = 0.05
    body = {"query": "Tell me everything about the sound, endlessly", "item_id": "KINDLE", "mode": "rag"}
    try:
        with running(create_app(api_settings.model_copy(update={"api_workers": 1}))) as url:
            assert wait_ready(url).status_code == 200
            ended = len(generator.streamed)  # replies the generator finished (or saw cut) so far
            with httpx.stream("POST", f"{url}/query", json={**body, "stream": True}, timeout=30) as streamed:
                first = next(line for line in streamed.iter_lines() if line.startswith("event: "))
            assert first == "event: token"
            assert ask(url, query="How is the sound?").status_code == 200  # extractive: it needs the one worker
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{url}/query", json=body, timeout=0.5)
            assert ask(url, query="How is the sound?").status_code == 200
            assert len(generator.streamed) == ended, "a question waited for the end of an abandoned answer"

            def stopped() -> float:
                metrics = text_string_to_metric_families(httpx.get(f"{url}/metrics").text)
                return next(s.value for family in metrics for s in family.samples if s.name == "qa_api_generations_stopped_total")

            deadline = time.monotonic() + 30  # the second stop is counted when the server notices the client left
            while stopped() < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert stopped() == 2
    finally:
        generator.drip_s = 0.0


def command_environment(api_settings: Settings) -> dict[str, str]:
    """What `qa-system api`, started as a command, needs to serve the tests' corpus."""
    return {
        "QA_DATA_DIR": str(api_settings.data_dir),
        "QA_HOME": str(api_settings.home),
        "QA_READER_MODEL": api_settings.reader_model,
        "QA_READER_BACKEND": "torch",
    }


def test_the_api_command_serves_on_loopback(api, api_settings, tmp_path):
    env = command_environment(api_settings)
    with serve_api(env, args=["--rate-limit", "0"], log=tmp_path / "api.log", timeout=180) as server:
        url = server.url
        body = ask(url).json()
        assert body["documents"][0]["meta"]["review_id"] == "r-kindle-1"
        assert "/query" in httpx.get(f"{url}/openapi.json").json()["paths"]
    assert "API:" in (tmp_path / "api.log").read_text()


def test_several_server_processes_share_the_port_and_answer_alike(api, api_settings, tmp_path):
    env = command_environment(api_settings)
    alone = ask(api).json()["answers"]
    with serve_api(env, args=["--rate-limit", "0", "--processes", "2", "--workers", "1"], log=tmp_path / "api.log", timeout=300) as server:
        url = server.url
        wait_all_ready(url, 2, timeout=240)  # each process loads on its own; a new connection may reach either
        with ThreadPoolExecutor(4) as clients:  # a connection of its own each
            answers = list(clients.map(lambda _: ask(url).json()["answers"], range(8)))
        with httpx.Client(base_url=url, timeout=60) as alone_on_it:  # one request at a time: the connection is kept
            kept = [alone_on_it.post("/query", json=QUESTION).headers.get("connection") for _ in range(3)]
        # Four keep-alive clients on two processes of one worker each: a process answering two at once ends a connection.
        barrier = threading.Barrier(4)

        def keep_asking(_) -> list[tuple[int, str | None]]:
            with httpx.Client(base_url=url, timeout=60) as http:
                barrier.wait()
                return [(r.status_code, r.headers.get("connection")) for r in (http.post("/query", json=QUESTION) for _ in range(4))]

        with ThreadPoolExecutor(4) as clients:
            replies = [reply for replies in clients.map(keep_asking, range(4)) for reply in replies]
    assert all(a == alone for a in answers)
    assert kept == [None] * 3, kept  # HTTP/1.1 keeps a connection unless told "close"
    assert {status for status, _ in replies} == {200} and {connection for _, connection in replies} == {"close", None}, replies
    log = (tmp_path / "api.log").read_text()
    assert "Serving from 2 processes" in log and len(set(re.findall(r"Started server process \[(\d+)\]", log))) >= 2, log[-2000:]


def test_several_processes_that_cannot_load_are_one_line_before_serving(api_settings, tmp_path, capsys, monkeypatch):
    # The first process prepares what the others would build (in a process of its own): its error is the command's.
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("QA_DATA_DIR", str(tmp_path / "no-such-data"))
    assert main(["api", "--processes", "2", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-data does not exist" in err[0] and "Fix: pass --data-dir" in err[0]


def test_document_routes_on_several_processes_are_refused_in_one_line(api_settings, capsys, monkeypatch):
    monkeypatch.setenv("QA_HOME", str(api_settings.home))
    monkeypatch.setenv("QA_API_DOCUMENTS", "1")
    monkeypatch.setenv("QA_API_TOKEN", "secret-token-for-the-test")
    assert main(["api", "--processes", "2", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert "need a server of one process; 2 were asked for" in err and "--processes 1" in err and len(err.splitlines()) == 1


def test_a_servers_thread_pools_share_its_cores_among_its_workers():
    """PyTorch's threads and FAISS's OpenMP team (a dense search) per worker: workers x threads never exceeds the cores."""
    script = """
import json, faiss, torch
from qa_system.config import Settings
from qa_system.reading.onnx import physical_cores
from qa_system.serving.api.server import size_thread_pools
sized = [(size_thread_pools(Settings(api_workers=w)), torch.get_num_threads(), faiss.omp_get_max_threads()) for w in (1, 2, 64)]
print(json.dumps({"cores": physical_cores(), "sized": sized}))
"""
    result = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    cores = result["cores"]
    assert result["sized"] == [[cores] * 3, [max(1, cores // 2)] * 3, [1] * 3]
    # Where FAISS is not installed (an image that brings its own packages), PyTorch's threads are sized all the same.
    without_faiss = "import sys; sys.modules['faiss'] = None\n" + script.replace("faiss, ", "").replace(", faiss.omp_get_max_threads()", "")
    result = json.loads(subprocess.run([sys.executable, "-c", without_faiss], capture_output=True, text=True, check=True).stdout)
    assert result["sized"] == [[cores] * 2, [max(1, cores // 2)] * 2, [1] * 2]


def left_in_time_wait() -> int:
    """A loopback port that a server has just stopped serving on: its side of a connection waits out TIME_WAIT there."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        accepted.close()  # the server closes first: its end enters TIME_WAIT
        client.recv(1)
        client.close()
        return listener.getsockname()[1]


def test_the_api_restarts_at_once_on_the_port_it_just_left(api_settings, tmp_path):
    """The port check bound without SO_REUSEADDR: a restart right after a stop was refused for up to 60 s."""
    from qa_system.serving.api.server import CLI
    from qa_system.serving.webapp import serve_process

    port = left_in_time_wait()
    with socket.socket() as plain:  # what the check did: refused while the old connection waits
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    env = command_environment(api_settings)
    command = [*CLI, "api", "--host", "127.0.0.1", "--port", str(port), "--rate-limit", "0"]
    with serve_process(command, f"http://127.0.0.1:{port}/health", "qa-system api", env, tmp_path / "api.log", timeout=180):
        assert ask(f"http://127.0.0.1:{port}").status_code == 200


def test_ask_url_asks_a_running_server_and_its_errors_are_one_line(api, capsys):
    assert main(["ask", "Is it good for reading?", "--item", "KINDLE", "--url", api, "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    body = ask(api, top_k=2).json()  # what the server answers the same question
    assert out.startswith("Q: Is it good for reading?  (KINDLE in electronics;") and f"{body['pipeline']} at {api})" in out.splitlines()[0]
    spans = [a for a in body["answers"] if a["kind"] == "span"]
    assert (
        spans
        and all(f". {a['text']}  " in out for a in spans)
        and ("\nNo answer in these reviews  " in out) == any(a["kind"] == "no_answer" for a in body["answers"])
    )
    assert main(["ask", "Is it good?", "--item", "NOPE", "--url", api]) == 2  # the server's 404, as one line
    err = capsys.readouterr().err
    assert "Product 'NOPE' has no reviews" in err and len(err.strip().splitlines()) == 1
    # the server's limits are said as the flags that set them (it said "pass top_k=1 to 50")
    assert main(["ask", "Is it good?", "--item", "KINDLE", "--url", api, "--top-k", "100", "--answers", "60"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --top-k must be a whole number from 1 to 50, not 100. Fix: pass --top-k 1 to 50"), err
    port = free_port()
    assert main(["ask", "Is it good?", "--item", "KINDLE", "--url", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"Cannot reach the API at http://127.0.0.1:{port}" in err and "`qa-system api`" in err and len(err.strip().splitlines()) == 1


def test_ask_url_starts_without_loading_haystack_or_the_models(api):
    # A client of a running server pays for Python and the CLI alone: 0.5 s a question against 2.7 s when
    # `ask --url` imported Haystack (docs/rest-api.md). Checked by what the process imported, not by a clock.
    code = (
        "import sys; from qa_system.cli import main; "
        f"code = main(['ask', 'Is it good for reading?', '--item', 'KINDLE', '--url', {api!r}]); "
        "heavy = sorted(m for m in ('haystack', 'torch', 'transformers', 'onnxruntime', 'numpy') if m in sys.modules); "
        "print('exit', code, 'heavy', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "1. " in out and out.strip().endswith("exit 0 heavy []"), out


def test_the_load_test_serves_the_configured_reader_by_default(api_settings, tmp_path):
    from qa_system.bench.api import run_api_bench

    # `qa-system bench api --clients 8 --seconds 60` measures what `qa-system api` serves (int8 ONNX unless configured otherwise).
    onnx = api_settings.with_(reader_backend="onnx")
    table = run_api_bench(onnx, tmp_path / "bench", clients=1, seconds=1, questions=2, progress=lambda m: None)
    assert list(table["server"]) == ["QA_READER_BACKEND=onnx"] and table["answered"].iloc[0] >= 1 and table["errors"].iloc[0] == 0
    assert table["answered_by"].iloc[0].endswith(", onnx int8) on cpu")  # what read, as the answers name it
    # The CPU its processes spent meanwhile: one process, no model server.
    row = table.iloc[0]
    assert row["server_cpu_ms_per_answer"] > 0 and row["server_cores_busy"] > 0 and math.isnan(row["model_server_cpu_ms_per_answer"])
    # /health names what reads once loaded, not merely what was configured.
    with running(create_app(onnx)) as url:
        assert wait_ready(url).json()["reader_backend"] == "onnx int8"


def test_the_load_test_measures_each_number_of_clients_in_turn(api, api_settings, tmp_path, monkeypatch):
    monkeypatch.setenv("QA_DATA_DIR", str(api_settings.data_dir))
    out = tmp_path / "bench-api"
    assert main(["bench", "api", "--url", api, "--clients", "1", "2", "--seconds", "1", "--questions", "4", "--out", str(out)]) == 0
    rows = json.loads((out / "report.json").read_text())["metrics"]
    assert [(r["server"], r["clients"]) for r in rows] == [(f"{api}, 1 clients", 1), (f"{api}, 2 clients", 2)]
    assert all(r["answered"] >= 1 and r["errors"] == 0 and 0 < r["p50_ms"] <= r["p99_ms"] for r in rows)
    assert all(math.isnan(r["server_cpu_ms_per_answer"]) for r in rows)  # a server it did not start: its processes are not seen


def test_the_load_test_reports_throughput_latency_and_errors(api, api_settings, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QA_DATA_DIR", str(api_settings.data_dir))
    out = tmp_path / "bench-api"
    assert main(["bench", "api", "--url", api, "--clients", "3", "--seconds", "2", "--questions", "4", "--out", str(out)]) == 0
    (row,) = json.loads((out / "report.json").read_text())["metrics"]
    assert row["clients"] == 3 and row["answered"] >= 3 and row["errors"] == 0
    assert (
        row["throughput_qps"] == pytest.approx(row["answered"] / row["seconds"], rel=0.01)
        and 0 < row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
    )
    assert row["health_p50_ms"] > 0 and "throughput_qps" in capsys.readouterr().out
    # The pipeline's own times, the waits and the server's memory, as a table and over the run (a table and a plot).
    assert 0 < row["pipeline_p50_ms"] <= row["pipeline_p95_ms"] and row["retrieval_p50_ms"] > 0 and row["queue_p50_ms"] >= 0
    assert row["reader_queue_p50_ms"] >= 0 and 0 < row["memory_start_mb"] <= row["memory_max_mb"]
    assert 0 < row["client_cpu_pct"] < 100 and "client_cpu_pct: the busiest client process" in (out / "report.md").read_text()
    assert row["answered_by"] == ask(api).json()["pipeline"]
    report = json.loads((out / "report.json").read_text())
    assert report["Over time"] and {"from_s", "throughput_qps", "p95_ms", "memory_mb"} <= set(report["Over time"][0])
    assert (out / "over_time.png").stat().st_size > 0


def test_the_load_tests_clients_spread_over_processes_and_report_their_own_cpu(api, api_settings):
    from qa_system.bench.api import load_questions, load_test

    bodies = load_questions(api_settings, "electronics", "test", 4, 0, None, 3)
    result = load_test(api, bodies, clients=3, seconds=2, label="spread", client_processes=2)
    # Clients 0 and 2 asked from one process, client 1 from the other: every client's questions came back answered.
    assert result.errors == {} and {r["client"] for r in result.records} == {0, 1, 2}
    assert len(result.records) == len(result.latencies) == len(result.server_total_s)
    assert all(0 <= r["t"] <= result.seconds for r in result.records) and [r["t"] for r in result.records] == sorted(
        r["t"] for r in result.records
    )
    row = result.row()
    assert row["answered"] == len(result.latencies) and 0 < row["client_cpu_pct"] < 100


class _EndsTheProcess:
    """Unpickled in a client process, it ends that process at once, as a client that dies while starting does."""

    def __reduce__(self):
        return os._exit, (3,)


def test_a_client_process_that_dies_before_the_load_begins_ends_the_load_test_at_once(api, api_settings):
    from qa_system.bench.api import load_questions, load_test

    bodies = load_questions(api_settings, "electronics", "test", 2, 0, None, 3)
    # It waited at the start barrier for its timeout (600 s) and then said only that the clients did not start.
    with pytest.raises(QAError, match=r"clients did not start: a client process ended \(exit code 3\) before the load began"):
        load_test(api, [*bodies, _EndsTheProcess()], clients=2, seconds=2, label="dies", client_processes=2)
