"""The answer selector fitted on judged labels: whole phrases, P(right) against P("no answer" is right), cards by chance."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest
from haystack import Document

from qa_system.evaluation.judged import JudgedQuestion, JudgedSpan
from qa_system.reading.reader import ReaderOutput, SpanCandidate
from qa_system.reading.selection import SELECTOR_FILE, USEFUL, AnswerSelector, SelectorModel
from qa_system.reading.selection_features import MAX_PHRASE_WORDS, ReadDocument, candidates, features, other_codes, phrase_bounds
from qa_system.training.judged_selector import MODE, fit_judged_selector, judged_frames, summarize_out_of_fold
from qa_system.training.selector import _read_document

FILLER = "The box came on time. Shipping was quick. I bought it for my dad. The color is grey."
ANSWER = "The battery lasts a whole week on one charge"


def test_a_span_grows_to_its_whole_phrase_and_no_further():
    text = "I never thought I would. It is great for reading books when no light is available, but the battery is weak."
    start = text.index("It is great")
    assert text[slice(*phrase_bounds(text, start, start + len("It is great")))] == (
        "It is great for reading books when no light is available, but the battery is weak"  # a contrast stays with it
    )
    middle = text.index("battery")
    assert text[slice(*phrase_bounds(text, middle, middle + 7))] == "the battery is weak"
    run_on = " ".join(["word"] * (MAX_PHRASE_WORDS + 5))
    assert phrase_bounds(run_on, 5, 9) == (5, 9)  # a phrase too long to read as an answer: the span itself
    unspaced = "电池" * 300 + "很好" + "屏幕" * 300  # one "word" of 1,202 characters: too long too
    assert phrase_bounds(unspaced, 600, 602) == (600, 602)
    stopped = "屏幕很清楚。电池很好，用了三天。"
    start = stopped.index("很好")
    assert stopped[slice(*phrase_bounds(stopped, start, start + 2))] == "电池很好，用了三天"
    escaped = "Check-in was slow. The rooms are always clean, spacious &amp; quiet at night; the pool is cold."
    start = escaped.index("clean")
    assert escaped[slice(*phrase_bounds(escaped, start, start + 5))] == "The rooms are always clean, spacious &amp; quiet at night"
    ruled = "It works.Battery=========The battery last a long time***EDIT***it died."  # a heading and its rule
    start = ruled.index("a long")
    assert ruled[slice(*phrase_bounds(ruled, start, start + 6))] == "The battery last a long time"
    for text, span, phrase in [
        ("It lasts 1.5 hours on a charge. It costs $199.99 new.", "1.5 hours", "It lasts 1.5 hours on a charge"),
        ("It lasts 1.5 hours on a charge. It costs $199.99 new.", "costs", "It costs $199.99 new"),
        ("We had a fire place (it was chilly!)Breakfast was nice.", "nice", "Breakfast was nice"),  # no ")"
        ("Cons:\n- It is heavy (\n- The battery is weak", "heavy", "It is heavy"),  # no bullet, no "("
        ("||>>HEADPHONE QUALITYThe headphones are good.+Impressive battery life", "good", "The headphones are good"),
        ("||>>HEADPHONE QUALITYThe headphones are good.+Impressive battery life", "battery", "Impressive battery life"),
        ("The LEDs, the HDMI port and my TRENDnet router work well.", "router", "The LEDs, the HDMI port and my TRENDnet router work well"),
        ("It was fine. :-) We heard the doors slam.", "heard", "We heard the doors slam"),  # no smiley's rest
        # a dot inside a word is no sentence's end: the address was cut at its dot ("escriba a soporte@lux")
        ("Escriba a soporte@lux.com si tiene dudas. Gracias.", "soporte", "Escriba a soporte@lux.com si tiene dudas"),
        ("Sold on amazon.com for less than in shops. Buy it.", "Sold", "Sold on amazon.com for less than in shops"),
        ("Great battery.The screen is dim.", "screen", "The screen is dim"),  # run together before a capital: two sentences
        # ... or before a small letter, between words: the card read "too.there's another company that warrants theirs for life"
        ("It is past the return period too.there's a lifetime one.", "return", "It is past the return period too"),
        ("great product.works well and cheap", "works", "works well and cheap"),
        ("Compare it vs.the old one. Check sandisk.com, it helps.", "old", "Compare it vs.the old one"),
        ("It plays song.mp3 files, e.g.the ones I buy.", "plays", "It plays song.mp3 files, e.g.the ones I buy"),
        # a dash run into the word before it and followed by a capital starts a list's next item
        ("Complaints:- The lights are bright- The manual is wrong.", "bright", "The lights are bright"),
        ("Complaints:- The lights are bright- The manual is wrong.", "manual", "The manual is wrong"),
        ("My T- Mobile phone works fine.", "phone", "My T- Mobile phone works fine"),
        # a contrast after the phrase is read with it: the card said "stays connected while in use", its review went on
        # "but loses it's connection when idle"
        (
            "My ipad stays connected while in use, but loses it's connection when idle. Great.",
            "connected",
            "My ipad stays connected while in use, but loses it's connection when idle",
        ),
        ("Breakfast was good, although the eggs were cold; fine.", "good", "Breakfast was good, although the eggs were cold"),
        ("The sound is great, but the battery is weak. Fine.", "battery", "the battery is weak"),  # the contrast alone
        ("The sound is great, but " + "it " * 30 + "fails.", "sound", "The sound is great"),  # a contrast too long to keep
        # an abbreviation's dot ends no phrase; "etc." may end a sentence, and does
        ("It holds ca. 30 cups, e.g. for a party. Nice.", "30 cups", "It holds ca. 30 cups, e.g. for a party"),
        ("Ask Dr. Smith vs. the shop. Nice.", "shop", "Ask Dr. Smith vs. the shop"),
        ("Pens, cards etc. The bag holds all.", "bag", "The bag holds all"),
        ("Made in the U.S. and sturdy. Nice.", "sturdy", "Made in the U.S. and sturdy"),  # initials' dots
        ("Beds were good, good A/C. The location was great.", "location", "The location was great"),
        ("We stayed on Main St. It was noisy at night.", "noisy", "It was noisy at night"),  # "St." may end a sentence
        # an ellipsis ends a phrase, whatever follows it: the card read ".they are impeccably clean"
        ("As for the washrooms downstairs...they are impeccably clean.", "impeccably", "they are impeccably clean"),
        ("As for the washrooms downstairs...they are impeccably clean.", "washrooms", "As for the washrooms downstairs"),
        ("The facilities\u2026very clean!", "clean", "very clean"),
        # a bracket opened is closed: the card read "amenities including cups (nice touch"
        ("Amenities including cups (nice touch!). Run to Guu!", "cups", "Amenities including cups (nice touch!)"),
        ("It was affordable ($100+ tip - and we ordered tons).", "affordable", "It was affordable ($100+ tip - and we ordered tons)"),
        ("We had a fire place (it was chilly!)Breakfast was nice.", "fire", "We had a fire place (it was chilly!)"),
        ("It was affordable (a tip - " + "x " * 50 + ")", "affordable", "It was affordable"),  # closed too far away
        (
            "Our room was on the ground floor. . .they are spotless and the view was great.",
            "spotless",
            "they are spotless and the view was great",
        ),
        ("The hotel gives you slippers [a nice touch!] and robes.", "slippers", "The hotel gives you slippers [a nice touch!]"),
        ("Check-in was slow {we waited an hour!} but fine.", "slow", "Check-in was slow {we waited an hour!}"),
        # a bracket opened before a break and closed in the phrase: no lone ")" shown
        ("We got coffee cups (nice touch! we loved them) and a kettle.", "kettle", "and a kettle"),
        ("We got coffee cups (nice touch! we loved them) and a kettle.", "loved", "we loved them"),
        ("The rooms (clean, but tiny. The beds were hard) cost 90 euros. Fine.", "beds", "The beds were hard"),
    ]:
        start = text.index(span)
        assert text[slice(*phrase_bounds(text, start, start + len(span)))] == phrase


def test_a_candidate_keeps_to_one_line_and_a_question_of_the_document_is_none():
    faq = "## How do I update the firmware?\n\nOpen the app, go to Settings, then System.\n\nPower\n\nThe motor draws 150 watts."
    spans = [
        (faq.index("How"), faq.index("?"), 9.0),  # the FAQ's own question, echoed
        (faq.index("Open"), faq.index("Power") + 5, 8.0),  # an answer run into the next heading
        (faq.index("Power"), len(faq) - 1, 7.0),  # a heading and its text
    ]
    found = candidates([ReadDocument(faq, 0.0, spans)], phrases=True)
    assert [c.text for c in found] == ["Open the app, go to Settings, then System.", "The motor draws 150 watts"]
    review = "Is it worth the money? Absolutely, it is great for reading books."
    found = candidates([ReadDocument(review, 0.0, [(6, 21, 5.0), (23, 33, 4.0)])], phrases=True)
    assert [c.text for c in found] == ["Absolutely, it is great for reading books"]  # the review's own question asks
    # ... and one that exclaims answers: "Do they give free bread?" found no candidate in it
    review = "Small portions. What kind of a restaurant doesn't provide complimentary bread?! Save your money."
    bread = review.index("doesn't provide")
    found = candidates([ReadDocument(review, 0.0, [(bread, bread + len("doesn't provide complimentary bread"), 5.0)])], phrases=True)
    assert [c.text for c in found] == ["What kind of a restaurant doesn't provide complimentary bread"]
    for asking in ("Is there free parking?! No, parking costs $20 a night.", "Is the breakfast any good!? Yes, very."):
        echo = asking.index("?") - 8
        found = candidates([ReadDocument(asking, 0.0, [(echo, echo + 4, 5.0)])], phrases=True)
        assert found == []  # the question repeated, with no negation to turn round, still asks


def test_a_heading_of_the_document_is_no_candidate():
    """ "Connecting to the App and Wi-Fi" (62%) and "Error Codes" were cards: a heading names what follows, it does not
    answer. A review's own short line ("Great sound"), a table row and a numbered step still answer."""
    manual = (
        "Charge it first.\n5. Connecting to the App and Wi-Fi\nThe robot connects only to 2.4 GHz networks.\n"
        "9. Error Codes\nCode: E1, Meaning: Tank empty\nPros\nGreat sound\n1. Place the dock against a wall.\n"
        "CleanBot S7 Firmware Release Notes\nVersion 3.0 is out.\nIt lasts 2 Hours\nEnd."
    )
    spans = [
        (manual.index(text), manual.index(text) + len(text), 9.0 - i)
        for i, text in enumerate(
            ("Connecting to the App and Wi-Fi", "Error Codes", "CleanBot S7", "Tank empty", "Great sound", "Place the dock", "2 Hours")
        )
    ]
    found = candidates([ReadDocument(manual, 0.0, spans)])
    assert [c.text for c in found] == ["Tank empty", "Great sound", "Place the dock", "2 Hours"]


