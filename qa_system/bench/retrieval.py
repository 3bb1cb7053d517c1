"""Indexing throughput and retrieval speed at one corpus size, against Haystack's in-memory retrievers.

BM25 is compared on the same scoring function: Haystack's InMemoryDocumentStore with
``BM25Plus`` and ``delta=0`` is Lucene's BM25 times ``k1 + 1``, which ``BM25sRetriever`` computes
with ``method="lucene"`` over Haystack's own tokens (its regex, no stemming, no stopwords), so the
top-10 must be the same documents in the same order. The project's default BM25 (English
stemming, stopwords kept, k1 1.2, b 1.0) is timed beside them. Dense retrieval compares Haystack's
InMemoryEmbeddingRetriever with the pre-filtered FAISS retriever over a Flat (exact) and an HNSW
(approximate) index; all compute cosine similarity of unit vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.in_memory.document_store import _DEFAULT_BM25_TOKENIZATION_REGEX

from qa_system.bench.corpus import SYNTHETIC_DOMAIN
from qa_system.bench.measure import Timing, compare, timed
from qa_system.retrieval import BM25sRetriever, FAISSFilteredEmbeddingRetriever, make_filters
from qa_system.sources import LabelledQuestion
from qa_system.stores import new_faiss_store

TOP_K = 10
K1, B = 1.5, 0.75
HNSW_INDEX = "HNSW32"
HAYSTACK = "Haystack in-memory"


def haystack_store(name: str) -> InMemoryDocumentStore:
    """Haystack's in-memory store set to Lucene's BM25 (BM25Plus without its delta) and cosine similarity."""
    return InMemoryDocumentStore(
        bm25_algorithm="BM25Plus",
        bm25_parameters={"k1": K1, "b": B, "delta": 0.0},
        embedding_similarity_function="cosine",
        index=name,
        shared=False,
    )


def same_scoring_bm25(store: Any, top_k: int = TOP_K) -> BM25sRetriever:
    """bm25s configured to rank exactly as ``haystack_store``'s BM25 (see the module doc)."""
    return BM25sRetriever(
        store,
        top_k=top_k,
        k1=K1,
        b=B,
        method="lucene",
        stemmer_language=None,
        stopwords=None,
        return_unmatched=False,
        token_pattern=_DEFAULT_BM25_TOKENIZATION_REGEX,
        join_hyphenated=False,
    )


@dataclass
class Query:
    """A benchmark query: the question's text, its vector, and the filters it is asked with."""

    text: str
    vector: list[float]
    filters: dict | None


