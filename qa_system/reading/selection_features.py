"""What the answer selector sees of one question: every candidate span of every review read, and each review's "no answer".

The reader's own decision compares two logits of one small model, the best span's and the
lowest no-answer's, which does not separate "this review answers it" from "it does not" off the
reader's training domains (``../shared/notes/answer-decision-diagnostic.md``). The selector
decides from more: how each review's spans compare with that review's own no-answer, the
retriever's rank of the review and its score relative to the best one (a raw BM25 score depends on
the collection), whether other reviews say the same thing, the span's length, position and
sentence boundaries, what kind of question it is, and (judged selectors) how close the phrase's
meaning is to the question's (``phrase_similarity``). These are the
features, computed the same way at training time (from recorded reader outputs) and at serving
time (from a ``ReaderOutput``).
"""

from __future__ import annotations

import itertools
import math
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from qa_system.metrics.squad import f1 as token_f1, normalize_answer

# Candidate spans the selector weighs: the best few of each review, and of the question.
SPANS_PER_DOCUMENT = 4
SPANS_PER_QUESTION = 12
# Two spans "say the same thing" above this token F1 (SQuAD's word overlap).
AGREEMENT_F1 = 0.5

_YES_NO = frozenset("is are was were does do did can could will would should has have had am may might must".split())
_STOPWORDS = frozenset(
    "a an the of to in on for with at by from and or but is are was were be been it its this that these those i you he she "
    "we they what how which who whom whose why when where does do did can could will would should has have had there "
    "about any as so if not no yes your my our their me us them than then too very just also".split()
)
_WORD = re.compile(r"\w+")
_HEADING_NUMBER = re.compile(r"^(?:\d+(?:\.\d+)*\.?|[A-Z]\.)\s+")  # "9. ", "4.2 ", "B. " before a heading's words
_NEGATION = re.compile(r"\b(?:not|no|never|none|nothing|nor|neither|without|cannot)\b|n['’]t\b", re.IGNORECASE)
# "How long/many/much ...": a quantity asked for, answered in a few words.
_HOW_MUCH = frozenset("many much long far old big heavy often tall large loud".split())
# Where a phrase ends: an ellipsis ("the washrooms...they are clean", ". . ."), a sentence's end (not a decimal point: "1.5
# hours", "$199.99"; nor a dot inside a word, before a small letter: "amazon.com", "help@lux.com", "v1.x"), a
# semicolon, a dash between words, a comma before a word that starts a new clause, a rule or heading mark of three or more
# ("Battery=====The battery lasts", "***EDIT***", "---"), or a capitalised heading run into the word that starts its
# text ("HEADPHONE QUALITYThe headphones": reviews whose lines were joined; only before a word that starts sentences,
# so that "LEDs", "HDMI" and "TRENDnet" stay whole); Chinese and Japanese full stops too.
_SENTENCE_STARTS = "The|This|These|That|Those|They|There|It|Its|My|We|Our|You|Your|One|First|Overall|For|If|When|After|As|In|So"
# Nor the dot of an abbreviation that does not end sentences ("ca. 30 cups", "e.g. on a plane", "Dr. Smith", "Fig. 3")
# or of initials ("Made in the U.S. and"; a lone capital's dot may end one: "good A/C. The location").
_ABBREVIATIONS = "".join(
    rf"(?<!\b{a})" for a in "[A-Z]\\.[A-Z] [Cc]a [Aa]pprox [Vv]s [Ee]\\.g [Ii]\\.e [Ee]sp [Ii]ncl [Rr]esp [Ff]ig Dr Mr Mrs Ms Prof".split()
)
# A dot between two words of small letters ends a sentence whose space was lost ("the return period too.there's
# another"), unless what follows names a site or a file ("amazon.com", "song.mp3").
_DOMAIN_OR_FILE = "com|net|org|edu|gov|co|uk|de|fr|ca|au|us|io|info|biz|tv|me|ly|html?|php|aspx?|jsp?|jpe?g|png|gif|pdf|txt|exe|zip|mp[34]|wav|avi|mov|mkv|docx?|xlsx?|csv"
PHRASE_BREAK = re.compile(
    rf"\.(?: ?\.)+|\u2026|{_ABBREVIATIONS}(?:(?<!\d)\.(?![a-z\u00df-\u00f6\u00f8-\u00ff])|\.(?![\da-z\u00df-\u00f6\u00f8-\u00ff]))(?![A-Z]\.)|"
    rf"{_ABBREVIATIONS}(?<=[a-z]{{2}})\.(?!(?:{_DOMAIN_OR_FILE})\b)(?=[a-z]+(?:['\u2019][a-z]+)?[\s,])|"
    r"[!?;\n\u3002\uff01\uff1f\uff1b]|,\s(?:but|and|so|which|although|though|while)\s|\s[-\u2013\u2014]\s|(?<=[a-z.:!?)])[-\u2013\u2014]\s(?=[A-Z])|"
    r"([-=*_~#+])\1{2,}"
    rf"|(?<=[A-Z]{{3}})(?=(?:{_SENTENCE_STARTS})\b)"
)
# What a phrase does not start with (the rest of a bracket closed after a break, a list's bullet) nor end with.
_PHRASE_LEAD = re.compile(r"(?:\s|[)\]},:;*+|>\u2022]|[-\u2013\u2014](?=[\s)\]]))*")
_PHRASE_TAIL = "([{:,-\u2013\u2014"
# A phrase followed by a contrast (", but ...", ", although ...") reads on through it up to this many words in all.
_CONTRAST = re.compile(r",\s(?:but|although|though)\s")
MAX_CONTRAST_WORDS = 30
# A phrase longer than this (a review without punctuation, or without spaces) is not shown whole: the reader's own span is.
MAX_PHRASE_WORDS = 40
MAX_PHRASE_CHARS = 400
# A phrase that opens a bracket and breaks inside it ("(nice touch!)", "($100+ tip - and we ordered tons)") ends at
# its closing bracket when that comes within this many characters on the same line.
BRACKET_REACH = 80
_BRACKETS = {"(": ")", "[": "]", "{": "}"}
_OPENERS = {closer: opener for opener, closer in _BRACKETS.items()}
# An HTML entity left in stored text ("&amp;", "&#34;"): its semicolon does not end a phrase.
_ENTITY = re.compile(r"&#?\w{1,8};")
_SENTENCE_END = ".!?\n"
_SENTENCE_MARK = re.compile(r"(?<!\d)\.|\.(?!\d)|[!?\n\u3002\uff01\uff1f]")  # where the sentence around a span ends
_LINE = re.compile(r"[^\n]+")
_MARKS = re.compile(r"[?!]*")  # the question and exclamation marks that end a sentence together