def test_of_two_spans_in_one_phrase_a_candidate_keeps_the_one_the_question_leads_to():
    """ "I charged it for 2 hours and the battery lasts 10 hours": both spans grow to that one phrase, a candidate once;
    asked how long the battery lasts, the span shown inside it is "10 hours", though the reader liked "2 hours" more."""
    review = "I charged it for 2 hours and the battery lasts 10 hours of recording. It arrived in 3 days."
    spans = [(review.index("2 hours"), review.index("2 hours") + 7, 5.0), (review.index("10 hours"), review.index("10 hours") + 8, 4.5)]
    read = [ReadDocument(review, 0.0, spans)]
    (battery,) = candidates(read, phrases=True, query="How long does the battery last?")
    assert battery.text == "I charged it for 2 hours and the battery lasts 10 hours of recording" and battery.logit == 5.0
    assert battery.as_read(review).text == "10 hours"
    (charging,) = candidates(read, phrases=True, query="How long did it charge for?")  # no more words lead to one: the reader's best
    assert charging.as_read(review).text == "2 hours"
    (unasked,) = candidates(read, phrases=True)
    assert unasked.as_read(review).text == "2 hours"
    # Nothing but spaces or stop words between two spans: both are led by the words before the first; the reader's best stays.
    review = "Battery lasts around 30 hours with noise cancelling on."
    spans = [(review.index("30 hours"), review.index("30 hours") + 8, 5.0), (review.index("around"), review.index("around") + 6, 4.0)]
    (headphones,) = candidates([ReadDocument(review, 0.0, spans)], phrases=True, query="How long does the battery last?")
    assert headphones.as_read(review).text == "30 hours"
    # Words after "of" belong to the span before them: "20 g of citric acid" is what the question asks.
    manual = "Dissolve 20 g of citric acid in 1 litre of water, then start the program."
    spans = [(manual.index("1 litre"), manual.index("1 litre") + 7, 5.0), (manual.index("20 g"), manual.index("20 g") + 4, 4.5)]
    (descaling,) = candidates([ReadDocument(manual, 0.0, spans)], phrases=True, query="How much citric acid do I need?")
    assert descaling.as_read(manual).text == "20 g"


