"""Integration tests of the OpenSearch store against a real Lucene server, part of the default run.

The session fixture `opensearch_url` (conftest.py) starts the bundled Elasticsearch 7.9.2 OSS
(tests/helpers/search_server.py) on 127.0.0.1, or uses QA_OPENSEARCH_TEST_URL. The search engine is never
mocked here. That server has no k-NN plugin, so the dense test skips there and the test of the
"no vector search" message runs instead.
"""

from __future__ import annotations

import uuid

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

import qa_system
from helpers.password_server import asking_for_a_password
from helpers.search_server import free_port
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion import IngestOptions, ingest
from qa_system.ingestion.indexing import build_index, open_or_build_index
from qa_system.pipelines import build_retrieval_pipeline
from qa_system.serving.documents import DocumentChanges
from qa_system.serving.service import QAService, ServedCollection
from qa_system.stores import (
    Index,
    delete_opensearch_index,
    discard_opensearch_index,
    new_opensearch_index,
    open_index,
    opensearch_client,
    opensearch_has_knn,
    opensearch_index_body,
    save_index,
)

pytestmark = pytest.mark.opensearch

NO_KNN = "the test server (Elasticsearch 7.9.2 OSS) has no k-NN plugin, so no vector search; set QA_OPENSEARCH_TEST_URL to an OpenSearch with k-NN"


@pytest.fixture
def os_settings(opensearch_url, tmp_path, tiny_subjqa):
    return Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="opensearch", opensearch_url=opensearch_url)


@pytest.fixture
def name(os_settings):
    """A fresh index name; the alias and every concrete index behind it are deleted afterwards."""
    name = f"qa-system-test-{uuid.uuid4().hex[:8]}"
    yield name
    delete_opensearch_index(os_settings, name)
    opensearch_client(os_settings).indices.delete(index=f"{name}*", ignore_unavailable=True)  # leftovers of a failed test


@pytest.fixture
def os_index(os_settings, name):
    return build_index(os_settings, "electronics", progress=False, name=name)


@pytest.fixture
def knn(os_settings) -> bool:
    return opensearch_has_knn(opensearch_client(os_settings))


def concrete_indices(settings, name) -> list[str]:
    return sorted(opensearch_client(settings).indices.get(index=f"{name}--*"))


def review_ids(pipeline, question, **kwargs) -> list[str]:
    return [d.meta["review_id"] for d in pipeline.run(question, **kwargs)["documents"]]


def review(review_id, item_id, text, split="train") -> Document:
    meta = {"review_id": review_id, "item_id": item_id, "split": split, "domain": "electronics"}
    return Document(id=f"electronics/{split}/{review_id}", content=text, meta=meta)


CORPUS = [
    review("a-1", "LAMP", "The lamp is bright and the light is warm."),
    review("a-2", "LAMP", "Bright enough for reading, but the switch broke after a week."),
    review("b-1", "KETTLE", "The kettle boils fast; bright blue light while it boils."),
]


# ------------------------------------------------------------------------------------ index


def test_index_round_trip_behind_an_alias(os_settings, os_index, name, knn):
    reopened = open_index(os_settings, name=name)
    assert reopened.backend == "opensearch" and reopened.store.count_documents() == 6
    assert reopened.manifest["documents"] == 6 and reopened.item_counts() == {"KINDLE": 3, "HEADPHONES": 2, "MOUSE": 1}
    assert reopened.manifest["vector_search"] is knn
    client = opensearch_client(os_settings)
    [concrete] = concrete_indices(os_settings, name)
    assert concrete.startswith(f"{name}--") and list(client.indices.get_alias(name=name)) == [concrete]


def test_opening_a_missing_index_says_how_to_build_it_and_creates_nothing(os_settings, name):
    with pytest.raises(QAError, match=f"No opensearch index named '{name}' exists yet.*--store opensearch"):
        open_index(os_settings, name=name)
    assert opensearch_client(os_settings).indices.get(index=f"{name}*") == {}


