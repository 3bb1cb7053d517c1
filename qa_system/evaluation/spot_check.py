"""Spot checks: one random labelled question at a time, its predictions scored against the gold.

The batch evaluation gives averages; a spot check shows a person *which* questions go wrong and
why (the gold review not retrieved, a near-miss span, a wrong "no answer"). The search page's
evaluation mode is built on these two functions.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from typing import NamedTuple

from haystack import Document

from qa_system.errors import QAError
from qa_system.metrics.squad import best_scores
from qa_system.sources import LabelledQuestion


def random_question(
    questions: Sequence[LabelledQuestion],
    split: str,
    products: Collection[str] | None = None,
    rng: random.Random | None = None,
) -> LabelledQuestion:
    """A uniformly drawn question of ``split``, limited to ``products`` (those the index holds)."""
    candidates = [q for q in questions if q.split == split and (products is None or q.item_id in products)]
    if not candidates:
        raise QAError(
            f"There is no labelled question of split '{split}' for the indexed products.",
            "pick another split or index the domain's reviews.",
        )
    return (rng or random).choice(candidates)


class SpotScore(NamedTuple):
    """EM / F1 of one prediction against the question's gold answers (SQuAD v2 rules)."""

    em: float
    f1: float


def score_prediction(question: LabelledQuestion, prediction: str | None) -> SpotScore:
    """``prediction`` None is "no answer", which is right exactly when the question has none."""
    em, f1 = best_scores(prediction or "", question.answer_texts)
    return SpotScore(em, f1)


def gold_rank(question: LabelledQuestion, documents: Sequence[Document]) -> int | None:
    """1-based rank of the question's own review among the retrieved ones (None: not retrieved)."""
    return next((rank for rank, d in enumerate(documents, 1) if d.id == question.document_id), None)