def test_a_card_never_shows_a_span_without_a_letter_or_digit_alone():
    """ "How much is parking?" showed "$$" (96%) of "Overnight parking was $$ at $40/night"."""
    review = "Overnight parking was $$ at $40/night but that was my only complaint. Great stay."
    span = (review.index("$$"), review.index("$$") + 2, 5.0)
    (parking,) = candidates([ReadDocument(review, 0.0, [span])], phrases=True)
    assert parking.as_read(review).text == "Overnight parking was $$ at $40/night but that was my only complaint"
    span = (review.index("$40"), review.index("$40") + 3, 5.0)
    (price,) = candidates([ReadDocument(review, 0.0, [span])], phrases=True)
    assert price.as_read(review).text == "$40"


def test_a_card_never_shows_a_span_that_drops_a_negation_of_its_phrase():
    """ "Does the X2 need to be connected to a water pipe?" showed "The X2 is a countertop unit" (89%), dropping "and does
    not need any plumbing": the phrase is shown whole when the rest of it holds a negation."""
    faq = "A: No. The X2 is a countertop unit and does not need any plumbing. You fill it by hand."
    span = (faq.index("The X2"), faq.index("unit") + 4, 5.0)
    (unit,) = candidates([ReadDocument(faq, 0.0, [span])], phrases=True)
    assert unit.as_read(faq).text == "The X2 is a countertop unit and does not need any plumbing"
    for negated in ("and doesn't need any plumbing", "and needs no plumbing", "without plumbing"):
        text = f"The X2 is a countertop unit {negated}. You fill it by hand."
        (unit,) = candidates([ReadDocument(text, 0.0, [(0, text.index("unit") + 4, 5.0)])], phrases=True)
        assert unit.as_read(text).text == text.split(".")[0], negated
    plain = "The X2 is a countertop unit and needs plumbing. You fill it by hand."
    (unit,) = candidates([ReadDocument(plain, 0.0, [(0, plain.index("unit") + 4, 5.0)])], phrases=True)
    assert unit.as_read(plain).text == "The X2 is a countertop unit"  # nothing dropped that turns it round


