"""The answers' chances recalibrated to a collection of one's own on its labelled questions (``tuning.confidence``,
``qa-system fit-confidence``): the fit, its refusals, and every door stating the recalibrated chance and what it
was calibrated on. The tiny random reader answers through a real selector whose calibrations say "no answer"
at 55% over every answer at 50%, so that which first cards are right is known."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.confidence import labels_csv, notes_collection, own_answering_env
from helpers.selector import close_call_selector
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion import open_collection
from qa_system.metrics.calibration import expected_calibration_error
from qa_system.reading.selection import Recalibration
from qa_system.retrieval.fitted import confidence_fit
from qa_system.tuning.confidence import check_enough, fit_platt, held_out_chances, recalibrated


@pytest.fixture
def own(tmp_path, tiny_reader, monkeypatch) -> Settings:
    """A collection 'notes' of one's own documents, asked through the tiny reader and the close-call selector."""
    env = own_answering_env(tmp_path, tiny_reader)
    for name in ("QA_ES_URL", "QA_OPENSEARCH_URL", "QA_STORE", "QA_EMBEDDING_MODEL", "QA_QUERY_EMBEDDING_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    notes_collection(settings, tmp_path)
    return settings


def test_a_platt_fit_turns_overconfident_chances_into_ones_that_mean_what_they_say():
    """Stated 60-95%, right half as often: the recalibrated chances, each scored by a fit on the other folds, are calibrated."""
    rng = np.random.default_rng(0)
    stated = rng.uniform(0.6, 0.95, 600)
    right = (rng.uniform(size=600) < stated / 2).astype(float)
    groups = [f"item-{i % 40}" for i in range(600)]
    held_out = held_out_chances(stated, right, groups)
    assert expected_calibration_error(stated, right) > 0.3
    assert expected_calibration_error(held_out, right) < 0.06
    slope, intercept = fit_platt(stated, right)
    again = recalibrated(np.sort(stated), slope, intercept)
    assert slope > 0 and np.all(np.diff(again) >= 0)  # the order of the chances is kept: no decision changes
    assert abs(again.mean() - right.mean()) < 0.05


def test_a_recalibration_never_reverses_an_order_and_refuses_what_is_not_one():
    recalibration = Recalibration(0.8, -1.0, "30 labelled questions")
    chances = [recalibration(p) for p in (0.0, 0.1, 0.5, 0.9, 1.0)]
    assert chances == sorted(chances) and 0 < chances[0] and chances[-1] < 1
    assert Recalibration.from_dict({**recalibration.to_dict(), "questions": 30}) == recalibration
    for broken in (
        {"slope": -0.5, "intercept": 0, "calibrated_on": "x"},
        {"slope": 1},
        {"slope": "nan", "intercept": 0, "calibrated_on": "x"},
    ):
        with pytest.raises(QAError, match="recalibration .* is not one.*fit-confidence"):
            Recalibration.from_dict(broken)


def test_too_few_questions_or_first_cards_all_right_are_refused():
    with pytest.raises(QAError, match="Too few labelled questions.*12 asked.*at least 20"):
        check_enough(np.array([1.0, 0.0] * 6), "labels.csv, bm25")
    with pytest.raises(QAError, match="30 asked, 28 first cards right and 2 wrong"):
        check_enough(np.array([1.0] * 28 + [0.0] * 2), "labels.csv, bm25")
    check_enough(np.array([1.0] * 10 + [0.0] * 10), "labels.csv, bm25")


def test_fit_confidence_restates_every_doors_chances_and_reset_brings_back_the_reviews_ones(own, tmp_path, capsys):
    """On a collection of one's own, the selector said "55% chance there is no answer here" where that was right on
    8 of 24 labelled questions. After `fit-confidence` every door states the recalibrated chance and names what it was
    calibrated on; the same answers come first."""
    from qa_system.serving.answer_views import answer_cards, answer_views
    from qa_system.serving.api.schemas import AnswerOut
    from qa_system.serving.question import Question
    from qa_system.serving.service import QAService, ServedCollection

    question = ["ask", "Is it bright enough for reading?", "--collection", "notes", "--item", "LAMP"]
    assert main(question) == 0
    assert "No answer in these documents  55% chance there is no answer here" in capsys.readouterr().out

    labels = labels_csv(tmp_path / "labels.csv")
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels)]) == 0
    out = capsys.readouterr().out
    assert "first cards were right on 33% where they stated 55% on average" in out and "Stored in 'notes'" in out
    fit = confidence_fit(open_collection(own, "notes"), own)
    assert fit["questions"] == 24 and fit["right"] == pytest.approx(1 / 3)
    chance = Recalibration.from_dict(fit)(0.55)
    # Fitted again, it fits the chances as the selector states them, not as the first fit restated them: the same fit.
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels)]) == 0
    again = confidence_fit(open_collection(own, "notes"), own)
    assert (again["slope"], again["intercept"]) == pytest.approx((fit["slope"], fit["intercept"])) and again["stated"] == fit["stated"]
    assert 0.3 < chance < 0.4  # Platt's smoothed targets keep it off the sample's 8 in 24 by a little
    shown = f"{round(chance * 100)}% chance there is no answer here"

    assert main(question) == 0
    assert f"No answer in these documents  {shown}" in capsys.readouterr().out
    answers = QAService(own, [ServedCollection("notes")]).ask(Question("Is it bright enough for reading?", "LAMP", collection="notes"))[
        "answers"
    ]
    views = answer_views(answers)
    (card, *_) = answer_cards(views)
    assert card.label == shown and "calibrated on 24 labelled questions of 'notes' (labels.csv)" in card.help
    assert "fit-confidence" not in card.help  # the hint to fit is for chances still calibrated on reviews
    api = AnswerOut.of(views[0])
    assert api.probability == pytest.approx(chance) and api.calibrated_on == "24 labelled questions of 'notes' (labels.csv)"

    # An evaluation on the very questions it was fitted on says so.
    assert main(["eval", "pipeline", "--collection", "notes", "--labels", str(labels), "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "24 of these 24 questions were among them, so its ece here is optimistic" in report
    assert "| subjective |" not in report and "| factual |" not in report  # labels of one's own do not say

    notes_collection(own, tmp_path)  # indexed again: the fit stays
    assert confidence_fit(open_collection(own, "notes"), own) == again

    assert main(["fit-confidence", "--collection", "notes", "--reset"]) == 0
    assert "recalibration removed" in capsys.readouterr().out
    assert main(question) == 0
    out = capsys.readouterr().out
    assert "55% chance there is no answer here" in out
    (card, *_) = answer_cards(
        answer_views(
            QAService(own, [ServedCollection("notes")]).ask(Question("Is it bright enough for reading?", "LAMP", collection="notes"))[
                "answers"
            ]
        )
    )
    assert "held-out product reviews (SubjQA)" in card.help and "`qa-system fit-confidence` fits it to yours" in card.help


def test_a_running_service_and_a_pipeline_built_before_a_fit_state_its_chances_at_once(own, tmp_path, capsys):
    """A running API server kept the chances of before `fit-confidence` (and of before `--reset`) until a document
    changed or it restarted; a pipeline built in a notebook kept them for good."""
    from qa_system.pipelines import build_qa_pipeline
    from qa_system.serving.question import Question
    from qa_system.serving.service import QAService, ServedCollection

    service = QAService(own, [ServedCollection("notes")])
    pipeline = build_qa_pipeline("bm25", own, index=open_collection(own, "notes"))

    def chances() -> tuple[float, float]:
        question = "Is it bright enough for reading?"
        served = service.ask(Question(question, "LAMP", collection="notes"))["answers"]
        built = pipeline.run(question, item_id="LAMP")["answers"]
        return served[0].meta["probability"], built[0].meta["probability"]

    assert chances() == pytest.approx((0.55, 0.55))
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels_csv(tmp_path / "labels.csv"))]) == 0
    fitted = Recalibration.from_dict(confidence_fit(open_collection(own, "notes"), own))(0.55)
    assert 0.3 < fitted < 0.4 and chances() == pytest.approx((fitted, fitted))
    assert main(["fit-confidence", "--collection", "notes", "--reset"]) == 0
    assert chances() == pytest.approx((0.55, 0.55))


