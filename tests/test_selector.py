"""The answer selector: cross-fitting by product, its two models and calibrations, the component in a YAML pipeline."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml
from haystack import Document, Pipeline

from helpers.selector import synthetic_records
from qa_system.reading.reader import ReaderOutput, SpanCandidate
from qa_system.reading.selection import (
    REVIEWS_CALIBRATION,
    SELECTOR_FILE,
    AnswerSelector,
    Recalibration,
    Saying,
    decide,
    group_candidates,
    read_documents,
    same_answer,
    selector_fits_reader,
)
from qa_system.reading.selection_features import Candidate
from qa_system.sources.subjqa import LabelledQuestion
from qa_system.training.selector import _isotonic, fit_selector, folds_of, selector_frames


def question(qid: str, item: str, domain: str = "electronics") -> LabelledQuestion:
    return LabelledQuestion(qid, "how is it?", item, f"r-{qid}", f"d-{qid}", domain, "train", [], False, context="text")


def test_folds_keep_products_whole_and_never_read_what_they_trained_on():
    questions = [question(f"q{i}", f"item{i % 17}", ("electronics", "restaurants")[i % 2]) for i in range(200)]
    folds = folds_of(questions, 5)
    assert sorted(i for f in folds for i in f.reads) == sorted(q.id for q in questions)  # each question read exactly once
    for fold in folds:
        assert not set(fold.reads) & set(fold.trained_on)
        assert set(fold.reads) | set(fold.trained_on) == {q.id for q in questions}
        read_products = {(q.domain, q.item_id) for q in questions if q.id in fold.reads}
        trained_products = {(q.domain, q.item_id) for q in questions if q.id in fold.trained_on}
        assert not read_products & trained_products  # a product's questions are never on both sides
    # Decided by product alone: the same folds whatever the order the questions come in.
    assert [set(f.reads) for f in folds] == [set(f.reads) for f in folds_of(list(reversed(questions)), 5)]


@pytest.fixture(scope="module")
def trained_selector(tmp_path_factory):
    folder = tmp_path_factory.mktemp("selector")
    questions, spans = selector_frames(synthetic_records(240))
    oof = fit_selector(questions, spans, folder, {"reader_fingerprint": "abc"}, folds=3)
    return folder, oof


def test_the_selector_learns_what_the_threshold_cannot_see_and_its_probabilities_are_calibrated(trained_selector):
    folder, oof = trained_selector
    info = json.loads((folder / SELECTOR_FILE).read_text())
    assert info["reader_fingerprint"] == "abc" and info["span_model"] == "span.txt"
    assert oof["f1"].mean() > oof["null_f1"].mean() + 0.2  # far better than always abstaining on this easy set
    answered = oof[oof["answered"]]
    assert (answered["best_f1_true"] >= 0.5).mean() > 0.8
    x, y = info["calibration"]["no_answer"]
    assert all(b >= a for a, b in zip(y, y[1:])) and 0 <= min(y) and max(y) <= 1


PREDICTING_THREADS = """
import json, sys, threading
import psutil
from qa_system.reading.selection import SelectorModel

model = SelectorModel(sys.argv[1])
spans = [{name: float(i % 7) for name in model.span_features} for i in range(30)]
answer = {name: 0.5 for name in model.answer_features}
process = psutil.Process()
def cpu():
    return {thread.id: thread.user_time + thread.system_time for thread in process.threads()}
before = cpu()
for _ in range(1000):
    model.span_f1(spans)
    model.answerable(answer)