# ------------------------------------------------------------------------------------ BM25


def test_bm25_with_product_filters(os_settings, os_index):
    bm25 = build_retrieval_pipeline("bm25", os_settings, index=os_index)
    assert review_ids(bm25, "How is the sound?", item_id="KINDLE", split="dev", top_k=5) == ["r-kindle-3"]
    assert review_ids(bm25, "reading books", item_id="KINDLE", split="train", top_k=3)[0] == "r-kindle-1"
    # Both the mouse and the Kindle speak of their battery; the filter keeps one product, best first.
    everywhere = bm25.run("Does the battery last months?", top_k=10)["documents"]
    assert everywhere[0].meta["review_id"] == "r-mouse-1"  # battery, lasts and months
    assert {d.meta["item_id"] for d in everywhere} >= {"MOUSE", "KINDLE"}
    kindle = bm25.run("Does the battery last months?", item_id="KINDLE", top_k=10)["documents"]
    assert kindle and {d.meta["item_id"] for d in kindle} == {"KINDLE"}
    assert kindle[0].meta["review_id"] == "r-kindle-1"
    scores = [d.score for d in everywhere]
    assert scores == sorted(scores, reverse=True)


def test_a_review_in_two_splits_is_one_document_a_split_filter_finds_under_either(os_settings, os_index):
    """split is a keyword array (["dev", "test"]); the server's term filter matches any element."""
    [stored] = os_index.store.filter_documents({"field": "meta.review_id", "operator": "==", "value": "r-kindle-3"})
    assert (stored.id, stored.meta["split"]) == ("electronics/r-kindle-3", ["dev", "test"])
    bm25 = build_retrieval_pipeline("bm25", os_settings, index=os_index)
    for split in ("dev", "test"):
        found = bm25.run("How is the sound?", item_id="KINDLE", split=split, top_k=5)["documents"]
        assert [d.id for d in found] == ["electronics/r-kindle-3"], split
    # The whole product: each review once, the one in two splits too.
    product = review_ids(bm25, "How is the sound?", item_id="KINDLE", top_k=5)
    assert sorted(product) == ["r-kindle-1", "r-kindle-2", "r-kindle-3"]
    in_train = os_index.store.filter_documents({"field": "meta.split", "operator": "in", "value": ["train"]})
    assert sorted(d.meta["review_id"] for d in in_train) == ["r-kindle-1", "r-kindle-2", "r-phones-1"]  # r-phones-1: train and test


def test_public_api_pipeline_on_the_opensearch_store(os_settings, os_index):
    pipeline = qa_system.build_retrieval_pipeline("bm25", os_settings, domains="electronics", index=os_index)
    result = pipeline.run("Is the cord durable?", item_id="HEADPHONES", top_k=3)
    # the product's other review holds no word of the question: it follows at score 0, as in the memory store
    assert [(d.meta["review_id"], d.score > 0) for d in result["documents"]] == [("r-phones-2", True), ("r-phones-1", False)]
    assert result["timings"]["retrieval_s"] > 0


def test_bm25_analyzer_matches_the_project_bm25(os_settings, name):
    """English stemming (books ~ book, boils ~ boiling), stopwords kept, hyphenated words joined too: as the memory store's BM25."""
    routers = [
        review("r-1", "ROUTER", "The wi-fi is fast and the state-of-the-art antenna helps."),
        review("r-2", "ROUTER", "Slow wifi, set up in 2-3 minutes (2024-01-31, x-2b)."),
    ]
    index = build_index(os_settings, documents=[*CORPUS, *routers], embed=False, progress=False, name=name)
    bm25 = build_retrieval_pipeline("bm25", os_settings, index=index)
    assert review_ids(bm25, "boiling", top_k=3) == ["b-1"]
    assert review_ids(bm25, "bright light", item_id="LAMP", top_k=3) == ["a-1", "a-2"]
    memory = Settings.from_env(data_dir=os_settings.data_dir, home=os_settings.home, store="memory")
    in_memory = build_retrieval_pipeline(
        "bm25", memory, index=build_index(memory, documents=[*CORPUS, *routers], embed=False, progress=False, name=name)
    )
    for question in ("wifi", "Is the wi-fi fast?", "stateof", "theart antenna", "23 minutes"):
        assert review_ids(bm25, question, top_k=3) == review_ids(in_memory, question, top_k=3) != [], question
    for question in ("x2b", "202401"):  # joined words only: no part starts with a digit
        assert review_ids(bm25, question, top_k=3) == review_ids(in_memory, question, top_k=3) == [], question
    settings = opensearch_client(os_settings).indices.get_settings(index=name)
    [concrete] = settings
    assert settings[concrete]["settings"]["index"]["similarity"]["default"] == {"type": "BM25", "k1": "1.2", "b": "1.0"}


