"""Answer views: highlights at the reader's real offsets, and one view for every kind of answer."""

from dataclasses import replace

from haystack import Document, ExtractedAnswer, GeneratedAnswer

from qa_system.serving.answer_views import (
    ELLIPSIS,
    Segment,
    a_chance,
    answer_cards,
    answer_view,
    answer_views,
    chance_text,
    highlight_segments,
    rank_answers,
    score_level,
)

REVIEW = "The bass is deep. Friends say the bass is deep too, but the cord broke."


def test_highlight_uses_the_offsets_not_a_text_search():
    second = REVIEW.index("bass is deep", 10)  # the same text occurs twice: the second one is the answer
    segments = highlight_segments(REVIEW, [(second, second + len("bass is deep"))])
    assert [s.text for s in segments if s.highlighted] == ["bass is deep"]
    assert "".join(s.text for s in segments[:1]) == REVIEW[:second]
    assert "".join(s.text for s in segments) == REVIEW


def test_window_cuts_at_words_and_marks_the_cuts():
    start = REVIEW.index("Friends")
    segments = highlight_segments(REVIEW, [(start, start + len("Friends"))], window=5)
    assert segments[0] == Segment(ELLIPSIS) and segments[-1] == Segment(ELLIPSIS)
    assert "".join(s.text for s in segments[1:-1]) == "deep. Friends say"
    assert highlight_segments("short", [(0, 5)], window=50) == [Segment("short", True)]
    unspaced = "电池" * 500 + "很好" + "屏幕" * 500  # no spaces: the window holds, never the whole text
    start = unspaced.index("很好")
    segments = highlight_segments(unspaced, [(start, start + 2)], window=10)
    assert "".join(s.text for s in segments[1:-1]) == unspaced[start - 10 : start + 12]


def test_overlapping_spans_merge_and_bad_spans_are_ignored():
    segments = highlight_segments(REVIEW, [(4, 8), (6, 11), (50, 40), (60, 999)])
    assert [s.text for s in segments if s.highlighted] == [REVIEW[4:11]]
    assert highlight_segments("", [(0, 3)]) == []


def test_views_of_extracted_generated_and_no_answers():
    document = Document(id="d1", content=REVIEW, meta={"review_id": "r1"})
    span = ExtractedAnswer(query="q", score=0.83, data="bass is deep", document=document, document_offset=ExtractedAnswer.Span(4, 16))
    none = ExtractedAnswer(query="q", score=0.2, data=None)
    cited = Document(id="d2", content="other", meta={"referenced": True, "source_index": 2})
    generated = GeneratedAnswer(data="Deep bass [2].", query="q", documents=[document, cited], meta={"cited_document_ids": ["d2"]})
    no_reply = GeneratedAnswer(data=None, query="q", documents=[document], meta={"no_answer_reason": "the generator found no answer"})  # type: ignore[arg-type]

    views = answer_views([span, none, generated, no_reply])
    assert [v.kind for v in views] == ["span", "no_answer", "generated", "no_answer"]
    assert views[0].score_text == "0.83" and views[0].score_label == "reader score 0.83" and views[0].level == "high"
    assert views[1].score_label == "no-answer score 0.20" and "not a calibrated chance" in views[1].score_help
    assert [s.text for s in views[0].segments() if s.highlighted] == ["bass is deep"]
    assert views[1].document is None and views[1].segments() == []
    assert views[2].sources == [cited] and views[2].score is None and views[2].score_label == ""
    assert views[3].meta["no_answer_reason"] == "the generator found no answer"


def test_score_levels_and_text():
    assert [score_level(s) for s in (0.9, 0.5, 0.1, None)] == ["high", "medium", "low", "unknown"]
    assert answer_view(ExtractedAnswer(query="q", score=0.456, data=None)).score_text == "0.46"  # a score, not "46%"


def test_copies_of_one_review_give_one_answer():
    copies = [
        Document(id=f"electronics/{split}/r1", content=REVIEW, meta={"review_id": "r1", "split": split}) for split in ("train", "test")
    ]
    answers = [
        ExtractedAnswer(query="q", score=0.9 - i / 10, data="bass", document=d, document_offset=ExtractedAnswer.Span(4, 8))
        for i, d in enumerate(copies)
    ]
    views = answer_views([*answers, ExtractedAnswer(query="q", score=0.1, data=None)])
    assert [(v.kind, v.document and v.document.meta["split"]) for v in views] == [("span", "train"), ("no_answer", None)]


