"""Answer feedback: one durable SQLite row per click, exported as SQuAD v2 that train-reader accepts."""

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from helpers.training import tiny_training_argv
from qa_system.cli import main
from qa_system.errors import QAError
from qa_system.serving.feedback import MAX_NEW_CLICKS, Feedback, FeedbackStore, unrecorded_clicks
from qa_system.sources.squad import read_squad

REVIEW = "The bass is deep and the cord broke after two months."
OTHER = "Shipping was slow."


def click(verdict, answer=None, context=REVIEW, document_id="electronics/test/r1", question="How is the bass?"):
    start = context.index(answer) if answer else None
    end = start + len(answer) if answer else None
    return Feedback(
        verdict, question, answer, start, end, document_id, item_id="B1", review_id=document_id.rsplit("/", 1)[-1], context=context
    )


@pytest.fixture
def store(tmp_path):
    return FeedbackStore(tmp_path / "home" / "feedback.sqlite")


def test_every_click_is_a_committed_row(store):
    saved = store.record(click("correct", "bass is deep"))
    store.record(click("wrong_span", "the cord broke"))
    assert saved.id == 1 and saved.created
    with sqlite3.connect(store.path) as connection:  # another connection sees it: committed
        rows = connection.execute(
            'SELECT question, answer, document_id, start, "end", verdict, created FROM feedback ORDER BY id'
        ).fetchall()
    assert rows[0][:6] == ("How is the bass?", "bass is deep", "electronics/test/r1", 4, 16, "correct")
    assert rows[1][5] == "wrong_span" and len(rows) == 2
    assert store.counts() == {"correct": 1, "wrong_span": 1}
    assert [f.answer for f in FeedbackStore(store.path).all()] == ["bass is deep", "the cord broke"]


def test_a_click_seen_twice_is_one_row(store):
    first = store.record(replace(click("correct", "bass is deep"), click_id="page/feedback-1-1/0"))
    again = store.record(replace(click("correct", "bass is deep"), click_id="page/feedback-1-1/0"))  # a rerun repeats it
    store.record(replace(click("wrong", "bass is deep"), click_id="page/feedback-1-1/1"))
    store.record(click("wrong", "bass is deep"))  # clicks without ids (the CLI, older pages) are all kept
    store.record(click("wrong", "bass is deep"))
    assert again.id == first.id and [f.click_id for f in store.all()] == ["page/feedback-1-1/0", "page/feedback-1-1/1", None, None]


def test_one_click_sent_by_several_clients_at_once_is_new_to_exactly_one(tmp_path):
    """Four clients sending one click_id at once were answered 201, 201, 200, 201: three were told it was new."""
    store = FeedbackStore(tmp_path / "feedback.sqlite3")
    store.all()  # the database made, as a server's first request finds it
    for round_number in range(4):
        sent = replace(click("correct", "bass is deep"), click_id=f"client/{round_number}")
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: store.record_click(sent), range(8)))
        assert len({saved.id for saved, _ in answers}) == 1 and sum(new for _, new in answers) == 1
    assert store.record_click(sent)[1] is False and len(store.all()) == 4


def earlier_database(path, *later_columns: str):
    """A feedback database as an earlier version created it: its first columns, and ``later_columns`` (TEXT)."""
    columns = "".join(f", {column} TEXT" for column in later_columns)
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TABLE feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, created TEXT NOT NULL, verdict TEXT NOT NULL, "
            'question TEXT NOT NULL, answer TEXT, start INTEGER, "end" INTEGER, document_id TEXT, item_id TEXT, '
            f"review_id TEXT, context TEXT, score REAL, pipeline TEXT, labelled_question_id TEXT{columns})"
        )
    return path


def test_a_database_of_an_earlier_version_gains_click_ids(tmp_path):
    path = earlier_database(tmp_path / "feedback.sqlite")
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO feedback (created, verdict, question, document_id) VALUES ('t', 'wrong', 'q?', 'd')")
    store = FeedbackStore(path)
    store.record(replace(click("correct", "bass is deep"), click_id="c"))
    store.record(replace(click("correct", "bass is deep"), click_id="c"))
    assert [(f.verdict, f.click_id) for f in store.all()] == [("wrong", None), ("correct", "c")]