@dataclass(frozen=True)
class ReadDocument:
    """One review as the reader read it: its text, its own no-answer logit, its spans (start, end, logit; best first)."""

    content: str
    null_logit: float
    spans: Sequence[tuple[int, int, float]]
    rank: int = 0
    retrieval_score: float | None = None


@dataclass(frozen=True)
class Candidate:
    """A span the selector may answer with (``document`` indexes the question's documents); ``span``: the
    reader's own span (start, end) that a phrase grew from, None when the candidate is that span."""

    document: int
    start: int
    end: int
    logit: float
    text: str
    span: tuple[int, int] | None = None

    def as_read(self, content: str) -> Candidate:
        """The reader's own span, shown instead of the phrase it grew to; the phrase when the rest of it holds a
        negation, which the span alone would drop ("The X2 is a countertop unit" of "... unit and does not need any
        plumbing", asked whether it needs a water pipe), or when the span holds no letter or digit ("$$" of "parking was $$
        at $40/night")."""
        if self.span is None:
            return self
        start, end = self.span
        rest = content[self.start : start] + " " + content[end : self.end]
        if _NEGATION.search(rest) or not any(character.isalnum() for character in content[start:end]):
            return self
        return Candidate(self.document, start, end, self.logit, content[start:end])


@lru_cache(maxsize=1024)
def _phrase_breaks(content: str) -> tuple[str, list[int]]:
    """``content`` with its HTML entities masked (same length: offsets still hold), and where each phrase break in it
    ends. Kept for a review's other spans and the next questions that read it."""
    text = _ENTITY.sub(lambda entity: "x" * len(entity.group()), content)
    return text, [mark.end() for mark in PHRASE_BREAK.finditer(text)]


