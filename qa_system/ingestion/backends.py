"""What an incremental run needs from each store: the saved passages' metadata, and the commit.

A run first writes the passages it made (embedded) to a staging file; the commit then builds the
collection's next version from the saved passages it keeps plus the staged ones, and swaps it in
the way ``stores`` does for every index:

* memory: the kept lines of the saved file and the staged lines stream into a temporary file that is
  renamed over the old one (memory bounded by a document, not the collection);
* faiss: the saved store loses the replaced passages and gains the staged ones, then is saved
  into a staging directory that replaces the old one;
* opensearch: a new index beside the one in service receives the kept documents (a server-side
  scroll) and the staged ones, then the alias moves to it in one step;
* elasticsearch: written in place (its index has no alias): staged passages overwrite, replaced
  ones are deleted, the manifest goes last. Every input error is found before this starts, but a
  crash in the middle of it leaves a mixed index, which the next run repairs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from qa_system.config import Settings
from qa_system.errors import Unavailable
from qa_system.stores import (
    Index,
    discard_opensearch_index,
    elasticsearch_client,
    elasticsearch_store,
    memory_documents,
    new_faiss_store,
    new_opensearch_index,
    opensearch_client,
    save_index,
    saving_stopped,
    try_open_index,
    write_memory_index,
)

META_FIELDS = ("document_id", "content_hash", "item_id", "passages")
WRITE_BATCH = 500


def _scan(backend: str, client, index: str, fields: Iterable[str] | bool = True) -> Iterator[dict]:
    """Every hit of ``index`` (``fields``: the _source fields to fetch, True for all, False for none)."""
    query: dict = {"query": {"match_all": {}}, "_source": fields if isinstance(fields, bool) else list(fields)}
    if backend == "opensearch":
        from opensearchpy.helpers import scan
    else:
        from elasticsearch.helpers import scan
    yield from scan(client, index=index, query=query, size=1000)


def saved_passages(settings: Settings, name: str) -> Iterator[tuple[str, dict]]:
    """(passage id, metadata) of every passage the saved collection holds."""
    if settings.store == "memory":
        for raw in memory_documents(settings, name):
            document = json.loads(raw)
            yield document["id"], document.get("meta", {})
    elif settings.store == "faiss":
        index = try_open_index(settings, name)
        for document in [] if index is None else index.store.filter_documents():
            yield document.id, document.meta
    else:
        client = opensearch_client(settings) if settings.store == "opensearch" else elasticsearch_client(settings)
        if not client.indices.exists(index=name):
            return
        hits = _scan(settings.store, client, name, META_FIELDS)
        if settings.store == "opensearch":
            hits = _answered_scan(settings, name, hits)
        for hit in hits:
            yield hit["_id"], hit["_source"]


@contextmanager
def server_answering(settings: Settings, name: str) -> Iterator[None]:
    """A run into ``name`` whose OpenSearch stops answering at any step (the listing of what a killed run left, the
    manifest's reading, the new index's creation) ends with the run's one-line error, not a traceback: the alias still
    serves the index it served, and an index the run created is removed by the next one."""
    if settings.store != "opensearch":
        yield
        return
    from opensearchpy.exceptions import ConnectionError as NoAnswer

    try:
        yield
    except NoAnswer:
        raise saving_stopped(settings, name) from None


def _answered_scan(settings: Settings, name: str, hits: Iterator[dict]) -> Iterator[dict]:
    """``hits`` of an OpenSearch scan, with a server that stops answering part-way as the run's one-line error."""
    from opensearchpy.exceptions import ConnectionError as NoAnswer

    try:
        yield from hits
    except NoAnswer:
        raise saving_stopped(settings, name) from None


def staged_batches(staging: Path) -> Iterator[list[Document]]:
    """The passages a run staged in the JSON lines file ``staging``, as Documents in batches of ``WRITE_BATCH``."""
    batch = []
    with staging.open(encoding="utf-8") as handle:
        for line in handle:
            batch.append(Document.from_dict(json.loads(line)))
            if len(batch) == WRITE_BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


