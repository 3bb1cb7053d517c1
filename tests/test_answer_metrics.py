"""EM/F1 pinned to the official SQuAD v2.0 evaluation script's behaviour."""

import pytest

from qa_system.metrics.squad import best_scores, exact_match, f1, gold_answers, normalize_answer


@pytest.mark.parametrize(
    "prediction, gold, em, f1_score",
    [
        ("about 6000 hours", "6000 hours", 0.0, 0.8),
        ("about 6000 dollars", "6000 hours", 0.0, 0.4),
        ("", "", 1.0, 1.0),
        ("x", "", 0.0, 0.0),
        ("", "6000 hours", 0.0, 0.0),
        ("The battery!", "battery", 1.0, 1.0),
        # Repeated words count as often as both sides hold them: 2 shared of 4 predicted and 3 gold words.
        ("good good good sound", "good good price", 0.0, 4 / 7),
        ("sound sound", "good sound", 0.0, 0.5),
    ],
)
def test_pinned_cases(prediction, gold, em, f1_score):
    assert exact_match(prediction, gold) == em
    assert f1(prediction, gold) == pytest.approx(f1_score)


def test_normalisation_removes_case_punctuation_articles_and_spaces():
    assert normalize_answer("  The  Sound, an   A-grade!  ") == "sound agrade"


def test_best_over_golds_and_empty_golds_mean_no_answer():
    assert best_scores("great sound", ["bad", "great sound quality"]) == (0.0, pytest.approx(0.8))
    assert best_scores("", []) == (1.0, 1.0)
    assert gold_answers(["", "  ", "the"]) == [""]  # spans that normalise to nothing do not count
    assert best_scores("anything", [""]) == (0.0, 0.0)
