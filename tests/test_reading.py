"""The extractive reader on a tiny random BERT (no download): offsets, windows, dedup, no-answer."""

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from haystack import Document, Pipeline

from helpers.down_server import DownServer
from helpers.models import LONG, tiny_model_dir, tiny_roberta_model_dir
from qa_system.errors import QAError
from qa_system.reading import MODEL_INFO_FILE, ExtractiveReader, SpanCandidate, encode_windows
from qa_system.reading.reader import deduplicate


class TargetReader(ExtractiveReader):
    """A reader whose 'model' points at one word: start and end logit 8 on its tokens, CLS at 0."""

    def __init__(self, target: str, null: float = 0.0, **kwargs):
        super().__init__(backend="torch", **kwargs)  # its logits replace the model's: nothing to export
        self.target, self.null = target, null

    def _logits(self, encoding):
        target_id = self._tokenizer.convert_tokens_to_ids(self.target)
        logits = np.where(encoding["input_ids"] == target_id, 8.0, -8.0)
        logits[:, 0] = self.null
        return logits, logits.copy()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-reader"))


def target_reader(model_dir, target, **kwargs) -> ExtractiveReader:
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    model = AutoModelForQuestionAnswering.from_pretrained(model_dir)
    reader = TargetReader(target, **kwargs)
    reader._model, reader._tokenizer = model.eval(), AutoTokenizer.from_pretrained(model_dir)
    return reader


def test_offsets_of_every_answer_point_into_the_document(model_dir):
    reader = ExtractiveReader(model=str(model_dir), max_seq_length=64, doc_stride=16, top_k=10)
    documents = [Document(content=LONG), Document(content="Sound is GREAT, battery is bad.")]
    answers = reader.run("how is the battery?", documents)["answers"]
    spans = [a for a in answers if a.data is not None]
    assert len(spans) == 10 and sum(a.data is None for a in answers) == 1
    assert [a.score for a in answers] == sorted((a.score for a in answers), reverse=True)
    for answer in spans:
        start, end = answer.document_offset.start, answer.document_offset.end
        assert answer.data == answer.document.content[start:end]
        context_start = answer.meta["context_start"]
        assert answer.context == answer.document.content[context_start : answer.meta["context_end"]]
        assert answer.context[answer.context_offset.start : answer.context_offset.end] == answer.data


def test_long_review_is_read_in_windows_and_the_answer_found_once(model_dir):
    reader = target_reader(model_dir, "battery", max_seq_length=48, doc_stride=20, top_k=5)
    output = reader.predict("battery?", [Document(content=LONG)])
    assert len({span.window for span in output.spans}) > 5  # the review really is cut into many windows
    encoding = encode_windows(reader._tokenizer, ["battery?"], [LONG], 48, 20, padding=True)
    battery_id = reader._tokenizer.convert_tokens_to_ids("battery")
    assert (encoding["input_ids"][:, 4:] == battery_id).any(axis=1).sum() == 2  # two overlapping windows see it
    assert sum(LONG[span.start : span.end] == "battery" for span in output.spans) == 1  # ... it is kept once
    answers = reader.run("battery?", [Document(content=LONG)])["answers"]
    battery = [a for a in answers if a.data and "battery" in a.data]
    assert len(battery) == 1  # seen by two overlapping windows, returned once
    assert battery[0].data == "battery"
    assert battery[0].document_offset.start == LONG.index("battery")