def commit(
    settings: Settings, name: str, staging: Path, replaced: set[str], replaced_passages: list[str], manifest: dict, rebuild: bool
) -> int:
    """Swap in the collection's next version: the saved passages except those of the ``replaced``
    documents (``replaced_passages``), plus the staged ones; returns how many passages it holds.
    ``rebuild``: keep none of the saved passages (their vectors or splits are out of date)."""
    if settings.store == "memory":
        return _commit_memory(settings, name, staging, replaced, manifest, rebuild)
    if settings.store == "faiss":
        saved = None if rebuild else try_open_index(settings, name)
        store = saved.store if saved is not None else new_faiss_store(manifest["embedding_dim"])
        if saved is not None and replaced_passages:
            store.delete_documents(replaced_passages)
        for batch in staged_batches(staging):
            store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
        manifest["documents"] = store.count_documents()
        save_index(Index("faiss", name, store, manifest), settings)
        return manifest["documents"]
    if settings.store == "opensearch":
        return _commit_opensearch(settings, name, staging, replaced, manifest, rebuild)
    return _commit_elasticsearch(settings, name, staging, replaced_passages, manifest, rebuild)


def _commit_elasticsearch(settings: Settings, name: str, staging: Path, replaced_passages: list[str], manifest: dict, rebuild: bool) -> int:
    store = elasticsearch_store(settings, name)
    staged = set()
    for batch in staged_batches(staging):
        store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
        staged.update(d.id for d in batch)
    stale = [i for i in replaced_passages if i not in staged]
    if rebuild:
        stale = [hit["_id"] for hit in _scan("elasticsearch", store.client, name, False) if hit["_id"] not in staged]
    for begin in range(0, len(stale), WRITE_BATCH):
        store.delete_documents(stale[begin : begin + WRITE_BATCH])
    store.client.indices.refresh(index=name)
    manifest["documents"] = store.count_documents()
    save_index(Index("elasticsearch", name, store, manifest), settings)
    return manifest["documents"]


def _commit_memory(settings: Settings, name: str, staging: Path, replaced: set[str], manifest: dict, rebuild: bool) -> int:
    def documents() -> Iterator[str]:
        if not rebuild:
            for raw in memory_documents(settings, name):
                if json.loads(raw).get("meta", {}).get("document_id") not in replaced:
                    yield raw
        with staging.open(encoding="utf-8") as handle:
            yield from (line.rstrip("\n") for line in handle)

    manifest["documents"] = write_memory_index(settings, name, documents(), manifest)
    return manifest["documents"]


def _commit_opensearch(settings: Settings, name: str, staging: Path, replaced: set[str], manifest: dict, rebuild: bool) -> int:
    from opensearchpy.exceptions import ConnectionError as NoAnswer
    from opensearchpy.helpers import bulk

    client = opensearch_client(settings)
    store = new_opensearch_index(settings, name, manifest.get("embedding_dim"))
    concrete = store.to_dict()["init_parameters"]["index"]
    try:
        if not rebuild and client.indices.exists(index=name):
            kept = (
                {"_index": concrete, "_id": hit["_id"], "_source": hit["_source"]}
                for hit in _scan("opensearch", client, name)
                if hit["_source"].get("document_id") not in replaced
            )
            bulk(client, kept, chunk_size=WRITE_BATCH, refresh=False)
        for batch in staged_batches(staging):
            store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE, refresh=False)
        client.indices.refresh(index=concrete)
        manifest["documents"] = client.count(index=concrete)["count"]
        save_index(Index("opensearch", name, store, manifest), settings)
    except (NoAnswer, Unavailable):  # the server stopped answering: the alias still serves a complete index
        discard_opensearch_index(settings, store)
        raise saving_stopped(settings, name) from None
    except BaseException:
        discard_opensearch_index(settings, store)
        raise
    return manifest["documents"]
