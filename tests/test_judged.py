"""Judged evaluation: cards scored the way a shopper judges them (right, wrong, abstain-ok, abstain-missed, top 3, calibration)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pandas as pd
import pytest

from qa_system.cli import main
from qa_system.errors import QAError
from qa_system.evaluation.judged import (
    CARDS_TO_JUDGE,
    Card,
    JudgedQuestion,
    JudgedSpan,
    JudgedSystem,
    check_judged,
    judge_all,
    load_card_verdicts,
    load_judged,
    summarize_judged,
    system_labels,
    verdict,
    write_judged_report,
)

READING = JudgedQuestion(
    "e:K1:1",
    "K1",
    "Is it good for reading?",
    "yes",
    (JudgedSpan("it is great for reading books when no light is available"),),
    domain="electronics",
)
OIL = JudgedQuestion("e:O1:2", "O1", "What is in it?", "yes", (JudgedSpan("the quality of Jarrow coconut oil"),), domain="electronics")
VAGUE = JudgedQuestion("r:V1:3", "V1", "How is it the walk?", "partly", (JudgedSpan("a short walk to the river"),), domain="restaurants")
NOTHING = JudgedQuestion("r:N1:4", "N1", "Is the thing flimsy?", "no", (), domain="restaurants")


def test_a_card_is_right_by_f1_or_by_holding_a_span_and_a_fragment_below_half_is_not():
    assert verdict(Card("It is great for reading books"), READING) == "right"  # F1 >= 0.5 with the span
    assert verdict(Card("Jarrow"), OIL) == "wrong"  # a fragment: F1 0.33 with the span
    long_answer = "I love it: the quality of Jarrow coconut oil is the best I know"
    assert verdict(Card(long_answer), OIL) == "right"  # holds the span whole, at most 3x as long
    assert verdict(Card("the quality of Jarrow coconut oil " + "and so on " * 20), OIL) == "wrong"  # holds it, but far too long


def test_no_answer_is_ok_only_where_the_documents_do_not_answer_fully():
    assert verdict(Card(None), READING) == "abstain-missed"
    assert verdict(Card(None), VAGUE) == "abstain-ok"
    assert verdict(Card(None), NOTHING) == "abstain-ok"
    assert verdict(Card("a short walk to the river"), VAGUE) == "right"  # partly answered: an answer may still be right
    assert verdict(Card("a short walk to the river"), NOTHING) == "wrong"  # nothing answers: any answer is wrong


def test_the_summary_counts_first_cards_top_three_and_calibration():
    cards = {
        READING.id: [Card(None, 0.6), Card("a fine screen", 0.3), Card("it is great for reading books", 0.2)],  # missed, right in top 3
        OIL.id: [Card("Jarrow", 0.9)],  # wrong
        VAGUE.id: [Card(None, 0.7)],  # abstain-ok
        NOTHING.id: [Card(None, 0.8), Card("sturdy", 0.1)],  # abstain-ok
    }
    run = judge_all("toy", [READING, OIL, VAGUE, NOTHING], lambda q: cards[q.id])
    overall = run.summary.set_index("set").loc["all"]
    assert overall["questions"] == 4
    assert (overall["right"], overall["wrong"], overall["abstain_ok"], overall["abstain_missed"]) == (0.0, 0.25, 0.5, 0.25)
    assert overall["useful_first"] == 0.5 and overall["right_top3"] == 0.25 and overall["useful_top3"] == 0.75
    # ECE by hand: bins (0.5,0.6] -> conf 0.6 useful 0; (0.8,0.9] -> 0.9 vs 0; (0.6,0.7] -> 0.7 vs 1; (0.7,0.8] -> 0.8 vs 1
    assert overall["ece"] == pytest.approx((0.6 + 0.9 + 0.3 + 0.2) / 4)
    assert set(run.summary["set"]) == {"all", "electronics", "restaurants"}


def test_a_first_card_without_a_stated_chance_has_no_calibration_figure():
    run = judge_all("reader scores", [READING], lambda q: [Card("it is great for reading books")])
    assert run.summary.loc[0, "right"] == 1.0 and math.isnan(run.summary.loc[0, "ece"])
    assert summarize_judged(pd.DataFrame(run.records)).loc[0, "useful_first"] == 1.0


def test_judged_label_files_are_read_and_bad_lines_are_one_error(tmp_path):
    good = tmp_path / "judged.jsonl"
    good.write_text(
        json.dumps({"id": "a", "item_id": "K1", "question": "Good?", "answerable": "yes", "answers": [{"text": "very good"}]}) + "\n\n",
        encoding="utf-8",
    )
    (question,) = load_judged([good])
    assert question.spans == ["very good"] and question.item_id == "K1"
    cases = {
        "not json": "{",
        "unknown answerable": json.dumps({"id": "a", "question": "q", "answerable": "maybe", "answers": []}),
        "answerable without spans": json.dumps({"id": "a", "question": "q", "answerable": "yes", "answers": []}),
        "a key twice": '{"id": "a", "question": "q", "answerable": "yes", "answerable": "no", "answers": []}',  # which one?
    }
    for line in cases.values():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line + "\n", encoding="utf-8")
        with pytest.raises(QAError, match="bad.jsonl, line 1"):
            load_judged([bad])
    twice = tmp_path / "twice.jsonl"
    twice.write_text(good.read_text(encoding="utf-8").strip() + "\n" + good.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(QAError, match="already given"):
        load_judged([twice])


def test_eval_judged_refuses_a_missing_label_file_in_one_line(tmp_path, capsys):
    assert main(["eval", "judged", "--labels", str(tmp_path / "missing.jsonl"), "--home", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "missing.jsonl" in error and len(error.splitlines()) == 1


def test_a_label_file_that_is_not_utf8_or_nested_too_deep_is_one_error_and_a_bom_is_read(tmp_path):
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"id": "l", "question": "café?", "answerable": "no"}\n'.encode("latin-1"))
    with pytest.raises(QAError, match="latin.jsonl is not UTF-8 text"):
        load_judged([latin])
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(QAError, match="deep.jsonl, line 1: JSON nested too deeply"):
        load_judged([deep])
    bom = tmp_path / "bom.jsonl"
    bom.write_text('\ufeff{"id": "b", "question": "Good?", "answerable": "no"}\n', encoding="utf-8")
    assert load_judged([bom])[0].id == "b"


def test_systems_with_selectors_of_the_same_folder_name_are_told_apart_in_reports():
    systems = [JudgedSystem("models/reader", "old/answer-selector", 8), JudgedSystem("models/reader", "models/answer-selector", 8)]
    assert system_labels([*systems, JudgedSystem("models/reader", "none")]) == [
        "models/reader + old/answer-selector, top 8",
        "models/reader + models/answer-selector, top 8",
        "reader + no selector",
    ]


def test_judged_questions_are_asked_of_the_collection_their_domain_names(cli_home, tiny_reader, tmp_path, capsys):
    from helpers.ingestion import COLUMNS, write_csv
    from qa_system.ingestion import ingest

    ingest(cli_home, write_csv(tmp_path / "reviews.csv"), "shop", COLUMNS)
    line = {"domain": "shop", "item_id": "P1", "question": "How long does the battery last?", "split": "test", "answerable": "yes"}
    answer = {"review_id": "r1", "start": 15, "end": 36, "text": "it lasts a whole week"}
    labels = tmp_path / "judged.jsonl"
    labels.write_text(
        "".join(json.dumps({**line, "id": f"shop:P1:{n}", "answers": [answer], "best": 0}) + "\n" for n in range(3)), encoding="utf-8"
    )
    out = tmp_path / "report"
    assert main(["eval", "judged", "--labels", str(labels), "--reader", str(tiny_reader), "--selector", "none", "--out", str(out)]) == 0
    overall = next(m for m in json.loads((out / "report.json").read_text())["metrics"] if m["set"] == "all")
    assert overall["questions"] == 3 and overall["system"] == f"{tiny_reader.name} + no selector"
    assert overall["right"] + overall["wrong"] + overall["abstain_missed"] == pytest.approx(1.0)  # every card judged, none abstain-ok
    # Into a pipe (a log file, CI) its progress is log lines, never a bar's carriage returns.
    assert "\r" not in capsys.readouterr().err


LOCATION = JudgedQuestion(
    "t:H1:5", "H1", "How is the location?", "yes", (JudgedSpan("Great location near Union Square"),), domain="tripadvisor"
)


def write_verdicts(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_card_verdict_decides_a_card_no_listed_span_matches(tmp_path):
    labels = tmp_path / "judged.jsonl"
    labels.write_text(
        "".join(
            json.dumps(
                {
                    "id": q.id,
                    "domain": q.domain,
                    "question": q.question,
                    "answerable": q.answerable,
                    "answers": [{"text": s} for s in q.spans],
                }
            )
            + "\n"
            for q in (LOCATION, NOTHING)
        ),
        encoding="utf-8",
    )
    verdicts = write_verdicts(
        tmp_path / "verdicts.jsonl",
        {"id": LOCATION.id, "text": "The location was perfect for us", "acceptable": True, "note": "answers in other words"},
        {"id": LOCATION.id, "text": "We stayed 5 nights", "acceptable": False},
        {"id": LOCATION.id, "text": "Great location near Union Square", "acceptable": False},
        {"id": NOTHING.id, "text": "sturdy enough", "acceptable": True},
        {"id": "not:asked:here", "text": "anything", "acceptable": True},
    )
    location, nothing = load_judged([labels], [verdicts])
    assert verdict(Card("The location was perfect for us"), LOCATION) == "wrong"  # without the verdict: no span matches
    assert verdict(Card("the location was PERFECT for us!"), location) == "right"  # matched once normalised
    assert verdict(Card("We stayed 5 nights"), location) == "wrong"
    assert verdict(Card("Great location near Union Square"), location) == "right"  # a listed span wins over a verdict
    assert verdict(Card("sturdy enough"), nothing) == "wrong"  # nothing answers it: no card is right
    assert location.decided_by("a quiet street") is None and location.decided_by("We stayed 5 nights") == "verdict"


def test_a_card_verdict_file_with_a_card_left_to_judge_or_judged_both_ways_is_one_error(tmp_path):
    left = write_verdicts(tmp_path / "left.jsonl", {"id": "a", "text": "fine", "acceptable": None})
    with pytest.raises(QAError, match="left.jsonl, line 1: acceptable is null"):
        load_card_verdicts([left])
    both = write_verdicts(
        tmp_path / "both.jsonl", {"id": "a", "text": "Fine.", "acceptable": True}, {"id": "a", "text": "fine", "acceptable": False}
    )
    with pytest.raises(QAError, match="both.jsonl, line 2: judges the card of both.jsonl, line 1 the other way"):
        load_card_verdicts([both])
    not_object = tmp_path / "list.jsonl"
    not_object.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(QAError, match="list.jsonl, line 1: not an object"):
        load_card_verdicts([not_object])
    with pytest.raises(QAError, match="No card verdict file"):
        load_card_verdicts([tmp_path / "missing.jsonl"])


def test_the_report_lists_the_cards_left_to_judge_once_in_the_verdict_format(tmp_path):
    judged_location = replace(LOCATION, cards={"location was perfect for us": True})
    cards = {
        LOCATION.id: [Card("The location was perfect for us", 0.7), Card("a quiet street", 0.4), Card(None, 0.2), Card("far away", 0.1)],
        OIL.id: [Card("Jarrow", 0.6), Card("the quality of Jarrow coconut oil", 0.3)],
    }
    runs = [judge_all(name, [judged_location, OIL], lambda q: cards[q.id]) for name in ("one", "two")]
    write_judged_report(tmp_path, runs, [judged_location, OIL])
    lines = [json.loads(line) for line in (tmp_path / CARDS_TO_JUDGE).read_text(encoding="utf-8").splitlines()]
    # within the first three, neither listed nor judged; "far away" is fourth; both runs showed the same cards, listed once
    assert lines == [
        {"id": LOCATION.id, "question": LOCATION.question, "text": "a quiet street", "acceptable": None},
        {"id": OIL.id, "question": OIL.question, "text": "Jarrow", "acceptable": None},
    ]
    assert runs[0].records["first_by_card_verdict"].tolist() == [True, False]
    assert "First cards decided by a card verdict (--verdicts): one 1, two 1." in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_train_selector_refuses_verdicts_without_judged_questions_in_one_line(tmp_path, capsys):
    verdicts = write_verdicts(tmp_path / "v.jsonl", {"id": "a", "text": "fine", "acceptable": True})
    assert main(["train-selector", "--verdicts", str(verdicts), "--home", str(tmp_path), "--output", str(tmp_path / "sel")]) == 2
    error = capsys.readouterr().err.strip()
    assert "--verdicts" in error and len(error.splitlines()) == 1


def label_file(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


BATTERY = {"domain": "shop", "item_id": "P1", "question": "How long does the battery last?", "answerable": "yes", "best": 0}
WEEK = {"review_id": "r1", "start": 15, "end": 36, "text": "it lasts a whole week"}


@pytest.mark.parametrize(
    "line, message",
    [
        ({"answers": [{**WEEK, "start": 40, "end": 15}]}, "answers[0]: start 40 is after end 15."),
        ({"answers": [{**WEEK, "start": "abc"}]}, 'answers[0]: start is "abc", not a character offset'),
        ({"answers": [{**WEEK, "end": None}]}, "answers[0]: end is null, not a character offset"),
        ({"answers": [{"start": 15, "end": 36, "text": WEEK["text"]}]}, "answers[0]: start and end are given without the review_id"),
        ({"answerable": "no", "answers": [WEEK], "best": None}, "answerable is no, but 1 answer span(s) are given."),
        ({"answers": [WEEK], "best": 7}, "best is 7, but the line has 1 answer(s)"),
        ({"answerable": True}, "answerable is true, not one of yes, partly or no."),
    ],
)
def test_a_label_whose_offsets_best_or_answerable_make_no_sense_is_one_error_naming_its_line(tmp_path, line, message):
    labels = label_file(tmp_path / "judged.jsonl", {**BATTERY, "id": "good", "answers": [WEEK]}, {**BATTERY, "id": "bad", **line})
    with pytest.raises(QAError, match=re.escape(f"judged.jsonl, line 2: {message}")):
        load_judged([labels])


@pytest.fixture
def shop(cli_home, tmp_path):
    """The collection 'shop': reviews r1, r2 of product P1 and r3, r4 of P2 (``helpers.ingestion.REVIEWS``)."""
    from helpers.ingestion import COLUMNS, write_csv
    from qa_system.ingestion import ingest, open_collection

    ingest(cli_home, write_csv(tmp_path / "reviews.csv"), "shop", COLUMNS)
    return open_collection(cli_home, "shop")


@pytest.mark.parametrize(
    "line, message",
    [
        (
            {"item_id": "P9"},
            "item_id 'P9' has no documents in collection 'shop'. Fix: use an item id that `qa-system products --collection shop`",
        ),
        ({"answers": [{**WEEK, "review_id": "r9"}]}, "answers[0]: review_id 'r9' is not a document of collection 'shop'."),
        ({"answers": [{**WEEK, "review_id": "r3"}]}, "answers[0]: 'r3' is a document of product 'P2', not of the question's 'P1'."),
        (
            {"answers": [{**WEEK, "start": 16, "end": 37}]},
            'answers[0]: the text "it lasts a whole week" is not the document\'s text at 16:37',
        ),
        ({"answers": [{**WEEK, "start": 15, "end": 900}]}, "answers[0]: end 900 is past the end of 'r1' (48 characters)."),
        ({"answers": [{"review_id": "r2", "text": WEEK["text"]}]}, "answers[0]: the text is not in 'r2'."),
    ],
)
def test_a_label_that_contradicts_the_collection_is_one_error_naming_its_line(shop, tmp_path, line, message):
    labels = label_file(
        tmp_path / "judged.jsonl", {**BATTERY, "id": "good", "answers": [WEEK]}, {**BATTERY, "id": "bad", "answers": [WEEK], **line}
    )
    with pytest.raises(QAError, match=re.escape(f"judged.jsonl, line 2: {message}")):
        check_judged(load_judged([labels]), {"shop": shop})
    # the same span with its text spread over other whitespace (a document put back together from passages) is fine
    check_judged([JudgedQuestion("w", "P1", "q", "yes", (JudgedSpan("it  lasts a\nwhole week", "r1", 15, 36),), "shop")], {"shop": shop})


def test_eval_judged_checks_every_label_before_asking_any_question_and_counts_the_other_problems(shop, tiny_reader, tmp_path, capsys):
    labels = label_file(
        tmp_path / "judged.jsonl",
        {**BATTERY, "id": "good", "answers": [WEEK]},
        {**BATTERY, "id": "unknown product", "item_id": "P9", "answers": [WEEK]},
        {**BATTERY, "id": "other product", "answers": [{**WEEK, "review_id": "r3"}]},
    )
    out = tmp_path / "report"
    assert main(["eval", "judged", "--labels", str(labels), "--reader", str(tiny_reader), "--selector", "none", "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(
        "error: judged.jsonl, line 2: item_id 'P9' has no documents in collection 'shop'. The labels hold 1 more problem."
    )
    assert len(error.splitlines()) == 1 and not out.exists()  # nothing asked, no report


def test_eval_judged_counts_the_problems_of_the_lines_the_domains_and_the_collection_together(shop, tiny_reader, tmp_path, capsys):
    labels = label_file(
        tmp_path / "judged.jsonl",
        {**BATTERY, "id": "no answerable", "answerable": "maybe", "answers": [WEEK]},
        {**BATTERY, "id": "unknown product", "item_id": "P9", "answers": [WEEK]},
        {**BATTERY, "id": "typo", "domain": "shpo", "answers": [WEEK]},
        {**BATTERY, "id": "good", "answers": [WEEK]},
    )
    out = tmp_path / "report"
    assert main(["eval", "judged", "--labels", str(labels), "--reader", str(tiny_reader), "--selector", "none", "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(
        'error: judged.jsonl, line 1: answerable is "maybe", not one of yes, partly or no. The labels hold 2 more problems.'
    )
    assert len(error.splitlines()) == 1 and not out.exists()


def test_a_domain_naming_neither_a_collection_nor_a_subjqa_domain_names_its_line_and_both_kinds(shop, tmp_path, capsys):
    labels = label_file(tmp_path / "judged.jsonl", {**BATTERY, "id": "typo", "domain": "shpo", "answers": [WEEK]})
    assert main(["eval", "judged", "--labels", str(labels), "--out", str(tmp_path / "report")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(
        "error: judged.jsonl, line 1: domain 'shpo' is neither a collection nor a SubjQA domain. Fix: use a collection's name (shop)"
    )
    assert len(error.splitlines()) == 1


def test_the_shipped_judged_labels_pass_every_check_against_subjqa(real_data_dir, tmp_path):
    from qa_system.config import REPO_ROOT, Settings
    from qa_system.evaluation.judged import judged_indexes, unknown_domains

    settings = Settings.from_env(data_dir=real_data_dir, home=tmp_path / "home", store="memory")
    shared = real_data_dir.parents[1] / "judged"
    for files in (shared.glob("*.jsonl"), (shared / "train").glob("*.jsonl"), (REPO_ROOT / "data" / "judged").glob("train-extra-*.jsonl")):
        questions = load_judged(sorted(files))
        assert unknown_domains(settings, questions) == (set(), [])
        check_judged(questions, judged_indexes(settings, {q.domain for q in questions}, False, False, progress=False))
