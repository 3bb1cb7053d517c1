"""Training and evaluation files: MRQA conversion, format detection from content, dedupe across files with a per-file report."""

import gzip
import json

import pandas as pd
import pytest

from helpers.qa_files import CONTEXT, MRQA_QAS, mrqa_lines, span
from helpers.training import tiny_training_argv
from qa_system.errors import QAError
from qa_system.sources.qa_files import labelled_questions, read_qa_file, read_qa_files


def squad_json(qas, version="v2.0", context=CONTEXT, title="t"):
    squad = {"data": [{"title": title, "paragraphs": [{"context": context, "qas": qas}]}]}
    if version:
        squad["version"] = version
    return json.dumps(squad)


def qa(qid, question, answer=None, impossible=None):
    record = {
        "id": qid,
        "question": question,
        "answers": [] if answer is None else [{"text": answer, "answer_start": CONTEXT.index(answer)}],
    }
    if impossible is not None:
        record["is_impossible"] = impossible
    return record


def test_mrqa_becomes_squad_examples_with_verified_spans(tmp_path):
    path = tmp_path / "toy.jsonl"
    path.write_text(mrqa_lines(MRQA_QAS))
    examples, report = read_qa_file(path)
    assert [e.id for e in examples] == ["m1", "m2"]
    first, second = examples
    assert first.context == CONTEXT and "[PAR]" in first.context  # kept as given: the spans refer to it
    assert first.answers == [("battery lasts", CONTEXT.index("battery lasts")), ("battery lasts", CONTEXT.rindex("battery lasts"))]
    assert second.answers == [("Battery", CONTEXT.index("Battery"))]  # the context's own characters
    for example in examples:
        assert not example.is_impossible and example.title == "ToyQA:2"
        for text, start in example.answers:
            assert CONTEXT[start : start + len(text)] == text
    assert (report.format, report.questions, report.answerable, report.impossible, report.answers) == ("MRQA", 2, 2, 0, 3)
    assert (report.unlocated_answers, report.skipped_questions) == (1, 1)
    assert report.problems == [f"line 2.qas[2] (qid m3): 'Paperwhite' is not at characters {span('6000 hours')[0]}-{span('6000 hours')[1]}"]


def test_a_span_off_by_one_character_is_caught(tmp_path):
    start, end = span("battery lasts")
    qas = [{"qid": "x", "question": "?", "detected_answers": [{"text": "battery lasts", "char_spans": [[start + 1, end + 1]]}]}]
    path = tmp_path / "toy.jsonl"
    path.write_text(mrqa_lines(qas))
    examples, report = read_qa_file(path)
    assert examples == [] and report.unlocated_answers == 1 and report.skipped_questions == 1  # "attery lasts " is not the answer