def test_answers_split_at_no_answer_and_an_abstention_names_its_best_span():
    document = Document(id="d1", content=REVIEW, meta={"review_id": "r1"})

    def span(score, start, end):
        return ExtractedAnswer(
            query="q", score=score, data=REVIEW[start:end], document=document, document_offset=ExtractedAnswer.Span(start, end)
        )

    null = ExtractedAnswer(query="q", score=0.96, data=None)
    abstained = rank_answers(answer_views([null, span(0.89, 4, 16), span(0.4, 0, 3)]))
    assert abstained.abstains and abstained.above == [] and abstained.best_below.text == "bass is deep"
    note = abstained.no_answer_note()
    assert "best span scores 0.89, below its no-answer score (0.96)" in note and "may still answer" in note

    answered = rank_answers(answer_views([span(0.89, 4, 16), null, span(0.4, 0, 3)]))
    assert not answered.abstains and [v.text for v in answered.above] == ["bass is deep"] and len(answered.below) == 1
    assert answered.best_below is None and answered.no_answer_note() == ""
    assert rank_answers(answer_views([null])).no_answer_note() == ""  # nothing below: the page's own hint
    assert rank_answers(answer_views([span(0.89, 4, 16)])).no_answer is None  # a stage without a no-answer


def test_the_selectors_probabilities_are_shown_as_chances_with_every_review_saying_it():
    document = Document(id="d1", content=REVIEW, meta={"review_id": "r1"})
    second = REVIEW.index("bass is deep", 10)
    spans = [
        {"document_id": "d1", "start": 4, "end": 16},
        {"document_id": "d1", "start": second, "end": second + 12},
        {"document_id": "d9", "start": 0, "end": 4},
    ]
    meta = {"probability": 0.55, "chosen": True, "close_call": True, "support": 2, "spans": spans}
    span = ExtractedAnswer(
        query="q", score=0.55, data="bass is deep", document=document, document_offset=ExtractedAnswer.Span(4, 16), meta=meta
    )
    none = ExtractedAnswer(query="q", score=0.45, data=None, meta={"probability": 0.45, "chosen": False, "close_call": True})
    views = answer_views([span, none])
    assert views[0].score_label == "55% chance right" and "calibrated" in views[0].score_help
    assert views[1].score_label == "45% chance there is no answer here"
    assert views[0].support == 2 and views[0].supporting_spans == [(4, 16), (second, second + 12)]  # both places in this review are marked
    assert [s.text for s in views[0].segments() if s.highlighted] == ["bass is deep", "bass is deep"]
    ranked = rank_answers(views)
    assert "close call" in ranked.close_call.lower() and "55%" in ranked.close_call and "45%" in ranked.close_call
    abstained = rank_answers(answer_views([none, span]))
    assert "55% chance of being right" in abstained.no_answer_note() and "45%" in abstained.no_answer_note()
    clear = answer_views([span.__class__(**{**span.__dict__, "meta": {**meta, "close_call": False}}), none])
    assert rank_answers(clear).close_call == ""


def test_a_span_of_the_same_review_overlapping_the_answer_is_not_highlighted_with_it():
    """The card said "My dish was $23 for four pieces of sashimi", the highlight ran on into the next sentence."""
    text = "My dish was $23 for four pieces of sashimi. Having said that, the staff were friendly. The sashimi was fresh."
    document = Document(id="d1", content=text, meta={"review_id": "r1"})
    own_end = text.index(".")
    overlapping = text.index(" Having") - 7  # "sashimi. Having said that, ...": the group's other span, running past the card's
    fresh = text.index("The sashimi was fresh")
    spans = [
        {"document_id": "d1", "start": 0, "end": own_end},
        {"document_id": "d1", "start": overlapping, "end": text.index(" The sashimi")},
        {"document_id": "d1", "start": fresh, "end": len(text) - 1},
    ]
    answer = ExtractedAnswer(
        query="Is the sashimi good?", score=0.58, data=text[:own_end], document=document,
        document_offset=ExtractedAnswer.Span(0, own_end), meta={"probability": 0.58, "spans": spans},
    )  # fmt: skip
    (view,) = answer_views([answer])
    assert [s.text for s in view.segments() if s.highlighted] == [text[:own_end], "The sashimi was fresh"]