used = {thread: seconds - before.get(thread, 0.0) for thread, seconds in cpu().items()}
print(json.dumps({"caller": used.pop(threading.get_native_id()), "others": sum(used.values())}))
"""


def test_the_selector_predicts_in_the_calling_thread(trained_selector):
    """A question's few rows: LightGBM's default OpenMP team (a thread per core) would spin on every other core after
    each call, as much CPU again per core as the prediction itself."""
    folder, _ = trained_selector
    run = subprocess.run([sys.executable, "-c", PREDICTING_THREADS, str(folder)], capture_output=True, text=True, check=True)
    cpu = json.loads(run.stdout)
    assert cpu["caller"] > 0.05 and cpu["others"] <= 0.1 * cpu["caller"]


def test_a_calibration_never_states_certainty_from_a_finite_sample():
    # Three low scores all wrong, four high ones all right: with one right answer added at the lowest score and
    # one wrong at the highest, the ends state 1/4 and 4/5.
    x, y = _isotonic([0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9], [0, 0, 0, 1, 1, 1, 1])
    assert y[0] == pytest.approx(1 / 4) and y[-1] == pytest.approx(4 / 5)
    assert np.interp(0.0, x, y) == pytest.approx(1 / 4) and np.interp(1.0, x, y) == pytest.approx(4 / 5)
    assert all(b >= a for a, b in zip(y, y[1:]))


def reading_of(documents: list[Document], spans: list[tuple[int, int, int, float]], nulls: list[float]) -> ReaderOutput:
    candidates = sorted((SpanCandidate(d, s, e, logit, 0) for d, s, e, logit in spans), key=lambda c: -c.logit)
    return ReaderOutput(candidates, min(nulls), dict(enumerate(nulls)))


def test_the_component_round_trips_through_a_yaml_pipeline_and_answers_with_probabilities(trained_selector):
    folder, _ = trained_selector
    pipeline = Pipeline()
    pipeline.add_component("selector", AnswerSelector(model=str(folder), top_k=2))
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["qa_system"])
    assert yaml.safe_load(loaded.dumps()) == yaml.safe_load(pipeline.dumps())
    documents = [
        Document(id="a", content="battery lasts a week. screen sharp."),
        Document(id="b", content="the battery lasts a week, really."),
    ]
    reading = reading_of(documents, [(0, 0, 20, 5.0), (1, 4, 24, 4.5), (0, 22, 34, 1.0)], [0.5, 1.0])
    answers = loaded.run({"selector": {"query": "how is the battery?", "documents": documents, "reading": reading}})["selector"]["answers"]
    assert len(answers) == 3 and sum(a.data is None for a in answers) == 1
    chosen = answers[0]
    assert chosen.meta["chosen"] and all(0.0 <= a.score <= 1.0 for a in answers)
    assert all("probability" in a.meta for a in answers)
    (week,) = [a for a in answers if a.data is not None and "lasts a week" in a.data]  # the two reviews' answer is one card naming both
    assert week.meta["support"] == 2 and week.meta["supporting_documents"] == ["a", "b"]
    # Two passages of one long document say it: said in one document, not two.
    passages = [Document(id=d.id, content=d.content, meta={"document_id": "manual.txt"}) for d in documents]
    answers = loaded.run({"selector": {"query": "how is the battery?", "documents": passages, "reading": reading}})["selector"]["answers"]
    (week,) = [a for a in answers if a.data is not None and "lasts a week" in a.data]
    assert week.meta["support"] == 1 and week.meta["supporting_documents"] == ["a", "b"]


def recalibrated(folder, tmp_path, answer: float, no_answer: float):
    """A copy of the trained selector whose calibrations map every value to ``answer`` and ``no_answer``."""
    copy = tmp_path / f"selector-{answer}-{no_answer}"
    copy.mkdir()
    for file in folder.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    info = json.loads((copy / SELECTOR_FILE).read_text())
    info["calibration"] = {"answer": [[0.0, 1.0], [answer, answer]], "no_answer": [[0.0, 1.0], [no_answer, no_answer]]}
    (copy / SELECTOR_FILE).write_text(json.dumps(info))
    return copy


def test_answers_come_by_their_chance_of_being_right_and_the_first_is_the_choice(trained_selector, tmp_path):
    """The decision (expected F1s) and the probabilities (two calibrations fitted apart) can disagree: the
    decision answered, and its answer was put above a "no answer" with a higher chance of being right."""
    folder, _ = trained_selector
    documents = [
        Document(id="a", content="battery lasts a week. screen sharp."),
        Document(id="b", content="the battery lasts a week, really."),
    ]
    reading = reading_of(documents, [(0, 0, 20, 6.0), (1, 4, 24, 5.5), (0, 22, 34, 1.0)], [-2.0, -1.0])
    selector = AnswerSelector(model=str(recalibrated(folder, tmp_path, 0.3, 0.6)), top_k=3)
    selector.warm_up()
    assert (
        selector._selector.choose("how is the battery?", read_documents(documents, reading))[3].answer is not None
    )  # it decides to answer
    answers = selector.run("how is the battery?", documents, reading)["answers"]
    scores = [a.score for a in answers]
    assert scores == sorted(scores, reverse=True) and answers[0].data is None and scores[0] == 0.6
    assert [a.meta["chosen"] for a in answers] == [True] + [False] * (len(answers) - 1)
    # Agreeing, the decision comes first; at equal chances too.
    for answer_p, no_answer_p in ((0.7, 0.2), (0.5, 0.5)):
        agreeing = AnswerSelector(model=str(recalibrated(folder, tmp_path, answer_p, no_answer_p)), top_k=3).run(
            "how is the battery?", documents, reading
        )["answers"]
        assert (
            agreeing[0].data is not None
            and agreeing[0].meta["chosen"]
            and [a.score for a in agreeing] == sorted((a.score for a in agreeing), reverse=True)
        )


def test_every_answers_meta_is_plain_json(trained_selector):
    """``chosen`` was a numpy.bool_: Hayhooks (and any JSON encoder) answered 500 on every question."""
    folder, _ = trained_selector
    documents = [
        Document(id="a", content="battery lasts a week. screen sharp."),
        Document(id="b", content="the battery lasts a week, really."),
    ]
    reading = reading_of(documents, [(0, 0, 20, 5.0), (1, 4, 24, 4.5), (0, 22, 34, 1.0)], [0.5, 1.0])
    answers = AnswerSelector(model=str(folder), top_k=3).run("how is the battery?", documents, reading)["answers"]
    assert len(answers) >= 2
    for answer in answers:
        assert json.loads(json.dumps(answer.meta)) == answer.meta  # no default=: every value a plain Python type
        json.dumps(answer.to_dict())
        assert type(answer.meta["chosen"]) is bool and type(answer.meta["probability"]) is float
        for span in answer.meta.get("spans", []):
            assert {type(span["start"]), type(span["end"])} == {int}


def test_spans_that_say_the_same_thing_are_grouped_best_first():
    spans = [
        Candidate(0, 0, 20, 3.0, "great for reading books"),
        Candidate(1, 5, 16, 2.0, "great for reading"),  # inside the first
        Candidate(2, 0, 9, 1.5, "It is great for reading books!"),  # the same words, more of them
        Candidate(1, 30, 40, 1.0, "cheap price"),
    ]
    assert group_candidates(spans, [0, 1, 2, 3]) == [[0, 1, 2], [3]]
    assert group_candidates(spans, [3, 1, 0, 2]) == [[3], [1, 0, 2]]


# A tester's employee handbook (Markdown files indexed as a collection of their own), as the reader read it.
HANDBOOK = {
    "wellness.md": "# Wellness\n\nA monthly wellness stipend of $75 covers gym memberships, fitness classes or meditation apps.\n",
    "health-insurance.md": "# Health insurance\n\nThe company pays 90% of the premium for employees and 75% for dependents.\n",
    "sick-leave.md": "# Sick leave\n\nEmployees receive 10 paid sick days per year. Sick days do not carry over.\n",
    "parental-leave.md": (
        "# Parental leave\n\nBirth parents receive 16 weeks of fully paid parental leave. "
        "Non-birth parents receive 10 weeks of fully paid leave.\n"
    ),
    "faq.md": "# FAQ\n\nHow many sick days? You get 10 paid sick days per year, as the handbook says.\n",
}


def handbook_answers(folder, tmp_path, question: str, said: list[tuple[str, str]]):
    """The selector's answers when the reader found each (file, span text) of ``said`` in the handbook written to ``tmp_path``."""
    for name, text in HANDBOOK.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    names = list(dict.fromkeys(name for name, _ in said))
    documents = [Document(id=name, content=(tmp_path / name).read_text(encoding="utf-8"), meta={"document_id": name}) for name in names]
    spans = []
    for rank, (name, text) in enumerate(said):
        start = documents[names.index(name)].content.index(text)
        spans.append((names.index(name), start, start + len(text), 5.0 - rank))
    reading = reading_of(documents, spans, [0.0] * len(documents))
    return AnswerSelector(model=str(folder), top_k=5).run(question, documents, reading)["answers"]