def test_fit_confidence_refuses_bad_input_in_one_line_before_asking_anything(own, tmp_path, capsys):
    few = labels_csv(tmp_path / "few.csv", answered=8, unanswered=4)
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(few)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Too few labelled questions to fit the chances on: 12 asked" in error
    assert confidence_fit(open_collection(own, "notes"), own) is None  # nothing stored
    # Enough questions, but every first card right: the error says what is missing, not "label at least 20".
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels_csv(tmp_path / "all.csv", 0, 24))]) == 2
    error = capsys.readouterr().err
    assert "Too few first cards wrong to fit the chances on: 24 asked, 24 first cards right and 0 wrong" in error
    assert "add labelled questions whose first card is wrong" in error
    for argv, message in (
        (["--labels", str(few), "--reset"], "--reset removes the fit; --labels makes one"),
        (["--labels", str(tmp_path)], f"The labels {tmp_path} are a folder, not a file."),
        (["--labels", str(few), "--out", str(few)], f"--out {few} is a file, not a folder."),  # before any question is asked
    ):
        assert main(["fit-confidence", "--collection", "notes", *argv]) == 2, argv
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and message in error, error
    # SubjQA's chances are not refitted: said before the labels are read, and naming the command that builds it.
    assert main(["fit-confidence", "--collection", "subjqa-electronics", "--labels", str(tmp_path / "missing.csv")]) == 2
    assert "'subjqa-electronics' is a SubjQA collection" in capsys.readouterr().err
    assert main(["ask", "Is it loud?", "--collection", "subjqa-books"]) == 2
    assert "build it with `qa-system index --domain books`" in capsys.readouterr().err
    assert main(["ask", "Is it loud?", "--collection", "notes", "--item", "NOPE"]) == 2
    error = capsys.readouterr().err
    assert (
        "Item 'NOPE' has no documents in collection 'notes'. Fix: pick an item id that `qa-system products --collection notes` lists."
        in error
    )
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(few), "--retriever", "hybrid"]) == 2  # indexed --no-embed
    error = capsys.readouterr().err
    assert "Index 'notes' has no embeddings, so hybrid retrieval cannot run." in error
    assert (
        f"run the command that indexed it without --no-embed (`qa-system index --input {tmp_path / 'notes.csv'} --collection notes ...`)"
        in error
    )


