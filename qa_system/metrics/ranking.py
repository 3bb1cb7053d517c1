"""Ranking metrics of a retriever over per-question records: recall@k (hit@k), MRR and MAP, and what chance reaches.

Pure functions of the relevant documents' ranks (``evaluation.retrieval`` records them per question
under each definition of a hit, ``DEFINITIONS``: strict and chapter always, pooled when asked for):
a retriever's observed scores, and the scores a uniformly random order of the same candidates is
expected to reach.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import pandas as pd

DEFAULT_KS = (1, 3, 5, 10, 20)
DEFINITIONS = ("strict", "pooled", "chapter")


def average_precision(ranks: list[int]) -> float:
    """AP over the retrieved list: mean of precision@rank at each relevant document."""
    return sum((i + 1) / rank for i, rank in enumerate(sorted(ranks))) / len(ranks) if ranks else 0.0


def _always_hit(records: pd.DataFrame, definition: str) -> pd.Series:
    """Chapter definition: a question the chapter's data labels unanswerable is always a hit (at rank 1)."""
    return records["chapter_unanswerable"] & (definition == "chapter")


def _observed_scores(records: pd.DataFrame, definition: str, ks: Sequence[int]) -> pd.DataFrame:
    """Per question: hit@k (0/1), reciprocal rank and average precision of the retriever's ranking."""
    always_hit = _always_hit(records, definition)
    ranks = records[f"{definition}_ranks"]
    first = ranks.map(lambda r: min(r) if r else float("inf"))
    scores = {f"recall@{k}": ((first <= k) | always_hit).astype(float) for k in ks}
    scores["mrr"] = (1.0 / first).where(~always_hit, 1.0)
    scores["map"] = ranks.map(average_precision).where(~always_hit, 1.0)
    return pd.DataFrame(scores, index=records.index)


def _chance_scores(records: pd.DataFrame, definition: str, ks: Sequence[int]) -> pd.DataFrame:
    """Per question: the same scores expected from a uniformly random order of its candidates.

    n = the candidates (``n_candidates`` when recorded, else the retrieved list, complete when
    shorter than the retrieval depth), m = the relevant ones among them. hit@k: 1 - C(n-m, k) /
    C(n, k); reciprocal rank: sum over r of P(first relevant at r) / r with P = C(n-r, m-1) /
    C(n, m); average precision: (1/n) sum_i (1 + (i-1)(m-1)/(n-1)) / i.
    """
    always_hit = _always_hit(records, definition)
    if "n_candidates" in records:
        counts, relevant = records["n_candidates"], records[f"{definition}_relevant"]
    else:
        counts, relevant = records["retrieved"], records[f"{definition}_ranks"].map(len)
    rows = []
    for n, m, hit in zip(counts, relevant, always_hit):
        if hit or m == 0:
            rows.append({**{f"recall@{k}": float(hit) for k in ks}, "mrr": float(hit), "map": float(hit)})
            continue
        rows.append(
            {
                **{f"recall@{k}": 1.0 if k >= n else 1 - comb(n - m, k) / comb(n, k) for k in ks},
                "mrr": sum(comb(n - r, m - 1) / comb(n, m) / r for r in range(1, n - m + 2)),
                "map": sum((1 + (i - 1) * (m - 1) / max(n - 1, 1)) / i for i in range(1, n + 1)) / n,
            }
        )
    return pd.DataFrame(rows, index=records.index)


def retrieval_metrics(records: pd.DataFrame, ks: Sequence[int] = DEFAULT_KS, chance: bool = False) -> pd.DataFrame:
    """Rows (definition, group) with n, recall@k, MRR, MAP; groups: all, subjective, factual, answerable,
    and "2+ candidates" (questions whose product has more than one review: the others are always hits).

    ``chance=True``: the figures a random order of the same candidates is expected to reach, the floor
    that a retriever's figures mean something above (exact when the records count the candidates, or
    when every candidate was retrieved).
    """
    groups = {
        "all": records.index == records.index,
        "subjective": records["subjective"],
        "factual": ~records["subjective"],
        "answerable": records["answerable"],
    }
    if "n_candidates" in records or "retrieved" in records:
        groups["2+ candidates"] = records["n_candidates" if "n_candidates" in records else "retrieved"] >= 2
    rows = []
    for definition in (d for d in DEFINITIONS if f"{d}_ranks" in records):
        scores = (_chance_scores if chance else _observed_scores)(records, definition, ks)
        for group, mask in groups.items():
            if not mask.any():
                continue
            rows.append({"definition": definition, "group": group, "n": int(mask.sum()), **scores[mask].mean().to_dict()})
    return pd.DataFrame(rows)
