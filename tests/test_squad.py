"""SQuAD v2 export, round trip and validation of user files."""

import json

import pytest

from qa_system.errors import QAError
from qa_system.sources.squad import read_squad, to_squad, write_squad
from qa_system.sources.subjqa import GoldAnswer, LabelledQuestion

REVIEW = "The battery lasts about 6000 hours. Sound is great."


def question(qid, answers, item="B001", review="r1", context=REVIEW):
    return LabelledQuestion(
        id=qid,
        question=f"question {qid}?",
        item_id=item,
        review_id=review,
        document_id=f"electronics/test/{review}",
        domain="electronics",
        split="test",
        answers=answers,
        is_subjective=False,
        context=context,
    )


QUESTIONS = [
    question("q1", [GoldAnswer("about 6000 hours", 18), GoldAnswer("6000 hours", 24)]),
    question("q2", []),
    question("q3", [GoldAnswer("great", 45), GoldAnswer("sound great", None)]),
    question("q4", [GoldAnswer("not in the review", None)]),
    question("q5", [GoldAnswer("Sound", 36)], item="B002", review="r2"),
]


def test_export_groups_by_product_and_review_and_counts_what_it_leaves_out():
    squad, report = to_squad(QUESTIONS)
    assert squad["version"] == "v2.0"
    assert [a["title"] for a in squad["data"]] == ["B001", "B002"]
    qas = squad["data"][0]["paragraphs"][0]["qas"]
    assert [q["id"] for q in qas] == ["q1", "q2", "q3"]
    assert qas[1] == {"id": "q2", "question": "question q2?", "answers": [], "is_impossible": True}
    assert qas[2]["answers"] == [{"text": "great", "answer_start": 45}]
    assert (report.questions, report.answerable, report.impossible) == (4, 3, 1)
    assert (report.answers, report.unlocated_answers, report.skipped_questions) == (4, 2, 1)


def test_round_trip(tmp_path):
    path = tmp_path / "out" / "squad.json"
    write_squad(QUESTIONS, path)
    examples, report = read_squad(path)
    assert report.unlocated_answers == 0 and not report.problems
    by_id = {e.id: e for e in examples}
    assert set(by_id) == {"q1", "q2", "q3", "q5"}
    assert by_id["q1"].answers == [("about 6000 hours", 18), ("6000 hours", 24)]
    assert by_id["q1"].title == "B001" and by_id["q1"].context == REVIEW
    assert by_id["q2"].is_impossible and by_id["q2"].answer_texts == [""]
    for example in examples:
        for text, start in example.answers:
            assert example.context[start : start + len(text)] == text


def squad_file(tmp_path, qas, context=REVIEW):
    path = tmp_path / "user.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


def test_offsets_that_do_not_match_are_counted_and_reported(tmp_path):
    qas = [
        {
            "id": "a",
            "question": "?",
            "answers": [{"text": "battery", "answer_start": 4}, {"text": "battery", "answer_start": 0}],
            "is_impossible": False,
        },
        {"id": "b", "question": "?", "answers": [{"text": "nothing", "answer_start": 3}]},
    ]
    examples, report = read_squad(squad_file(tmp_path, qas))
    assert [e.id for e in examples] == ["a"]
    assert examples[0].answers == [("battery", 4)]
    assert report.unlocated_answers == 2 and report.skipped_questions == 1
    assert "data[0].paragraphs[0].qas[0]" in report.problems[0]


@pytest.mark.parametrize(
    "qas, message",
    [
        ([{"id": "a", "answers": []}], "data[0].paragraphs[0].qas[0] has no 'question'"),
        (
            [{"id": "a", "question": "?", "answers": [{"text": "x", "answer_start": "4"}]}],
            "qas[0].answers[0].answer_start is a string, not a number",
        ),
        (
            [{"id": "a", "question": "?", "answers": [{"text": "battery", "answer_start": 4}], "is_impossible": True}],
            "marked impossible but has answers",
        ),
        ([{"id": "a", "question": "?", "answers": []}, {"id": "a", "question": "?", "answers": []}], "repeats the question id 'a'"),
    ],
)
def test_bad_records_are_named(tmp_path, qas, message):
    with pytest.raises(QAError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_squad(squad_file(tmp_path, qas))


def test_unreadable_files(tmp_path):
    with pytest.raises(QAError, match="does not exist"):
        read_squad(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(QAError, match="not valid JSON"):
        read_squad(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(QAError, match="no top-level 'data' list"):
        read_squad(tmp_path / "list.json")


@pytest.mark.slow
def test_subjqa_export_is_valid_squad(tmp_path):
    from qa_system.training.reader_data import subjqa_to_squad_files

    written = subjqa_to_squad_files(["electronics"], ["train", "test"], tmp_path)
    for path, exported in written.items():
        examples, report = read_squad(path)
        assert report.unlocated_answers == 0 and report.skipped_questions == 0
        assert len(examples) == exported.questions and report.answers == exported.answers
    assert written[tmp_path / "electronics-test.json"].questions + written[tmp_path / "electronics-test.json"].skipped_questions == 358


def articles_file(path, count=40):
    """``count`` one-paragraph articles (products), two questions each."""
    write_squad(
        [question(f"q{i}-{j}", [GoldAnswer("about 6000 hours", 18)], item=f"group-{i}") for i in range(count) for j in range(2)], path
    )
    return path


def titles(path):
    return [a["title"] for a in json.loads(path.read_text())["data"]]


def test_held_out_split_and_samples_keep_whole_articles_the_same_on_every_call(tmp_path):
    from qa_system.sources.squad import is_held_out, sample_articles, split_held_out

    source = articles_file(tmp_path / "amazon.json")
    train, held_out = split_held_out(source, tmp_path / "out", percent=25)
    assert sorted(titles(train) + titles(held_out)) == sorted(titles(source)) and not set(titles(train)) & set(titles(held_out))
    assert titles(held_out) == [t for t in titles(source) if is_held_out(t, 25)] and 0 < len(titles(held_out)) < 40

    sample = sample_articles(train, tmp_path / "out", 50, salt="rehearse")
    assert sample.name == "amazon-train-sample50.json" and 0 < len(titles(sample)) < len(titles(train))
    assert set(titles(sample)) <= set(titles(train))
    examples, _ = read_squad(sample)
    assert len(examples) == 2 * len(titles(sample))  # whole articles, every question kept
    assert sample_articles(train, tmp_path / "again", 50, salt="rehearse").read_text() == sample.read_text()
    assert titles(sample_articles(train, tmp_path / "other", 50, salt="other")) != titles(sample)  # the salt picks another sample
    assert (
        titles(sample_articles(train, tmp_path / "all", 100)) == titles(train)
        and titles(sample_articles(train, tmp_path / "none", 0)) == []
    )
