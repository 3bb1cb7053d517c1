import csv

import pytest

from helpers.subjqa import COLUMNS, REVIEWS, row, write_subjqa
from qa_system.errors import QAError
from qa_system.sources import load_subjqa
from qa_system.sources.subjqa import locate_answer


def test_documents_are_cleaned_deduplicated_reviews(tiny_subjqa):
    data = load_subjqa("electronics", source=tiny_subjqa)
    ids = [d.id for d in data.documents]
    assert len(ids) == len(set(ids)) == len(REVIEWS)
    # r-kindle-1 has two annotation rows in train but is one document.
    kindle = [d for d in data.documents if d.meta["review_id"] == "r-kindle-1"]
    assert len(kindle) == 1
    assert kindle[0].content == REVIEWS["r-kindle-1"][1]
    assert kindle[0].meta == {"item_id": "KINDLE", "review_id": "r-kindle-1", "domain": "electronics", "split": ["train"]}
    assert not any("ANSWERNOTFOUND" in d.content for d in data.documents)


def test_a_review_in_two_splits_is_one_document_listing_both(tiny_subjqa):
    # r-kindle-3 is asked about in dev (q4) and test (q6), r-phones-1 in train (q2) and test (q9).
    data = load_subjqa("electronics", source=tiny_subjqa)
    [kindle] = [d for d in data.documents if d.meta["review_id"] == "r-kindle-3"]
    [phones] = [d for d in data.documents if d.meta["review_id"] == "r-phones-1"]
    assert (kindle.id, kindle.meta["split"]) == ("electronics/r-kindle-3", ["dev", "test"])
    assert phones.meta["split"] == ["train", "test"]  # SPLITS order, whatever order the files are read in
    reversed_order = load_subjqa("electronics", ["test", "train"], source=tiny_subjqa).documents
    assert [d.meta["split"] for d in reversed_order if d.meta["review_id"] == "r-phones-1"] == [["train", "test"]]
    questions = {q.id: q for q in data.questions}
    # Both questions point at the one document; each keeps its own split.
    assert (questions["q4"].document_id, questions["q4"].split) == (kindle.id, "dev")
    assert (questions["q6"].document_id, questions["q6"].split) == (kindle.id, "test")
    # Its id does not depend on which splits are loaded.
    assert [d.id for d in load_subjqa("electronics", "dev", source=tiny_subjqa).documents if d.meta["review_id"] == "r-kindle-3"] == [
        kindle.id
    ]
    assert {s: c["documents"] for s, c in data.report.splits.items()} == {
        "electronics/train": 3,
        "electronics/dev": 2,
        "electronics/test": 3,
    }


def test_questions_group_annotations_and_flag_no_answer(tiny_subjqa):
    data = load_subjqa("electronics", source=tiny_subjqa)
    questions = {q.id: q for q in data.questions}
    assert len(data.questions) == 9
    assert [a.text for a in questions["q1"].answers] == ["great for reading books at night", "The screen is sharp"]
    assert questions["q3"].no_answer and questions["q3"].answer_texts == [""]
    # A question mixing ANSWERNOTFOUND with a real span is answerable (as the SQuAD v2 script counts it).
    assert not questions["q7"].no_answer and questions["q7"].answer_texts == ["the scroll wheel feels solid"]
    assert questions["q7"].is_subjective is False and questions["q1"].is_subjective is True
    assert questions["q6"].document_id == "electronics/r-kindle-3"
    assert {s: c["questions"] for s, c in data.report.splits.items()} == {
        "electronics/train": 3,
        "electronics/dev": 2,
        "electronics/test": 4,
    }


def test_chapter_no_answer_follows_the_first_annotation_as_the_published_dataset_does(tmp_path):
    # The hub's subjqa (the reference chapter's data) drops a question's spans when its first annotation is ANSWERNOTFOUND.
    rows = [
        row("q1", "How is the scroll wheel?", "r-mouse-1", "ANSWERNOTFOUND"),
        row("q1", "How is the scroll wheel?", "r-mouse-1", "the scroll wheel feels solid"),
        row("q2", "Is it comfortable?", "r-phones-1", "comfortable fit"),
        row("q2", "Is it comfortable?", "r-phones-1", "ANSWERNOTFOUND"),
        row("q3", "How is the cord?", "r-phones-2", "ANSWERNOTFOUND"),
    ]
    data = load_subjqa("electronics", "test", source=write_subjqa(tmp_path, {"test": rows}))
    questions = {q.id: q for q in data.questions}
    assert [(q.no_answer, q.chapter_no_answer) for q in (questions["q1"], questions["q2"], questions["q3"])] == [
        (False, True),
        (False, False),
        (True, True),
    ]


def test_offsets_are_verified_repaired_and_mismatches_counted(tiny_subjqa):
    data = load_subjqa("electronics", source=tiny_subjqa)
    questions = {q.id: q for q in data.questions}
    for question in data.questions:
        for answer in question.located_answers:
            assert question.context[answer.start : answer.end] == answer.text
    # "I do n't like the speakers" (PTB tokens) is repaired to the review's own characters.
    assert questions["q6"].answers[0].text == "I don't like the speakers"
    assert questions["q6"].answers[0].start == 0
    # "battery months" is not a contiguous span: kept as text, no offset, counted and listed.
    assert questions["q8"].answers[0].start is None
    assert data.report.answers == {"exact": 6, "repaired": 1, "unlocated": 1}
    assert data.report.unlocated == [("q8", "battery months")]
    assert "1 not locatable" in data.report.summary()


