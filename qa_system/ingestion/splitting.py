"""Long documents -> overlapping passages that remember where they start in their document.

``PassageSplitter`` cuts a document into passages of ``words`` words sharing ``overlap`` words with
the next, exactly as Haystack's ``DocumentSplitter(split_by="word")`` does (words are runs between
single spaces; a test checks the two agree), but in one pass over precomputed offsets: Haystack's
copies every passage's metadata and re-sums unit lengths, which made it most of the time of
ingesting a million reviews. A passage still longer than ``max_chars`` (a text without spaces) is
cut by characters. Every passage carries ``source_offset``, the character where it starts in its
document, and ``document_id``, so an answer's offsets in a passage map back to the document
(``source_span``) and the document can be put back together from its passages (``source_text``).
A short document is one passage with the document's own id, a long one's passages are
``<id>#<n>``; the id's own '%' and '#' are written %25 and %23 (``passage_id``), so that no
document's id is ever another document's passage id.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate

from haystack import Document, component

# Characters per word allowed before a passage is cut by characters (a text without spaces).
CHARS_PER_WORD = 25


def passage_id(document_id: str, number: int, count: int) -> str:
    """The id of passage ``number`` of ``count`` of a document: the document's id (one passage) or ``<id>#<number>``.

    The document id's '%' and '#' are escaped: a document whose id is 'long#1' would otherwise take
    the place of passage 1 of document 'long'. Ids without either character are kept as they are.
    """
    escaped = document_id.replace("%", "%25").replace("#", "%23")
    return escaped if count == 1 else f"{escaped}#{number}"


@component
class PassageSplitter:
    """Splits documents into passages of ``words`` words, each sharing ``overlap`` words with the next.

    Passages are the ones Haystack's ``DocumentSplitter(split_by="word")`` makes, each with
    ``source_offset`` and ``document_id`` in its metadata. Usage::

        passages = PassageSplitter(words=200, overlap=40).run(documents=[Document(content=text)])["documents"]

    :param words: words per passage (a longer text without spaces is also cut at ``words * CHARS_PER_WORD`` characters).
    :param overlap: words a passage shares with the next, at least 0 and below ``words``.
    """

    def __init__(self, words: int = 200, overlap: int = 40):
        if not 0 <= overlap < words:
            raise ValueError(f"overlap ({overlap}) must be at least 0 and below words ({words})")
        self.words, self.overlap = words, overlap
        self.max_chars = words * CHARS_PER_WORD

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """The passages of every document, in order (a short document is one passage with its own id)."""
        return {"documents": [passage for document in documents for passage in self.split(document)]}

    def spans(self, text: str) -> list[tuple[int, str]]:
        """(start, text) of each passage of ``text``."""
        if text.count(" ") < self.words and len(text) <= self.max_chars:
            return [(0, text)]
        # Units as DocumentSplitter's: split at each space, the space kept at the end of its unit; the
        # empty unit after a trailing space adds nothing (DocumentSplitter skips a window of only that).
        parts = text.split(" ")
        units = len(parts) - (len(parts) > 1 and parts[-1] == "")
        starts = list(accumulate((len(part) + 1 for part in parts), initial=0))
        starts[units] = len(text)
        step, spans, first = self.words - self.overlap, [], 0
        while True:
            last = min(first + self.words, units)
            spans += self._cut(starts[first], text[starts[first] : starts[last]])
            if last == units:
                break
            first += step
        return [(start, content) for start, content in spans if content.strip()] or [(0, text)]

    def _cut(self, start: int, content: str) -> list[tuple[int, str]]:
        if len(content) <= self.max_chars:
            return [(start, content)]
        step = self.max_chars - self.max_chars * self.overlap // self.words
        return [(start + begin, content[begin : begin + self.max_chars]) for begin in range(0, len(content) - self.max_chars + step, step)]

    def passages(self, document_id: str, text: str, meta: dict) -> list[dict]:
        """The passages of one document as ``Document.to_dict(flatten=False)`` dicts (no Document objects: ingestion's fast path)."""
        spans = self.spans(text)
        count = len(spans)
        return [
            {
                "id": passage_id(document_id, number, count),
                "content": content,
                "blob": None,
                "meta": {**meta, "document_id": document_id, "source_offset": start, "passage": number, "passages": count},
                "score": None,
                "embedding": None,
                "sparse_embedding": None,
            }
            for number, (start, content) in enumerate(spans)
        ]

    def split(self, document: Document) -> list[Document]:
        """The passages of one document, each with ``source_offset`` and ``document_id`` in its metadata."""
        return [Document.from_dict(passage) for passage in self.passages(document.id, document.content or "", document.meta)]


def source_span(passage: Document, start: int, end: int) -> tuple[str, int, int]:
    """(document id, start, end) in the source document of a span at [start, end) of ``passage``."""
    offset = int(passage.meta.get("source_offset", 0))
    return passage.meta.get("document_id", passage.id), start + offset, end + offset


def source_text(passages: Iterable[Document]) -> str:
    """A document's text put back together from its passages (any order; overlaps counted once)."""
    text = ""
    for passage in sorted(passages, key=lambda p: int(p.meta.get("source_offset", 0))):
        offset = int(passage.meta.get("source_offset", 0))
        text += " " * max(0, offset - len(text))  # a whitespace-only stretch between passages was not kept
        text += (passage.content or "")[len(text) - offset :]
    return text