def test_fit_confidence_says_what_it_left_out_what_it_replaced_and_what_is_in_force(own, tmp_path, capsys):
    from helpers.confidence import labels_squad

    squad = labels_squad(tmp_path / "squad.json", elsewhere=1)  # one question about a paragraph the collection does not hold

    assert main(["fit-confidence", "--collection", "notes"]) == 0  # neither --labels nor --reset: what is in force
    assert capsys.readouterr().out.startswith(
        "'notes': chances as calibrated on held-out product reviews (SubjQA); `qa-system fit-confidence"
    )
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels_csv(tmp_path / "labels.csv"))]) == 0
    capsys.readouterr()
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(squad)]) == 0
    out = capsys.readouterr().out
    assert "1 questions whose context is no document of collection 'notes' were left out." in out
    assert "It replaces the fit on 24 labelled questions of 'notes' (labels.csv)." in out
    assert "`qa-system fit-confidence --collection notes --reset` removes them" in out
    assert main(["fit-confidence", "--collection", "notes"]) == 0
    assert capsys.readouterr().out.startswith("'notes': chances recalibrated on 24 labelled questions of 'notes' (squad.json)")


def test_an_evaluation_asks_a_question_without_an_item_as_the_doors_do(own, tiny_reader, tmp_path):
    """Asked across every document of a collection without items, the doors weigh each answer by its document's
    retrieval score; the evaluation (and so fit-confidence) stated the unweighed chances instead."""
    from helpers.confidence import ANSWERED, DOCUMENTS
    from qa_system.evaluation.answering import evaluate_pipelines
    from qa_system.ingestion import IngestOptions, ingest
    from qa_system.ingestion.labels import load_labels
    from qa_system.pipelines import build_qa_pipeline

    # Calibrations that state each answer's value as its chance, and "no answer" never first: the weighing shows.
    identity = {"answer": [[0.0, 1.0], [0.0, 1.0]], "no_answer": [[0.0, 1.0], [0.0, 0.0]]}
    settings = own.with_(selector_model=str(close_call_selector(tmp_path / "identity", tiny_reader, identity)))
    flat = tmp_path / "flat.csv"  # documents of no item: every question is asked of all of them
    flat.write_text("id,text\n" + "".join(f"{i},{t}\n" for i, _, t in DOCUMENTS), encoding="utf-8")
    ingest(settings, flat, "flat", IngestOptions(text_column="text", id_column="id"), embed=False, progress=False)
    labels = tmp_path / "labels.csv"
    labels.write_text("question,answer,document_id\n" + "".join(f"{q},{a},{d}\n" for q, a, d in ANSWERED), encoding="utf-8")
    index = open_collection(settings, "flat")
    result = evaluate_pipelines(
        settings, [settings.reader_model], labels=load_labels(labels, settings, "flat"), index=index, candidates=("product",)
    )
    records = next(r for (system, _), r in result["records"].items() if system.endswith("+selector"))
    pipeline = build_qa_pipeline("bm25", settings, index=index)
    shown = [pipeline.run(question, top_k_reader=3)["answers"][0].score for question, _, _ in ANSWERED]
    assert records["confidence"].tolist() == pytest.approx(shown)


