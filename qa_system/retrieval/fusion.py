"""Reciprocal rank fusion of several ranked lists (Cormack et al., 2009)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict


def reciprocal_rank_fusion(rankings: list[list[Document]], k: float = 60.0, weights: list[float] | None = None) -> list[Document]:
    """score(d) = sum_i w_i / (k + rank_i(d)), rank from 1; ties go to the earlier list's order.

    The original retriever scores are kept in ``meta["retriever_scores"]`` (one per ranking, None
    where the document was not retrieved) so that users can see why a document ranks where it does.
    """
    weights = weights or [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings.")
    fused: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    originals: dict[str, Document] = {}
    raw_scores: dict[str, list[float | None]] = {}
    for list_index, (ranking, weight) in enumerate(zip(rankings, weights)):
        for rank, document in enumerate(ranking, start=1):
            fused[document.id] = fused.get(document.id, 0.0) + weight / (k + rank)
            first_seen.setdefault(document.id, (rank, list_index))
            originals.setdefault(document.id, document)
            raw_scores.setdefault(document.id, [None] * len(rankings))[list_index] = document.score
    order = sorted(fused, key=lambda doc_id: (-fused[doc_id], first_seen[doc_id]))
    return [
        replace(originals[doc_id], score=fused[doc_id], meta={**originals[doc_id].meta, "retriever_scores": raw_scores[doc_id]})
        for doc_id in order
    ]


@component
class RankFusion:
    """Hybrid retrieval's join: fuses the sparse (BM25) and dense rankings with weighted RRF.

    Named inputs rather than one variadic list, so that each weight is tied to its retriever.
    """

    def __init__(self, k: float = 60.0, sparse_weight: float = 1.0, dense_weight: float = 1.0, top_k: int = 10):
        self.k, self.sparse_weight, self.dense_weight, self.top_k = k, sparse_weight, dense_weight, top_k

    @component.output_types(documents=list[Document])
    def run(self, sparse: list[Document], dense: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        fused = reciprocal_rank_fusion([sparse, dense], k=self.k, weights=[self.sparse_weight, self.dense_weight])
        return {"documents": fused[: self.top_k if top_k is None else top_k]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, k=self.k, sparse_weight=self.sparse_weight, dense_weight=self.dense_weight, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RankFusion":
        return default_from_dict(cls, data)