# ------------------------------------------------------------------------------------ update, delete, re-index


def test_reindex_updates_changed_reviews_and_drops_removed_ones(os_settings, name):
    build_index(os_settings, documents=CORPUS, embed=False, progress=False, name=name)
    changed = [review("a-1", "LAMP", "The lamp flickers and hums."), CORPUS[1]]  # a-1 rewritten, b-1 gone
    index = build_index(os_settings, documents=changed, embed=False, progress=False, name=name)
    bm25 = build_retrieval_pipeline("bm25", os_settings, index=index)
    assert review_ids(bm25, "flickers", top_k=3) == ["a-1"]
    assert review_ids(bm25, "kettle boils", top_k=3) == []
    reopened = open_index(os_settings, name=name)
    assert reopened.store.count_documents() == 2 and reopened.item_counts() == {"LAMP": 2}
    assert len(concrete_indices(os_settings, name)) == 1  # the retired index is deleted


def test_update_and_delete_documents_through_the_alias(os_settings, name):
    build_index(os_settings, documents=CORPUS, embed=False, progress=False, name=name)
    index = open_index(os_settings, name=name)
    bm25 = build_retrieval_pipeline("bm25", os_settings, index=index)
    index.store.write_documents([review("b-1", "KETTLE", "The kettle whistles loudly.")], policy=DuplicatePolicy.OVERWRITE, refresh=True)
    assert review_ids(bm25, "whistles", top_k=3) == ["b-1"] and review_ids(bm25, "boils", top_k=3) == []
    index.store.delete_documents([CORPUS[0].id], refresh=True)
    assert review_ids(bm25, "lamp", item_id="LAMP", top_k=3) == ["a-2"]  # a-1 is gone; a-2 holds no "lamp" (score 0)
    assert index.store.count_documents() == 2


def test_reindex_is_atomic_old_index_serves_until_the_swap(os_settings, name):
    old = build_index(os_settings, documents=CORPUS, embed=False, progress=False, name=name)
    bm25 = build_retrieval_pipeline("bm25", os_settings, index=old)
    # The steps build_index takes, with a look between them: a new index beside the old one ...
    staging = new_opensearch_index(os_settings, name, embedding_dim=None)
    staging.write_documents([review("c-1", "CLOCK", "The clock ticks loudly at night.")], refresh=True)
    assert open_index(os_settings, name=name).store.count_documents() == 3
    assert review_ids(bm25, "ticks", top_k=3) == [] and review_ids(bm25, "kettle", top_k=3) == ["b-1"]
    # ... swapped in with one alias update: the same pipeline now reads the new documents.
    save_index(Index("opensearch", name, staging, {"documents": 1, "item_counts": {"CLOCK": 1}}), os_settings)
    assert review_ids(bm25, "ticks", top_k=3) == ["c-1"] and review_ids(bm25, "kettle", top_k=3) == []
    assert open_index(os_settings, name=name).item_counts() == {"CLOCK": 1}
    assert concrete_indices(os_settings, name) == [staging.to_dict()["init_parameters"]["index"]]