def test_an_answer_in_the_shared_words_of_two_passages_is_one_answer(model_dir):
    from qa_system.ingestion import PassageSplitter, source_span

    text = " ".join(["cheap screen and bad sound"] * 6) + " the battery lasts long " + " ".join(["great price"] * 12)
    passages = PassageSplitter(words=40, overlap=20).split(Document(id="manual.txt", content=text))
    holding = [p for p in passages if "battery" in p.content]
    assert len(holding) == 2  # the answer sits in the words both passages share
    reader = target_reader(model_dir, "battery", top_k=5)
    answers = [a for a in reader.run("battery?", holding)["answers"] if a.data == "battery"]
    assert len(answers) == 1
    start, end = answers[0].document_offset.start, answers[0].document_offset.end
    assert source_span(answers[0].document, start, end) == ("manual.txt", text.index("battery"), text.index("battery") + 7)
    # Two documents that are not passages of one source keep an answer each, even with the same text.
    twins = [Document(content="the battery lasts"), Document(content="the battery lasts", meta={"product": "other"})]
    assert sum(a.data == "battery" for a in reader.run("battery?", twins)["answers"]) == 2


def test_deduplicate_compares_passages_in_their_source_document():
    spans = [SpanCandidate(0, 30, 37, 2.0, 0), SpanCandidate(1, 10, 17, 1.5, 1), SpanCandidate(2, 10, 17, 1.0, 2)]
    sources = [("manual", 0), ("manual", 20), ("other", 20)]
    assert deduplicate(spans, sources) == [spans[0], spans[2]]  # passage 1's span is passage 0's, 20 characters on
    assert deduplicate(spans) == spans


def test_an_answer_is_its_words_without_the_space_some_tokenizers_count_in_a_token(tmp_path):
    """RoBERTa's tokenizer counts the leading space of the first token of each part of a long review in its offsets."""
    reader = target_reader(tiny_roberta_model_dir(tmp_path, [LONG]), "", max_seq_length=48, doc_stride=16, top_k=100)
    encoding = reader.encode("cheap?", [Document(content=LONG)])[1]
    first = encoding.context_span(1)[0]  # the second part's first token
    start, end = encoding["offset_mapping"][1][first]
    word = LONG[start:end]
    assert word.startswith(" ")
    reader.target = reader._tokenizer.convert_ids_to_tokens(int(encoding["input_ids"][1][first]))  # every place it is read
    logits = reader._logits
    reader._logits = lambda windows: tuple(x + np.arange(len(x))[:, None] / 100 for x in logits(windows))  # later parts win ties
    answers = [a for a in reader.run("cheap?", [Document(content=LONG)])["answers"] if a.data is not None]
    assert start + 1 in {a.document_offset.start for a in answers}  # the part's first token, read as an answer
    assert all(a.data == a.data.strip() == LONG[a.document_offset.start : a.document_offset.end] for a in answers)


def test_answer_in_second_document_is_mapped_to_it(model_dir):
    reader = target_reader(model_dir, "battery")
    documents = [Document(content="great sound, cheap price"), Document(content="sound is bad but the battery lasts")]
    best = reader.run("battery?", documents)["answers"][0]
    assert best.data == "battery" and best.document is documents[1]
    assert best.document_offset.start == documents[1].content.index("battery")


def test_no_answer_wins_when_the_threshold_says_so(model_dir):
    reader = target_reader(model_dir, "battery", null=2.0)
    documents = [Document(content="the battery lasts")]
    assert reader.run("battery?", documents)["answers"][0].data == "battery"  # logit 8 beats 2
    top = reader.run("battery?", documents, no_answer_threshold=10.0)["answers"][0]
    assert top.data is None and top.document is None and top.meta["threshold"] == 10.0
    assert reader.run("battery?", documents, no_answer_threshold=5.9)["answers"][0].data == "battery"
    strong_null = target_reader(model_dir, "battery", null=9.0)
    assert strong_null.run("battery?", documents)["answers"][0].data is None


def test_deduplicate_keeps_the_best_of_overlapping_spans_per_document():
    spans = [
        SpanCandidate(0, 0, 10, 1.0, 0),
        SpanCandidate(0, 5, 12, 2.0, 1),
        SpanCandidate(1, 5, 12, 0.5, 2),
        SpanCandidate(0, 12, 14, 0.1, 1),
    ]
    assert deduplicate(spans) == [spans[1], spans[2], spans[3]]