def phrase_bounds(content: str, start: int, end: int) -> tuple[int, int]:
    """The whole phrase around a span (from the phrase break before it to the one after it), so that an answer
    reads "it is great for reading books", not "it is great"; the span itself when that phrase is too long."""
    breaks, ends = _phrase_breaks(content)
    # The phrase starts after the last of the review's breaks that ends by the span's start (a span that starts
    # inside a rule of marks starts its phrase after the break before that rule).
    before = bisect_right(ends, start)
    left = ends[before - 1] if before else 0
    after = PHRASE_BREAK.search(breaks, end)
    right = after.start() if after else len(content)
    if after and _CONTRAST.fullmatch(after.group()):
        # "it stays connected while in use, but loses its connection when idle": cut at "but", the card would say the
        # opposite of its review; the contrast is kept when the whole stays short.
        following = PHRASE_BREAK.search(breaks, after.end())
        stop = following.start() if following else len(content)
        if len(content[left:stop].split()) <= MAX_CONTRAST_WORDS:
            right = stop
    left = _PHRASE_LEAD.match(content, left, start).end()
    while right > end and (content[right - 1].isspace() or content[right - 1] in _PHRASE_TAIL):
        right -= 1
    for _ in range(2):  # measured before its brackets are matched (which reads it character by character) and after
        if right - left > MAX_PHRASE_CHARS or len(content[left:right].split()) > MAX_PHRASE_WORDS:
            return start, end
        left, right = _brackets_closed(content, left, right, start, end)
    return left, right


def _brackets_closed(content: str, left: int, right: int, start: int, end: int) -> tuple[int, int]:
    """The bounds of a phrase ``content[left:right]`` around the span ``start:end`` once its brackets match. A bracket it
    leaves open ends it at the bracket that closes it, when that comes soon on the same line ("cups (nice touch!)"),
    else before the bracket when the span ends before it ("affordable ($100+ tip" reads "affordable"). A bracket it
    closes without opening (one opened before a break) starts it after that bracket when the span comes after it
    ("we loved them) and a kettle" reads "and a kettle"), and ends it there when the span comes before."""
    opened: list[int] = []
    for position in range(left, right):
        character = content[position]
        if character in _BRACKETS:
            opened.append(position)
        elif character in _OPENERS:
            if opened and content[opened[-1]] == _OPENERS[character]:
                opened.pop()
            elif position < start:
                left, opened = _PHRASE_LEAD.match(content, position + 1, start).end(), []
            elif position >= end:
                right = position
                break
    while right > end and content[right - 1].isspace():
        right -= 1
    if not opened:
        return left, right
    first = opened[0]
    close = content.find(_BRACKETS[content[first]], right, right + BRACKET_REACH)
    if close != -1 and "\n" not in content[right:close]:
        return left, close + 1
    if first >= end:
        while first > end and content[first - 1].isspace():
            first -= 1
        return left, first
    return left, right


def candidates(documents: Sequence[ReadDocument], phrases: bool = False, query: str = "") -> list[Candidate]:
    """The best ``SPANS_PER_DOCUMENT`` spans of each review, the best ``SPANS_PER_QUESTION`` of them all, best first;
    with ``phrases``, each span grown to its whole phrase (``phrase_bounds``), a phrase counted once, with its best
    span, or the one of its spans that the ``query``'s words lead up to (``_led_to``). A span is kept to one line
    (``one_line``), and one inside a question or a heading of the document (``asks``, ``heads``) is no candidate."""
    spans = []
    question_stems = {_stem(word) for word in content_words(query)}
    for position, document in enumerate(documents):
        kept: dict[tuple[int, int], Candidate] = {}
        for span_start, span_end, logit in document.spans:
            span_start, span_end = one_line(document.content, span_start, span_end)
            if asks(document.content, span_start, span_end) or heads(document.content, span_start, span_end):
                continue
            start, end = phrase_bounds(document.content, span_start, span_end) if phrases else (span_start, span_end)
            grown = (span_start, span_end) if (start, end) != (span_start, span_end) else None
            if (start, end) not in kept:
                kept[start, end] = Candidate(position, start, end, logit, document.content[start:end], grown)
            elif grown is not None and (first := kept[start, end]).span is not None:
                if _led_to(document.content, start, grown, first.span, question_stems):
                    kept[start, end] = replace(first, span=grown)
            if len(kept) == SPANS_PER_DOCUMENT:
                break
        spans += kept.values()
    return sorted(spans, key=lambda c: c.logit, reverse=True)[:SPANS_PER_QUESTION]