def test_one_id_in_two_collections_or_a_review_edited_between_clicks_are_exported_apart(tmp_path):
    """Two collections hold a document 'FAQ-4' ("$18" in one, "$22" in the other): a confirmed answer in each was one
    labelled question with both answers and one context, so one answer was not at its offsets (and an older database,
    without collections, is upgraded in place)."""
    store = FeedbackStore(earlier_database(tmp_path / "feedback.sqlite", "click_id"))
    hotels, live = "Breakfast costs $18 a day.", "Breakfast costs $22 a day."
    store.record(
        replace(click("correct", "$18", context=hotels, document_id="FAQ-4", question="How much is breakfast?"), collection="hotels")
    )
    store.record(replace(click("correct", "$22", context=live, document_id="FAQ-4", question="How much is breakfast?"), collection="live"))
    store.record(replace(click("correct", "$22", context=live, document_id="FAQ-4", question="How much is breakfast?"), collection=None))
    assert [f.collection for f in store.all()] == ["hotels", "live", None]
    export = store.export()
    contexts = {
        paragraph["context"]: [a["text"] for qa in paragraph["qas"] for a in qa["answers"]]
        for article in export.squad["data"]
        for paragraph in article["paragraphs"]
    }
    assert contexts == {hotels: ["$18"], live: ["$22", "$22"]}  # "live" and an unnamed collection: two questions, one text
    assert export.report.questions == 3 and export.report.unlocated_answers == 0


def test_unrecorded_clicks_take_only_new_known_verdicts_from_the_page():
    assert unrecorded_clicks(["correct", "wrong", "correct"], 1) == ["wrong", "correct"]  # in click order
    assert unrecorded_clicks(["correct"], 1) == [] and unrecorded_clicks(None, 0) == []
    # The log comes from the browser: anything else is ignored, and a flood is cut.
    assert unrecorded_clicks(["correct", "drop table"], 0) == [] and unrecorded_clicks({"correct": 9}, 0) == []
    assert unrecorded_clicks(["wrong"] * 10**6, 0) == ["wrong"] * MAX_NEW_CLICKS
    assert unrecorded_clicks(["wrong_span"], 0, offered=("correct", "wrong")) == []  # not a button of a "no answer"


@pytest.mark.parametrize(
    "feedback, message",
    [
        (click("maybe", "bass is deep"), "Unknown feedback verdict 'maybe'"),
        (click("correct", "bass is deep", question="  "), "needs the question"),
        (Feedback("correct", "q?", "bass", 0, 4, "d", context=REVIEW), "is not at offsets 0-4"),
    ],
)
def test_bad_feedback_is_refused(store, feedback, message):
    with pytest.raises(QAError, match=message):
        store.record(feedback)


def test_export_rules(store, tmp_path):
    store.record(click("correct", "bass is deep"))
    store.record(click("correct", "cord broke"))  # two confirmed spans: two answers of one question
    store.record(click("wrong", "after two months"))  # says what the answer is not: not exported
    store.record(click("correct", None, context=OTHER, document_id="electronics/test/r2", question="How is the delivery?"))
    store.record(click("correct", None, question="How is the bass?"))  # contradicted by the spans: the spans win
    store.record(click("correct", "Shipping", context=OTHER, document_id="electronics/test/r2", question="Is it fast?"))
    store.record(click("wrong", "Shipping", context=OTHER, document_id="electronics/test/r2", question="Is it fast?"))  # changed mind
    export = store.export_squad(tmp_path / "out" / "feedback.json")

    examples, report = read_squad(export.path)
    by_question = {e.question: e for e in examples}
    assert set(by_question) == {"How is the bass?", "How is the delivery?"}
    assert sorted(by_question["How is the bass?"].answers) == [("bass is deep", 4), ("cord broke", 25)]
    assert by_question["How is the delivery?"].is_impossible and by_question["How is the delivery?"].context == OTHER
    assert (report.questions, report.answerable, report.impossible, report.unlocated_answers) == (2, 1, 1, 0)
    assert (export.clicks, export.used_clicks) == (7, 3)
    assert "2 labelled questions" in export.summary()


def test_generated_answers_are_kept_but_not_exported(store, tmp_path):
    store.record(Feedback("correct", "How is the bass?", "Deep, says review [1].", None, None, "electronics/test/r1", context=REVIEW))
    assert store.counts() == {"correct": 1}
    with pytest.raises(QAError, match="No feedback can become training data yet"):
        store.export_squad(tmp_path / "feedback.json")


def test_the_export_trains_a_reader(store, tmp_path, settings, tiny_reader, capsys):
    store = FeedbackStore(settings.feedback_db)
    store.record(click("correct", "bass is deep"))
    store.record(click("correct", None, context=OTHER, document_id="electronics/test/r2", question="How is the delivery?"))
    out = tmp_path / "feedback.json"
    assert main(["export-feedback", "--home", str(settings.home), "--out", str(out)]) == 0
    assert "2 labelled questions (1 answerable, 1 impossible)" in capsys.readouterr().out
    argv = tiny_training_argv([out], out, tiny_reader, tmp_path / "reader", max_seq_length=64)
    assert main(argv) == 0
    assert (tmp_path / "reader" / "config.json").is_file()