@pytest.mark.parametrize(
    "text, message",
    [
        (mrqa_lines(MRQA_QAS) + "{not json\n", "line 3 is not valid JSON"),
        (mrqa_lines([{"question": "?", "detected_answers": []}]), "line 2.qas[0] has no 'qid'. Fix: fix that record (MRQA format)."),
        (
            mrqa_lines([{"qid": "a", "question": "?", "detected_answers": [{"text": "x", "char_spans": [[1, "2"]]}]}]),
            "has a char span that is not [start, end]",
        ),
        (mrqa_lines([MRQA_QAS[0], MRQA_QAS[0]]), "repeats the question id 'm1'"),
    ],
)
def test_bad_mrqa_records_are_named(tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(QAError) as error:
        read_qa_file(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_format_comes_from_the_content_not_the_name(tmp_path):
    files = {
        "mrqa-named.json": mrqa_lines(MRQA_QAS).encode(),
        "mrqa-no-header.txt": mrqa_lines(MRQA_QAS, header=False).encode(),
        "mrqa.jsonl.gz": gzip.compress(mrqa_lines(MRQA_QAS).encode()),
        "squad2-named.jsonl": squad_json([qa("s1", "how long?", "6000 hours"), qa("s2", "price?", impossible=True)]).encode(),
        "squad11": squad_json([qa("s3", "what lasts?", "The battery")], version="1.1").encode(),
        "squad-unversioned.json": squad_json([qa("s4", "what lasts?", "The battery")], version=None).encode(),
    }
    formats = {}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        examples, report = read_qa_file(tmp_path / name)
        formats[name] = (report.format, [e.id for e in examples])
    assert formats == {
        "mrqa-named.json": ("MRQA", ["m1", "m2"]),
        "mrqa-no-header.txt": ("MRQA", ["m1", "m2"]),
        "mrqa.jsonl.gz": ("MRQA", ["m1", "m2"]),
        "squad2-named.jsonl": ("SQuAD v2.0", ["s1", "s2"]),
        "squad11": ("SQuAD v1.1", ["s3"]),
        "squad-unversioned.json": ("SQuAD v1.1", ["s4"]),
    }


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is neither SQuAD JSON nor MRQA JSON lines"),
        (b"question,answer\nwhy?,because\n", "is neither SQuAD JSON nor MRQA JSON lines"),
        (b'[{"data": []}]', "is JSON but neither SQuAD"),
        (b'{"version": "v2.0"}', "is JSON but neither SQuAD"),
        (b"\xff\xfe\x00binary", "is not UTF-8 text"),
    ],
)
def test_unreadable_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "file.json"
    path.write_bytes(content)
    with pytest.raises(QAError) as error:
        read_qa_file(path)
    assert message in str(error.value) and "Fix: pass SQuAD v1.1 / v2.0 JSON" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(QAError, match="does not exist"):
        read_qa_file(tmp_path / "missing.json")


def test_questions_are_deduplicated_by_id_across_files_with_a_report_per_file(tmp_path):
    # As SQuAD 2.0 dev and 1.1 dev: the answerable questions of the first are questions of the second, same ids.
    (tmp_path / "dev-v2.json").write_text(squad_json([qa("q1", "how long?", "6000 hours", False), qa("q2", "price?", impossible=True)]))
    (tmp_path / "dev-v1.json").write_text(
        squad_json([qa("q1", "how long?", "6000 hours"), qa("q3", "what is great?", "Battery")], version="1.1")
    )
    (tmp_path / "toy.jsonl").write_text(mrqa_lines(MRQA_QAS))
    reports = read_qa_files([tmp_path / "dev-v2.json", tmp_path / "dev-v1.json", tmp_path / "toy.jsonl"])
    assert [[e.id for e in r.examples] for r in reports] == [["q1", "q2"], ["q3"], ["m1", "m2"]]
    assert [(r.duplicates, r.unanswerable) for r in reports] == [(0, 1), (1, 0), (0, 0)]
    assert reports[1].summary() == (
        f"{tmp_path / 'dev-v1.json'} (SQuAD v1.1): used 1 questions (1 answerable, 0 unanswerable); dropped 1 duplicate(s) of earlier files, "
        "0 question(s) without a located answer, 0 answer(s) not located"
    )
    assert reports[2].as_dict() == {
        "file": "toy.jsonl",
        "format": "MRQA",
        "used": 2,
        "unanswerable": 0,
        "duplicates": 0,
        "skipped_questions": 1,
        "unlocated_answers": 1,
        "dev_questions": 0,
        "dev_dropped": False,
    }

    # Training files' questions that are dev questions: counted, and dropped when asked.
    kept, dropped = (read_qa_files([tmp_path / "dev-v1.json"], dev_ids={"q1", "q3"}, drop_dev=drop) for drop in (False, True))
    assert [e.id for e in kept[0].examples] == ["q1", "q3"] and kept[0].dev_questions == 2
    assert "2 dev question(s) kept (also in a dev file)" in kept[0].summary()
    assert dropped[0].examples == [] and "2 dev question(s) dropped" in dropped[0].summary()


def test_one_id_for_two_different_questions_is_an_error(tmp_path):
    (tmp_path / "a.json").write_text(squad_json([qa("1", "how long?", "6000 hours")]))
    (tmp_path / "b.json").write_text(squad_json([qa("1", "what is great?", "Battery")]))
    with pytest.raises(QAError, match=r"Question id '1' names different questions in .*a\.json and .*b\.json\. Fix: give"):
        read_qa_files([tmp_path / "a.json", tmp_path / "b.json"])


