"""Generated answers grounded or withheld: a RAG answer is shown only when the reviews it cites say it.

A small generator writes fluent text that no review says ("does not have a built-in water heater",
of a kettle nobody described so). ``GroundingCheck`` measures how much of a generated answer the
reviews it cites support: the share of its content words (numbers included) that occur in those
reviews, or an extractive answer over the same reviews that says the same thing. An answer below
``min_support`` is withheld: the pipeline returns the extractive answers instead (the reader's,
through the answer selector when there is one), each carrying in ``meta`` the withheld text and
why. An answer that cites no review is checked against every review it was given.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from haystack import Document, ExtractedAnswer, GeneratedAnswer, component, default_from_dict, default_to_dict

from qa_system.errors import check_number
from qa_system.generation.answers import strip_citations
from qa_system.metrics.squad import f1 as token_f1

# Words that say nothing of the reviews' content: whether they occur there proves nothing.
_STOPWORDS = frozenset(
    "a an the of to in on for with at by from and or but is are was were be been being it its it's this that these those "
    "i you he she we they me him her us them my your his our their what how which who why when where does do did doing can could "
    "will would should has have had having there here about as so if not no nor yes very just also too than then more most "
    "some any all both each such only own same other into over under again further once review reviews reviewer says said "
    "according mentioned mentions".split()
)
_WORD = re.compile(r"[a-z0-9]+")
# An extractive answer saying the same thing as the generated one (token F1) grounds it too.
SAME_ANSWER_F1 = 0.5


def _stem(word: str) -> str:
    """A crude stem, so that "batteries" finds "battery" and "charging" finds "charge"."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("e", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + keep
    return word


def content_words(text: str) -> list[str]:
    """The stems of the words of ``text`` that carry content (numbers too), in order."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


def support(answer: str, documents: list[Document]) -> float:
    """The share of the answer's content words that occur in ``documents`` (1 when it has none)."""
    words = content_words(strip_citations(answer))
    if not words:
        return 1.0
    vocabulary = {w for d in documents for w in content_words(d.content or "")}
    return sum(w in vocabulary for w in words) / len(words)


@component
class GroundingCheck:
    """Passes a generated answer the reviews it cites support; otherwise returns the extractive answers in its place.

    :param min_support: the share of the answer's content words that must occur in the reviews it cites.

    The generated answer gains ``meta["support"]`` and ``meta["grounded"]``; when it is withheld, each
    extractive answer returned carries ``meta["withheld"]``: the generated text, its support and the reason.
    """

    def __init__(self, min_support: float = 0.75):
        self.min_support = check_number(min_support, "min_support", 0, maximum=1)

    def to_dict(self) -> dict[str, Any]:
        """The component's init parameters, as Haystack serialises a pipeline."""
        return default_to_dict(self, min_support=self.min_support)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GroundingCheck":
        """The component from ``to_dict``'s output."""
        return default_from_dict(cls, data)

    @component.output_types(answers=list)
    def run(self, answers: list[GeneratedAnswer], extracted: list[ExtractedAnswer]) -> dict[str, list]:
        """The generated answer when grounded (or "no answer"); else ``extracted``, each naming what was withheld."""
        generated = answers[0] if answers else None
        if generated is None or generated.data is None:
            return {"answers": answers}
        given = list(generated.documents or [])
        cited = [d for d in given if d.meta.get("referenced")] or given
        share = support(generated.data, cited)
        same = [a for a in extracted if a.data and token_f1(a.data, strip_citations(generated.data)) >= SAME_ANSWER_F1]
        grounded = share >= self.min_support or bool(same)
        checked = replace(generated, meta={**generated.meta, "support": share, "grounded": grounded})
        if grounded:
            return {"answers": [checked]}
        reason = (
            f"only {share:.0%} of its content words occur in the {'reviews it cites' if cited is not given else 'reviews given'} "
            f"(at least {self.min_support:.0%} are needed), and no extractive answer says the same"
        )
        withheld = {"text": generated.data, "support": share, "reason": reason, "cited_document_ids": generated.meta.get("cited_document_ids", [])}
        return {"answers": [replace(a, meta={**a.meta, "withheld": withheld}) for a in extracted]}
