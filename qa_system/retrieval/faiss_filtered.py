"""Dense retrieval from a FAISS store with metadata filters applied *before* the vector search.

faiss-haystack's retriever searches first and filters afterwards (fetching 10 x top_k), so a
per-product filter that keeps 3 of 100,000 reviews usually returns nothing. Here the filter picks
the allowed vector ids and only those are searched. A selective filter (a product's few dozen
reviews) is searched exactly, from the allowed vectors alone: that costs microseconds at any corpus
size, and graph or cluster indexes (HNSW, IVF) would miss most of them, as their search walks
neighbours that the filter rejects. A broad filter goes to the index with an ``IDSelectorBatch``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict

from qa_system.retrieval.filters import MetaPostings

# Filters that allow at most this many vectors are searched exactly, over those vectors only.
EXACT_SEARCH_LIMIT = 4096


@component
class FAISSFilteredEmbeddingRetriever:
    """Embedding retrieval from a ``FAISSDocumentStore`` that applies metadata filters before the vector search.

    Scores are cosine similarities (the store's embeddings are unit length). Usage::

        retriever = FAISSFilteredEmbeddingRetriever(document_store=store, top_k=5)
        retriever.run(query_embedding=vector, filters={"field": "meta.item_id", "operator": "==", "value": "B0074BW614"})

    :param document_store: the FAISS store to search.
    :param top_k: documents returned when ``run`` is not given its own.

    With the question's vector from ``QueryEmbedder``::

        vector = QueryEmbedder(model="sentence-transformers/all-MiniLM-L6-v2").run(text="Is the battery good?")["embedding"]
        documents = retriever.run(query_embedding=vector, top_k=3)["documents"]
    """

    def __init__(self, document_store: Any, top_k: int = 10):
        self.document_store = document_store
        self.top_k = top_k
        self._postings: MetaPostings | None = None
        self._positions = np.empty(0, dtype="int64")
        self._indexed_count = -1

    def _refresh(self) -> None:
        """Postings of the documents' metadata, and each vector id's position inside the wrapped index."""
        import faiss

        store = self.document_store
        entries = ((int(vector_id), store.documents[doc_id]) for doc_id, vector_id in store.inverse_id_map.items())
        self._postings = MetaPostings(entries)
        ids = faiss.vector_to_array(store.index.id_map)
        self._positions = np.zeros(int(ids.max(initial=-1)) + 1, dtype="int64")
        self._positions[ids] = np.arange(len(ids))
        ivf = faiss.try_extract_index_ivf(store.index.index)
        if ivf is not None and ivf.direct_map.type == faiss.DirectMap.NoMap:
            ivf.make_direct_map()  # IVF indexes reconstruct vectors only through a direct map
        self._indexed_count = store.count_documents()

    def _allowed_ids(self, filters: dict | None) -> np.ndarray | None:
        """FAISS vector ids of the documents ``filters`` allows (None = all)."""
        store = self.document_store
        if self._postings is None or self._indexed_count != store.count_documents():
            self._refresh()
        return self._postings.allowed(filters)

    @component.output_types(documents=list[Document])
    def run(self, query_embedding: list[float], filters: dict | None = None, top_k: int | None = None) -> dict[str, list[Document]]:
        """The ``top_k`` documents nearest to ``query_embedding`` among those ``filters`` allows, nearest first.

        :param query_embedding: the question's vector (unit length, as the documents').
        :param filters: Haystack metadata filters, applied before the search.
        :param top_k: documents returned (default: the component's ``top_k``); 0 returns none.
        :returns: ``{"documents": [...]}``, each scored with its cosine similarity.
        """
        import faiss

        store = self.document_store
        top_k = self.top_k if top_k is None else top_k
        if store.index is None or store.index.ntotal == 0 or top_k <= 0:
            return {"documents": []}
        allowed = self._allowed_ids(filters)
        if allowed is not None and allowed.size == 0:
            return {"documents": []}
        query = np.asarray([query_embedding], dtype="float32")
        if allowed is not None and allowed.size <= EXACT_SEARCH_LIMIT:
            distances, ids = self._exact_search(query[0], allowed, top_k)
        else:
            params = None if allowed is None else faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
            distances, ids = (row[0] for row in store.index.search(query, top_k, params=params))
        documents = []
        for distance, vector_id in zip(distances, ids):
            doc_id = store.id_map.get(int(vector_id))
            if vector_id == -1 or doc_id is None:
                continue
            # Unit-length embeddings: squared L2 distance d = 2 - 2 cos, so report the cosine.
            documents.append(replace(store.documents[doc_id], score=float(1.0 - distance / 2.0)))
        return {"documents": documents}

    def _exact_search(self, query: np.ndarray, allowed: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """Squared L2 distances and ids of the ``top_k`` nearest allowed vectors (ties: lower id first)."""
        vectors = self.document_store.index.index.reconstruct_batch(self._positions[allowed])
        distances = ((vectors - query) ** 2).sum(axis=1)
        best = np.argsort(distances, kind="stable")[:top_k]
        return distances[best], allowed[best]

    def to_dict(self) -> dict[str, Any]:
        """The component's settings and its document store, serialised for a pipeline YAML."""
        return default_to_dict(self, document_store=self.document_store.to_dict(), top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FAISSFilteredEmbeddingRetriever:
        """The component from ``to_dict``'s data, its FAISS store rebuilt from its own serialisation."""
        from haystack_integrations.document_stores.faiss import FAISSDocumentStore

        data["init_parameters"]["document_store"] = FAISSDocumentStore.from_dict(data["init_parameters"]["document_store"])
        return default_from_dict(cls, data)