def test_an_excerpt_stays_around_its_cards_span_when_the_same_words_come_again_far_on():
    """A review said "7 hours" twice, 3,000 characters apart: the card's excerpt ran from one to the other."""
    text = "I only get approximately 7 hours of listening time. " + "The buttons are fine. " * 150 + "I only got around 7 hours."
    first, second = text.index("7 hours"), text.rindex("7 hours")
    spans = [{"document_id": "d1", "start": first, "end": first + 7}, {"document_id": "d1", "start": second, "end": second + 7}]
    answer = ExtractedAnswer(
        query="How long does the battery last?", score=0.3, data="7 hours", document=Document(id="d1", content=text),
        document_offset=ExtractedAnswer.Span(first, first + 7), meta={"probability": 0.3, "spans": spans},
    )  # fmt: skip
    (view,) = answer_views([answer])
    excerpt = view.segments(150)
    assert [s.text for s in excerpt if s.highlighted] == ["7 hours"] and len("".join(s.text for s in excerpt)) < 400
    assert [s.text for s in view.segments() if s.highlighted] == ["7 hours", "7 hours"]  # the whole review marks both
    near = text[: first + 60] + "7 hours" + text[first + 60 :]  # said again within the excerpt: marked there too
    spans[1] = {"document_id": "d1", "start": first + 60, "end": first + 67}
    (view,) = answer_views([replace(answer, document=Document(id="d1", content=near), meta={"probability": 0.3, "spans": spans})])
    assert [s.text for s in view.segments(150) if s.highlighted] == ["7 hours", "7 hours"]


def test_a_chance_is_shown_as_a_percentage_short_of_certainty():
    assert [chance_text(p) for p in (0.0, 0.004, 0.55, 0.996, 1.0)] == ["1%", "1%", "55%", "99%", "99%"]
    assert [a_chance(p) for p in (0.72, 0.89, 0.08, 0.11, 0.18, 0.8)] == [
        "a 72% chance",
        "an 89% chance",
        "an 8% chance",
        "an 11% chance",
        "an 18% chance",
        "an 80% chance",
    ]
    none = ExtractedAnswer(query="q", score=1.0, data=None, meta={"probability": 1.0, "chosen": True})
    assert answer_views([none])[0].score_label == "99% chance there is no answer here"


def test_a_generated_answers_card_notes_its_grounding_flags():
    from haystack import GeneratedAnswer

    flags = [
        "It cites none of the reviews: check it against the reviews themselves",
        "The generator wrote 5 sentences again; each is shown once",
    ]
    answer = GeneratedAnswer(data="The battery lasts ten hours.", query="q", documents=[], meta={"flags": flags, "cited_document_ids": []})
    [card] = answer_cards(answer_views([answer]), "reviews")  # given no review: the caller says what it holds
    assert card.kind == "generated" and card.text == "The battery lasts ten hours." and card.source == "cites no review"
    assert card.note == f"{flags[0]}. {flags[1]}."
    [card] = answer_cards(answer_views([answer]), "documents")  # over documents of one's own, it names them
    assert card.note.startswith("It cites none of the documents: check it against the documents themselves. The generator")
    # It has no score, and its help says why it is shown (it spoke of "the answering stage's score").
    view = answer_views([answer])[0]
    assert view.score is None and view.help_text("reviews").startswith("A generated answer has no score: it is shown because the reviews")


def test_a_spans_card_is_one_line_while_its_offsets_still_point_into_the_review():
    review = "The lamp is<br>\r\nvery   bright &amp; warm."
    start = review.index("The")
    span = ExtractedAnswer(
        query="Is it bright?",
        score=0.9,
        data=review[start:],
        document=Document(content=review),
        document_offset=ExtractedAnswer.Span(start, len(review)),
    )
    view = answer_view(span)
    assert view.shown_text == "The lamp is<br> very bright & warm." and review[view.start : view.end] == span.data
    generated = answer_view(GeneratedAnswer(data="Two points:\n- bright\n- warm", query="?", documents=[], meta={}))
    assert generated.shown_text == "Two points:\n- bright\n- warm"  # a generated answer keeps its lines


STIPEND = "A monthly wellness stipend of $75 covers gym memberships, fitness classes or meditation apps."


def stipend_answers(meta: dict, answer_p: float, no_answer_p: float, first: str = "answer") -> list[ExtractedAnswer]:
    """The selector's answers to "How much is the wellness stipend?" over a handbook page (``meta``: the document's)."""
    document = Document(id="wellness.md", content=STIPEND, meta=meta)
    start = STIPEND.index("$75")
    span = ExtractedAnswer(
        query="q",
        score=answer_p,
        data="$75",
        document=document,
        document_offset=ExtractedAnswer.Span(start, start + 3),
        meta={"probability": answer_p, "chosen": first == "answer", "close_call": True},
    )
    none = ExtractedAnswer(
        query="q", score=no_answer_p, data=None, meta={"probability": no_answer_p, "chosen": first != "answer", "close_call": True}
    )
    return [span, none] if first == "answer" else [none, span]