def test_answers_of_several_documents_are_one_only_when_they_say_the_same(trained_selector, tmp_path):
    """ "$75 (said in 2 reviews)": the wellness stipend's "$75" was grouped with "75% for dependents" of the health
    insurance (both "75" once normalised, the one inside the other), and "10" paid sick days with "10 weeks" of leave."""
    folder, _ = trained_selector
    stipend = handbook_answers(
        folder,
        tmp_path,
        "How much is the wellness stipend?",
        [("wellness.md", "$75"), ("health-insurance.md", "The company pays 90% of the premium for employees and 75% for dependents")],
    )
    (dollars,) = [a for a in stipend if a.data == "$75"]
    assert dollars.meta["supporting_documents"] == ["wellness.md"] and dollars.meta["support"] == 1
    assert sum(a.data is not None for a in stipend) == 2  # the premium is an answer of its own
    sick = handbook_answers(
        folder,
        tmp_path,
        "How many paid sick days do I get?",
        [("sick-leave.md", "10"), ("parental-leave.md", "10 weeks of fully paid leave"), ("faq.md", "10 paid sick days")],
    )
    (days,) = [a for a in sick if a.data == "10"]
    # The FAQ says the same ("10" of "10 paid sick days" in both): one answer said in two documents; the leave is not it.
    assert days.meta["supporting_documents"] == ["sick-leave.md", "faq.md"] and days.meta["support"] == 2
    assert [a.meta["support"] for a in sick if a.data == "10 weeks of fully paid leave"] == [1]


