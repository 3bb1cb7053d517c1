"""Integration tests against a real Elasticsearch server.

They run only when QA_ES_URL points at a running server (e.g. `docker compose up -d
elasticsearch; QA_ES_URL=http://localhost:9200 pytest -m elasticsearch`), and are reported as
skipped, with the reason, otherwise. Elasticsearch is never mocked here.
"""

import os
import uuid

import pytest
from haystack import Document

from qa_system.config import Settings
from qa_system.ingestion.indexing import build_index
from qa_system.pipelines import build_retrieval_pipeline
from qa_system.stores import open_index

ES_URL = os.environ.get("QA_ES_URL")
pytestmark = [
    pytest.mark.elasticsearch,
    pytest.mark.skipif(
        not ES_URL, reason="QA_ES_URL is not set: no Elasticsearch server to test against (docker compose up -d elasticsearch)"
    ),
]


@pytest.fixture
def es_settings(tmp_path, tiny_subjqa):
    return Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="elasticsearch", es_url=ES_URL)


@pytest.fixture
def es_index(es_settings):
    name = f"qa-system-test-{uuid.uuid4().hex[:8]}"
    index = build_index(es_settings, "electronics", progress=False, name=name)
    yield index
    index.store.client.indices.delete(index=name, ignore_unavailable=True)


def test_store_round_trip_with_manifest(es_settings, es_index):
    reopened = open_index(es_settings, name=es_index.name)
    assert reopened.store.count_documents() == 6
    assert reopened.manifest["documents"] == 6
    assert reopened.embedding_model == es_settings.embedding_model


def test_bm25_and_dense_retrieval_with_filters(es_settings, es_index):
    for retriever in ("bm25", "dense", "hybrid"):
        pipeline = build_retrieval_pipeline(retriever, es_settings, index=es_index)
        result = pipeline.run("How is the sound?", item_id="KINDLE", split="dev", top_k=5)
        assert [d.meta["review_id"] for d in result["documents"]] == ["r-kindle-3"], retriever
    bm25 = build_retrieval_pipeline("bm25", es_settings, index=es_index)
    ranked = bm25.run("reading books", item_id="KINDLE", split="train", top_k=3)["documents"]
    assert ranked[0].meta["review_id"] == "r-kindle-1"


def test_reindex_keeps_documents(es_settings, es_index):
    build_index(es_settings, "electronics", progress=False, name=es_index.name)
    assert open_index(es_settings, name=es_index.name).store.count_documents() == 6


def test_an_ingested_collection_updates_in_place(es_settings, tmp_path):
    from qa_system.ingestion import IngestOptions, delete_collection, ingest, list_collections, open_collection

    name = f"qa-ingest-test-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "r.csv"
    path.write_text("id,item,text\nr1,P1,Great battery that lasts a week.\nr2,P1,The screen is dim.\nr3,P2,Deep bass.\n", encoding="utf-8")
    options = IngestOptions(id_column="id", item_column="item")
    try:
        assert ingest(es_settings, path, name, options, progress=False).embedded == 3
        path.write_text("id,item,text\nr1,P1,Great battery that lasts a week.\nr2,P1,The screen is bright in sunlight.\n", encoding="utf-8")
        report = ingest(es_settings, path, name, options, sync=True, progress=False)
        assert (report.embedded, report.changed, report.deleted, report.passages) == (1, 1, 1, 2)
        bm25 = build_retrieval_pipeline("bm25", es_settings, index=open_collection(es_settings, name))
        assert bm25.run("bright sunlight", item_id="P1", top_k=1)["documents"][0].id == "r2"
        assert next(c for c in list_collections(es_settings) if c.name == name).documents == 2
        delete_collection(es_settings, name)
        assert all(c.name != name for c in list_collections(es_settings))
    finally:
        from qa_system.stores import elasticsearch_store

        elasticsearch_store(es_settings, name).client.indices.delete(index=name, ignore_unavailable=True)


def test_a_review_in_two_splits_is_found_under_either_split(es_settings, es_index):
    bm25 = build_retrieval_pipeline("bm25", es_settings, index=es_index)
    for split in ("dev", "test"):  # a term filter on the keyword array ["dev", "test"] matches either element
        found = bm25.run("How is the sound?", item_id="KINDLE", split=split, top_k=5)["documents"]
        assert [(d.id, d.meta["split"]) for d in found] == [("electronics/r-kindle-3", ["dev", "test"])], split


def test_reindex_deletes_what_the_new_corpus_lacks(es_settings, es_index):
    # A copy under an older layout's id (one document per review and split) must not survive the re-index beside the new one.
    old = Document(
        id="electronics/test/r-kindle-3", content="old copy", meta={"item_id": "KINDLE", "review_id": "r-kindle-3", "split": "test"}
    )
    es_index.store.write_documents([old])
    build_index(es_settings, "electronics", progress=False, name=es_index.name)
    ids = {d.id for d in open_index(es_settings, name=es_index.name).store.filter_documents()}
    assert len(ids) == 6 and old.id not in ids
