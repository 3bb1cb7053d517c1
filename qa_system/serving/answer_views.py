"""What a front end shows of an answer, whatever stage produced it.

Extractive readers return ``ExtractedAnswer`` (a span at character offsets of a review, or
``data=None`` for "no answer"); the RAG stage returns ``GeneratedAnswer`` (free text citing
reviews, ``data=None`` for "no answer"). ``answer_views`` turns either into ``AnswerView``, so
that the search page renders one kind of card, and ``highlight_segments`` cuts a review at the
answer's *real* offsets (searching for the answer text would mark the wrong occurrence when it
appears twice, and nothing when the reader's span does not match the text exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from haystack import Document

ELLIPSIS = "…"


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
        begin, finish = _word_start(text, merged[0][0] - window), _word_end(text, merged[-1][1] + window)
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


def _word_start(text: str, position: int) -> int:
    if position <= 0:
        return 0
    space = text.rfind(" ", 0, position)
    return space + 1 if space >= 0 else 0


def _word_end(text: str, position: int) -> int:
    if position >= len(text):
        return len(text)
    space = text.find(" ", position - 1)  # the end of the word holding the last kept character
    return space if space >= 0 else len(text)


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
        "threshold). Spans are weighed against it; it is not a calibrated chance that the reviews hold no answer."
    ),
}


def score_level(score: float | None) -> str:
    """high / medium / low, for colouring a score (a ranking signal, not a probability of being right)."""
    if score is None:
        return "unknown"
    return "high" if score >= 0.7 else "medium" if score >= 0.4 else "low"


@dataclass(frozen=True)
class AnswerView:
    """One answer as shown to a user.

    ``kind``: ``"span"`` (extracted, with ``document`` and offsets), ``"generated"`` (free text with
    ``sources``) or ``"no_answer"``. ``document`` of a "no answer" is None.
    """

    kind: str
    text: str | None
    score: float | None
    document: Document | None = None
    start: int | None = None
    end: int | None = None
    sources: list[Document] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def score_text(self) -> str:
        """The score with two decimals ("0.87"; not a percentage, which reads as a chance of being right), or "" when the stage gives none."""
        return "" if self.score is None else f"{self.score:.2f}"

    @property
    def score_label(self) -> str:
        """The score named as what it is ("reader score 0.87", "no-answer score 0.96"), or ""."""
        return f"{SCORE_LABELS.get(self.kind, 'score')} {self.score_text}" if self.score_text else ""

    @property
    def score_help(self) -> str:
        """What the score means, for a tooltip."""
        return SCORE_HELP.get(self.kind, "The answering stage's score for this answer; not a calibrated chance that it is right.")

    @property
    def level(self) -> str:
        """high, medium, low or unknown: the score's band, for colouring it (``score_level``)."""
        return score_level(self.score)

    def segments(self, window: int | None = None) -> list[Segment]:
        """The answer's review with the answer highlighted (empty for answers without a review)."""
        if self.document is None or self.document.content is None:
            return []
        spans = [(self.start, self.end)] if self.start is not None and self.end is not None else []
        return highlight_segments(self.document.content, spans, window)


def answer_view(answer: Any) -> AnswerView:
    """An ``ExtractedAnswer``, a ``GeneratedAnswer`` or anything with ``.data`` as an ``AnswerView``."""
    score = getattr(answer, "score", None)
    meta = dict(getattr(answer, "meta", None) or {})
    if getattr(answer, "data", None) is None or not str(answer.data).strip():
        return AnswerView("no_answer", None, score, meta=meta)
    offset = getattr(answer, "document_offset", None)
    document = getattr(answer, "document", None)
    if document is not None and offset is not None:
        return AnswerView("span", answer.data, score, document, offset.start, offset.end, meta=meta)
    documents = list(getattr(answer, "documents", None) or [])
    cited = set(meta.get("cited_document_ids") or [])
    sources = [d for d in documents if d.meta.get("referenced") or d.id in cited]
    return AnswerView("generated", str(answer.data), score, sources=sources, meta=meta)


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
    (when the stage gives one), and the spans ranked below it, best first."""

    above: list[AnswerView]
    no_answer: AnswerView | None
    below: list[AnswerView]

    @property
    def abstains(self) -> bool:
        """The reader's verdict is "no answer": nothing ranked above it."""
        return self.no_answer is not None and not self.above

    @property
    def best_below(self) -> AnswerView | None:
        """The best span the reader rated below "no answer": shown beside an abstention, not hidden,
        as SQuAD 2.0 systems report the best span with their no-answer probability."""
        return self.below[0] if self.abstains and self.below else None

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
        return (
            f"The reader's best span scores {best.score_text or 'less'}, below its no-answer score"
            f"{f' ({self.no_answer.score_text})' if self.no_answer.score_text else ''}, so it answers "
            "“no answer”. The span is shown below: it may still answer the question."
        )


def rank_answers(views: Sequence[AnswerView]) -> RankedAnswers:
    """Splits the views (in the reader's order) at the first no-answer."""
    null = next((i for i, v in enumerate(views) if v.kind == "no_answer"), None)
    if null is None:
        return RankedAnswers(list(views), None, [])
    return RankedAnswers(list(views[:null]), views[null], list(views[null + 1 :]))