def test_locate_answer_prefers_the_occurrence_nearest_the_annotation():
    review = "good sound . then more text . good sound"
    answer, how = locate_answer(review, "good  sound", start=31)
    assert how == "repaired" and answer.start == 30 and review[answer.start : answer.end] == "good sound"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"domains": "garden"}, "Unknown domain 'garden'"),
        ({"splits": "validation"}, "Unknown split 'validation'"),
    ],
)
def test_bad_domain_or_split(tiny_subjqa, kwargs, message):
    with pytest.raises(QAError, match=message) as error:
        load_subjqa(source=tiny_subjqa, **kwargs)
    assert "Fix:" in str(error.value) and "\n" not in str(error.value)


def test_missing_data_dir(tmp_path):
    with pytest.raises(QAError, match="does not exist"):
        load_subjqa("electronics", source=tmp_path / "nowhere")


def test_csv_with_missing_columns(tmp_path):
    folder = tmp_path / "electronics" / "splits"
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        with (folder / f"{split}.csv").open("w", newline="") as handle:
            csv.writer(handle).writerows([["item_id", "question"], ["X", "Is it good?"]])
    with pytest.raises(QAError, match="missing the SubjQA column"):
        load_subjqa("electronics", "test", source=tmp_path)


def _dev_csv_lines(tmp_path):
    root = write_subjqa(tmp_path / "subjqa")
    path = root / "electronics" / "splits" / "dev.csv"
    return root, path, path.read_text(encoding="utf-8").splitlines(keepends=True)


@pytest.mark.parametrize(
    "shape, message",
    [
        # A cut-off row used to crash with AttributeError: 'NoneType' object has no attribute 'rstrip'.
        (
            lambda lines: lines[0] + lines[1] + "X,electronics,a,b\r\n",
            r"dev\.csv line 3: the row has fewer fields \(4\) than the header \(19\)",
        ),
        (lambda lines: lines[0] + lines[1] + 'X,electronics,"never closed\r\n', r"dev\.csv line 3: the row has fewer fields"),
        # An unquoted comma shifts every later column: silently wrong values before.
        (
            lambda lines: lines[0] + lines[1].rstrip() + ",extra\r\n",
            r"dev\.csv line 2: the row has more fields \(20\) than the header \(19\)",
        ),
        (lambda lines: lines[0].replace(",review,", ",text,") + "".join(lines[1:]), r"dev\.csv is missing the SubjQA column\(s\) review\."),
        (lambda lines: "", r"dev\.csv is empty\."),
        (lambda lines: lines[0], r"dev\.csv has a header but no rows\."),
        (lambda lines: (lines[0] + lines[1]).encode() + "caf\u00e9\r\n".encode("latin-1"), r"dev\.csv line 3 is not UTF-8 text"),
    ],
    ids=["short-row", "unclosed-quote", "extra-fields", "missing-column", "empty", "header-only", "not-utf8"],
)
def test_malformed_csv_is_one_line_naming_the_file_and_line(tmp_path, shape, message):
    root, path, lines = _dev_csv_lines(tmp_path)
    content = shape(lines)
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content, encoding="utf-8")
    with pytest.raises(QAError, match=message) as error:
        load_subjqa("electronics", source=root)
    assert str(path) in str(error.value) and "Fix:" in str(error.value) and "\n" not in str(error.value)


def test_line_numbers_count_multiline_reviews_and_blank_lines(tmp_path):
    root, path, _ = _dev_csv_lines(tmp_path)
    spanning = row("q5", "Is the cord durable?", "r-phones-2", "The cord broke after two months")
    spanning["review"] = spanning["review"].replace(" Customer", "\nCustomer")  # a quoted review over two lines
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()  # line 1
        writer.writerow(spanning)  # lines 2-3
        handle.write("\r\nX,short\r\n")  # a blank line 4, the bad row on line 5
    with pytest.raises(QAError, match=r"dev\.csv line 5: the row has fewer fields \(2\)"):
        load_subjqa("electronics", source=root)


def test_real_electronics_counts_and_offsets(real_data_dir):
    data = load_subjqa("electronics", source=real_data_dir)
    assert {s: c["questions"] for s, c in data.report.splits.items()} == {
        "electronics/train": 1295,
        "electronics/dev": 255,
        "electronics/test": 358,
    }
    test = data.questions_for("test")
    assert sum(q.no_answer for q in test) == 120
    # As the published dataset labels them: its electronics test has 455 answer labels (the chapter's count).
    assert sum(q.chapter_no_answer for q in test) == 198
    for question in data.questions:
        for answer in question.located_answers:
            assert question.context[answer.start : answer.end] == answer.text
    # Every annotated span is accounted for: exact + repaired + unlocated.
    assert sum(data.report.answers.values()) == 1115 + 189 + 76
