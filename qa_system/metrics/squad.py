"""Answer metrics exactly as the official SQuAD v2.0 evaluation script computes them.

Texts are normalised (lower-case, punctuation and the articles a/an/the removed, whitespace
collapsed); a prediction scores the maximum over the gold answers. An unanswerable question has
the gold answers ``[""]`` and the prediction ``""`` means "no answer".
"""

from __future__ import annotations

import collections
import functools
import re
import string
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


@functools.lru_cache(maxsize=8192)
def normalize_answer(text: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (SQuAD's normalisation); cached, since the
    answer selector compares every pair of a question's candidate spans."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_NO_PUNCTUATION)).split())


@functools.lru_cache(maxsize=8192)
def _tokens(text: str) -> tuple[str, ...]:
    """Normalised tokens (cached, as ``normalize_answer``)."""
    return tuple(normalize_answer(text).split()) if text else ()


@functools.lru_cache(maxsize=8192)
def _token_counts(text: str) -> dict[str, int]:
    """How often each normalised token occurs (cached; never changed by its callers)."""
    return dict(collections.Counter(_tokens(text)))


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the prediction equals the gold answer once both are normalised (``normalize_answer``), else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """The token-overlap F1 of the prediction against one gold answer, on normalised tokens; an empty answer scores 1.0 only against an empty one."""
    gold_tokens, predicted_tokens = _tokens(gold), _tokens(prediction)
    if not gold_tokens or not predicted_tokens:
        # If either is no-answer, F1 is 1 if they agree, 0 otherwise.
        return float(gold_tokens == predicted_tokens)
    predicted_counts = _token_counts(prediction)
    overlap = sum(min(n, predicted_counts[token]) for token, n in _token_counts(gold).items() if token in predicted_counts)
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(texts: Sequence[str]) -> list[str]:
    """The gold list the official script uses: the non-empty spans, or [""] when there are none."""
    spans = [t for t in texts if normalize_answer(t)]
    return spans or [""]


def best_scores(prediction: str, golds: Sequence[str]) -> tuple[float, float]:
    """(EM, F1) of one prediction: the maximum over the gold answers."""
    golds = gold_answers(golds)
    return max(exact_match(prediction, g) for g in golds), max(f1(prediction, g) for g in golds)


# An answer is "right" when its F1 with the annotators' best-matching answer reaches this: the definition behind
# every probability of being right (the answer selector's) and every calibration figure (ECE).
RIGHT_F1 = 0.5


def is_right(answered: bool, f1: float, answerable: bool) -> bool:
    """An answer is right when its F1 reaches ``RIGHT_F1``; "no answer" is right when the question has none."""
    return f1 >= RIGHT_F1 if answered else not answerable