def test_examples_become_labelled_questions_for_the_evaluation_runners(tmp_path):
    (tmp_path / "toy.jsonl").write_text(mrqa_lines(MRQA_QAS))
    examples, _ = read_qa_file(tmp_path / "toy.jsonl")
    questions = labelled_questions(examples, "toy.jsonl")
    assert [q.answer_texts for q in questions] == [["battery lasts", "battery lasts"], ["Battery"]]
    assert {q.document_id for q in questions} == {f"ToyQA:2/{questions[0].review_id}"}  # one context, one document
    assert all(q.context == CONTEXT and q.domain == "toy.jsonl" and not q.no_answer for q in questions)
    for question in questions:
        for answer in question.answers:
            assert question.context[answer.start : answer.end] == answer.text


@pytest.mark.slow
def test_the_shared_qa_files(real_data_dir):
    """The ~21,200 distinct SQuAD questions of the three SQuAD files; every MRQA span located."""
    data = real_data_dir.parent
    squad = read_qa_files(
        [data / "squad" / "dev-v2.0.json", data / "squad" / "dev-v1.1.json", data / "squad" / "train-v2.0-first10articles.json"]
    )
    assert [r.read.format for r in squad] == ["SQuAD v2.0", "SQuAD v1.1", "SQuAD v2.0"]
    assert [len(r.examples) for r in squad] == [11873, 4642, 4719] and squad[1].duplicates == 5928
    assert sum(r.unanswerable for r in squad) == 5945 + 348
    mrqa = read_qa_files([data / "mrqa" / "DROP.dev.jsonl", data / "mrqa" / "DuoRC.ParaphraseRC.dev.jsonl"])
    assert [(r.read.format, len(r.examples), r.read.unlocated_answers) for r in mrqa] == [("MRQA", 1503, 0), ("MRQA", 1501, 0)]


