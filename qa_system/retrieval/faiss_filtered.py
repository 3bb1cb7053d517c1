"""Dense retrieval from a FAISS store with metadata filters applied *before* the vector search.

faiss-haystack's retriever searches first and filters afterwards (fetching 10 x top_k), so a
per-product filter that keeps 3 of 100,000 reviews usually returns nothing. Here the filter picks
the allowed vector ids and FAISS searches only those (an ``IDSelectorBatch``), which works for
Flat, IVF and HNSW indexes alike.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict

from qa_system.retrieval.filters import MetaPostings


@component
class FAISSFilteredEmbeddingRetriever:
    def __init__(self, document_store: Any, top_k: int = 10):
        self.document_store = document_store
        self.top_k = top_k
        self._postings: MetaPostings | None = None
        self._indexed_count = -1

    def _allowed_ids(self, filters: dict | None) -> np.ndarray | None:
        """FAISS vector ids of the documents ``filters`` allows (None = all)."""
        store = self.document_store
        if self._postings is None or self._indexed_count != store.count_documents():
            entries = ((int(vector_id), store.documents[doc_id].meta) for doc_id, vector_id in store.inverse_id_map.items())
            self._postings = MetaPostings(entries)
            self._indexed_count = store.count_documents()

        def scan(filters: dict) -> list[int]:
            return [int(store.inverse_id_map[d.id]) for d in store.filter_documents(filters=filters) if d.id in store.inverse_id_map]

        return self._postings.allowed(filters, scan)

    @component.output_types(documents=list[Document])
    def run(self, query_embedding: list[float], filters: dict | None = None, top_k: int | None = None) -> dict[str, list[Document]]:
        import faiss

        store = self.document_store
        top_k = self.top_k if top_k is None else top_k
        if store.index is None or store.index.ntotal == 0 or top_k <= 0:
            return {"documents": []}
        allowed = self._allowed_ids(filters)
        params = None
        if allowed is not None:
            if allowed.size == 0:
                return {"documents": []}
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
            top_k = min(top_k, int(allowed.size))
        query = np.asarray([query_embedding], dtype="float32")
        distances, ids = store.index.search(query, top_k, params=params)
        documents = []
        for distance, vector_id in zip(distances[0], ids[0]):
            doc_id = store.id_map.get(int(vector_id))
            if vector_id == -1 or doc_id is None:
                continue
            # Unit-length embeddings: squared L2 distance d = 2 - 2 cos, so report the cosine.
            documents.append(replace(store.documents[doc_id], score=float(1.0 - distance / 2.0)))
        return {"documents": documents}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, document_store=self.document_store.to_dict(), top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FAISSFilteredEmbeddingRetriever":
        from haystack_integrations.document_stores.faiss import FAISSDocumentStore

        data["init_parameters"]["document_store"] = FAISSDocumentStore.from_dict(data["init_parameters"]["document_store"])
        return default_from_dict(cls, data)