def test_a_close_call_never_states_two_chances_over_100_percent_as_if_both_could_be_right():
    """ "A close call: this answer has a 78% chance of being right, and "no answer" a 72% chance": if the answer is
    right the documents answer, so both cannot be; the two chances are calibrated apart and the card says so."""
    cards = answer_cards(answer_views(stipend_answers({"document_id": "wellness.md"}, 0.78, 0.72)))
    note = cards[0].note
    assert note.startswith(
        "A close call: this answer has a 78% chance of being right, and \u201cno answer\u201d a 72% chance, each estimated"
    )
    assert "both cannot be right, so at least one of these chances is too high here" in note
    assert [c.label for c in cards] == ["78% chance right", "72% chance there is no answer here"]  # each as calibrated, in order
    # Abstaining (the no-answer card first), its note says it too.
    abstained = answer_cards(answer_views(stipend_answers({"document_id": "wellness.md"}, 0.60, 0.72, first="none")))
    assert abstained[0].note.startswith(
        "A close call: the best answer below has a 60% chance of being right, and \u201cno answer\u201d a 72%"
    )
    assert "each estimated on its own" in abstained[0].note and abstained[1].label == "60% chance right"
    # Chances that fit in 100% read as before.
    coherent = answer_cards(answer_views(stipend_answers({"document_id": "wellness.md"}, 0.55, 0.45)))[0].note
    assert coherent == (
        "A close call: this answer has a 55% chance of being right, and \u201cno answer\u201d a 45% chance. "
        "Read the document before you rely on it."
    )


def test_an_answer_and_no_answer_past_100_percent_say_so_on_the_no_answer_card():
    """ "74% chance right" first, "44% chance there is no answer here" folded below it: no close call, and nothing said
    that both cannot be right."""
    answers = stipend_answers({"document_id": "wellness.md"}, 0.74, 0.44)
    for answer in answers:
        answer.meta["close_call"] = False
    first, no_answer = answer_cards(answer_views(answers))
    assert first.note == "" and no_answer.folded
    assert no_answer.note == (
        "The first answer has a 74% chance of being right, \u201cno answer\u201d a 44% chance, each estimated on its own; "
        "both cannot be right, so at least one of these chances is too high here."
    )
    within = stipend_answers({"document_id": "wellness.md"}, 0.54, 0.44)
    for answer in within:
        answer.meta["close_call"] = False
    assert answer_cards(answer_views(within))[1].note == ""  # 98%: nothing to say
    # A sure answer beside an unlikely "no answer" (99% and 8%), or chances a few points past 100% (77% and 27%), say
    # nothing: said on most cards, it read as if no chance could be trusted.
    cases = ((0.99, 0.08, False), (0.81, 0.24, False), (0.77, 0.27, False), (0.81, 0.28, False), (0.81, 0.29, True), (0.81, 0.286, True))
    for answer_p, no_answer_p, said in cases:
        answers = stipend_answers({"document_id": "wellness.md"}, answer_p, no_answer_p)
        for answer in answers:
            answer.meta["close_call"] = False
        assert bool(answer_cards(answer_views(answers))[1].note) is said, (answer_p, no_answer_p)


def test_cards_over_documents_of_your_own_say_documents_and_subjqas_say_reviews():
    own = answer_cards(answer_views(stipend_answers({"document_id": "wellness.md"}, 0.55, 0.45)))
    assert own[1].text == "No answer in these documents" and "these documents do not answer" in own[1].help
    assert own[0].note.endswith("Read the document before you rely on it.")
    subjqa = answer_cards(answer_views(stipend_answers({"review_id": "r1", "item_id": "B1"}, 0.55, 0.45)))
    assert subjqa[1].text == "No answer in these reviews" and "these reviews do not answer" in subjqa[1].help
    assert subjqa[0].note.endswith("Read the review before you rely on it.")
    # Nothing read: the caller names what its collection holds ("documents" when it does not say).
    nothing = ExtractedAnswer(query="q", score=1.0, data=None, meta={"probability": 1.0, "chosen": True, "no_documents": True})
    (card,) = answer_cards(answer_views([nothing]))
    assert card.text == "No answer in these documents" and card.note.startswith("There was nothing to read: no document passes")
    (card,) = answer_cards(answer_views([nothing]), "reviews")
    assert card.text == "No answer in these reviews" and card.note.startswith("There was nothing to read: no review passes")
    # A generated answer citing none of the handbook's pages it was given.
    given = [Document(id="wellness.md", content=STIPEND, meta={"document_id": "wellness.md", "referenced": False})]
    answer = GeneratedAnswer(data="It is $75.", query="q", documents=given, meta={"flags": [], "cited_document_ids": []})
    assert answer_cards(answer_views([answer]))[0].source == "cites no document"