def test_a_number_is_the_same_answer_only_as_the_same_quantity():
    assert not same_answer("$75", "75%") and not same_answer("$75", "and 75% for dependents")
    assert not same_answer("The company pays 90% of the premium", "The company pays 80% of the premium")
    assert same_answer("$1,000", "$1000") and same_answer("30 hours", "30 hours")
    review = "Great phone. The battery lasts 30 hours, more than I need."
    start = review.index("30 hours")
    # Two words inside a longer answer: one answer when the phrase they stand in says the same.
    assert same_answer(Saying.of("30 hours", review, start, start + 8), Saying.of("the battery lasts 30 hours"))
    assert not same_answer(Saying.of("30 hours", review, start, start + 8), Saying.of("It took 30 hours to ship"))
    assert same_answer("great for reading", "It is great for reading books!")  # three words inside a longer answer: still one
    assert not same_answer("great", "great for reading books")  # a word alone: its phrase unknown, not the longer answer


def test_an_answer_that_says_only_part_of_a_groups_head_does_not_support_it():
    """Three hotels' pet policies end alike: the first's card ("no pets are allowed. Pets may not be left alone in
    rooms") was "said in 3 documents", of which two allow dogs and share only the last sentence."""
    head = "Pet policy at Alpine Lodge: no pets are allowed. Pets may not be left alone in rooms"
    assert not same_answer(head, "Pets may not be left alone in rooms")
    assert same_answer("Pets may not be left alone in rooms", head)  # the longer one says all the head says
    assert same_answer("This thing is awesome", "This thing is awesome, especially now that it supports HBO Go")
    assert same_answer("It is great for reading books", "great for reading books")  # a head adding little is still one
    spans = [Candidate(0, 0, len(head), 3.0, head), Candidate(1, 0, 35, 2.0, "Pets may not be left alone in rooms")]
    assert group_candidates(spans, [0, 1]) == [[0], [1]]


def test_a_candidate_is_agreed_with_by_the_spans_of_other_reviews_that_say_nearly_the_same():
    from qa_system.reading.selection_features import ReadDocument, features

    documents = [
        ReadDocument("Great for reading books. Cheap price.", -1.0, [(0, 23, 3.0), (25, 36, 0.5)]),
        ReadDocument("It is great for reading books!", -1.0, [(6, 29, 2.0)]),
        ReadDocument("Good for reading. Great for reading books.", -1.0, [(18, 41, 1.0), (0, 16, 0.8)]),
    ]
    _, spans, rows = features("Is it good for reading?", documents)
    texts = [span.text for span in spans]
    assert texts == ["Great for reading books", "great for reading books", "Great for reading books", "Good for reading", "Cheap price"]
    # Each of the three "great for reading books" is backed by the other two reviews, with their probabilities.
    # "Good for reading" shares 2 of 3 and 4 words with those of reviews 0 and 1 (F1 4/7), its own review's aside.
    assert [row["agreeing_documents"] for row in rows] == [2.0, 2.0, 2.0, 2.0, 0.0]
    # Review 2's two spans both agree with the first candidate: its probability sums theirs, its documents count one.
    assert rows[0]["agreeing_probability"] == pytest.approx(sum(row["probability"] for row in rows[1:4]))
    assert rows[3]["agreeing_probability"] == pytest.approx(rows[0]["probability"] + rows[1]["probability"])
    assert rows[4]["agreeing_probability"] == 0.0


