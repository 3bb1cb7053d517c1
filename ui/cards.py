"""HTML of the search page's cards: answers, reviews, the gold answer. Presentation only.

Every text that comes from data goes through ``html_text`` (``html.escape``), and the page shows
these cards with ``st.html``, which parses no Markdown: ``st.markdown(..., unsafe_allow_html=True)``
would end the HTML block at a blank line inside a review and read the rest as Markdown. Highlights
come from ``qa_system.serving.answer_views`` segments, i.e. from the reader's character offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import unescape

from haystack import Document

from qa_system.safe_text import html_text
from qa_system.serving.answer_views import BELOW_HEADING, AnswerCard, AnswerView, Segment, highlight_segments
from qa_system.sources import split_names
from qa_system.sources.records import user_metadata


@dataclass(frozen=True)
class Nouns:
    """What the page calls a collection's documents: SubjQA's are reviews; a collection of your own (a handbook,
    tickets, an FAQ) holds documents."""

    one: str
    many: str

    @property
    def title(self) -> str:
        return f"Ask the {self.many}"


REVIEWS = Nouns("review", "reviews")
DOCUMENTS = Nouns("document", "documents")

# The source's own metadata shown on a card: at most this many fields, each value cut to this many characters.
META_SHOWN = 8
META_CHARS = 60

CSS = """
<style>
[data-testid="stMainBlockContainer"] { padding-top: 2.5rem; }
.qa-answer { margin-bottom: .35rem; }
.qa-answer-head { display: flex; align-items: baseline; gap: .75rem; flex-wrap: wrap; margin-bottom: .45rem; }
.qa-answer-text { font-size: 1.3rem; font-weight: 650; color: #0f172a; }
.qa-noanswer .qa-answer-text { color: #475569; }
.qa-rank { color: #94a3b8; font-weight: 600; font-size: .95rem; }
.qa-chip { display: inline-block; padding: .1rem .55rem; border-radius: 999px; font-size: .78rem; font-weight: 600; white-space: nowrap; }
.qa-high { background: #dcfce7; color: #166534; }
.qa-medium { background: #fef3c7; color: #92400e; }
.qa-low, .qa-unknown { background: #f1f5f9; color: #475569; }
.qa-em { background: #e0e7ff; color: #3730a3; }
.qa-gold-chip { background: #fde68a; color: #78350f; }
.qa-review { font-size: .95rem; line-height: 1.6; color: #334155; background: #f8fafc; border-left: 3px solid #fdba74;
             padding: .55rem .8rem; border-radius: 6px; margin-bottom: .6rem; }
.qa-review mark { background: #fde68a; color: #0f172a; padding: 0 .15rem; border-radius: 3px; font-weight: 600; }
.qa-source { font-size: .8rem; color: #64748b; margin-top: .35rem; }
.qa-hint { font-size: .9rem; color: #475569; }
.qa-timings { font-size: .85rem; color: #64748b; margin: .1rem 0 .6rem; }
.qa-timings b { color: #0f172a; }
/* A wide table (a report's metrics) scrolls inside its own box, not the whole page sideways. */
[data-testid="stMarkdownContainer"] table { display: block; max-width: 100%; overflow-x: auto; }
/* st.html blocks keep their last margin (Markdown dropped it): the container's gap is enough. */
[data-testid="stHtml"] > :last-child { margin-bottom: 0; }
</style>
"""


def segments_html(segments: Sequence[Segment]) -> str:
    # Some SubjQA reviews hold HTML entities (7&#34;): shown as the character, after the offsets did their work.
    return "".join(f"<mark>{html_text(unescape(s.text))}</mark>" if s.highlighted else html_text(unescape(s.text)) for s in segments)


# Ids longer than this are cut in the middle (the full one on hover): ids of one source often share a long
# prefix ("drugscom-..."), so the end, which tells them apart, is kept.
ID_CHARS = 48


def shown_id(value: str) -> str:
    """An id as a card shows it: whole up to ``ID_CHARS`` characters, else its start and its end around "…"."""
    if len(value) <= ID_CHARS:
        return value
    tail = ID_CHARS // 3
    return f"{value[: ID_CHARS - tail - 1]}…{value[-tail:]}"


def review_source(document: Document, nouns: Nouns = REVIEWS) -> str:
    """'review r-123 · B0074BW614 · train split' ('document vacation.md' in a collection of your own): the whole id
    (a very long one cut in the middle, the full one on hover)."""
    meta = document.meta
    review_id = str(meta.get("review_id") or meta.get("document_id") or document.id)
    shown = shown_id(review_id)
    splits = split_names(document)
    parts = [
        html_text(meta.get("item_id") or ""),
        html_text(f"{' + '.join(splits)} split{'s' if len(splits) > 1 else ''}") if splits else "",
    ]
    return " · ".join(
        [f'{nouns.one} <span title="{html_text(review_id)}">{html_text(shown)}</span>', *filter(None, parts), *metadata_parts(document)]
    )


def metadata_parts(document: Document) -> list[str]:
    """The document's own metadata (a review's rating, date, ...) as escaped text: 'rating 5', one part per field."""
    parts = []
    for key, value in list(user_metadata(document.meta).items())[:META_SHOWN]:
        text = str(value) if not isinstance(value, float) else f"{value:g}"
        text = text if len(text) <= META_CHARS else f"{text[: META_CHARS - 1]}…"
        parts.append(f'<span class="qa-meta">{html_text(str(key))} <b>{html_text(text)}</b></span>')
    return parts


def chip(text: str, kind: str, tooltip: str = "") -> str:
    title = f' title="{html_text(tooltip)}"' if tooltip else ""
    return f'<span class="qa-chip qa-{kind}"{title}>{html_text(text)}</span>'


def score_chips(card: AnswerCard, kind: str) -> list[str]:
    """The answer's score, named as a score (with what it means on hover), never as a confidence."""
    return [chip(card.label, kind, card.help)] if card.label else []


def no_answer_hint(nouns: Nouns = REVIEWS) -> str:
    """What the page says below a "no answer" the reader gave without a span beside it."""
    return f"The reader found nothing that answers the question in the {nouns.many} it read. The closest {nouns.many} are below."


def answer_card(view: AnswerView, card: AnswerCard, window: int = 220, extra_chips: Sequence[str] = (), nouns: Nouns = REVIEWS) -> str:
    """One answer: its card's text, label and note (``answer_cards``: what every door shows), the reviews
    saying it, and the review it came from with the answer highlighted.

    A span headed ``BELOW_HEADING`` (rated below "no answer") does not have its score coloured as a good one.
    """
    if view.kind == "no_answer":
        chips = score_chips(card, "unknown")
        head = f'<span class="qa-answer-text">{html_text(card.text)}</span>'
        hint = card.note or ("" if card.folded else no_answer_hint(nouns))
        body = f'<div class="qa-hint">{html_text(hint)}</div>' if hint else ""
        return f'<div class="qa-answer qa-noanswer"><div class="qa-answer-head">{head}{"".join([*chips, *extra_chips])}</div>{body}</div>'
    below = card.heading == BELOW_HEADING
    support = (
        [chip(card.said_in, "unknown", f"{nouns.many.capitalize()} that give this answer, in words close enough to count as one.")]
        if card.said_in
        else []
    )
    chips = [*score_chips(card, "unknown" if below else view.level), *support, *extra_chips]
    head = f'<span class="qa-rank">{html_text(card.heading)}</span><span class="qa-answer-text">{html_text(card.text)}</span>'
    hint = f'<div class="qa-hint">{html_text(card.note)}</div>' if card.note else ""
    if view.kind == "span" and view.document is not None:
        body = f'{hint}<div class="qa-review">{segments_html(view.segments(window))}</div><div class="qa-source">from {review_source(view.document, nouns)}</div>'
    else:
        sources = "".join(
            f"<li>[{html_text(d.meta.get('source_index', i))}] {review_source(d, nouns)}</li>" for i, d in enumerate(view.sources, 1)
        )
        cites = (
            f"Generated from the retrieved {nouns.many}; cites:<ul>{sources}</ul>"
            if sources
            else f"Generated; it cites none of the retrieved {nouns.many}."
        )
        body = f'{hint}<div class="qa-source">{cites}</div>'
    return f'<div class="qa-answer qa-{view.kind}"><div class="qa-answer-head">{head}{"".join(chips)}</div>{body}</div>'


def withheld_card(withheld: dict, nouns: Nouns = REVIEWS) -> str:
    """A generated answer the reviews it cites do not support: its text, struck through, and why it is not the answer."""
    return (
        '<div class="qa-answer qa-noanswer"><div class="qa-answer-head"><span class="qa-answer-text"><s>'
        f"{html_text(withheld['text'])}</s></span>{chip('generated, withheld', 'low')}</div>"
        f'<div class="qa-hint">Not shown as the answer: {html_text(withheld["reason"])}. The reader\'s answers below come from the {nouns.many} themselves.</div></div>'
    )


def review_card(document: Document, spans: Sequence[tuple[int, int]] = (), chips: Sequence[str] = (), nouns: Nouns = REVIEWS) -> str:
    """A whole review (or document), with the given character spans highlighted."""
    text = segments_html(highlight_segments(document.content or "", spans))
    return f'<div class="qa-source">{review_source(document, nouns)} {"".join(chips)}</div><div class="qa-review">{text}</div>'


def timings_line(timings: dict[str, float], pipeline: str) -> str:
    """Latency of the last query: total, the two stages, then every component."""

    def ms(seconds: float) -> str:
        return f"{1000 * seconds:.0f} ms"

    components = " · ".join(f"{html_text(name)} {ms(seconds)}" for name, seconds in timings.items() if not name.endswith("_s"))
    return (
        f'<div class="qa-timings">Answered in <b>{ms(timings["total_s"])}</b>: retrieval <b>{ms(timings["retrieval_s"])}</b>, '
        f"answering <b>{ms(timings['answer_s'])}</b> &nbsp;·&nbsp; {html_text(pipeline)}: {components}</div>"
    )
