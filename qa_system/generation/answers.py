"""From the generator's reply to a ``GeneratedAnswer``: citations parsed back to documents, and the
explicit no-answer.

Citations are the bracketed review numbers of the prompt: ``[1]``, ``[1, 3]``, ``[1][2]``,
``[2-3]``, ``[Review 2]``. The answer is "no answer" (``data=None``) when the reply is empty, when it
says the prompt's no-answer phrase, or when there were no reviews to answer from; ``meta
["no_answer_reason"]`` says which.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from haystack import Document, GeneratedAnswer, component, default_to_dict
from haystack.dataclasses import ChatMessage

from qa_system.generation.prompt import NO_ANSWER_REPLY
from qa_system.metrics.squad import normalize_answer

CITATION = re.compile(r"\[\s*(?:reviews?\s*)?(\d+(?:\s*(?:,|-|and)\s*\d+)*)\s*\]", re.IGNORECASE)
# The instructed reply, and how small models tend to paraphrase it.
NO_ANSWER_PHRASES = (NO_ANSWER_REPLY, "I do not know", "I'm not sure")


def parse_citations(text: str) -> list[int]:
    """The review numbers cited in ``text``, in order of first mention, ranges expanded."""
    numbers: list[int] = []
    for match in CITATION.finditer(text):
        for part in re.split(r"\s*(?:,|and)\s*", match.group(1), flags=re.IGNORECASE):
            first, _, last = part.partition("-")
            start, end = int(first), int(last or first)
            numbers += range(start, min(end, start + 100) + 1)  # bounded: a reply can cite [1-99999]
    return list(dict.fromkeys(numbers))


def strip_citations(text: str) -> str:
    """The answer without its citation markers (for scoring it against the gold spans)."""
    return " ".join(CITATION.sub(" ", text).split()).replace(" .", ".").replace(" ,", ",")


def says_no_answer(text: str, phrases: Sequence[str] = NO_ANSWER_PHRASES) -> bool:
    """Whether a reply (its citations ignored) starts with one of ``phrases``, compared as SQuAD normalises answers."""
    normalized = normalize_answer(strip_citations(text))
    return any(normalized.startswith(normalize_answer(phrase)) for phrase in phrases)


@component
class CitedAnswerBuilder:
    """One ``GeneratedAnswer`` per question: the reply text (``None`` for no answer), the documents
    given, each marked ``referenced`` and numbered ``source_index`` as in Haystack's AnswerBuilder,
    and meta with the cited document ids, the prompt meta (truncation) and the token usage.

    :param no_answer_phrases: replies starting with one of these (normalised) mean "no answer".

    Usage::

        prompt = ReviewPromptBuilder().run(query=question, documents=docs)
        replies = generator.run(messages=prompt["messages"])["replies"]
        builder = CitedAnswerBuilder(no_answer_phrases=["I don't know"])
        answer = builder.run(query=question, replies=replies, documents=prompt["documents"], prompt=prompt["prompt"])["answers"][0]
    """

    def __init__(self, no_answer_phrases: list[str] | None = None):
        self.no_answer_phrases = list(no_answer_phrases or NO_ANSWER_PHRASES)

    def to_dict(self) -> dict[str, Any]:
        """The component's settings, serialised for a pipeline YAML."""
        return default_to_dict(self, no_answer_phrases=self.no_answer_phrases)

    @component.output_types(answers=list[GeneratedAnswer])
    def run(
        self, query: str, replies: list[ChatMessage], documents: list[Document], prompt: dict[str, Any] | None = None
    ) -> dict[str, list[GeneratedAnswer]]:
        """The generator's first reply as one ``GeneratedAnswer`` citing the documents it names.

        :param query: the question.
        :param replies: the generator's replies (the first is read).
        :param documents: the documents the prompt numbered, in its order.
        :param prompt: the prompt builder's meta (truncation), kept in the answer's meta.
        :returns: ``{"answers": [answer]}``; its ``data`` is None and ``meta["no_answer_reason"]`` says why
            when nothing was retrieved, the reply is empty or it says the reviews hold no answer.
        """
        reply = replies[0] if replies else None
        text = (reply.text or "").strip() if reply is not None else ""
        reason = None
        if not documents:
            reason = "no reviews were retrieved"
        elif not text:
            reason = "the generator returned nothing"
        elif says_no_answer(text, self.no_answer_phrases):
            reason = "the generator found no answer in the reviews"
        cited = parse_citations(text)
        valid = [] if reason else [n for n in cited if 1 <= n <= len(documents)]
        given = [replace(d, meta={**d.meta, "source_index": n, "referenced": n in valid}) for n, d in enumerate(documents, 1)]
        meta = {
            "reply": text,
            "no_answer_reason": reason,
            "cited_document_ids": [documents[n - 1].id for n in valid],
            "invalid_citations": [n for n in cited if not 1 <= n <= len(documents)],
            "document_ids": [d.id for d in documents],
            "prompt": prompt or {},
            "usage": (reply.meta.get("usage") if reply is not None else None) or {},  # streamed replies may have none
            "finish_reason": reply.meta.get("finish_reason") if reply is not None else None,
        }
        answer = GeneratedAnswer(data=None if reason else text, query=query, documents=given, meta=meta)  # type: ignore[arg-type]
        return {"answers": [answer]}