def test_decide_answers_only_when_answering_is_expected_to_score_more():
    assert decide(np.array([0.9, 0.2]), 0.8).answer == 0
    assert decide(np.array([0.9, 0.2]), 0.4).answer is None  # 0.36 < 0.6
    assert decide(np.array([]), 0.9).answer is None


def test_a_selector_is_used_only_for_the_reader_it_was_trained_for(tmp_path, trained_selector):
    from qa_system.model_files import model_fingerprint

    folder, _ = trained_selector
    reader = tmp_path / "reader"
    reader.mkdir()
    (reader / "model.safetensors").write_bytes(b"weights")
    assert not selector_fits_reader(folder, reader)  # trained for "abc"
    info = json.loads((folder / SELECTOR_FILE).read_text())
    mine = tmp_path / "mine"
    mine.mkdir()
    for file in folder.iterdir():
        (mine / file.name).write_bytes(file.read_bytes())
    (mine / SELECTOR_FILE).write_text(json.dumps({**info, "reader_fingerprint": model_fingerprint(reader)}))
    assert selector_fits_reader(mine, reader)
    assert not selector_fits_reader("none", reader) and not selector_fits_reader(tmp_path / "missing", reader)


def test_cross_fitting_reads_each_question_with_a_reader_that_never_trained_on_it(tmp_path, settings, tiny_reader):
    """Two folds of the tiny SubjQA: KINDLE and MOUSE in one, HEADPHONES in the other (by the hash of the product)."""
    from qa_system.sources.squad import read_squad
    from qa_system.training.reader import TrainingConfig
    from qa_system.training.selector import cross_fit_readers

    settings = settings.with_(reader_backend="torch")
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=1, max_seq_length=64, doc_stride=16)
    records = cross_fit_readers(settings, str(tiny_reader), tmp_path / "work", ["electronics"], folds=2, config=config, progress=False)
    assert sorted(r["id"] for r in records) == ["q1", "q2", "q3"]  # every training question, once
    for k in range(2):
        fold = json.loads((tmp_path / "work" / f"fold-{k}" / "fold.json").read_text())
        trained = {e.id for e in read_squad(tmp_path / "work" / f"fold-{k}" / "train.json")[0]}
        read = [json.loads(line)["id"] for line in (tmp_path / "work" / f"fold-{k}" / "records.jsonl").read_text().splitlines()]
        assert trained == set(fold["trained_on"]) and set(read) == set(fold["reads"])
        assert read and not trained & set(read)  # the fold's reader never trained on a question it read
    by_id = {r["id"]: r for r in records}
    assert set(by_id["q1"]["modes"]) == {"gold", "split", "product"}
    assert [d["id"] for d in by_id["q1"]["modes"]["gold"]] == ["electronics/r-kindle-1"]
    assert all(d["id"].startswith("electronics/r-kindle") for d in by_id["q1"]["modes"]["product"])  # BM25 over its product's reviews
    # Done work is kept: a second call trains nothing and reads nothing again.
    stamp = (tmp_path / "work" / "fold-0" / "reader" / "model.safetensors").stat().st_mtime_ns
    assert (
        cross_fit_readers(settings, str(tiny_reader), tmp_path / "work", ["electronics"], folds=2, config=config, progress=False) == records
    )
    assert (tmp_path / "work" / "fold-0" / "reader" / "model.safetensors").stat().st_mtime_ns == stamp


