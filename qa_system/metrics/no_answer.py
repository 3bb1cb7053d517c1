"""The no-answer threshold: F1 as a function of the margin an answer needs over "no answer".

A reader answers when its best span's logit beats the no-answer logit by ``threshold``. Given, for
each held-out question, that margin and what answering and abstaining would score
(``DevPrediction``), ``tune_no_answer_threshold`` finds the F1-optimal threshold and ``scores_at``
scores any threshold, both optionally for another share of unanswerable questions (label shift).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qa_system.errors import QAError


@dataclass(frozen=True)
class DevPrediction:
    """One dev question read with the threshold left open: what answering and abstaining would score."""

    gap: float  # best span logit - no-answer logit
    answer_em: float
    answer_f1: float
    null_em: float
    null_f1: float

    @property
    def unanswerable(self) -> bool:
        """The gold answer is "no answer"."""
        return self.null_f1 == 1.0  # abstaining scores 1 exactly when the gold answer is ""


def tune_no_answer_threshold(predictions: Sequence[DevPrediction], no_answer_prior: float | None = None) -> tuple[float, float]:
    """The threshold maximising mean F1 when answering exactly the questions with gap >= threshold.

    Sweeps the thresholds between consecutive gaps (as the official SQuAD v2 script's
    ``find_best_thresh`` does) and returns (threshold, F1); the midpoint between two gaps is
    chosen so that the decision is not on a knife edge.

    ``no_answer_prior`` corrects for label shift: the questions are weighted so that unanswerable
    ones make up that share. SubjQA's dev splits are far more often unanswerable (51% pooled,
    61% electronics) than its train (38%) and test (32%) splits, and a threshold fitted to them
    unweighted abstains much too often; the training share is the best prior known at training time.
    """
    if not predictions:
        raise QAError("No dev questions to tune the no-answer threshold on.", "pass at least one dev file with questions.")
    weights = prior_weights(predictions, no_answer_prior)
    order = sorted(range(len(predictions)), key=lambda i: predictions[i].gap, reverse=True)
    ordered = [predictions[i] for i in order]
    weights = [weights[i] for i in order]
    gaps = [p.gap for p in ordered]
    # Threshold above every gap: abstain everywhere; then answer one more question at each step.
    total = best_total = sum(w * p.null_f1 for p, w in zip(ordered, weights))
    best_index = 0
    for i, (p, w) in enumerate(zip(ordered, weights), start=1):
        total += w * (p.answer_f1 - p.null_f1)
        if total > best_total + 1e-9:
            best_total, best_index = total, i
    if best_index == 0:
        threshold = gaps[0] + 1.0 if math.isfinite(gaps[0]) else 0.0
    elif best_index == len(gaps) or not math.isfinite(gaps[best_index]):
        threshold = gaps[best_index - 1] - 1.0
    else:
        threshold = (gaps[best_index - 1] + gaps[best_index]) / 2
    return float(threshold), best_total / sum(weights)


def prior_weights(predictions: Sequence[DevPrediction], no_answer_prior: float | None) -> list[float]:
    """Per-question weights that make unanswerable questions ``no_answer_prior`` of the total (all 1 without a prior)."""
    share = sum(p.unanswerable for p in predictions) / len(predictions)
    if no_answer_prior is None or share in (0.0, 1.0):
        return [1.0] * len(predictions)
    unanswerable, answerable = no_answer_prior / share, (1 - no_answer_prior) / (1 - share)
    return [unanswerable if p.unanswerable else answerable for p in predictions]


def scores_at(predictions: Sequence[DevPrediction], threshold: float, no_answer_prior: float | None = None) -> dict[str, float]:
    """EM/F1 (and the answer rate) of dev predictions at one threshold, and ``prior_weighted_f1``: F1 with
    the unanswerable questions reweighted to ``no_answer_prior`` (plain F1 without one), what selects."""
    if not predictions:
        return {"em": 0.0, "f1": 0.0, "answered": 0.0, "questions": 0, "prior_weighted_f1": 0.0}
    answered = [p.gap >= threshold for p in predictions]
    em = np.mean([p.answer_em if a else p.null_em for p, a in zip(predictions, answered)])
    f1s = [p.answer_f1 if a else p.null_f1 for p, a in zip(predictions, answered)]
    weighted = np.average(f1s, weights=prior_weights(predictions, no_answer_prior))
    return {
        "em": float(em),
        "f1": float(np.mean(f1s)),
        "answered": float(np.mean(answered)),
        "questions": len(predictions),
        "prior_weighted_f1": float(weighted),
    }