def test_a_collection_saved_by_another_writer_meanwhile_keeps_its_change_and_refuses_this_one(os_settings, name):
    """Two API servers with their own QA_HOME on one search server: both tasks said "done", and one upload was gone
    (or the alias served both new indices, every review twice). No file lock reaches the other writer."""
    from qa_system.errors import Conflict

    build_index(os_settings, documents=CORPUS, embed=False, progress=False, name=name)
    theirs = new_opensearch_index(os_settings, name, embedding_dim=None)  # both start from the index in service
    ours = new_opensearch_index(os_settings, name, embedding_dim=None)
    theirs.write_documents([*CORPUS, review("c-1", "CLOCK", "The clock ticks.")], refresh=True)
    ours.write_documents([*CORPUS, review("d-1", "DESK", "The desk wobbles.")], refresh=True)
    save_index(Index("opensearch", name, theirs, {"documents": 4}), os_settings)
    with pytest.raises(Conflict, match=rf"^Collection '{name}' was changed by another writer while this change ran .* theirs is kept"):
        save_index(Index("opensearch", name, ours, {"documents": 4}), os_settings)
    served = open_index(os_settings, name=name)
    assert (
        served.manifest.pop("saved")
        and served.manifest == {"documents": 4}
        and sorted(d.id.split("/")[-1] for d in served.store.filter_documents())
        == [
            "a-1",
            "a-2",
            "b-1",
            "c-1",
        ]
    )
    discard_opensearch_index(os_settings, ours)  # what a failed run does with its index
    assert concrete_indices(os_settings, name) == [theirs.to_dict()["init_parameters"]["index"]]  # one index, served once
    # A change saved in place meanwhile (deleted documents, a recalibration: the manifest of the index in service
    # saved again) is another writer's change too.
    later = new_opensearch_index(os_settings, name, embedding_dim=None)
    later.write_documents(CORPUS, refresh=True)
    in_service = open_index(os_settings, name=name)
    save_index(Index("opensearch", name, in_service.store, {**in_service.manifest, "recalibration": {"a": 1.0}}), os_settings)
    with pytest.raises(Conflict):
        save_index(Index("opensearch", name, later, {"documents": 3}), os_settings)
    discard_opensearch_index(os_settings, later)
    kept = open_index(os_settings, name=name).manifest
    assert kept.pop("saved") and kept == {"documents": 4, "recalibration": {"a": 1.0}}
    # Without another writer, a change goes in, and the index it started from is deleted in the same step.
    alone = new_opensearch_index(os_settings, name, embedding_dim=None)
    alone.write_documents([review("e-1", "FAN", "The fan hums.")], refresh=True)
    save_index(Index("opensearch", name, alone, {"documents": 1}), os_settings)
    assert concrete_indices(os_settings, name) == [alone.to_dict()["init_parameters"]["index"]]


def test_failed_reindex_leaves_the_old_index_serving(os_settings, name):
    build_index(os_settings, documents=CORPUS, embed=False, progress=False, name=name)
    before = concrete_indices(os_settings, name)
    # The server refuses the second review: its `rating` is text where the first made it a number.
    bad = [review("d-1", "LAMP", "Fine."), review("d-2", "LAMP", "Also fine.")]
    bad[0].meta["rating"], bad[1].meta["rating"] = 5, "five stars"
    with pytest.raises(Exception, match="mapper_parsing_exception|failed to parse"):
        build_index(os_settings, documents=bad, embed=False, progress=False, name=name)
    index = open_index(os_settings, name=name)
    assert index.store.count_documents() == 3 and index.manifest["documents"] == 3
    assert review_ids(build_retrieval_pipeline("bm25", os_settings, index=index), "kettle", top_k=3) == ["b-1"]
    assert concrete_indices(os_settings, name) == before  # the half-written index is gone


def test_a_plain_index_of_that_name_is_replaced_by_the_alias(os_settings, name):
    """An index created under the name itself (e.g. by the integration's defaults) is swapped out in the same step."""
    client = opensearch_client(os_settings)
    client.indices.create(index=name, body=opensearch_index_body(None))
    client.index(index=name, body={"content": "stale review", "item_id": "OLD"}, refresh=True)
    index = build_index(os_settings, documents=CORPUS, embed=False, progress=False, name=name)
    assert list(client.indices.get_alias(name=name)) == concrete_indices(os_settings, name)
    assert index.store.count_documents() == 3