def test_the_commands_read_any_format_and_report_per_file(tmp_path, tiny_reader, capsys):
    from qa_system.cli import main

    (tmp_path / "squad.json").write_text(
        squad_json([qa("q1", "how long does the battery last?", "6000 hours"), qa("q2", "price?", impossible=True)])
    )
    (tmp_path / "toy.jsonl").write_text(mrqa_lines(MRQA_QAS))
    toy = tmp_path / "toy.jsonl"
    argv = [
        *tiny_training_argv([toy, toy], tmp_path / "squad.json", tiny_reader, tmp_path / "reader", max_seq_length=64),
        "--home",
        str(tmp_path / "home"),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"train {tmp_path / 'toy.jsonl'} (MRQA): used 2 questions (2 answerable, 0 unanswerable); dropped 0 duplicate(s)" in out
    assert (
        "used 0 questions (0 answerable, 0 unanswerable); dropped 2 duplicate(s) of earlier files, 1 question(s) without a located answer"
        in out
    )
    assert f"dev {tmp_path / 'squad.json'} (SQuAD v2.0): used 2 questions (1 answerable, 1 unanswerable)" in out

    report_dir = tmp_path / "report"
    assert (
        main(
            [
                "eval",
                "reader",
                "--labels",
                str(tmp_path / "toy.jsonl"),
                "--reader",
                str(tmp_path / "reader"),
                "--out",
                str(report_dir),
                "--home",
                str(tmp_path / "home"),
            ]
        )
        == 0
    )
    report = json.loads((report_dir / "report.json").read_text())
    assert (report["labels"], report["format"], report["collection"], report["questions"]) == (str(tmp_path / "toy.jsonl"), "MRQA", None, 2)
    assert report["title"] == "Reader evaluation: toy.jsonl (MRQA) (gold context)"
    gold = json.loads((report_dir / "gold.json").read_text())
    assert [q["id"] for article in gold["data"] for p in article["paragraphs"] for q in p["qas"]] == ["m1", "m2"]

    capsys.readouterr()
    (tmp_path / "bad.json").write_text("question,answer\n")
    assert main(["eval", "reader", "--labels", str(tmp_path / "bad.json"), "--home", str(tmp_path / "home")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ") and "is neither SQuAD JSON nor MRQA JSON lines" in err and len(err.strip().splitlines()) == 1
    )  # before any model loads
    with pytest.raises(SystemExit):  # one door: --labels took over from --file
        main(["eval", "reader", "--file", str(tmp_path / "toy.jsonl")])


@pytest.mark.parametrize(
    "name, content",
    [
        (
            "squad.json",
            squad_json(
                [
                    qa("q1", "how long does the battery last?", "6000 hours"),
                    qa("q2", "price?", impossible=True),
                    qa("q3", "what is great?", "Battery"),
                ]
            ),
        ),
        ("toy.jsonl", mrqa_lines(MRQA_QAS)),
    ],
)
def test_eval_reader_labels_scores_a_file_as_eval_reader_file_did(tmp_path, tiny_reader, name, content):
    """`--labels FILE` without a collection gives the figures that `--file FILE` gave: each question read with
    its own context, as ``read_qa_file`` and ``labelled_questions`` make them (what --file ran)."""
    from qa_system.cli import main
    from qa_system.evaluation.reader import evaluate_reader, squad_predictions, summarize_answers
    from qa_system.reading.reader import ExtractiveReader

    path = tmp_path / name
    path.write_text(content)
    out = tmp_path / "report"
    argv = [
        "eval",
        "reader",
        "--labels",
        str(path),
        "--reader",
        str(tiny_reader),
        "--reader-backend",
        "torch",
        "--out",
        str(out),
        "--home",
        str(tmp_path / "home"),
    ]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())

    examples, _ = read_qa_file(path)
    questions = labelled_questions(examples, path.name)
    records = evaluate_reader(questions, ExtractiveReader(str(tiny_reader), top_k=3, backend="torch"), top_k=3, progress=False)
    expected = summarize_answers(records).drop(columns="latency_ms").rename_axis("group").reset_index()
    pd.testing.assert_frame_equal(pd.DataFrame(report["metrics"]).drop(columns=["system", "latency_ms"]), expected, check_dtype=False)
    assert report["questions"] == len(examples) > 0
    assert json.loads(next(out.glob("predictions-*.json")).read_text()) == squad_predictions(records)


def test_eval_reader_says_which_squad_questions_it_left_out_and_why_none_is_left(tmp_path, tiny_reader, capsys):
    """A SQuAD question whose answer is not at its answer_start is left out: said in the report only (the console said
    nothing), and a file of such questions alone was "holds no labelled question. Fix: index the labelled documents
    first", which no reader evaluation without a collection needs."""
    from qa_system.cli import main

    context = "The lamp is bright enough for reading. The cable is two metres long."
    good = {"id": "q1", "question": "Is it bright?", "answers": [{"text": "bright enough", "answer_start": context.index("bright")}]}
    off = {"id": "q2", "question": "How long is the cable?", "answers": [{"text": "two metres", "answer_start": 3}]}
    for name, qas in (("mixed.json", [good, off]), ("off.json", [off])):
        data = {"version": "v2.0", "data": [{"title": "LAMP", "paragraphs": [{"context": context, "qas": qas}]}]}
        (tmp_path / name).write_text(json.dumps(data), encoding="utf-8")
    home = ["--home", str(tmp_path / "home"), "--reader", str(tiny_reader)]
    assert main(["eval", "reader", "--labels", str(tmp_path / "mixed.json"), "--out", str(tmp_path / "report"), *home]) == 0
    assert (
        "mixed.json: 1 answers not at their given offsets and 1 questions left without one were left out "
        "(the first: data[0].paragraphs[0].qas[1] (id q2): 'two metres' is not at offset 3)."
    ) in capsys.readouterr().out  # which one, so that it can be mended
    assert main(["eval", "reader", "--labels", str(tmp_path / "off.json"), *home]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "off.json holds no labelled question that can be read (1 answers not at their given offsets" in error
    assert "Fix: check the file's answers and their answer_start offsets." in error
