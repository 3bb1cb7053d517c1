"""Spot checks behind the search page's evaluation mode: random labelled questions, scored predictions."""

import random

import pytest
from haystack import Document

from qa_system.errors import QAError
from qa_system.evaluation.spot_check import gold_rank, random_question, score_prediction
from qa_system.sources import load_subjqa


@pytest.fixture
def questions(tiny_subjqa):
    return load_subjqa("electronics", source=tiny_subjqa).questions


def test_random_question_comes_from_the_split_and_the_indexed_products(questions):
    drawn = {random_question(questions, "test", products={"MOUSE"}, rng=random.Random(seed)).id for seed in range(20)}
    assert drawn == {"q7", "q8"}
    with pytest.raises(QAError, match="no labelled question of split 'dev'"):
        random_question(questions, "dev", products={"MOUSE"})


def test_predictions_are_scored_like_squad_v2(questions):
    by_id = {q.id: q for q in questions if q.split == "test"}
    scroll = by_id["q7"]  # answerable
    assert score_prediction(scroll, "the scroll wheel feels solid") == (1.0, 1.0)
    assert score_prediction(scroll, "scroll wheel").f1 == pytest.approx(2 / 3)
    assert score_prediction(scroll, None) == (0.0, 0.0)
    unanswerable = by_id["q9"]
    assert score_prediction(unanswerable, None) == (1.0, 1.0) and score_prediction(unanswerable, "deep bass").em == 0.0


def test_gold_rank(questions):
    question = next(q for q in questions if q.id == "q7")
    documents = [Document(id="x", content="a"), Document(id=question.document_id, content="b")]
    assert gold_rank(question, documents) == 2 and gold_rank(question, documents[:1]) is None