def _led_to(content: str, phrase_start: int, span: tuple[int, int], best: tuple[int, int], question_stems: set[str]) -> bool:
    """Whether, of two spans of one phrase, ``span`` rather than the reader's ``best`` is the one the question asks for:
    the words leading up to it share more of the question's. The first span is led by the phrase's words before it, the
    second by those between the two (unless they start with "of": "20 g of citric acid in 1 litre" leads the first),
    or, where only stop words come between ("around 30 hours"), by the first's. In "I charged it for 2 hours and the
    battery lasts 10 hours", "How long does the battery last?" leads to "10 hours"."""

    def words(begin: int, end: int) -> set[str]:
        return {_stem(word) for word in content_words(content[begin:end])}

    def lead(own: tuple[int, int], other: tuple[int, int]) -> int:
        first, second = (other, own) if other[1] <= own[0] else (own, other)
        between = words(first[1], second[0])
        # "20 g of citric acid in 1 litre": words after "of" describe the first span, they do not lead to the second.
        of_first = content[first[1] : second[0]].lstrip().lower().startswith("of ")
        if own == second and between:
            return 0 if of_first else len(between & question_stems)
        return len(words(phrase_start, first[0]) & question_stems) + (len(between & question_stems) if own == first and of_first else 0)

    return lead(span, best) > lead(best, span)


