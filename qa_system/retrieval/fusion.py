"""Fusion of ranked lists: reciprocal rank fusion (Cormack et al., 2009) or a convex combination of
min-max normalised scores.

On SubjQA electronics (about 3 reviews per product) plain RRF of BM25 and MiniLM is *worse* than
either alone: with two lists that disagree on the top two reviews, RRF scores them equally and
the tie decides. Normalised score fusion keeps how sure each retriever is, and is the default.
``fit_fusion`` picks the mode, weights and k on labelled rankings (``tuning.fusion`` runs
it on a dev split).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict


def minmax_normalise(scores: Sequence[float]) -> list[float]:
    """(s - min) / (max - min); all 1.0 when the scores are equal."""
    low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
    return [(score - low) / (high - low) if high > low else 1.0 for score in scores]


def minmax_fusion(rankings: list[list[Document]], weights: list[float] | None = None) -> list[Document]:
    """score(d) = sum_i w_i * (s_i(d) - min_i) / (max_i - min_i); a document absent from a list gets 0 there."""
    weights = weights or [1.0 / len(rankings)] * len(rankings)
    fused: dict[str, float] = {}
    originals: dict[str, Document] = {}
    raw_scores: dict[str, list[float | None]] = {}
    for list_index, (ranking, weight) in enumerate(zip(rankings, weights)):
        for document, normalised in zip(ranking, minmax_normalise([d.score or 0.0 for d in ranking])):
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

    :param mode: "minmax" or "rrf" (any other raises ``ValueError``).
    :param k: the reciprocal rank fusion's constant (used by "rrf" only).
    :param sparse_weight: weight of the sparse (BM25) ranking.
    :param dense_weight: weight of the dense (embedding) ranking.
    :param top_k: documents returned when ``run`` is not given its own.

    Usage::

        fusion = RankFusion(mode="rrf", k=60.0, sparse_weight=0.5, dense_weight=0.5, top_k=5)
        sparse = bm25.run(query="Is the battery good?", filters=filters)["documents"]
        dense = dense_retriever.run(query_embedding=vector, filters=filters)["documents"]
        documents = fusion.run(sparse=sparse, dense=dense)["documents"]
    """

    def __init__(self, mode: str = "minmax", k: float = 60.0, sparse_weight: float = 0.5, dense_weight: float = 0.5, top_k: int = 10):
        if mode not in ("minmax", "rrf"):
            raise ValueError(f"Unknown fusion mode '{mode}'; use 'minmax' or 'rrf'.")
        self.mode, self.k, self.sparse_weight, self.dense_weight, self.top_k = mode, k, sparse_weight, dense_weight, top_k

    @component.output_types(documents=list[Document])
    def run(self, sparse: list[Document], dense: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        """One ranking from the sparse and dense ones, each weighted, best first.

        :param sparse: the BM25 retriever's documents, best first.
        :param dense: the embedding retriever's documents, best first.
        :param top_k: documents returned (default: the component's ``top_k``).
        :returns: ``{"documents": [...]}``, scored by the fusion.
        """
        weights = [self.sparse_weight, self.dense_weight]
        if self.mode == "rrf":
            fused = reciprocal_rank_fusion([sparse, dense], k=self.k, weights=weights)
        else:
            fused = minmax_fusion([sparse, dense], weights=weights)
        return {"documents": fused[: self.top_k if top_k is None else top_k]}

    def to_dict(self) -> dict[str, Any]:
        """The component's settings, serialised for a pipeline YAML."""
        return default_to_dict(
            self, mode=self.mode, k=self.k, sparse_weight=self.sparse_weight, dense_weight=self.dense_weight, top_k=self.top_k
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankFusion:
        """The component from ``to_dict``'s data."""
        return default_from_dict(cls, data)


@dataclass(frozen=True)
class FusionParameters:
    """RankFusion's settings (what the hybrid pipeline reads from the index manifest)."""

    mode: str = "minmax"
    k: float = 60.0
    sparse_weight: float = 0.5
    dense_weight: float = 0.5

    def as_dict(self) -> dict[str, Any]:
        """The parameters as JSON-ready data (as the index manifest keeps them)."""
        return asdict(self)


@dataclass(frozen=True)
class RankedCandidates:
    """One labelled question's two candidate lists and the id of the document that should come first."""

    sparse: list[Document]
    dense: list[Document]
    relevant_id: str


def fusion_grid() -> list[FusionParameters]:
    """Sparse weight 0..1 (dense = 1 - sparse) for min-max fusion and for RRF with k in {1, 5, 10, 20, 60}.

    The weights 0 and 1 reproduce the dense and the sparse ranking, so the fitted fusion is never
    worse than its best part on the data it is fitted on.
    """
    minmax = [FusionParameters("minmax", 60.0, w / 20, 1 - w / 20) for w in range(21)]
    rrf = [FusionParameters("rrf", float(k), w / 10, 1 - w / 10) for k in (1, 5, 10, 20, 60) for w in range(11)]
    return minmax + rrf


def ranking_scores(rankings: Iterable[tuple[list[Document], str]]) -> tuple[float, float]:
    """(recall@1, MRR) of rankings given with their relevant document id (absent: reciprocal rank 0)."""
    hits, reciprocal, count = 0, 0.0, 0
    for ranking, relevant_id in rankings:
        ids = [d.id for d in ranking]
        rank = ids.index(relevant_id) + 1 if relevant_id in ids else None
        hits += rank == 1
        reciprocal += 1.0 / rank if rank else 0.0
        count += 1
    return (hits / count, reciprocal / count) if count else (0.0, 0.0)


def fit_fusion(
    candidates: Sequence[RankedCandidates], grid: Sequence[FusionParameters] | None = None
) -> tuple[FusionParameters, dict[str, float]]:
    """The grid point with the best recall@1, then MRR, then the most even weights; and its (recall@1, MRR)."""
    best, best_key = None, None
    for parameters in grid or fusion_grid():
        fusion = RankFusion(**parameters.as_dict())
        r1, mrr = ranking_scores((fusion.run(c.sparse, c.dense)["documents"], c.relevant_id) for c in candidates)
        key = (r1, mrr, -abs(parameters.sparse_weight - parameters.dense_weight))
        if best_key is None or key > best_key:
            best, best_key = parameters, key
    return best, {"recall@1": best_key[0], "mrr": best_key[1]}
