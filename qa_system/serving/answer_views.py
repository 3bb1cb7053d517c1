"""What a front end shows of an answer, whatever stage produced it.

Extractive readers return ``ExtractedAnswer`` (a span at character offsets of a review, or
``data=None`` for "no answer"); the RAG stage returns ``GeneratedAnswer`` (free text citing
reviews, ``data=None`` for "no answer"). ``answer_views`` turns either into ``AnswerView``, so
that the search page renders one kind of card, and ``highlight_segments`` cuts a review at the
answer's *real* offsets (searching for the answer text would mark the wrong occurrence when it
appears twice, and nothing when the reader's span does not match the text exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from html import unescape
from typing import TYPE_CHECKING, Any

from qa_system.language import language_note
from qa_system.nouns import DOCUMENTS, REVIEWS, noun_of

if TYPE_CHECKING:  # a client of a running server prints cards without importing Haystack
    from haystack import Document

ELLIPSIS = "…"
# The most characters a cut moves to keep a word whole: past it (text without spaces) it cuts inside the word.
WORD_SLACK = 30


@dataclass(frozen=True)
class Segment:
    """A piece of a review as a card shows it: plain text, or highlighted (an answer span)."""

    text: str
    highlighted: bool = False


def highlight_segments(text: str, spans: Sequence[tuple[int, int]], window: int | None = None) -> list[Segment]:
    """``text`` as plain and highlighted segments, the highlights at the given character offsets.

    Overlapping spans are merged; empty spans and spans beyond the text are ignored. With ``window``, only
    ``window`` characters around the highlights are kept (cut at a word boundary, marked "…").
    """
    spans = sorted((s, e) for s, e in spans if 0 <= s < e <= len(text))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    begin, finish = 0, len(text)
    if window is not None and merged:
        begin, finish = word_start(text, merged[0][0] - window), word_end(text, merged[-1][1] + window)
    segments = [Segment(ELLIPSIS)] if begin > 0 else []
    position = begin
    for start, end in merged:
        if start > position:
            segments.append(Segment(text[position:start]))
        segments.append(Segment(text[start:end], highlighted=True))
        position = end
    if finish > position:
        segments.append(Segment(text[position:finish]))
    if finish < len(text):
        segments.append(Segment(ELLIPSIS))
    return segments


def word_start(text: str, position: int) -> int:
    """The start of the word that holds ``position`` (``position`` itself where a word starts there); ``position``
    where that word is longer than ``WORD_SLACK`` (a text without spaces: Chinese, a long link)."""
    if position <= 0:
        return 0
    space = text.rfind(" ", max(0, position - WORD_SLACK), position)
    if space >= 0:
        return space + 1
    return 0 if position <= WORD_SLACK else position


def word_end(text: str, position: int) -> int:
    """The end of the word that holds the character before ``position``; ``position`` where that word runs on for
    more than ``WORD_SLACK`` characters."""
    if position >= len(text):
        return len(text)
    space = text.find(" ", max(0, position - 1), position - 1 + WORD_SLACK)  # the end of the word holding the last kept character
    if space >= 0:
        return space
    return len(text) if len(text) - position <= WORD_SLACK else position


# The reader's scores are sigmoids of logits (``qa_system.reading.reader``): they rank the candidates
# of one question and were never calibrated, so a page names them scores, never "confidence" or "% sure".
SCORE_LABELS = {"span": "reader score", "no_answer": "no-answer score"}
SCORE_HELP = {
    "span": (
        "The reader's score for this span: the sigmoid of the model's start and end logits for it. It ranks "
        "the answers to this question; it is not a calibrated chance that the answer is right."
    ),
    "no_answer": (
        "The reader's score for “no answer”: the sigmoid of the model's no-answer logit (plus the no-answer "
        "threshold). Spans are weighed against it; it is not a calibrated chance that the {noun} hold no answer."
    ),
    "generated": (
        "A generated answer has no score: it is shown because the {noun} it cites say it (the grounding check), "
        "not for a chance that it is right."
    ),
}


# The answer selector's scores are probabilities of being right, calibrated on held-out questions
# (reading/selection.py): they are shown as chances, and only they are.
PROBABILITY_LABELS = {"span": "{} chance right", "no_answer": "{} chance there is no answer here"}
NOTHING_READ_LABEL = "nothing was read"
PROBABILITY_HELP = {
    "span": (
        "The answer selector's probability that this answer is right (its words match an annotator's answer at F1 0.5 or more), "
        "calibrated on {calibrated_on}: there, answers shown with a chance were right about that often."
    ),
    "no_answer": "The answer selector's probability that these {noun} do not answer the question, calibrated on {calibrated_on}.",
}
# Said where the chances of a collection of one's own are still those fitted on product reviews.
RECALIBRATE_HINT = " On documents unlike product reviews it can be off: `qa-system fit-confidence` fits it to yours on labelled questions."


def _percent(probability: float) -> int:
    """A chance as a whole percentage between 1 and 99: a chance fitted on finite data is never a certainty."""
    return min(max(round(probability * 100), 1), 99)


def chance_text(probability: float) -> str:
    """A chance as it is shown: "72%" (``_percent``)."""
    return f"{_percent(probability)}%"


def a_chance(probability: float) -> str:
    """The chance with its article, as it is read aloud: "a 72% chance", "an 89% chance"."""
    percent = _percent(probability)
    return f"{'an' if percent in (8, 11, 18) or 80 <= percent <= 89 else 'a'} {percent}% chance"


def singular(noun: str) -> str:
    """The noun for one: review of reviews, document of documents."""
    return noun.removesuffix("s")


def score_level(score: float | None) -> str:
    """high / medium / low, for colouring a score (a ranking signal, not a probability of being right)."""
    if score is None:
        return "unknown"
    return "high" if score >= 0.7 else "medium" if score >= 0.4 else "low"


@dataclass(frozen=True)
class AnswerView:
    """One answer as shown to a user.

    ``kind``: ``"span"`` (extracted, with ``document`` and offsets), ``"generated"`` (free text with
    ``sources``) or ``"no_answer"``. ``document`` of a "no answer" is None. ``noun``: what the answer was read
    from (``noun_of``: "reviews" or "documents"), None for a "no answer", which names no document.
    """

    kind: str
    text: str | None
    score: float | None
    document: Document | None = None
    start: int | None = None
    end: int | None = None
    sources: list[Document] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    noun: str | None = None
    query: str | None = None  # the question it answers

    @property
    def probability(self) -> float | None:
        """The probability that this answer is right, when the stage that chose it gives one (the answer selector's)."""
        return self.meta.get("probability")

    @property
    def support(self) -> int:
        """How many reviews (or documents) say this answer (1 for a span the selector did not group with others)."""
        return int(self.meta.get("support", 1))

    @property
    def supporting_spans(self) -> list[tuple[int, int]]:
        """The answer's offsets in its own review, and those of every other span of the same review saying the same thing.
        A span overlapping the answer's own is left out: highlighted with it, it would mark more than the card says."""
        document_id = self.document.id if self.document is not None else None
        spans = [(s["start"], s["end"]) for s in self.meta.get("spans", []) if s["document_id"] == document_id]
        if self.start is None or self.end is None:
            return spans
        return [(self.start, self.end), *(span for span in spans if span[1] <= self.start or span[0] >= self.end)]

    @property
    def withheld(self) -> dict | None:
        """A generated answer withheld in favour of this one (the reviews it cited did not say it): its text and why."""
        return self.meta.get("withheld")

    @property
    def shown_text(self) -> str | None:
        """The answer as a reader sees it: HTML entities of the stored review decoded ("7&#34;" -> '7"'), and a span's
        line breaks and runs of spaces as one space (a card's answer is one line); ``start`` and ``end`` still point
        into the stored text."""
        if self.text is None:
            return None
        return " ".join(unescape(self.text).split()) if self.kind == "span" else unescape(self.text)

    @property
    def score_text(self) -> str:
        """The score with two decimals ("0.87"; not a percentage, which reads as a chance of being right), or "" when the stage gives none."""
        return "" if self.score is None else f"{self.score:.2f}"

    @property
    def score_label(self) -> str:
        """The score named as what it is: a chance where it is a probability ("72% chance right"), else
        the reader's score ("reader score 0.87", "no-answer score 0.96"); "" when there is none."""
        if self.meta.get("no_documents"):  # no chance to state about documents never read
            return NOTHING_READ_LABEL
        if self.probability is not None and self.kind in PROBABILITY_LABELS:
            return PROBABILITY_LABELS[self.kind].format(chance_text(self.probability))
        return f"{SCORE_LABELS.get(self.kind, 'score')} {self.score_text}" if self.score_text else ""

    @property
    def score_help(self) -> str:
        """What the score means, for a tooltip (``help_text`` of the answer's own noun)."""
        return self.help_text(self.noun or DOCUMENTS)

    def help_text(self, noun: str) -> str:
        """What the score means, for a tooltip, naming what was read ``noun`` ("reviews" or "documents")."""
        if self.probability is not None and self.kind in PROBABILITY_HELP:
            calibrated_on = self.meta.get("calibrated_on") or "questions it never saw"
            hint = RECALIBRATE_HINT if noun == DOCUMENTS and not self.meta.get("recalibrated") else ""
            return PROBABILITY_HELP[self.kind].format(noun=noun, calibrated_on=calibrated_on) + hint
        return SCORE_HELP.get(self.kind, "The answering stage's score for this answer; not a calibrated chance that it is right.").format(
            noun=noun
        )

    @property
    def level(self) -> str:
        """high, medium, low or unknown: the score's band, for colouring it (``score_level``)."""
        return score_level(self.score)

    def segments(self, window: int | None = None) -> list[Segment]:
        """The answer's review with the answer highlighted (empty for answers without a review). A passage of a longer
        document is marked "…" where the document goes on before or after it: it starts and ends mid-sentence."""
        if self.document is None or self.document.content is None:
            return []
        spans = self.supporting_spans
        if window is not None and self.start is not None and self.end is not None:
            # An excerpt is about its card's span: the same words further on are marked only when they fall inside it,
            # else the excerpt would run from one to the other (thousands of characters in a long review).
            spans = [span for span in spans if span[0] >= self.start - window and span[1] <= self.end + window]
        segments = highlight_segments(self.document.content, spans, window)
        meta = self.document.meta
        if segments and int(meta.get("source_offset", 0) or 0) > 0 and segments[0].text != ELLIPSIS:
            segments.insert(0, Segment(ELLIPSIS))
        if segments and int(meta.get("passage", 0) or 0) + 1 < int(meta.get("passages", 1) or 1) and segments[-1].text != ELLIPSIS:
            segments.append(Segment(ELLIPSIS))
        return segments


def answer_view(answer: Any) -> AnswerView:
    """An ``ExtractedAnswer``, a ``GeneratedAnswer`` or anything with ``.data`` as an ``AnswerView``."""
    score = getattr(answer, "score", None)
    meta = dict(getattr(answer, "meta", None) or {})
    query = getattr(answer, "query", None)
    if getattr(answer, "data", None) is None or not str(answer.data).strip():
        return AnswerView("no_answer", None, score, meta=meta, query=query)
    offset = getattr(answer, "document_offset", None)
    document = getattr(answer, "document", None)
    if document is not None and offset is not None:
        return AnswerView("span", answer.data, score, document, offset.start, offset.end, meta=meta, noun=noun_of([document]), query=query)
    documents = list(getattr(answer, "documents", None) or [])
    cited = set(meta.get("cited_document_ids") or [])
    sources = [d for d in documents if d.meta.get("referenced") or d.id in cited]
    return AnswerView("generated", str(answer.data), score, sources=sources, meta=meta, noun=noun_of(documents), query=query)


def answer_views(answers: Sequence[Any]) -> list[AnswerView]:
    """The answers as views, best first, each span once.

    A corpus may hold a review twice (indexes of older versions held one copy per SubjQA split), so
    two retrieved copies of one review would give the same span twice; only the better-ranked one is kept.
    """
    views, seen = [], set()
    for view in map(answer_view, answers):
        if view.kind == "span":
            key = (view.document.meta.get("review_id", view.document.id), view.start, view.end)
            if key in seen:
                continue
            seen.add(key)
        views.append(view)
    return views


@dataclass(frozen=True)
class RankedAnswers:
    """The answers as a page shows them: the ones ranked above "no answer", the no-answer verdict
    (when the stage gives one), and the spans ranked below it, best first; ``noun``: what was read
    ("reviews" or "documents", ``reading_noun``)."""

    above: list[AnswerView]
    no_answer: AnswerView | None
    below: list[AnswerView]
    noun: str = DOCUMENTS

    @property
    def abstains(self) -> bool:
        """The reader's verdict is "no answer": nothing ranked above it."""
        return self.no_answer is not None and not self.above

    @property
    def best_below(self) -> AnswerView | None:
        """The best span the reader rated below "no answer": shown beside an abstention, not hidden,
        as SQuAD 2.0 systems report the best span with their no-answer probability."""
        return self.below[0] if self.abstains and self.below else None

    @property
    def close_call(self) -> str:
        """When the best answer and "no answer" are about as likely to be right (the selector says so), a sentence saying so; else ""."""
        first = (self.above or [self.no_answer])[0] if (self.above or self.no_answer) else None
        if first is None or not first.meta.get("close_call"):
            return ""
        answer = self.above[0] if self.above else self.best_below
        if answer is None or answer.probability is None or self.no_answer is None or self.no_answer.probability is None:
            return ""
        which = "the best answer below" if self.abstains else "this answer"
        chances = (
            f"{which} has {a_chance(answer.probability)} of being right, and \u201cno answer\u201d {a_chance(self.no_answer.probability)}"
        )
        check = f"Read the {singular(self.noun)} before you rely on it."
        if self.overflows_notably(answer):
            return f"A close call: {chances}, each estimated on its own; {BOTH_CANNOT_BE_RIGHT}. {check}"
        return f"A close call: {chances}. {check}"

    def overflows(self, answer: AnswerView) -> bool:
        """Whether the chances shown for ``answer`` and "no answer" add up to more than 100%. The answer selector
        calibrates them apart (``reading.selection``): if the answer is right, the documents answer, so both
        cannot be right, and at least one of the two is too high for this question."""
        if answer.probability is None or self.no_answer is None or self.no_answer.probability is None:
            return False
        return _percent(answer.probability) + _percent(self.no_answer.probability) > 100

    def overflows_notably(self, answer: AnswerView) -> bool:
        """``overflows`` by at least ``NOTABLE_OVERFLOW`` points, with both chances at least ``NOTABLE_PERCENT`` as shown: a 99%
        answer beside an 8% "no answer", or a 77% "no answer" beside a 27% answer, overflow by a few points, which said on
        most cards reads as if no chance could be trusted."""
        if not self.overflows(answer):
            return False
        shown = (_percent(answer.probability), _percent(self.no_answer.probability))
        return min(shown) >= NOTABLE_PERCENT and sum(shown) >= 100 + NOTABLE_OVERFLOW

    def overflow_note(self) -> str:
        """Below an answer whose chance and "no answer"'s add up past 100% (no close call: that says it), a sentence on
        the "no answer" card saying so; else ""."""
        first = self.above[0] if self.above else None
        if first is None or self.abstains or first.meta.get("close_call") or not self.overflows_notably(first):
            return ""
        return (
            f"The first answer has {a_chance(first.probability)} of being right, \u201cno answer\u201d {a_chance(self.no_answer.probability)}, "
            f"each estimated on its own; {BOTH_CANNOT_BE_RIGHT}."
        )

    def no_answer_note(self) -> str:
        """What a "no answer" means here, in words that do not oversell it.

        Both numbers are the reader's scores (sigmoids of logits, each on its own): they rank the
        candidates, and are not probabilities that add up.
        """
        if not self.abstains:
            return ""
        best = self.best_below
        if best is None:
            return ""
        if best.probability is not None and self.no_answer.probability is not None:
            chances = f"The best answer found has {a_chance(best.probability)} of being right, \u201cno answer\u201d {a_chance(self.no_answer.probability)}"
            if self.overflows_notably(best):
                chances += f", each estimated on its own ({BOTH_CANNOT_BE_RIGHT})"
            return f"{chances}, so the answer is \u201cno answer\u201d. The span is shown below."
        return (
            f"The reader's best span scores {best.score_text or 'less'}, below its no-answer score"
            f"{f' ({self.no_answer.score_text})' if self.no_answer.score_text else ''}, so it answers "
            "“no answer”. The span is shown below: it may still answer the question."
        )


def reading_noun(views: Sequence[AnswerView], noun: str | None = None) -> str:
    """What the answers were read from, by their documents' meta (``noun_of``): "reviews" or "documents"; where no
    answer names a document (nothing was read), ``noun`` (the caller knows its collection), else "documents"."""
    return next((view.noun for view in views if view.noun), None) or noun or DOCUMENTS


def rank_answers(views: Sequence[AnswerView], noun: str | None = None) -> RankedAnswers:
    """Splits the views (in the reader's order) at the first no-answer (``noun``: ``reading_noun``'s fallback)."""
    null = next((i for i, v in enumerate(views) if v.kind == "no_answer"), None)
    noun = reading_noun(views, noun)
    if null is None:
        return RankedAnswers(list(views), None, [], noun)
    return RankedAnswers(list(views[:null]), views[null], list(views[null + 1 :]), noun)


# The chances of an answer and of "no answer" are calibrated apart and may add up past 100% (``RankedAnswers.overflows``).
BOTH_CANNOT_BE_RIGHT = "both cannot be right, so at least one of these chances is too high here"
# Chances past 100% are said only when the lesser of the two, as shown, is at least this, and they add up to at least
# this many points past 100.
NOTABLE_PERCENT = 25
NOTABLE_OVERFLOW = 10


def no_answer_text(noun: str = REVIEWS) -> str:
    """The "no answer" card's text: "No answer in these reviews" (or documents)."""
    return f"No answer in these {noun}"


def no_documents_note(noun: str = DOCUMENTS, no_word_matched: bool = False, by_meaning: bool = True) -> str:
    """The note of a "no answer" where nothing was read: nothing passed what the question was limited to, or (asked of
    every document) none shares a word with the question (``by_meaning``: the collection can be searched by meaning)."""
    if no_word_matched:
        other_retriever = (
            f", or with the dense or hybrid retriever, which find {noun} by meaning."
            if by_meaning
            else f": finding {noun} by meaning (the dense or hybrid retriever) needs vectors, which this collection was indexed without."
        )
        return f"There was nothing to read: no {singular(noun)} holds a word of the question. Ask with other words{other_retriever}"
    return f"There was nothing to read: no {singular(noun)} passes the product, filters and split asked for."


NO_ANSWER_TEXT = no_answer_text(REVIEWS)
# Nothing read, and the caller did not say what its collection holds: "document" is true of a review too.
NO_DOCUMENTS_NOTE = no_documents_note(DOCUMENTS)
BELOW_HEADING = "Best span, rated below \u201cno answer\u201d:"


def document_label(document_id: str, meta: dict, answer_start: int | None = None) -> str:
    """``review R`` for SubjQA, ``document D`` for a collection's; in a document split into passages, where the passage
    starts in it, or where the answer does (``answer_start``: its offset in the passage)."""
    if meta.get("review_id"):
        return f"review {meta['review_id']}"
    where = ""
    if meta.get("passages", 1) > 1:
        offset = int(meta.get("source_offset", 0))
        where = f" (from character {offset})" if answer_start is None else f" (answer at character {offset + answer_start})"
    return f"document {meta.get('document_id', document_id)}{where}"


@dataclass(frozen=True)
class AnswerCard:
    """One answer as every door shows it (the page, the CLI, the API's ``card``): the same heading, text,
    score label and note, whichever door. Plain text: a door escapes it for its medium.

    ``number``: the answer's rank among the answers (0 for "no answer"), which names it in feedback;
    ``heading``: "1." (empty for "no answer"; ``BELOW_HEADING`` for the best span beside an abstention);
    ``text``: the answer with HTML entities decoded, or ``NO_ANSWER_TEXT``; ``label``: its score or chance
    named as what it is; ``help``: what that means; ``note``: a close call, what a "no answer" means, or
    a generated answer's flags; ``folded``: rated below "no answer" (a page may fold it away);
    ``source``: the review it came from (or that a generated answer cites); ``product``: that review's product;
    ``said_in``: "said in 2 reviews" where several give this answer (the selector grouped them), else "".
    """

    kind: str
    number: int
    heading: str
    text: str
    label: str
    help: str
    note: str = ""
    folded: bool = False
    source: str = ""
    product: str | None = None
    said_in: str = ""

    @property
    def line(self) -> str:
        """The card's head as one line of text: "1. great for reading  55% chance right"."""
        return "  ".join(part for part in (" ".join(filter(None, (self.heading, self.text))), self.label) if part)

    def as_dict(self) -> dict[str, Any]:
        """The card as JSON (the API's ``card``)."""
        return asdict(self)

    @classmethod
    def of(cls, card: dict[str, Any]) -> AnswerCard:
        """A card from ``as_dict``'s JSON, fields a newer server adds left out."""
        return cls(**{f.name: card[f.name] for f in fields(cls) if f.name in card})


def _source(view: AnswerView, noun: str) -> tuple[str, str | None]:
    if view.kind == "span" and view.document is not None:
        return document_label(view.document.id, view.document.meta, view.start), view.document.meta.get("item_id")
    if view.kind == "generated":
        cited = ", ".join(document_label(d.id, d.meta) for d in view.sources)
        products = sorted({str(d.meta["item_id"]) for d in view.sources if d.meta.get("item_id")})
        return f"cites {cited or f'no {singular(noun)}'}", ", ".join(products) or None
    return "", None


def _language_note(views: Sequence[AnswerView]) -> str:
    """``language_note`` of the question, else of the first answer's document: said on the first card."""
    first = next((view for view in views if view.kind != "no_answer"), None)
    document = None if first is None else first.document if first.kind == "span" else next(iter(first.sources), None)
    question = next((view.query for view in views if view.query), None)
    return language_note(question or "", document.content if document is not None else None)


def answer_cards(views: Sequence[AnswerView], noun: str | None = None) -> list[AnswerCard]:
    """The cards of ``answer_views`` (in their order, best first): what every door shows of them.

    The close-call sentence goes on the first card; an abstention's "no answer" card says what it means
    (``RankedAnswers.no_answer_note``), and the best span beside it is headed ``BELOW_HEADING``; a
    generated answer's note is its flags (it cites no review, it repeated itself). What was read is named as the
    answers' documents say (``reading_noun``: SubjQA's "reviews", a collection's "documents"); ``noun`` names it
    where nothing was read.
    """
    ranked = rank_answers(views, noun)
    noun = ranked.noun
    best_below = ranked.best_below
    language = _language_note(views)
    cards, number = [], 0
    for position, view in enumerate(views):
        if view.kind == "no_answer":
            note = ranked.close_call if ranked.abstains else ""
            note = note or (ranked.no_answer_note() if view is ranked.no_answer else "")
            note = note or (ranked.overflow_note() if view is ranked.no_answer else "")
            if view.meta.get("no_documents"):
                note = no_documents_note(noun, bool(view.meta.get("no_word_matched")), view.meta.get("by_meaning", True))
            if position == 0 and not view.meta.get("no_documents"):  # nothing read: nothing answered in any language
                note = " ".join(filter(None, [note, language]))
            cards.append(
                AnswerCard(
                    "no_answer",
                    0,
                    "",
                    no_answer_text(noun),
                    view.score_label,
                    view.help_text(noun),
                    note,
                    folded=not ranked.abstains and view is ranked.no_answer,
                )
            )
            continue
        number += 1
        below = any(view is other for other in ranked.below)
        note = " ".join(filter(None, [ranked.close_call, language])) if position == 0 else ""
        if view.kind == "generated":
            # The grounding check's flags speak of reviews; over documents of one's own they are documents.
            flags = [flag.replace("the reviews", f"the {noun}") for flag in view.meta.get("flags", [])]
            note = " ".join(filter(None, [note, *(f"{flag}." for flag in flags)]))
        source, product = _source(view, noun)
        heading = BELOW_HEADING if view is best_below else f"{number}."
        cards.append(
            AnswerCard(
                view.kind,
                number,
                heading,
                view.shown_text or "",
                view.score_label,
                view.help_text(noun),
                note,
                folded=below and view is not best_below,
                source=source,
                product=product,
                said_in=f"said in {view.support} {noun}" if view.support > 1 else "",
            )
        )
    return cards