def test_a_phrase_starts_after_the_last_break_before_its_span_wherever_the_span_starts():
    """Spans that start on a break, inside one, or just after it: the phrase starts after the last of the review's
    breaks that ends by the span's start (its spaces left out)."""
    from qa_system.reading.selection_features import _ENTITY, PHRASE_BREAK

    text = "Fine. ok, and it works - well;\nyes, but &amp; no, so. End=====while &#39;x&#39; - doNE DONEDone 1.5!"
    masked = _ENTITY.sub(lambda entity: "x" * len(entity.group()), text)
    breaks = [mark.end() for mark in PHRASE_BREAK.finditer(masked)]
    for start in range(len(text) + 1):
        for end in range(start, min(len(text), start + 6) + 1):
            left = max([0, *(mark for mark in breaks if mark <= start)])
            while left < start and text[left].isspace():
                left += 1
            assert phrase_bounds(text, start, end)[0] == left, (start, end)


def judged_records(count: int, seed: int = 0) -> tuple[list[dict], dict[str, JudgedQuestion]]:
    """Questions read over three reviews; where the reviews answer, the reader's best span is a fragment of the answer's phrase."""
    rng = random.Random(seed)
    records, labels = [], {}
    for n in range(count):
        kind = rng.choices(["yes", "partly", "no"], [0.6, 0.2, 0.2])[0]
        documents = []
        for rank in range(3):
            content = FILLER + (f" {ANSWER}. Great buy." if kind != "no" and rank == 0 else " It works.")
            spans = []
            if kind != "no" and rank == 0:
                start = content.index("lasts a whole week")
                spans.append([start, start + len("lasts a whole week"), 3.0 + rng.gauss(0, 1)])
            for word in ("quick", "grey"):
                start = content.index(word)
                spans.append([start, start + len(word), rng.gauss(0, 1)])
            spans.sort(key=lambda s: -s[2])
            documents.append(
                {"id": f"{n}-{rank}", "content": content, "rank": rank, "score": 9.0 - rank, "null": rng.gauss(1.0, 1), "spans": spans}
            )
        qid = f"q{n}"
        records.append(
            {
                "id": qid,
                "question": "How long does the battery last?",
                "item_id": f"item{n % 19}",
                "domain": "electronics",
                "modes": {MODE: documents},
            }
        )
        answers = () if kind == "no" else (JudgedSpan(ANSWER),)
        labels[qid] = JudgedQuestion(qid, f"item{n % 19}", "How long does the battery last?", kind, answers, domain="electronics")
    return records, labels


@pytest.fixture(scope="module")
def judged_selector(tmp_path_factory):
    folder = tmp_path_factory.mktemp("judged-selector")
    records, labels = judged_records(240)
    questions, spans, texts = judged_frames(records, labels)
    decisions = fit_judged_selector(questions, spans, texts, folder, {"reader_fingerprint": "abc"}, folds=3)
    return folder, decisions, spans


def test_the_span_model_rates_a_phrase_higher_as_the_reader_likes_it_more(judged_selector):
    import pandas as pd

    from qa_system.training.judged_selector import JUDGED_PARAMETERS, _classifier, _span_parameters

    folder, _, _ = judged_selector
    monotone = json.loads((folder / SELECTOR_FILE).read_text())["span_monotone"]
    assert monotone["logit"] == monotone["gap"] == 1 and monotone["document_rank"] == -1

    # Noisy labels, as a few hundred judged questions give: unconstrained trees follow the noise up and down.
    rng = np.random.default_rng(0)
    columns = ["logit", "rank", "span_words"]
    rows = pd.DataFrame(rng.normal(size=(600, 3)), columns=columns)
    target = pd.Series((rows["logit"] + rng.normal(scale=2.0, size=600) > 0).astype(float))

    def drops(parameters, column, sign):
        model = _classifier(rows, columns, target, parameters)
        varied = pd.DataFrame(np.repeat(rows.head(20).to_numpy()[:, None, :], 40, axis=1).reshape(-1, 3), columns=columns)
        varied[column] = np.tile(np.linspace(-3, 3, 40), 20)
        steps = np.diff(model.predict_proba(varied)[:, 1].reshape(20, 40), axis=1) * sign
        return int((steps < -1e-12).sum())

    assert drops(JUDGED_PARAMETERS, "logit", 1) > 0 and drops(JUDGED_PARAMETERS, "rank", -1) > 0
    constrained = _span_parameters(JUDGED_PARAMETERS, columns)
    assert drops(constrained, "logit", 1) == 0 and drops(constrained, "rank", -1) == 0


