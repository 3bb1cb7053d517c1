"""Pooled gold: a question asked of several reviews of one product is scored against all their answers."""

import math

import pandas as pd
import pytest

from helpers.subjqa import SPLIT_ROWS, row, write_subjqa
from qa_system.evaluation.gold import check_golds, pooled_answers, pooled_documents, pooled_share, rescored
from qa_system.evaluation.reader import calibration_error, decision_shares, summarize_answers
from qa_system.sources.subjqa import GoldAnswer, LabelledQuestion


def asked(qid, text, item, review, answers):
    return LabelledQuestion(
        qid, text, item, review, f"electronics/{review}", "electronics", "test", [GoldAnswer(a, 0) for a in answers], True
    )


QUESTIONS = [
    asked("a", "How is the sound?", "KINDLE", "r1", []),
    asked("b", "how is the SOUND ?", "KINDLE", "r2", ["tinny and quiet"]),  # the same question, normalised
    asked("c", "How is the sound?", "KINDLE", "r3", ["loud enough"]),
    asked("d", "How is the sound?", "MOUSE", "r4", []),  # another product: its own question
    asked("e", "Is it light?", "KINDLE", "r5", []),
    asked("f", "Is it light?", "KINDLE", "r6", []),  # asked twice, answered by neither review
]


def test_pooled_answers_take_every_review_the_question_was_asked_of():
    golds = pooled_answers(QUESTIONS)
    assert golds["a"] == golds["b"] == golds["c"] == ["tinny and quiet", "loud enough"]
    assert golds["d"] == [""] and golds["e"] == golds["f"] == [""]  # unanswerable only when none of them has an answer
    documents = pooled_documents(QUESTIONS)
    assert documents["a"] == {"electronics/r2", "electronics/r3"}  # the reviews that answer it
    assert documents["e"] == {"electronics/r5", "electronics/r6"}  # none answers: any of them
    assert pooled_share(QUESTIONS) == pytest.approx(5 / 6)
    assert check_golds(["pooled", "annotated", "pooled"]) == ["pooled", "annotated"]


def test_a_right_answer_from_another_review_counts_under_pooled_gold():
    records = pd.DataFrame(
        [
            {
                "id": "a",
                "prediction": "it is loud enough",
                "predictions": ["it is loud enough", ""],
                "gold": [""],
                "answerable": False,
                "em": 0.0,
                "f1": 0.0,
                "source_documents": ["electronics/r3"],
            },
            {
                "id": "d",
                "prediction": "",
                "predictions": ["", "quiet"],
                "gold": [""],
                "answerable": False,
                "em": 1.0,
                "f1": 1.0,
                "source_documents": ["electronics/r4"],
            },
        ]
    )
    pooled = rescored(records, pooled_answers(QUESTIONS), pooled_documents(QUESTIONS)).set_index("id")
    assert pooled.loc["a", "answerable"] and pooled.loc["a", "f1"] == pytest.approx(2 / 3)  # 2 of its 4 words, both gold words
    assert pooled.loc["a", "gold_retrieved"]
    assert pooled.loc["d", "f1"] == 1.0 and pooled.loc["d", "f1_top_k"] == 1.0 and not pooled.loc["d", "answerable"]


def test_decision_shares_and_calibration_error():
    records = pd.DataFrame(
        {
            "prediction": ["x", "x", "", "", "y"],
            "f1": [1.0, 0.2, 0.0, 1.0, 0.6],
            "answerable": [True, True, True, False, True],
            "confidence": [0.9, 0.9, 0.5, 0.5, 0.7],
        }
    )
    assert decision_shares(records) == {"answered_right": 0.4, "answered_wrong": 0.2, "abstained_wrong": 0.2}
    # Bins: 0.9 -> 1 of 2 right (|0.9 - 0.5|); 0.5 -> 1 of 2 right (0); 0.7 -> 1 of 1 (0.3).
    assert calibration_error(records) == pytest.approx((2 * 0.4 + 2 * 0.0 + 1 * 0.3) / 5)
    assert math.isnan(calibration_error(records.assign(confidence=math.nan)))  # the reader's scores are no probabilities


@pytest.fixture
def asked_twice(settings, monkeypatch):
    """The tiny SubjQA, whose test split asks "How is the sound?" of two Kindle reviews, only one answering it."""
    test = [
        *SPLIT_ROWS["test"],
        row("q11", "How is the sound?", "r-kindle-1", "ANSWERNOTFOUND"),
        row("q12", "How is the sound?", "r-kindle-3", "the sound is tinny and quiet"),
    ]
    write_subjqa(settings.data_dir, {**SPLIT_ROWS, "test": test})
    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    return settings


def test_retrieval_counts_a_review_that_answers_the_same_question_under_pooled_gold(asked_twice):
    from qa_system.evaluation.retrieval import evaluate_retrievers

    result = evaluate_retrievers(
        asked_twice, "electronics", "test", ["bm25"], ks=(1, 3), candidates=["product"], golds=["annotated", "pooled"]
    )
    records = result["records"]["bm25"].set_index("question_id")
    # q11's own review r-kindle-1 has no answer; pooled, the relevant review is r-kindle-3, which answers it (one of 3 candidates each).
    assert records.loc["q11", "strict_relevant"] == records.loc["q11", "pooled_relevant"] == 1
    assert len(records.loc["q11", "pooled_ranks"]) == 1 and records.loc["q11", "pooled_ranks"] != records.loc["q11", "strict_ranks"]
    assert records.loc["q12", "pooled_ranks"] == records.loc["q12", "strict_ranks"]  # its own review is the one that answers
    metrics = result["metrics"]
    assert {"strict", "pooled", "chapter"} <= set(metrics["definition"])


def test_eval_pipeline_reports_both_golds_side_by_side(asked_twice, tiny_reader, tmp_path):
    from qa_system.evaluation.answering import evaluate_pipelines

    result = evaluate_pipelines(
        asked_twice, [str(tiny_reader)], "bm25", split="test", candidates=["product"], golds=["annotated", "pooled"], out_dir=tmp_path
    )
    metrics = result["metrics"]
    both = metrics[metrics["group"] == "answerable"].set_index("gold")
    assert set(both.index) == {"annotated", "pooled"}
    assert both.loc["pooled", "questions"] == both.loc["annotated", "questions"] + 1  # q11 is answerable once pooled
    assert {"answered_right", "answered_wrong", "abstained_wrong", "ece"} <= set(metrics.columns)
    assert (tmp_path / "report.md").read_text().count("pooled") >= 2
    summary = summarize_answers(result["records"][(f"bm25+{tiny_reader.name}", "product")])
    assert summary.loc["all", "answered_right"] + summary.loc["all", "answered_wrong"] == pytest.approx(summary.loc["all", "answered"])