def _stem(word: str) -> str:
    """A word without a plural's or a verb's -s ("lasts" and "last" meet; "glass" stays)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def one_line(content: str, start: int, end: int) -> tuple[int, int]:
    """The longest line of a span that runs over line breaks: a heading, a list item or a table row is a line of its
    own, and a span over two of them ("Troubleshooting\n\nIf the motor stops") answers with one."""
    if "\n" not in content[start:end]:
        return start, end
    lines = [line.span() for line in _LINE.finditer(content, start, end) if line.group().strip()]
    if not lines:
        return start, end
    first, last = max(lines, key=lambda bounds: len(content[bounds[0] : bounds[1]].strip()))
    first += len(content[first:last]) - len(content[first:last].lstrip())
    return first, first + len(content[first:last].strip())


def asks(content: str, start: int, end: int) -> bool:
    """Whether the span lies in a question of the document ("How do I reset the router?", an FAQ's heading; "Is it
    worth the money?" in a review): such a sentence asks, it does not answer. One that ends "?!" or "!?" and holds a
    negation exclaims the other way round ("What kind of a restaurant doesn't provide complimentary bread?!"), and
    answers; "Is there free parking?!" still asks."""
    after = _SENTENCE_MARK.search(content, end)
    marks = _MARKS.match(content, after.start()).group() if after is not None else ""  # "?", "?!", "!?", "!"
    if "?" not in marks:
        return False
    sentence_start = max(content.rfind(mark, 0, start) for mark in _SENTENCE_END) + 1
    return not ("!" in marks and _NEGATION.search(content, sentence_start, after.start()))


def heads(content: str, start: int, end: int) -> bool:
    """Whether the span lies in a heading of the document: a line of its own, followed by more text, of two to twelve
    words in title case ("Connecting to the App and Wi-Fi", "9. Error Codes", "CleanBot S7 Release Notes"), with no
    sentence's end, no colon and no number but its own: a heading names what follows, it does not answer. A review's
    "Great sound" line is no heading."""
    line_start = content.rfind("\n", 0, start) + 1
    line_end = content.find("\n", end)
    if line_end < 0 or not content[line_end:].strip():
        return False
    line = _HEADING_NUMBER.sub("", content[line_start:line_end].strip())
    words = line.split()
    if not 2 <= len(words) <= 12 or re.search(r"[.!?:;,]|\b\d", line):  # a model's name may hold digits ("S7")
        return False
    return all(word[0].isupper() for word in words if len(word) > 3)


# A code of letters and a number: an error code ("E3", "F-04"), a model ("S7"), a format ("mp3").
_CODE = re.compile(r"\b([A-Za-z]{1,4})-?(\d{1,4})\b")


def codes(text: str) -> set[tuple[str, str]]:
    """The codes ``text`` names, each as (its letters in lower case, its number): "E3" and "e-3" are one."""
    return {(match[1].lower(), match[2]) for match in _CODE.finditer(text)}


def other_codes(query: str, texts: Sequence[str]) -> list[bool]:
    """For each candidate text, whether it names another code of the kind the question asks about, and not the asked
    one, while some other candidate names the asked one: the table row of "E1" answers no question about "E3"
    where the row of "E3" is there to read. A review that only names another model ("I came from the S6") is not
    passed over when no text names the asked "S7"."""
    asked = codes(query)
    found = [codes(text) for text in texts]
    if not asked or not any(named & asked for named in found):
        return [False] * len(texts)
    kinds = {letters for letters, _ in asked}
    return [not named & asked and any(letters in kinds for letters, _ in named) for named in found]


def content_words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning (lower case, stop words left out)."""
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def shown_text_row(query: str, candidate: Candidate, content: str) -> dict[str, float]:
    """What tells whether a grown phrase or the reader's own span inside it reads as the answer: "30 hours"
    answers "How long does the battery last?", "it is great for reading books" answers "Is it good for reading?"."""
    start, end = candidate.span or (candidate.start, candidate.end)
    span = content[start:end]
    words = query.lower().split()
    return {
        **question_kind(query),
        "q_how_much": float(words[:1] == ["how"] and len(words) > 1 and words[1] in _HOW_MUCH),
        "q_who_when_where": float(words[:1] in (["who"], ["when"], ["where"], ["whom"], ["whose"], ["which"])),
        "span_words": float(len(span.split())),
        "phrase_words": float(len(candidate.text.split())),
        "phrase_to_span_chars": len(candidate.text) / max(len(span), 1),
        "logit": candidate.logit,
        "span_has_digit": float(any(ch.isdigit() for ch in span)),
    }


def question_kind(query: str) -> dict[str, float]:
    """Yes/no, how, what or another kind of question (SubjQA's are mostly the first three)."""
    words = query.lower().split()
    first = words[0] if words else ""
    return {
        "q_yes_no": float(first in _YES_NO),
        "q_how": float(first == "how"),
        "q_what": float(first in ("what", "which")),
        "q_words": float(len(words)),
    }


def _sentence_bounds(content: str, start: int, end: int) -> tuple[float, float]:
    """Does the span start a sentence (or the text), and does it end one."""
    before = content[:start].rstrip()
    after = content[end:].lstrip()
    return float(not before or before[-1] in _SENTENCE_END), float(
        not after or after[0] in _SENTENCE_END or content[end - 1 : end] in tuple(_SENTENCE_END)
    )


def _sentence(content: str, start: int, end: int) -> str:
    left = max(content.rfind(mark, 0, start) for mark in _SENTENCE_END) + 1
    rights = [i for i in (content.find(mark, end) for mark in _SENTENCE_END) if i >= 0]
    return content[left : min(rights) + 1 if rights else len(content)]


def _softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    total = sum(weights)
    return [w / total for w in weights]


def features(
    query: str,
    documents: Sequence[ReadDocument],
    phrases: bool = False,
    similarities: Mapping[str, Callable[[str, Sequence[str]], Sequence[float]]] | None = None,
) -> tuple[dict[str, float], list[Candidate], list[dict[str, float]]]:
    """(question features, candidate spans, one feature row per candidate: the question's features included);
    ``phrases``: the candidates are whole phrases (``candidates``); ``similarities``: by feature name (one of
    ``SIMILARITY_FEATURES``), the cosine of the question with each candidate's text by one encoder
    (``phrase_similarity.PhraseSimilarity``), added to each row under that name."""
    spans = candidates(documents, phrases, query)
    texts = [c.text for c in spans]
    cosines = {name: score(query, texts) for name, score in (similarities or {}).items()}
    nulls = [d.null_logit for d in documents if math.isfinite(d.null_logit)] or [0.0]
    null_min, null_max = min(nulls), max(nulls)
    scores = [d.retrieval_score for d in documents if d.retrieval_score is not None]
    top_score = max(scores) if scores else None
    best = spans[0].logit if spans else null_min
    probabilities = _softmax([c.logit for c in spans] + [null_min])
    answering = sum(1 for position, d in enumerate(documents) if any(c.document == position and c.logit > d.null_logit for c in spans))
    question_words = content_words(query)
    normalized = [normalize_answer(c.text) for c in spans]
    question = {
        **question_kind(query),
        "documents": float(len(documents)),
        "null_min": null_min,
        "null_max": null_max,
        "null_spread": null_max - null_min,
        "best_logit": best,
        "best_gap": best - null_min if spans else -10.0,
        "documents_answering": float(answering),
        "null_probability": probabilities[-1],
        "entropy": -sum(p * math.log(p) for p in probabilities if p > 0),
    }
    agreeing = _agreeing(spans, normalized)
    rows = []
    for rank, (candidate, probability) in enumerate(zip(spans, probabilities)):
        document = documents[candidate.document]
        starts, ends = _sentence_bounds(document.content, candidate.start, candidate.end)
        words = content_words(candidate.text)
        sentence_words = content_words(_sentence(document.content, candidate.start, candidate.end))
        rows.append(
            {
                **question,
                "logit": candidate.logit,
                "gap": candidate.logit - null_min,
                "own_gap": candidate.logit - document.null_logit,
                "below_best": candidate.logit - best,
                "probability": probability,
                "rank": float(rank),
                "rank_in_document": float(sum(1 for c in spans[:rank] if c.document == candidate.document)),
                "document_rank": float(document.rank),
                "document_null_above_min": document.null_logit - null_min,
                # Relative, never raw: a BM25 score depends on the collection's size and words, which differ from training.
                "relative_retrieval_score": document.retrieval_score / top_score if top_score else math.nan,
                "span_words": float(len(candidate.text.split())),
                "span_chars": float(len(candidate.text)),
                "relative_position": candidate.start / max(len(document.content), 1),
                "starts_sentence": starts,
                "ends_sentence": ends,
                "agreeing_documents": float(len({spans[other].document for other in agreeing[rank]})),
                "agreeing_probability": sum(probabilities[other] for other in agreeing[rank]),
                "question_overlap": len(words & question_words) / max(len(question_words), 1),
                "sentence_question_overlap": len(sentence_words & question_words) / max(len(question_words), 1),
            }
        )
        rows[-1].update({name: float(values[rank]) for name, values in cosines.items()})
    return question, spans, rows


def _agreeing(spans: Sequence[Candidate], normalized: Sequence[str]) -> list[list[int]]:
    """For each candidate, the candidates of other documents that say nearly the same (token F1 >= AGREEMENT_F1), in
    order; each pair is compared once, since F1 is symmetric."""
    agreeing: list[list[int]] = [[] for _ in spans]
    for first, second in itertools.combinations(range(len(spans)), 2):
        if spans[first].document != spans[second].document and token_f1(normalized[first], normalized[second]) >= AGREEMENT_F1:
            agreeing[first].append(second)
            agreeing[second].append(first)
    return agreeing


# What the answerability model adds to the question's features: the best span's (best by the span model).
BEST_SPAN_FEATURES = (
    "gap",
    "own_gap",
    "probability",
    "agreeing_documents",
    "agreeing_probability",
    "span_words",
    "question_overlap",
    "sentence_question_overlap",
    "document_rank",
    "relative_retrieval_score",
)
# The span rows' features that ``features`` adds when given similarities: the cosine by the configured sentence
# encoder, and by one tuned on judged phrases (``training.phrase_encoder``).
SIMILARITY_FEATURE = "phrase_similarity"
TUNED_SIMILARITY_FEATURE = "tuned_phrase_similarity"
SIMILARITY_FEATURES = (SIMILARITY_FEATURE, TUNED_SIMILARITY_FEATURE)


def answer_row(
    question: dict[str, float], best: dict[str, float] | None, best_f1: float, similarities: Sequence[str] = ()
) -> dict[str, float]:
    """The answerability model's features: the question's, the best span's predicted F1, and that span's own (with
    ``similarities``, those similarity features too: does the best phrase talk about what was asked)."""
    names = (*BEST_SPAN_FEATURES, *similarities)
    return {**question, "best_span_f1": best_f1, **{f"best_{name}": best[name] if best else math.nan for name in names}}