def test_fit_confidence_takes_judged_labels_which_other_evaluations_send_to_eval_judged(own, tmp_path, capsys):
    """Labels in the judged format (whether the documents answer each question, its acceptable spans) fit the chances
    as CSV labels do; a question the documents answer only in part counts "no answer" as right there, as `eval judged`
    scores it. `eval pipeline` given judged labels names `eval judged`, whose report then notes the fit."""
    from helpers.confidence import labels_judged

    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels_csv(tmp_path / "labels.csv"))]) == 0
    from_csv = confidence_fit(open_collection(own, "notes"), own)
    capsys.readouterr()

    judged = labels_judged(tmp_path / "judged.jsonl")
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(judged), "--out", str(tmp_path / "fit")]) == 0
    out = capsys.readouterr().out
    assert "Chances recalibrated on 24 labelled questions of 'notes' (judged.jsonl)" in out and "It replaces the fit" in out
    fit = confidence_fit(open_collection(own, "notes"), own)
    assert (fit["slope"], fit["intercept"], fit["right"]) == pytest.approx((from_csv["slope"], from_csv["intercept"], 1 / 3))
    assert "Judged questions" in (tmp_path / "fit" / "report.md").read_text()

    partly = labels_judged(tmp_path / "partly.jsonl", partly=4)  # 4 more first cards ("no answer") acceptable
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(partly), "--limit", "22"]) == 0
    fit = confidence_fit(open_collection(own, "notes"), own)
    assert fit["questions"] == 22 and fit["right"] == pytest.approx(10 / 22)
    capsys.readouterr()

    assert main(["eval", "pipeline", "--collection", "notes", "--labels", str(judged)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{judged} holds judged labels" in error and f"`qa-system eval judged --labels {judged}`" in error
    assert main(["eval", "judged", "--collection", "notes", "--labels", str(partly), "--out", str(tmp_path / "judged")]) == 0
    report = (tmp_path / "judged" / "report.md").read_text()
    assert "chances recalibrated to collection 'notes' on 22 labelled questions of 'notes' (partly.jsonl)" in report
    assert "22 of these 24 questions were among them, so its ece here is optimistic" in report

    assert main(["fit-confidence", "--collection", "notes", "--labels", str(tmp_path / "labels.csv"), "--verdicts", str(judged)]) == 2
    assert "--verdicts judge the cards of judged labels" in capsys.readouterr().err


def test_the_fit_says_when_one_kind_of_card_fares_worse_under_the_one_map():
    """Answers stated 80% and right on 40%, "no answer" stated 80% and right on 80%: the one map lowers both, so the
    answers' chances improve and "no answer"'s get worse, and the fit's line says so."""
    from qa_system.tuning.confidence import fit_line, kind_errors

    rng = np.random.default_rng(1)
    abstained = np.arange(400) % 4 == 0
    stated = np.full(400, 0.8) + rng.uniform(-0.05, 0.05, 400)
    right = np.where(abstained, rng.uniform(size=400) < 0.8, rng.uniform(size=400) < 0.4).astype(float)
    held_out = held_out_chances(stated, right, [f"item-{i % 40}" for i in range(400)])
    kinds = kind_errors(stated, held_out, right, abstained)
    assert kinds["answer"]["questions"] == 300 and kinds["no answer"]["questions"] == 100
    assert kinds["answer"]["ece_recalibrated"] < kinds["answer"]["ece_stated"]
    assert kinds["no answer"]["ece_recalibrated"] > kinds["no answer"]["ece_stated"] + 0.1
    fit = {
        "calibrated_on": "400 labelled questions of 'wiki' (labels.csv)", "right": right.mean(), "stated": stated.mean(),
        "ece_stated": expected_calibration_error(stated, right), "ece_recalibrated": expected_calibration_error(held_out, right),
        "kinds": kinds,
    }  # fmt: skip
    line = fit_line(fit, "wiki")
    assert 'Its 100 first cards that said "no answer" fare worse' in line and "one map serves answers" in line
    assert "fare worse" not in fit_line({**fit, "kinds": {"answer": kinds["answer"]}}, "wiki")


def test_a_flat_map_that_would_state_one_chance_for_every_card_is_not_stored():
    """31 labelled questions of one's own product reviews: first cards stated 99% were right on 13 of 18, those stated
    74-96% on 10 of 13. The fit's slope was 0: every card, "no answer" too, said 74%, and it was stored."""
    from qa_system.tuning.confidence import fit_line, why_not_stored

    stated = np.array([0.994] * 18 + [0.96, 0.96, 0.96, 0.937, 0.937, 0.891, 0.891, 0.865, 0.774, 0.774, 0.774, 0.737, 0.737])
    right = np.array([1.0] * 13 + [0.0] * 5 + [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    slope, intercept = fit_platt(stated, right)
    assert slope < 0.05  # no order to keep: higher stated chances were not right more often
    held_out = held_out_chances(stated, right, [f"item-{i % 6}" for i in range(31)])
    fit = {
        "slope": slope, "intercept": intercept, "calibrated_on": "31 labelled questions of 'shop' (labels.csv)",
        "right": right.mean(), "stated": stated.mean(), "ece_stated": expected_calibration_error(stated, right),
        "ece_recalibrated": expected_calibration_error(held_out, right),
    }  # fmt: skip
    assert fit["ece_recalibrated"] < fit["ece_stated"]  # a lower error all the same: a single chance near the base rate
    assert why_not_stored(fit, stated) == "flat"
    line = fit_line({**fit, "stored": False, "not_stored": "flat"}, "shop")
    assert "did not tell right first cards from wrong ones" in line and "about 74% for every card" in line
    assert "was not stored: the chances stay as they were" in line
    assert why_not_stored({**fit, "slope": 0.6}, stated) is None
    assert why_not_stored(fit, np.full(31, 0.55)) is None  # one stated chance: a shift of it is all a map can be


def test_a_fit_that_does_not_lower_the_error_is_not_stored(own, tmp_path, capsys):
    """13 of 24 first cards right where they state 55%: the chances are about right already, and a fit scored on the
    questions it did not see only adds noise. It says so and leaves the chances, and an earlier fit, as they were."""
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels_csv(tmp_path / "labels.csv"))]) == 0
    earlier = confidence_fit(open_collection(own, "notes"), own)
    capsys.readouterr()
    assert main(["fit-confidence", "--collection", "notes", "--labels", str(labels_csv(tmp_path / "even.csv", 11, 13))]) == 0
    out = capsys.readouterr().out
    assert "Fitted on 24 labelled questions of 'notes' (even.csv): first cards were right on 54% where they stated 55%" in out
    assert "It did not lower the error here, so it was not stored: the chances stay as they were." in out
    assert "'notes': chances recalibrated on 24 labelled questions of 'notes' (labels.csv)" in out and "Stored in" not in out
    assert confidence_fit(open_collection(own, "notes"), own) == earlier