def test_candidates_are_whole_phrases_labelled_by_the_judged_spans(judged_selector):
    _, _, spans = judged_selector
    right = spans[spans["f1"] == 1.0]
    assert len(right) > 100 and (right["span_words"] == len(ANSWER.split())).all()  # the fragment grew to the whole answer


def test_the_judged_selector_answers_where_the_reviews_answer_and_its_chances_are_calibrated(judged_selector):
    folder, decisions, _ = judged_selector
    info = json.loads((folder / SELECTOR_FILE).read_text())
    assert info["decision"] == USEFUL and info["phrases"] is True and info["reader_fingerprint"] == "abc"
    overall = summarize_out_of_fold(decisions).set_index("set").loc["all"]
    always_answer = decisions["right"].mean()
    always_abstain = decisions["abstain_ok"].mean()
    assert overall["useful_first"] > max(always_answer, always_abstain) + 0.05
    assert overall["ece"] < 0.1
    for _, y in info["calibration"].values():
        assert all(b >= a for a, b in zip(y, y[1:])) and 0 <= min(y) and max(y) <= 1


def test_the_first_card_is_the_one_most_likely_to_be_right_and_reads_as_a_whole_phrase(judged_selector):
    folder, _, _ = judged_selector
    selector = AnswerSelector(model=str(folder), top_k=3)
    content = FILLER + f" {ANSWER}. Great buy."
    documents = [Document(id="a", content=content), Document(id="b", content=FILLER + " It works.")]
    start = content.index("lasts a whole week")
    reading = ReaderOutput(
        [SpanCandidate(0, start, start + 18, 4.0, 0), SpanCandidate(1, content.index("grey"), content.index("grey") + 4, 0.1, 0)],
        0.5,
        {0: 0.5, 1: 1.0},
    )
    answers = selector.run(query="How long does the battery last?", documents=documents, reading=reading)["answers"]
    assert answers[0].data == ANSWER and answers[0].meta["chosen"]
    assert answers[0].document_offset.start == content.index(ANSWER)  # offsets of the phrase in the stored text
    chances = [a.score for a in answers]
    assert chances == sorted(chances, reverse=True)
    json.dumps([a.meta for a in answers])  # plain types only: the API and Hayhooks encode them


def test_the_row_of_another_code_than_the_one_asked_is_no_answer(judged_selector):
    """ "What does error E3 mean?" over a manual's table of codes: the row of E1 came first (74%), beside E3's."""
    folder, _, _ = judged_selector
    table = "Code: E1, Meaning: Water tank empty\nCode: E3, Meaning: Wheel stuck\nCode: E4, Meaning: Cliff sensor dirty"
    spans = [(table.index(row), table.index("\n", table.index(row)), logit) for row, logit in (("Code: E1", 4.0), ("Code: E3", 3.0))]
    found, values, _, decision = SelectorModel(folder).choose("What does error E3 mean?", [ReadDocument(table, 0.5, spans)])
    by_text = dict(zip((c.text for c in found), values))
    assert by_text["Code: E1, Meaning: Water tank empty"] == 0.0 < by_text["Code: E3, Meaning: Wheel stuck"]
    assert decision.answer is None or found[decision.answer].text.startswith("Code: E3")
    # a text naming only another model is read as before when no text names the one asked
    assert other_codes("Is the S7 quiet?", ["I came from the S6, this one is quiet", "Quiet enough"]) == [False, False]
    assert other_codes("What does E3 mean?", ["E1: tank empty", "E3: wheel stuck", "Press the button"]) == [True, False, False]
    assert other_codes("What does e-3 mean?", ["E1: tank", "E3: wheel"]) == [True, False]  # one code however written