def test_train_selector_command_fits_a_selector_for_the_configured_reader(tmp_path, settings, tiny_reader, monkeypatch, capsys):
    from qa_system.cli import main
    from qa_system.model_files import model_fingerprint

    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    monkeypatch.setenv("QA_READER_BACKEND", "torch")
    argv = [
        "train-selector",
        "--domain",
        "electronics",
        "--general-reader",
        str(tiny_reader),
        "--folds",
        "2",
        "--reader-model",
        str(tiny_reader),
        "--output",
        str(tmp_path / "selector"),
    ]
    assert main(argv) == 0
    info = json.loads((tmp_path / "selector" / SELECTOR_FILE).read_text())
    assert info["reader_fingerprint"] == model_fingerprint(tiny_reader) and info["questions"] == 3
    assert selector_fits_reader(tmp_path / "selector", tiny_reader)
    assert "Out-of-fold decisions" in capsys.readouterr().out
    assert (settings.home / "selector" / "fold-1" / "records.jsonl").is_file()  # the work is kept in QA_HOME for a second run


def test_the_default_pipeline_answers_through_the_selector_trained_for_its_reader(tmp_path, settings, tiny_reader, trained_selector):
    """Every door answers through QAPipeline: the selector joins it when it was trained for the reader, and steps aside for an explicit threshold."""
    from qa_system.ingestion.indexing import build_index
    from qa_system.model_files import model_fingerprint
    from qa_system.pipelines import build_qa_pipeline
    from qa_system.serving.answer_views import answer_views
    from qa_system.serving.api.schemas import AnswerOut

    folder, _ = trained_selector
    mine = tmp_path / "selector"
    mine.mkdir()
    for file in folder.iterdir():
        (mine / file.name).write_bytes(file.read_bytes())
    info = json.loads((mine / SELECTOR_FILE).read_text())
    (mine / SELECTOR_FILE).write_text(json.dumps({**info, "reader_fingerprint": model_fingerprint(tiny_reader)}))
    settings = settings.with_(reader_model=str(tiny_reader), reader_backend="torch", selector_model=str(mine))
    build_index(settings, "electronics", embed=False, progress=False)
    pipeline = build_qa_pipeline("bm25", settings)
    assert "selector" in pipeline.pipeline.graph.nodes
    answers = pipeline.run("How is the sound?", item_id="KINDLE", top_k=3)["answers"]
    assert sum(a.data is None for a in answers) == 1 and all(0 <= a.meta["probability"] <= 1 for a in answers)
    assert [a.meta["chosen"] for a in answers][0] and not any(a.meta["chosen"] for a in answers[1:])
    body = AnswerOut.of(answer_views(answers)[0])
    assert body.probability == answers[0].meta["probability"] and body.score == body.probability
    reader_decides = pipeline.run("How is the sound?", item_id="KINDLE", top_k=3, no_answer_threshold=0.0)["answers"]
    assert all("probability" not in a.meta for a in reader_decides)  # an explicit threshold is the reader's own decision
    assert "selector" not in build_qa_pipeline("bm25", settings.with_(selector_model="none")).pipeline.graph.nodes


def test_a_recalibrated_selector_restates_every_chance_keeps_the_order_and_round_trips_through_yaml(trained_selector):
    """``recalibration`` (``qa-system fit-confidence``) maps the answer's and the no-answer's chance alike, so the same answers
    come in the same order; an exported pipeline keeps it."""
    folder, _ = trained_selector
    documents = [
        Document(id="a", content="battery lasts a week. screen sharp."),
        Document(id="b", content="the battery lasts a week, really."),
    ]
    reading = reading_of(documents, [(0, 0, 20, 5.0), (1, 4, 24, 4.5), (0, 22, 34, 1.0)], [0.5, 1.0])
    fit = {"slope": 0.6, "intercept": -0.8, "calibrated_on": "40 labelled questions of 'wiki' (labels.csv)"}
    plain = AnswerSelector(model=str(folder)).run("how is the battery?", documents, reading)["answers"]
    pipeline = Pipeline()
    pipeline.add_component("selector", AnswerSelector(model=str(folder), recalibration=fit))
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["qa_system"])
    assert loaded.get_component("selector").to_dict()["init_parameters"]["recalibration"] == fit
    restated = loaded.run({"selector": {"query": "how is the battery?", "documents": documents, "reading": reading}})["selector"]["answers"]
    assert [a.data for a in restated] == [a.data for a in plain]
    assert [a.score for a in restated] == pytest.approx([Recalibration.from_dict(fit)(a.score) for a in plain])
    assert all(a.meta["calibrated_on"] == fit["calibrated_on"] and a.meta["recalibrated"] for a in restated)
    assert all(a.meta["calibrated_on"] == REVIEWS_CALIBRATION and not a.meta["recalibrated"] for a in plain)