def test_an_answer_said_in_several_documents_says_so_on_the_card_every_door_shows():
    """The CLI printed "(said in 2 documents)" while the API's card of the same answer said nothing of it."""
    from qa_system.serving.api.schemas import AnswerOut

    pages = [Document(id=f"p{n}", content="The monthly wellness stipend is $75.", meta={"document_id": f"wellness-{n}.md"}) for n in (1, 2)]
    spans = [{"document_id": page.id, "start": 32, "end": 35} for page in pages]
    meta = {"probability": 0.8, "chosen": True, "close_call": False, "support": 2, "spans": spans}
    grouped = ExtractedAnswer(query="q", score=0.8, data="$75", document=pages[0], document_offset=ExtractedAnswer.Span(32, 35), meta=meta)
    alone = ExtractedAnswer(
        query="q", score=0.3, data="monthly", document=pages[1], document_offset=ExtractedAnswer.Span(4, 11), meta={"probability": 0.3}
    )
    views = answer_views([grouped, alone])
    cards = answer_cards(views)
    assert [c.said_in for c in cards] == ["said in 2 documents", ""]
    assert AnswerOut.of(views[0], cards[0]).card.said_in == "said in 2 documents"


def test_the_first_card_says_when_the_question_or_its_document_is_not_english():
    # German reviews answered "ich liebe deutsche Wörter" to "Wie laut ist die Maschine?" at 78%, with nothing said
    from qa_system.language import guess_language

    questions = {
        "Wie laut ist die Maschine?": "German",
        "¿Funciona la lámpara sin internet?": "Spanish",
        "Est-ce que la batterie dure longtemps?": "French",
        "Is it good for reading?": "English",
        "Grösse?": None,  # too short to tell: nothing said
        # hyphenated English: no Portuguese "e", Italian "non", Spanish "y" or German "die" in it
        "E-ink e-reader?": None,
        "Non-stick, non-toxic?": None,
        "Y-splitter, Y-cable?": None,
        "Die-cast body, die-hard fans.": None,
        "Great e-ink screen, e-books look crisp.": None,  # too few function words of any language
    }
    assert {question: guess_language(question) for question in questions} == questions
    german = Document(id="r02", content="Leider ist der Wassertank zu klein. Außerdem ist sie ziemlich laut.", meta={"document_id": "r02"})
    start = german.content.index("Außerdem")

    def cards(query: str) -> list:
        span = ExtractedAnswer(
            query=query, score=0.6, data="Außerdem ist sie ziemlich laut", document=german,
            document_offset=ExtractedAnswer.Span(start, start + 30), meta={"probability": 0.6, "chosen": True},
        )  # fmt: skip
        none = ExtractedAnswer(query=query, score=0.3, data=None, meta={"probability": 0.3, "chosen": False})
        return answer_cards(answer_views([span, none]))

    first, *rest = cards("Wie laut ist die Maschine?")
    assert first.note == (
        "The question looks German: the reader was trained on English, so its answers to other languages are less often right "
        "than their chances say."
    )
    assert not any(card.note for card in rest)
    assert cards("How loud is it?")[0].note.startswith("Its document looks German: ")
    english = answer_cards(answer_views(stipend_answers({"document_id": "wellness.md"}, 0.7, 0.2)))
    assert "looks" not in english[0].note  # an English question over English documents: nothing said


def test_a_passage_of_a_longer_document_is_marked_where_the_document_goes_on():
    # "**Sie die Schuhe ...": a passage that starts mid-sentence looked like the start of the manual
    text = "Sie die Schuhe an einem trockenen Ort. Die Sohle ist aus Gummi und hält lange"
    start = text.index("Die Sohle")

    def shown(meta: dict) -> str:
        document = Document(id="manual#3", content=text, meta=meta)
        answer = ExtractedAnswer(
            query="q", score=0.6, data="Die Sohle", document=document, document_offset=ExtractedAnswer.Span(start, start + 9)
        )
        return "".join(segment.text for segment in answer_views([answer])[0].segments())

    assert shown({"document_id": "manual", "source_offset": 3275, "passage": 2, "passages": 5}) == f"…{text}…"
    assert shown({"document_id": "manual", "source_offset": 0, "passage": 0, "passages": 5}) == f"{text}…"
    assert shown({"document_id": "manual", "source_offset": 3275, "passage": 4, "passages": 5}) == f"…{text}"
    assert shown({"review_id": "r1"}) == text  # a review read whole