def test_a_selector_not_told_whether_a_product_was_asked_sees_it_in_the_documents(judged_selector):
    # a pipeline run from its exported YAML says nothing of a product: across products its spans went unweighed
    folder, _, _ = judged_selector
    selector = AnswerSelector(model=str(folder), top_k=3)
    content = FILLER + f" {ANSWER}. Great buy."
    start = content.index("lasts a whole week")
    reading = ReaderOutput(
        [SpanCandidate(1, start, start + 18, 4.0, 0), SpanCandidate(0, content.index("grey"), content.index("grey") + 4, 0.1, 0)],
        0.5,
        {0: 0.5, 1: 0.5},
    )  # the answer in the document the retriever liked least

    def answers(items: tuple[str, str], all_documents: bool | None) -> list[tuple]:
        documents = [
            Document(id=f"d{n}", content=content, score=score, meta={"item_id": item})
            for n, (item, score) in enumerate(zip(items, (9.0, 1.0)))
        ]
        found = selector.run(query="How long does the battery last?", documents=documents, reading=reading, all_documents=all_documents)
        return [(a.data, round(a.score, 6)) for a in found["answers"]]

    assert answers(("P1", "P2"), None) == answers(("P1", "P2"), True) != answers(("P1", "P2"), False)
    assert answers(("P1", "P1"), None) == answers(("P1", "P1"), False)


def test_the_fit_does_not_depend_on_the_order_of_the_labels(tmp_path):
    records, labels = judged_records(120, seed=3)
    fits = []
    for name, order in (("forward", records), ("backward", records[::-1])):
        fit_judged_selector(*judged_frames(order, labels), tmp_path / name, {}, folds=3)
        fits.append(json.loads((tmp_path / name / SELECTOR_FILE).read_text())["calibration"])
    assert fits[0] == fits[1]


FACT = "How many hours does the battery last?"
OPINION = "How is the screen?"
FACT_REVIEW = "Setup was easy. The battery easily lasts 40 hours on a single charge, even with the screen at full brightness all day."
OPINION_REVIEW = "Setup was easy. The screen is bright and sharp in sunlight. The box was plain."


def shown_text_records(count: int) -> tuple[list[dict], dict[str, JudgedQuestion]]:
    """Factual questions answered by a short span inside a long phrase, opinions answered by the whole phrase."""
    rng = random.Random(1)
    records, labels = [], {}
    for n in range(count):
        factual, answered = n % 2 == 0, n % 5 != 0
        query, content = (FACT, FACT_REVIEW) if factual else (OPINION, OPINION_REVIEW)
        span = "40 hours" if factual else "bright"
        start = content.index(span)
        other = content.index("Setup was easy")
        spans = [[start, start + len(span), 3.0 + rng.gauss(0, 1)], [other, other + 14, rng.gauss(0, 1)]]
        spans.sort(key=lambda s: -s[2])
        documents = [{"id": f"{n}", "content": content, "rank": 0, "score": 5.0, "null": rng.gauss(1.0, 1), "spans": spans}]
        qid = f"t{n}"
        records.append({"id": qid, "question": query, "item_id": f"item{n % 17}", "domain": "electronics", "modes": {MODE: documents}})
        answer = JudgedSpan("40 hours" if factual else "The screen is bright and sharp in sunlight")
        labels[qid] = JudgedQuestion(
            qid, f"item{n % 17}", query, "yes" if answered else "no", (answer,) if answered else (), domain="electronics"
        )
    return records, labels


def test_a_card_shows_the_readers_own_span_where_that_reads_as_the_answer(tmp_path):
    records, labels = shown_text_records(200)
    questions, spans, texts = judged_frames(records, labels)
    assert set(texts["span_right"]) == {True, False}  # "40 hours" right, its phrase too long; "bright" wrong, its phrase right
    fit_judged_selector(questions, spans, texts, tmp_path, {}, folds=3)
    assert json.loads((tmp_path / SELECTOR_FILE).read_text())["text_model"] == "text.txt"
    selector = AnswerSelector(model=str(tmp_path), top_k=1)
    for query, content, shown in ((FACT, FACT_REVIEW, "40 hours"), (OPINION, OPINION_REVIEW, "The screen is bright and sharp in sunlight")):
        span = "40 hours" if query == FACT else "bright"
        start = content.index(span)
        reading = ReaderOutput([SpanCandidate(0, start, start + len(span), 4.0, 0)], 0.5, {0: 0.5})
        answer = next(
            a for a in selector.run(query=query, documents=[Document(id="a", content=content)], reading=reading)["answers"] if a.data
        )
        assert answer.data == shown
        assert content[answer.document_offset.start : answer.document_offset.end] == shown  # offsets of the text shown


def test_a_card_verdict_labels_a_candidate_no_listed_span_matches():
    records, labels = judged_records(12, seed=5)
    shipping = "Shipping was quick"
    with_verdicts = {qid: replace(label, cards={"shipping was quick": True}) for qid, label in labels.items()}
    _, plain, _ = judged_frames(records, labels)
    _, judged, _ = judged_frames(records, with_verdicts)
    answered = [qid for qid, label in labels.items() if label.answerable != "no"]
    # the phrase a card verdict accepts is right only on questions the reviews answer, and nothing else changes
    assert len(shipping.split()) in set(plain["span_words"])
    changed = judged["f1"] != plain["f1"]
    assert changed.any() and (judged.loc[changed, "span_words"] == len(shipping.split())).all()
    assert set(judged.loc[changed, "id"]) <= set(answered) and (judged.loc[changed, "f1"] == 1.0).all()