def test_no_collection_addresses_or_replaces_the_index_behind_another_collection(os_settings, name, tmp_path):
    """The concrete index behind a collection's alias shows in _cat/aliases; a collection of that name would replace it on its first write."""
    build_index(os_settings, documents=CORPUS, embed=False, progress=False, name=name)
    [concrete] = concrete_indices(os_settings, name)
    changes = DocumentChanges(os_settings, QAService(os_settings, [ServedCollection(name)]))
    injected = b'{"text": "Injected review."}\n'
    (tmp_path / "injected.jsonl").write_bytes(injected)
    for door in (
        lambda: changes.add(concrete, injected, IngestOptions(format="jsonl"), "injected.jsonl"),
        lambda: changes.create(concrete),
        lambda: changes.delete(concrete, ids=[CORPUS[0].id]),
        lambda: changes.drop(concrete),
        lambda: ingest(os_settings, tmp_path / "injected.jsonl", concrete, progress=False),
    ):
        with pytest.raises(QAError, match=f"'{concrete}' is named like the index behind a collection.*Fix: pick a name"):
            door()
    # The store refuses it too, whichever door named it: opening, replacing or deleting that index.
    behind = f"'{concrete}' is the search server index behind the collection '{name}', not a collection. Fix: use the collection's name"
    with pytest.raises(QAError, match=behind):
        open_index(os_settings, name=concrete)
    with pytest.raises(QAError, match=behind):
        delete_opensearch_index(os_settings, concrete)
    staging = new_opensearch_index(os_settings, concrete, embedding_dim=None)
    with pytest.raises(QAError, match=behind):
        save_index(Index("opensearch", concrete, staging, {"documents": 0}), os_settings)
    discard_opensearch_index(os_settings, staging)
    assert concrete_indices(os_settings, name) == [concrete]
    index = open_index(os_settings, name=name)
    assert index.store.count_documents() == 3 and review_ids(
        build_retrieval_pipeline("bm25", os_settings, index=index), "kettle", top_k=3
    ) == ["b-1"]


def test_manifest_update_of_the_index_in_service(os_settings, os_index, name):
    """What fit-fusion does: change the manifest of an opened index and save it in place."""
    index = open_index(os_settings, name=name)
    index.manifest["calibration"] = {"note": "fitted"}
    save_index(index, os_settings)
    assert open_index(os_settings, name=name).manifest["calibration"] == {"note": "fitted"}
    assert open_index(os_settings, name=name).store.count_documents() == 6


# ------------------------------------------------------------------------------------ dense


def test_dense_retrieval_with_product_filters(os_settings, os_index, knn):
    if not knn:
        pytest.skip(NO_KNN)
    for retriever in ("dense", "hybrid"):
        pipeline = build_retrieval_pipeline(retriever, os_settings, index=os_index)
        assert review_ids(pipeline, "How is the sound?", item_id="KINDLE", split="dev", top_k=5) == ["r-kindle-3"], retriever


