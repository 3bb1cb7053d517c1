"""Fusion of ranked lists: reciprocal rank fusion (Cormack et al., 2009) or a convex combination of
min-max normalised scores.

On SubjQA electronics (about 3 reviews per product) plain RRF of BM25 and MiniLM is *worse* than
either alone: with two lists that disagree on the top two reviews, RRF scores them equally and
the tie decides. Normalised score fusion keeps how sure each retriever is, and is the default.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict


def minmax_fusion(rankings: list[list[Document]], weights: list[float] | None = None) -> list[Document]:
    """score(d) = sum_i w_i * (s_i(d) - min_i) / (max_i - min_i); a document absent from a list gets 0 there."""
    weights = weights or [1.0 / len(rankings)] * len(rankings)
    fused: dict[str, float] = {}
    originals: dict[str, Document] = {}
    raw_scores: dict[str, list[float | None]] = {}
    for list_index, (ranking, weight) in enumerate(zip(rankings, weights)):
        scores = [d.score or 0.0 for d in ranking]
        low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
        for document, score in zip(ranking, scores):
            normalised = (score - low) / (high - low) if high > low else 1.0
            fused[document.id] = fused.get(document.id, 0.0) + weight * normalised
            originals.setdefault(document.id, document)
            raw_scores.setdefault(document.id, [None] * len(rankings))[list_index] = document.score
    return _ranked(fused, originals, raw_scores)


def _ranked(fused: dict[str, float], originals: dict[str, Document], raw_scores: dict[str, list]) -> list[Document]:
    # Stable sort: ties keep first-seen order (the first list's ranking first).
    order = sorted(fused, key=lambda doc_id: -fused[doc_id])
    return [
        replace(originals[doc_id], score=fused[doc_id], meta={**originals[doc_id].meta, "retriever_scores": raw_scores[doc_id]})
        for doc_id in order
    ]


def reciprocal_rank_fusion(rankings: list[list[Document]], k: float = 60.0, weights: list[float] | None = None) -> list[Document]:
    """score(d) = sum_i w_i / (k + rank_i(d)), rank from 1; ties go to the earlier list's order.

    The original retriever scores are kept in ``meta["retriever_scores"]`` (one per ranking, None
    where the document was not retrieved) so that users can see why a document ranks where it does.
    """
    weights = weights or [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings.")
    fused: dict[str, float] = {}
    originals: dict[str, Document] = {}
    raw_scores: dict[str, list[float | None]] = {}
    for list_index, (ranking, weight) in enumerate(zip(rankings, weights)):
        for rank, document in enumerate(ranking, start=1):
            fused[document.id] = fused.get(document.id, 0.0) + weight / (k + rank)
            originals.setdefault(document.id, document)
            raw_scores.setdefault(document.id, [None] * len(rankings))[list_index] = document.score
    return _ranked(fused, originals, raw_scores)


@component
class RankFusion:
    """Hybrid retrieval's join: fuses the sparse (BM25) and dense rankings.

    ``mode`` is "minmax" (weighted sum of min-max normalised scores) or "rrf" (weighted reciprocal
    rank fusion with constant ``k``). Named inputs rather than one variadic list, so that each
    weight is tied to its retriever.
    """

    def __init__(
        self, mode: str = "minmax", k: float = 60.0, sparse_weight: float = 0.5, dense_weight: float = 0.5, top_k: int = 10
    ):
        if mode not in ("minmax", "rrf"):
            raise ValueError(f"Unknown fusion mode '{mode}'; use 'minmax' or 'rrf'.")
        self.mode, self.k, self.sparse_weight, self.dense_weight, self.top_k = mode, k, sparse_weight, dense_weight, top_k

    @component.output_types(documents=list[Document])
    def run(self, sparse: list[Document], dense: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        weights = [self.sparse_weight, self.dense_weight]
        if self.mode == "rrf":
            fused = reciprocal_rank_fusion([sparse, dense], k=self.k, weights=weights)
        else:
            fused = minmax_fusion([sparse, dense], weights=weights)
        return {"documents": fused[: self.top_k if top_k is None else top_k]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, mode=self.mode, k=self.k, sparse_weight=self.sparse_weight, dense_weight=self.dense_weight, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RankFusion":
        return default_from_dict(cls, data)