HOLD, CHARGE = "Is it comfortable to hold?", "Is it a long-lasting charge?"
HOLD_PHRASE, CHARGE_PHRASE = "It fits my hand perfectly", "The battery goes for days"
# Questions of one kind and length, phrases of one length that share no word with them, in either order: only their meaning tells them apart.
ASPECT_REVIEWS = (
    f"Shipping was quick. {HOLD_PHRASE}. {CHARGE_PHRASE}. The color is grey.",
    f"Shipping was quick. {CHARGE_PHRASE}. {HOLD_PHRASE}. The color is grey.",
)


def aspect_reading(content: str, logits: tuple[float, float]) -> ReaderOutput:
    """The reader's output with both phrases as spans of the review, of these logits."""
    return ReaderOutput(
        [SpanCandidate(0, content.index(p), content.index(p) + len(p), logit, 0) for p, logit in zip((HOLD_PHRASE, CHARGE_PHRASE), logits)],
        0.5,
        {0: 0.5},
    )


def aspect_records(count: int) -> tuple[list[dict], dict[str, JudgedQuestion]]:
    """Each question read over a review that holds both answers, which the reader likes alike."""
    rng = random.Random(2)
    records, labels = [], {}
    for n in range(count):
        query, answer = (HOLD, HOLD_PHRASE) if n % 2 else (CHARGE, CHARGE_PHRASE)
        content = ASPECT_REVIEWS[(n // 2) % 2]
        spans = sorted(([s.start, s.end, 3.0 + rng.gauss(0, 1)] for s in aspect_reading(content, (0, 0)).spans), key=lambda s: -s[2])
        documents = [{"id": f"{n}", "content": content, "rank": 0, "score": 5.0, "null": rng.gauss(1.0, 1), "spans": spans}]
        qid = f"a{n}"
        records.append({"id": qid, "question": query, "item_id": f"item{n % 13}", "domain": "electronics", "modes": {MODE: documents}})
        labels[qid] = JudgedQuestion(qid, f"item{n % 13}", query, "yes", (JudgedSpan(answer),), domain="electronics")
    return records, labels


def test_phrase_similarity_puts_the_phrase_about_what_was_asked_first(tmp_path):
    from qa_system.config import HUB_EMBEDDING_MODEL, default_embedding_model
    from qa_system.reading.phrase_similarity import PhraseSimilarity

    similarity = PhraseSimilarity(default_embedding_model(), "torch", "cpu")
    closer, farther = similarity("Is the staff friendly?", ["the staff are incredible", "the rooms were clean"])
    assert closer > farther
    assert similarity.to_info() == {"model": HUB_EMBEDDING_MODEL, "backend": "torch"}  # never this machine's path

    questions, spans, texts = judged_frames(*aspect_records(120), {"phrase_similarity": similarity})
    fit_judged_selector(questions, spans, texts, tmp_path, {}, folds=3, similarities={"phrase_similarity": similarity})
    info = json.loads((tmp_path / SELECTOR_FILE).read_text())
    assert "phrase_similarity" in info["span_features"] and "best_phrase_similarity" in info["answer_features"]
    assert info["similarity"] == similarity.to_info() and "tuned_similarity" not in info
    selector = AnswerSelector(model=str(tmp_path), top_k=2)
    selector.use_runtime("cpu")
    for content in ASPECT_REVIEWS:
        for logits in ((4.0, 4.0), (4.5, 4.0), (4.0, 4.5)):  # the reader likes either as much or a little more
            for query, asked in ((HOLD, HOLD_PHRASE), (CHARGE, CHARGE_PHRASE)):
                reading = aspect_reading(content, logits)
                answers = selector.run(query=query, documents=[Document(id="a", content=content)], reading=reading)["answers"]
                assert [a.data for a in answers if a.data][0] == asked


BATTERY_QUESTIONS = (
    "Does the battery last?",
    "How long does the battery last?",
    "Is the battery life good?",
    "Does the battery hold a charge?",
)
BATTERY_ANSWERS = (
    "It goes for days between charges",
    "It runs all week without a charge",
    "I only plug it in on Sundays",
    "Lasts three days on one charge",
)
# Phrases that share the question's word and answer nothing: the untuned encoder likes many of them better.
BATTERY_MENTIONS = (
    "The battery cover feels cheap",
    "The battery door is flimsy",
    "The battery compartment is hard to open",
    "The batteries were included",
)


def test_a_phrase_encoder_tuned_on_judged_phrases_prefers_what_answers_to_what_shares_a_word(tmp_path):
    from qa_system.config import default_embedding_model
    from qa_system.reading.phrase_similarity import PhraseSimilarity
    from qa_system.training.phrase_encoder import PhraseExample, PhraseTuning, tune_phrase_encoder

    def ordered(similarity):  # (question, answer, mention) triples where the answer is the closer
        return sum(a > m for q in BATTERY_QUESTIONS for a in similarity(q, BATTERY_ANSWERS) for m in similarity(q, BATTERY_MENTIONS))

    examples = [PhraseExample(q, f"item{n}", BATTERY_ANSWERS, BATTERY_MENTIONS) for n, q in enumerate(BATTERY_QUESTIONS)]
    tuned = tune_phrase_encoder(
        default_embedding_model(), examples, tmp_path / "tuned", PhraseTuning(epochs=8, learning_rate=1e-4), progress=False
    )
    before = ordered(PhraseSimilarity(default_embedding_model(), "torch", "cpu"))
    after = ordered(PhraseSimilarity(str(tuned), "torch", "cpu"))
    assert before < 48 and after >= 60  # of 64


def test_a_tuned_phrase_encoder_is_cross_fitted_by_product_and_served_from_the_selectors_folder(tmp_path):
    import shutil

    from qa_system.config import default_embedding_model
    from qa_system.reading.phrase_similarity import PhraseSimilarity
    from qa_system.training.phrase_encoder import TUNING_FILE, PhraseTuning, cross_fitted_encoders, phrase_examples, tune_phrase_encoder

    records, labels = aspect_records(60)
    examples = phrase_examples(records, labels)
    for example in examples:  # each question's phrase is right, the other aspect's wrong
        asked, other = (HOLD_PHRASE, CHARGE_PHRASE) if example.question == HOLD else (CHARGE_PHRASE, HOLD_PHRASE)
        assert example.right == (asked,) and other in example.wrong

    tuning = PhraseTuning(epochs=1, batch_size=16)
    folds = cross_fitted_encoders(default_embedding_model(), examples, tmp_path / "work", folds=2, tuning=tuning, progress=False)
    assert set(folds) == {e.item_id for e in examples} and len(set(folds.values())) == 2
    for path in set(folds.values()):  # each product's encoder was tuned without its questions
        tuned_on = json.loads((path / TUNING_FILE).read_text())["questions"]
        assert tuned_on == sum(folds[e.item_id] != path for e in examples)
    again = cross_fitted_encoders(default_embedding_model(), examples, tmp_path / "work", folds=2, tuning=tuning, progress=False)
    assert again == folds and all((p / TUNING_FILE).stat().st_mtime == (folds[i] / TUNING_FILE).stat().st_mtime for i, p in again.items())

    served = tune_phrase_encoder(default_embedding_model(), examples, tmp_path / "selector" / "phrase-encoder", tuning, progress=False)
    untuned = PhraseSimilarity(default_embedding_model(), "torch", "cpu")
    similarities = {"phrase_similarity": untuned, "tuned_phrase_similarity": PhraseSimilarity(str(served), "torch", "cpu")}
    by_product = {item: {"tuned_phrase_similarity": PhraseSimilarity(str(path), "torch", "cpu")} for item, path in folds.items()}
    questions, spans, texts = judged_frames(records, labels, similarities, by_product)
    # A training row's tuned similarity is by its product's fold encoder, the other by the configured encoder.
    first = records[0]
    rows = spans[spans["id"] == first["id"]]
    texts_of = [c.text for c in features(first["question"], [_read_document(d) for d in first["modes"][MODE]], phrases=True)[1]]
    assert rows["tuned_phrase_similarity"].tolist() == pytest.approx(
        by_product[first["item_id"]]["tuned_phrase_similarity"](first["question"], texts_of)
    )
    assert rows["phrase_similarity"].tolist() == pytest.approx(untuned(first["question"], texts_of))
    fit_judged_selector(questions, spans, texts, tmp_path / "selector", {}, folds=3, similarities=similarities)
    info = json.loads((tmp_path / "selector" / SELECTOR_FILE).read_text())
    assert info["tuned_similarity"] == {"model": "phrase-encoder", "backend": "torch"}
    assert info["similarity"] == untuned.to_info() and "best_tuned_phrase_similarity" in info["answer_features"]
    moved = shutil.copytree(tmp_path / "selector", tmp_path / "elsewhere")  # the selector's folder carries its encoder
    shutil.rmtree(tmp_path / "selector")
    selector = AnswerSelector(model=str(moved), top_k=2)
    selector.use_runtime("cpu")
    content = ASPECT_REVIEWS[0]
    for query, asked in ((HOLD, HOLD_PHRASE), (CHARGE, CHARGE_PHRASE)):
        answers = selector.run(query=query, documents=[Document(id="a", content=content)], reading=aspect_reading(content, (4.0, 4.0)))[
            "answers"
        ]
        assert [a.data for a in answers if a.data][0] == asked