def test_impossible_spans_are_refused_and_those_stored_before_are_not_exported(store, tmp_path):
    """Python slicing found text at offsets no reader gives (-10:-1, 50:5), so such clicks were stored and
    exported as answers at answer_start -10; now they are refused, and rows an older version stored are skipped."""
    tail = REVIEW[-10:-1]
    for start, end, answer in ((-10, -1, tail), (50, 5, ""), (5, 5, ""), (0, len(REVIEW) + 5, REVIEW)):
        with pytest.raises(QAError, match=rf"is not at offsets {start}-{end} of its review\. Fix: "):
            store.record(Feedback("correct", "Is it good?", answer, start, end, "electronics/test/r1", context=REVIEW))
    store.record(click("correct", "bass is deep"))
    with sqlite3.connect(store.path) as connection:  # as an older version stored them
        for n, (start, end, answer) in enumerate(((-10, -1, tail), (50, 5, ""), (5, 5, ""))):
            connection.execute(
                'INSERT INTO feedback (created, verdict, question, answer, start, "end", document_id, context) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                ("t", "correct", f"Stored before {n}?", answer, start, end, "electronics/test/r1", REVIEW),
            )
    export = store.export()
    answers = [
        a for article in export.squad["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"] for a in qa["answers"]
    ]
    assert answers == [{"text": "bass is deep", "answer_start": 4}]
    assert (export.report.questions, export.report.answerable, export.clicks, export.used_clicks) == (1, 1, 4, 1)


def test_the_export_is_built_in_memory(store):
    """What the API answers with: no file, so concurrent requests share nothing."""
    store.record(click("correct", "bass is deep"))
    export = store.export()
    assert export.path is None and export.squad["data"][0]["paragraphs"][0]["qas"][0]["answers"] == [
        {"text": "bass is deep", "answer_start": 4}
    ]


def test_exports_written_to_one_file_at_once_are_each_read_whole(store, tmp_path):
    """The page's button and the CLI write a file: aside, then renamed, so that an export read while
    another one writes the same path is never half a file (it was truncated and rewritten in place)."""
    for n in range(300):
        store.record(click("correct", "bass is deep", question=f"How is the bass, take {n}?"))
    path = tmp_path / "feedback" / "feedback-squad.json"
    read: list[int] = []

    def export_and_read(_: int) -> None:
        written = store.export_squad(path)
        read.append(len(json.loads(written.path.read_text(encoding="utf-8"))["data"][0]["paragraphs"][0]["qas"]))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(export_and_read, range(40)))
    assert read == [300] * 40
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing left aside


@pytest.mark.parametrize("blocked", ["a file where the folder should be", "a folder where the file should be"])
def test_a_database_that_cannot_be_opened_is_one_unavailable_line(tmp_path, blocked):
    from qa_system.errors import Unavailable

    if blocked.startswith("a file"):
        (tmp_path / "blocker").write_text("not a folder")
        path = tmp_path / "blocker" / "feedback.sqlite"
    else:
        path = tmp_path / "feedback.sqlite"
        path.mkdir()
    store = FeedbackStore(path)
    for call in (store.counts, store.all, lambda: store.record(click("correct"))):
        with pytest.raises(Unavailable, match=r"The feedback database .* cannot be used .*QA_FEEDBACK_DB") as caught:
            call()
        assert len(str(caught.value).splitlines()) == 1


def test_a_full_disk_is_one_no_space_line_and_the_clicks_before_it_are_kept(store, monkeypatch):
    from qa_system.errors import NoSpace
    from qa_system.serving import feedback as feedback_module

    store.record(click("correct", answer="deep"))
    connect = sqlite3.connect

    def full_database(*args, **kwargs):
        # SQLite's own "database or disk is full": the file may not grow past the pages it has now
        connection = connect(*args, **kwargs)
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")
        return connection

    monkeypatch.setattr(feedback_module.sqlite3, "connect", full_database)
    with pytest.raises(NoSpace, match=r"No space left on the disk of the feedback database .*nothing was saved") as caught:
        store.record(click("wrong", answer="deep", context=REVIEW + " long review" * 5000))
    assert len(str(caught.value).splitlines()) == 1
    monkeypatch.undo()
    assert [f.verdict for f in store.all()] == ["correct"]


def test_a_damaged_database_says_so_and_how_to_start_afresh(store):
    """ "file is not a database. Fix: point QA_FEEDBACK_DB at a file this process can write": the file was damaged."""
    from qa_system.errors import Unavailable

    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_bytes(b"not a database at all, but long enough to look like a header " * 20)
    with pytest.raises(
        Unavailable, match=r"The feedback database .*feedback.sqlite is damaged \(file is not a database\)\. Fix: move it aside"
    ):
        store.record(click("correct", answer="deep"))