def filter_kinds(questions: Sequence[LabelledQuestion], documents: Sequence[Document]) -> dict[str, list[dict | None]]:
    """Per question: no filter; its own product; and a synthetic product (few dozen reviews) if the corpus has them."""
    kinds: dict[str, list[dict | None]] = {
        "none": [None] * len(questions),
        "product": [make_filters(item_id=q.item_id) for q in questions],
    }
    synthetic = sorted({d.meta["item_id"] for d in documents if d.meta.get("domain") == SYNTHETIC_DOMAIN})
    if synthetic:
        step = max(1, len(synthetic) // max(1, len(questions)))
        kinds["synthetic product"] = [make_filters(item_id=synthetic[(i * step) % len(synthetic)]) for i in range(len(questions))]
    return kinds


def _ids(documents: list[Document]) -> list[str]:
    return [d.id for d in documents]


def agreement(baseline: Timing, other: Timing) -> tuple[float, float]:
    """(share of queries with the very same top-k ids in order, mean share of the baseline's top-k found)."""
    pairs = list(zip(baseline.outputs, other.outputs))
    if not pairs:
        return float("nan"), float("nan")
    identical = np.mean([a == b for a, b in pairs])
    overlap = np.mean([len(set(a) & set(b)) / len(a) if a else float(not b) for a, b in pairs])
    return float(identical), float(overlap)


def _rows(
    tier: int, retriever: str, kind: str, timings: dict[str, Timing], baseline: str, exact: set[str], filter_docs: float
) -> list[dict]:
    rows = []
    for system, timing in timings.items():
        identical, overlap = agreement(timings[baseline], timing) if system != baseline else (1.0, 1.0)
        rows.append(
            {
                "corpus": tier,
                "retriever": retriever,
                "system": system,
                "filter": kind,
                "docs_per_filter": filter_docs,
                "queries": timing.calls,
                "queries_per_s": timing.per_second,
                "p50_ms": timing.p50_ms,
                "p95_ms": timing.p95_ms,
                "baseline": baseline,
                "qps_ratio": timing.per_second / timings[baseline].per_second,
                "p50_ratio": timing.p50_ms / timings[baseline].p50_ms,
                "same_top10": identical if system in exact | {baseline} else float("nan"),
                "top10_overlap": overlap,
            }
        )
    return rows


def _docs_per_filter(store: InMemoryDocumentStore, filters: list[dict | None], sample: int = 20) -> float:
    chosen = [f for f in filters if f is not None][:sample]
    if not chosen:
        return float(store.count_documents())
    return float(np.mean([len(store.filter_documents(filters=f)) for f in chosen]))


def bench_tier(
    tier: int,
    documents: list[Document],
    questions: Sequence[LabelledQuestion],
    query_vectors: list[list[float]],
    budget_s: float,
    progress: Callable[[str], None] = print,
) -> tuple[list[dict], list[dict], InMemoryDocumentStore]:
    """Indexing rows, retrieval rows, and the Haystack store (reused by the end-to-end pipelines)."""
    indexing: list[dict] = []

    def index_row(stage: str, system: str, seconds: float, baseline: str, baseline_seconds: float) -> None:
        indexing.append(
            {
                "corpus": tier,
                "stage": stage,
                "system": system,
                "documents": len(documents),
                "seconds": seconds,
                "docs_per_s": len(documents) / seconds,
                "baseline": baseline,
                "speed_ratio": baseline_seconds / seconds,
            }
        )

    progress(f"[{tier}] indexing: Haystack in-memory store")
    store = haystack_store(f"bench-{tier}")
    _, haystack_s = timed(lambda: store.write_documents(documents))
    index_row("BM25", f"{HAYSTACK} (write_documents: BM25 statistics)", haystack_s, "itself", haystack_s)
    same, project = same_scoring_bm25(store), BM25sRetriever(store, top_k=TOP_K)
    for name, retriever in (("bm25s, same scoring", same), ("bm25s, project analyzer", project)):
        _, seconds = timed(retriever.warm_up)
        index_row("BM25", f"{name} (sparse matrix)", seconds, HAYSTACK, haystack_s)
    faiss_stores = {}
    for spec in ("Flat", HNSW_INDEX):
        progress(f"[{tier}] indexing: FAISS {spec}")
        faiss_store = new_faiss_store(len(query_vectors[0]), spec)
        _, seconds = timed(lambda: faiss_store.write_documents(documents))
        faiss_stores[spec] = faiss_store
        index_row("dense, vectors given (Haystack's write is the same call as for BM25)", f"FAISS {spec}", seconds, HAYSTACK, haystack_s)

    queries = [Query(q.question, v, None) for q, v in zip(questions, query_vectors)]
    kinds = filter_kinds(questions, documents)
    retrieval: list[dict] = []
    bm25_systems = {
        HAYSTACK: InMemoryBM25Retriever(store, top_k=TOP_K),
        "bm25s, same scoring": same,
        "bm25s, project analyzer": project,
    }
    dense_systems = {
        HAYSTACK: InMemoryEmbeddingRetriever(store, top_k=TOP_K),
        "FAISS Flat, pre-filtered": FAISSFilteredEmbeddingRetriever(faiss_stores["Flat"], top_k=TOP_K),
        f"FAISS {HNSW_INDEX}, pre-filtered": FAISSFilteredEmbeddingRetriever(faiss_stores[HNSW_INDEX], top_k=TOP_K),
    }
    for kind, filters in kinds.items():
        inputs = [Query(q.text, q.vector, f) for q, f in zip(queries, filters)]
        filter_docs = _docs_per_filter(store, filters)
        progress(f"[{tier}] BM25 queries, filter: {kind}")
        timings = compare(
            {name: (lambda r: lambda q: _ids(r.run(query=q.text, filters=q.filters)["documents"]))(r) for name, r in bm25_systems.items()},
            inputs,
            budget_s,
        )
        retrieval += _rows(tier, "BM25", kind, timings, HAYSTACK, {"bm25s, same scoring"}, filter_docs)
        progress(f"[{tier}] dense queries, filter: {kind}")
        timings = compare(
            {
                name: (lambda r: lambda q: _ids(r.run(query_embedding=q.vector, filters=q.filters)["documents"]))(r)
                for name, r in dense_systems.items()
            },
            inputs,
            budget_s,
        )
        retrieval += _rows(tier, "dense", kind, timings, HAYSTACK, {"FAISS Flat, pre-filtered"}, filter_docs)
    return indexing, retrieval, store