def test_dense_without_knn_is_one_clear_line(os_settings, os_index, knn, monkeypatch, capsys):
    if knn:
        pytest.skip("the server has the k-NN plugin (test_dense_retrieval_with_product_filters runs instead)")
    assert os_index.embedding_model is None  # nothing embedded for a server that cannot search vectors
    for retriever in ("dense", "hybrid"):
        with pytest.raises(QAError, match=f"has no vector search \\(k-NN plugin\\), so {retriever} retrieval cannot run") as error:
            build_retrieval_pipeline(retriever, os_settings, index=os_index)
        assert "--retriever bm25" in str(error.value) and "\n" not in str(error.value)
    # The saved index is not rebuilt over and over for lack of vectors, and the CLI says the same in one line.
    assert open_or_build_index(os_settings, name=os_index.name).manifest["created"] == os_index.manifest["created"]
    monkeypatch.setenv("QA_DATA_DIR", str(os_settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(os_settings.home))
    flags = ["--store", "opensearch", "--opensearch-url", os_settings.opensearch_url, "--domain", "electronics"]
    try:
        assert main(["index", *flags]) == 0
        assert "no review vectors: the server has no k-NN plugin" in capsys.readouterr().out
        assert main(["search", "How is the sound?", "--item", "KINDLE", "--retriever", "dense", *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "no vector search" in err and err.count("\n") == 1
        assert main(["search", "How is the sound?", "--item", "KINDLE", *flags]) == 0
        assert "r-kindle-3" in capsys.readouterr().out
    finally:
        delete_opensearch_index(os_settings, "subjqa-electronics")


def test_dense_pipeline_on_a_knn_server_filters_inside_the_vector_search(tmp_path):
    """Wiring for servers with k-NN (the test server has none): cosine HNSW vectors, product filters inside the k-NN query."""
    from qa_system.pipelines import load_pipeline
    from qa_system.stores.opensearch import _opensearch_document_store

    body = opensearch_index_body(384)
    assert body["settings"]["index"]["knn"] is True
    assert body["mappings"]["properties"]["embedding"] == {
        "type": "knn_vector",
        "dimension": 384,
        "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"},
    }
    assert "embedding" not in opensearch_index_body(None)["mappings"]["properties"]
    settings = Settings(home=tmp_path, store="opensearch", opensearch_url="http://127.0.0.1:9")
    index = Index(
        "opensearch",
        "subjqa-electronics",
        _opensearch_document_store(settings, "subjqa-electronics", body),
        {"embedding_model": settings.embedding_model},
    )
    for retriever in ("dense", "hybrid"):
        dense = load_pipeline(retriever, index, settings).get_component("dense_retriever")
        assert type(dense).__name__ == "OpenSearchEmbeddingRetriever" and dense.to_dict()["init_parameters"]["efficient_filtering"] is True


# ------------------------------------------------------------------------------------ unreachable


def test_unreachable_server_is_one_line_naming_the_url_and_the_fix(tmp_path, tiny_subjqa, monkeypatch, capsys):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there any more
    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="opensearch", opensearch_url=url)
    for call in (lambda: open_index(settings), lambda: build_index(settings, progress=False)):
        with pytest.raises(QAError) as error:
            call()
        assert str(error.value) == (
            f"OpenSearch at {url} is unreachable. Fix: start an OpenSearch server there, or set QA_OPENSEARCH_URL (--opensearch-url) to a running one."
        )
        assert error.value.__cause__ is None and error.value.__suppress_context__
    monkeypatch.setenv("QA_DATA_DIR", str(tiny_subjqa))
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    assert main(["search", "Is it good?", "--store", "opensearch", "--opensearch-url", url]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {error.value}\n"


def test_a_server_that_stops_answering_once_the_collection_is_open_is_one_line(os_settings, os_index):
    from qa_system.errors import Unavailable
    from qa_system.stores import Index
    from qa_system.stores.opensearch_store import CheckedOpenSearchDocumentStore

    url = f"http://127.0.0.1:{free_port()}"  # the open collection's server, gone: nothing listens there any more
    concrete = os_index.store.to_dict()["init_parameters"]["index"]
    store = CheckedOpenSearchDocumentStore(hosts=url, index=concrete, create_index=False, timeout=2)
    gone = Index("opensearch", os_index.name, store, os_index.manifest)
    pipeline = build_retrieval_pipeline("bm25", os_settings, index=gone)
    message = rf"^The search server at {url} does not answer \(it stopped, or the network to it is down\)\. Fix: start it again"
    with pytest.raises(Unavailable, match=message):  # a 503 over HTTP (it was a 500), one line in the CLI (a traceback)
        pipeline.run("Is it good?", item_id="KINDLE")
    with pytest.raises(Unavailable, match=message):  # an ingestion's write
        store.write_documents([review("r-new", "KINDLE", "Bright screen.")])
    assert os_index.store.count_documents() > 0  # the server itself, and what it holds, untouched


@pytest.mark.parametrize(
    "status, kind, body, why",
    [
        (200, "application/json", b'{"acknowledged": true}', "no version in its reply to GET /"),  # any JSON to anything
        (200, "text/html", b"<html><body>Welcome</body></html>", "its reply is no JSON"),  # a web server's page
        (502, "text/plain", b"Bad Gateway", "HTTP 502"),  # a proxy in front of nothing
    ],
)
def test_a_url_that_answers_but_is_no_search_server_is_one_line(tmp_path, monkeypatch, capsys, status, kind, body, why):
    import http.server
    import threading

    class NotASearchServer(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotASearchServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    try:
        for argv in (["collections"], ["index", "--input", str(tmp_path / "r.csv"), "--collection", "x", "--no-embed"]):
            (tmp_path / "r.csv").write_text("text\nA fine kettle.\n", encoding="utf-8")
            assert main([*argv, "--store", "opensearch", "--opensearch-url", url]) == 2  # tracebacks (TypeError) before
            assert capsys.readouterr().err == (
                f"error: {url} answered, but not as OpenSearch does ({why}). "
                "Fix: set QA_OPENSEARCH_URL (--opensearch-url) to your OpenSearch server's URL.\n"
            )
    finally:
        server.shutdown()


def test_https_to_a_plain_http_server_says_so(opensearch_url, tmp_path, monkeypatch, capsys):
    """It said the server was unreachable, naming how to start one, where only the scheme was wrong."""
    url = opensearch_url.replace("http://", "https://")
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    assert main(["collections", "--store", "opensearch", "--opensearch-url", url]) == 2
    assert capsys.readouterr().err == (
        f"error: {url} answers plain HTTP, not https. Fix: write the URL with http:// (QA_OPENSEARCH_URL or --opensearch-url).\n"
    )


def test_a_server_that_asks_for_a_password_names_the_credentials_and_the_url(tmp_path, monkeypatch, capsys):
    """A web server answering 401 was called OpenSearch, with OPENSEARCH_USERNAME as the only fix: the URL may be wrong."""
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OPENSEARCH_USERNAME", raising=False)
    monkeypatch.delenv("OPENSEARCH_PASSWORD", raising=False)
    other_server = "or, if it is not your OpenSearch server, set QA_OPENSEARCH_URL (--opensearch-url) to that server's URL.\n"
    with asking_for_a_password() as (url, sent):
        assert main(["collections", "--store", "opensearch", "--opensearch-url", url]) == 2
        assert capsys.readouterr().err == (
            f"error: {url} refused the request (401) without a user name and password. "
            f"Fix: set OPENSEARCH_USERNAME and OPENSEARCH_PASSWORD to a user of that server, {other_server}"
        )
        monkeypatch.setenv("OPENSEARCH_USERNAME", "reader")
        monkeypatch.setenv("OPENSEARCH_PASSWORD", "s3cret")
        assert main(["collections", "--store", "opensearch", "--opensearch-url", url]) == 2
        refused = (
            "refused the user named in the URL or OPENSEARCH_USERNAME (401). Fix: check the user and password (in the URL, or "
            f"OPENSEARCH_USERNAME and OPENSEARCH_PASSWORD) and that user's permissions, {other_server}"
        )
        assert capsys.readouterr().err == f"error: {url} {refused}"
        monkeypatch.delenv("OPENSEARCH_USERNAME")  # a user in the URL instead: it was "without a user name and password"
        with_user = url.replace("http://", "http://reader:s3cret@")
        assert main(["collections", "--store", "opensearch", "--opensearch-url", with_user]) == 2
        assert capsys.readouterr().err == f"error: {url.replace('http://', 'http://reader:***@')} {refused}"
        assert sent[-1] == "Basic cmVhZGVyOnMzY3JldA=="  # reader:s3cret, sent as the message says
