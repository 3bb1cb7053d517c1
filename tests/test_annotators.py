"""Annotator agreement: each SubjQA annotation kept as marked, Fleiss' kappa, a held-out annotator scored
against the others, and a model's predictions scored in that annotator's seat (the same gold)."""

import json

import pytest

from qa_system.cli import main
from qa_system.errors import QAError
from qa_system.evaluation.annotators import answerability_agreement, held_out_annotations, read_predictions, summarize_annotators
from qa_system.sources.subjqa import LabelledQuestion, load_subjqa


def annotated(qid, *annotations):
    answers = []  # what the loader keeps as gold; the agreement reads only the annotations
    return LabelledQuestion(
        qid, "is it good?", "B1", f"r-{qid}", f"electronics/r-{qid}", "electronics", "test", answers, True, annotations=list(annotations)
    )


def test_the_loader_keeps_every_annotation_in_file_order_with_no_answer_as_empty(tiny_subjqa):
    questions = {q.id: q for q in load_subjqa("electronics", ["train", "test"], tiny_subjqa).questions}
    assert questions["q1"].annotations == ["great for reading books at night", "The screen is sharp"]
    assert questions["q7"].annotations == ["the scroll wheel feels solid", ""]
    assert questions["q9"].annotations == [""]
    # The PTB-tokenised span is kept as the review writes it, as the gold answers are.
    assert questions["q6"].annotations == [questions["q6"].answers[0].text] and "don't" in questions["q6"].annotations[0]


def test_fleiss_kappa_over_questions_with_two_annotations_or_more():
    questions = [
        annotated("a", "x", "y"),  # both found an answer: agree
        annotated("b", "x", ""),  # disagree
        annotated("c", "", "", ""),  # three pairs, all agree
        annotated("d", "x"),  # one annotation: no pair, left out
    ]
    agreement = answerability_agreement(questions)
    assert agreement["questions"] == 3
    assert agreement["agreement"] == pytest.approx(2 / 3)
    assert agreement["span_share"] == pytest.approx(3 / 7)  # 3 spans among the 7 annotations of those questions
    assert agreement["chance_agreement"] == pytest.approx((3 / 7) ** 2 + (4 / 7) ** 2)
    assert agreement["kappa"] == pytest.approx(23 / 72)
    assert answerability_agreement([annotated("d", "x")])["questions"] == 0


def test_a_held_out_annotator_and_a_model_face_the_same_gold():
    questions = [annotated("a", "great for reading", ""), annotated("b", "the battery", "battery life is short"), annotated("c", "x")]
    records = held_out_annotations(questions, {"reader": {"a": "great for reading", "b": "", "c": "x"}})
    assert set(records["id"]) == {"a", "b"}  # "c" has no other annotation to be scored against
    seat = records.set_index(["id", "annotation", "system"])
    # Question a: annotation 0 (a span) faces "no answer", annotation 1 (no answer) faces the span.
    assert seat.loc[("a", 0, "held-out annotator"), "f1"] == 0.0 and seat.loc[("a", 1, "held-out annotator"), "f1"] == 0.0
    assert seat.loc[("a", 0, "always no answer"), "f1"] == 1.0 and seat.loc[("a", 1, "always no answer"), "f1"] == 0.0
    assert seat.loc[("a", 0, "reader"), "f1"] == 0.0 and seat.loc[("a", 1, "reader"), "f1"] == 1.0
    # Question b: two overlapping spans score each other by token F1 ("battery" shared).
    assert 0 < seat.loc[("b", 0, "held-out annotator"), "f1"] < 1
    assert seat.loc[("b", 0, "always no answer"), "answerable"] and seat.loc[("b", 0, "always no answer"), "f1"] == 0.0
    table = summarize_annotators(records).set_index(["system", "group"])
    assert table.loc[("always no answer", "all"), "f1"] == pytest.approx(0.25)  # only a's annotation 0 faces "no answer"
    assert table.loc[("reader", "all"), "f1"] == pytest.approx(0.25)
    assert table.loc[("held-out annotator", "answerable"), "annotations"] == 3
    assert table.loc[("held-out annotator", "unanswerable"), "answered"] == 1.0


def test_predictions_must_answer_every_question_and_be_squad_predictions(tmp_path):
    questions = [annotated("a", "x", "")]
    with pytest.raises(QAError, match="has no answer for 1 of the questions"):
        held_out_annotations(questions, {"reader": {"other": "x"}})
    bad = tmp_path / "predictions.json"
    bad.write_text(json.dumps([{"id": "a", "answer": "x"}]))
    with pytest.raises(QAError, match="is not SQuAD v2 predictions"):
        read_predictions(bad)
    for hostile in ("{not json", "[" * 100_000 + "]" * 100_000):  # the second was a RecursionError traceback
        bad.write_text(hostile)
        with pytest.raises(QAError, match="Cannot read predictions"):
            read_predictions(bad)


def test_eval_annotators_writes_a_report_and_seats_a_predictions_file(settings, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    predictions = tmp_path / "predictions-my-reader.json"
    predictions.write_text(json.dumps({"q6": "", "q7": "the scroll wheel feels solid", "q8": "", "q9": ""}))
    (tmp_path / "other").mkdir()
    same_name = tmp_path / "other" / "predictions-my-reader.json"  # another report's run of the same system
    same_name.write_text(json.dumps({"q7": ""}))
    out = tmp_path / "report"
    assert main(["eval", "annotators", "--split", "test", "--predictions", str(predictions), str(same_name), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 of 4 questions have two annotations or more" in printed
    report = json.loads((out / "report.json").read_text())
    rows = {(r["system"], r["group"]): r for r in report["metrics"]}
    # q7's two annotations: the span faces "no answer", "no answer" faces the span; the model answered the span.
    assert rows[("held-out annotator", "all")]["f1"] == 0.0
    assert rows[("always no answer", "all")]["f1"] == 0.5
    assert rows[("my-reader", "all")]["f1"] == 0.5
    assert rows[("other/my-reader", "all")]["f1"] == 0.5 and rows[("other/my-reader", "all")]["answered"] == 0.0
    assert report["answerability"]["agreement"] == 0.0
    assert (out / "records.csv").exists() and (out / "report.md").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "annotators", "--split", "dev"], "No question of SubjQA electronics dev has two annotations."),
        (["eval", "annotators", "--predictions", "missing.json"], "Cannot read predictions missing.json"),
        (["eval", "annotators", "--domain", "electronics", "--domain", "restaurants"], "An evaluation reads one domain; got 2"),
    ],
)
def test_eval_annotators_bad_input_is_one_line_exit_2(settings, monkeypatch, tmp_path, capsys, argv, message):
    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