def test_no_documents_gives_the_no_answer_alone(model_dir):
    reader = ExtractiveReader(model=str(model_dir))
    for documents in ([], [Document(content=""), Document(content=None)]):
        answers = reader.run("anything?", documents)["answers"]
        assert len(answers) == 1 and answers[0].data is None and answers[0].score == 1.0


def test_concurrent_runs_read_like_one_after_the_other(model_dir):
    """The API runs one reader from several threads: its tokenizer's settings must not leak between runs
    (they did: about 1 run in 150 read a ragged batch and failed)."""
    reader = ExtractiveReader(model=str(model_dir))
    documents = [
        Document(content="The battery lasts about ten hours."),
        Document(content="Sound is great. " * 4),
        Document(content="Cheap."),
    ]
    questions = [f"How long does the battery last {'really ' * (i % 5)}?" for i in range(10)]
    expected = {q: reader.predict(q, documents) for q in questions}
    failures: list[str] = []

    def ask_all() -> None:
        for _ in range(15):
            for question in questions:
                try:
                    assert reader.predict(question, documents) == expected[question]
                except Exception as error:  # noqa: BLE001 - collected, reported below
                    failures.append(repr(error)[:120])

    threads = [threading.Thread(target=ask_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_question_longer_than_the_window_is_a_clear_error(model_dir):
    reader = ExtractiveReader(model=str(model_dir), max_seq_length=64, doc_stride=16)
    with pytest.raises(QAError, match="no room left for the review"):
        reader.run("the battery " * 30, [Document(content="short review")])


def test_missing_or_corrupt_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(QAError, match="reader model directory .* has no config.json"):
        ExtractiveReader(model=str(tmp_path / "nowhere")).warm_up()
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(QAError, match="Could not load the reader model"):
        ExtractiveReader(model=str(tmp_path)).warm_up()


def load_in_fresh_process(model_id: str, hub: str, cache: Path, probe: bool = True) -> tuple[int, str]:
    """load_qa_model in a new interpreter (huggingface_hub reads HF_* variables at import) with the hub
    at ``hub``; (returncode, output). ``probe=False`` loads as before the hub probe, for comparison."""
    import os
    import subprocess
    import sys

    code = (
        "import sys\nimport qa_system.reading.model as model\nfrom qa_system.errors import QAError\n"
        f"{'' if probe else 'model.load_options = lambda name: {}'}\n"
        f"try:\n    model.load_qa_model({model_id!r})\nexcept QAError as error:\n    print(error)\n    sys.exit(2)\nprint('loaded')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}  # the hub is asked, and is down
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "HF_ENDPOINT": hub, "HF_HUB_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout.strip()


def model_requests(hub: DownServer) -> list[str]:
    """The requests for a model's files (not the probe, nor huggingface_hub's daily fetch of its agent registry)."""
    return [r for r in hub.requests if "/someone/" in r or "someone--" in r]


def test_a_hub_id_fails_fast_when_the_hub_is_unreachable(tmp_path):
    # huggingface_hub retried each file with backoff (about 50 s) before the same error: now one
    # probe of the hub, then the local cache only.
    with DownServer() as hub:
        code, output = load_in_fresh_process("someone/no-such-model", hub.url, tmp_path / "hub-cache")
    assert code == 2 and hub.requests.count("HEAD /") == 1 and model_requests(hub) == [], hub.requests  # one probe, no file asked for
    assert output == (
        f"Could not load the reader model 'someone/no-such-model': the model hub ({hub.url}) cannot be reached and the model "
        "is not in the local cache. Fix: pass a local model directory, or download the model once with a network (HF_ENDPOINT may name a mirror)."
    )


def test_without_the_probe_a_hub_id_is_retried_and_that_is_what_the_probe_saves(tmp_path):
    """The comparison that makes the test above meaningful: loading without the probe tries the hub again and again."""
    with DownServer() as hub:
        code, _ = load_in_fresh_process("someone/no-such-model", hub.url, tmp_path / "hub-cache", probe=False)
    assert code == 2 and len(model_requests(hub)) > 1, hub.requests


def test_a_cached_hub_model_still_loads_when_the_hub_is_unreachable(tmp_path, model_dir):
    import shutil

    # The hub cache's own layout: models--<owner>--<name>/snapshots/<commit>/ and refs/main naming the commit.
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub-cache" / "models--someone--tiny-reader"
    shutil.copytree(model_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    with DownServer() as hub:
        code, output = load_in_fresh_process("someone/tiny-reader", hub.url, tmp_path / "hub-cache")
    assert (code, output) == (0, "loaded") and hub.requests.count("HEAD /") == 1 and model_requests(hub) == [], (
        hub.requests
    )  # one probe, then the cache


def test_a_model_loaded_from_a_folder_prints_no_progress_bar_and_leaves_the_bars_as_they_were(model_dir, capfd):
    from transformers.utils import logging

    from qa_system.hub import quiet_local_load
    from qa_system.reading.model import load_qa_model

    assert logging.is_progress_bar_enabled()
    load_qa_model(model_dir)
    assert "Loading weights" not in capfd.readouterr().err and logging.is_progress_bar_enabled()
    with quiet_local_load("someone/a-model"):  # a hub id: its download shows progress
        assert logging.is_progress_bar_enabled()
    with quiet_local_load(model_dir):
        assert not logging.is_progress_bar_enabled()
    assert logging.is_progress_bar_enabled()


def test_tuned_threshold_is_the_default_and_an_explicit_one_wins(model_dir, tmp_path):
    import shutil

    tuned = Path(shutil.copytree(model_dir, tmp_path / "tuned"))
    (tuned / MODEL_INFO_FILE).write_text(json.dumps({"no_answer_threshold": 1.5}))
    reader = ExtractiveReader(model=str(tuned))
    reader.warm_up()
    assert reader.threshold == 1.5
    explicit = ExtractiveReader(model=str(tuned), no_answer_threshold=-1.0)
    explicit.warm_up()
    assert explicit.threshold == -1.0
    answers = reader.run("battery?", [Document(content="the battery lasts")])["answers"]
    assert next(a for a in answers if a.data is None).meta["threshold"] == 1.5


def test_serialises_into_a_yaml_pipeline(model_dir):
    pipeline = Pipeline()
    pipeline.add_component("reader", ExtractiveReader(model=str(model_dir), top_k=2, no_answer_threshold=0.5))
    restored = Pipeline.loads(pipeline.dumps(), allowed_modules=["qa_system"])
    reader = restored.get_component("reader")
    assert isinstance(reader, ExtractiveReader) and reader.to_dict() == pipeline.get_component("reader").to_dict()
    result = restored.run({"reader": {"query": "battery?", "documents": [Document(content="the battery lasts long")]}})
    assert len(result["reader"]["answers"]) == 3


def labelled(qid, answers, context, subjective=False):
    from qa_system.sources.subjqa import GoldAnswer, LabelledQuestion

    golds = [GoldAnswer(text, context.index(text)) for text in answers]
    return LabelledQuestion(
        qid, "battery?", "B1", qid, f"electronics/test/{qid}", "electronics", "test", golds, subjective, context=context
    )


def test_reader_and_pipeline_evaluation_records_and_summary(model_dir):
    from qa_system.evaluation.reader import evaluate_pipeline, evaluate_reader, gold_document, squad_predictions, summarize_answers

    reader = target_reader(model_dir, "battery", null=2.0)
    questions = [
        labelled("q1", ["battery lasts"], "the battery lasts"),  # top-1 "battery": EM 0, F1 2/3
        labelled("q2", [], "the battery is bad", subjective=True),  # answers wrongly; no-answer is in the top-k
        labelled("q3", [], "great sound"),  # nothing to point at: no answer, right
    ]
    records = evaluate_reader(questions, reader, top_k=2, progress=False)
    assert list(records["prediction"]) == ["battery", "battery", ""]
    assert list(records["em"]) == [0.0, 0.0, 1.0] and records["f1"][0] == pytest.approx(2 / 3)
    assert list(records["f1_top_k"]) == [pytest.approx(2 / 3), 1.0, 1.0]
    assert squad_predictions(records) == {"q1": "battery", "q2": "battery", "q3": ""}

    summary = summarize_answers(records)
    assert list(summary.index) == ["all", "answerable", "unanswerable", "subjective", "factual", "always no answer"]
    assert summary.loc["answerable", "questions"] == 1 and summary.loc["unanswerable", "em"] == 0.5
    assert summary.loc["always no answer", "f1"] == pytest.approx(2 / 3)
    assert summary.loc["all", "answered"] == pytest.approx(2 / 3)
    assert list(summary["no_answer_f1"][["answerable", "unanswerable", "subjective", "factual"]]) == [0.0, 1.0, 1.0, 0.5]

    by_id = {q.id: q for q in questions}
    retrieve = lambda q: [gold_document(by_id["q3"]), gold_document(q)]  # noqa: E731
    records = evaluate_pipeline(questions, retrieve, reader, top_k=2, progress=False)
    assert list(records["gold_retrieved"]) == [True, True, True]
    assert records["answer_document"][0] == "electronics/test/q1"
    assert (records["latency_s"] >= records["read_latency_s"]).all()
    # q1's and q2's annotated reviews not retrieved: scored in a group of their own
    missing = evaluate_pipeline(questions, lambda q: [gold_document(by_id["q3"])], reader, top_k=2, progress=False)
    summary = summarize_answers(missing)
    assert list(summary.index)[-3:] == ["gold retrieved", "gold not retrieved", "always no answer"]
    assert summary.loc["gold not retrieved", "questions"] == 2 and summary.loc["gold retrieved", "questions"] == 1
    assert summary.loc["gold not retrieved", "no_answer_f1"] == 0.5  # q1 answerable, q2 not


@pytest.mark.slow
def test_shipped_reader_beats_the_no_answer_baseline_on_electronics_test():
    from qa_system.evaluation.reader import evaluate_reader, summarize_answers
    from qa_system.sources import load_subjqa

    questions = load_subjqa("electronics", "test").questions
    summary = summarize_answers(evaluate_reader(questions, ExtractiveReader(), progress=False))
    assert summary.loc["all", "f1"] > summary.loc["always no answer", "f1"] + 0.05


def test_windows_padded_by_the_reader_are_the_tokenizers_own_padding(model_dir):
    """encode_windows pads a right-padding tokenizer's windows itself (faster): the same arrays, dtypes and sample map."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    questions, contexts = ["how is the battery?", "and the sound?"], [LONG, "Sound is GREAT, battery is bad."]
    ours = encode_windows(tokenizer, questions, contexts, 64, 20, padding=True)
    theirs = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=64,
        stride=20,  # what encode_windows strides by: the window leaves the review more than 40 tokens
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="longest",
        return_tensors="np",
    )
    assert len(ours["input_ids"]) > 3 and (ours["attention_mask"] == 0).any()  # several windows, the short one padded
    for name in ("input_ids", "attention_mask", "token_type_ids", "overflow_to_sample_mapping"):
        assert ours[name].dtype == theirs[name].dtype and np.array_equal(ours[name], theirs[name]), name
    for window in range(len(ours["input_ids"])):
        length = int(ours["attention_mask"][window].sum())
        assert ours.sequence_ids(window) == theirs.sequence_ids(window)[:length]
        assert [tuple(o) for o in ours["offset_mapping"][window]] == [tuple(o) for o in theirs["offset_mapping"][window][:length]]
