"""Long documents -> overlapping passages that remember where they start in their document.

Haystack's ``DocumentSplitter`` (by words) cuts a long document into passages of ``words`` words
sharing ``overlap`` words with the next; a passage still longer than ``max_chars`` (a text without
spaces) is cut by characters. Every passage carries ``source_offset``, the character where it
starts in its document, and ``document_id``, so an answer's offsets in a passage map back to the
document (``source_span``) and the document can be put back together from its passages
(``source_text``). A short document is one passage with the document's own id.
"""

from __future__ import annotations

from typing import Iterable

from haystack import Document, component

# Characters per word allowed before a passage is cut by characters (a text without spaces).
CHARS_PER_WORD = 25


@component
class PassageSplitter:
    def __init__(self, words: int = 200, overlap: int = 40):
        from haystack.components.preprocessors import DocumentSplitter

        if not 0 <= overlap < words:
            raise ValueError(f"overlap ({overlap}) must be at least 0 and below words ({words})")
        self.words, self.overlap = words, overlap
        self.max_chars = words * CHARS_PER_WORD
        self._splitter = DocumentSplitter(split_by="word", split_length=words, split_overlap=overlap)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        return {"documents": [passage for document in documents for passage in self.split(document)]}

    def _spans(self, text: str) -> list[tuple[int, str]]:
        # DocumentSplitter counts words as runs between single spaces: fewer spaces, one passage.
        if text.count(" ") < self.words and len(text) <= self.max_chars:
            return [(0, text)]
        pieces = self._splitter.run([Document(content=text)])["documents"]
        spans = [cut for piece in pieces for cut in self._cut(piece.meta["split_idx_start"], piece.content)]
        return [(start, content) for start, content in spans if content.strip()] or [(0, text)]

    def _cut(self, start: int, content: str) -> list[tuple[int, str]]:
        if len(content) <= self.max_chars:
            return [(start, content)]
        step = self.max_chars - self.max_chars * self.overlap // self.words
        return [(start + begin, content[begin : begin + self.max_chars]) for begin in range(0, len(content) - self.max_chars + step, step)]

    def split(self, document: Document) -> list[Document]:
        spans = self._spans(document.content or "")
        count = len(spans)
        return [
            Document(
                id=document.id if count == 1 else f"{document.id}#{number}",
                content=content,
                meta={**document.meta, "document_id": document.id, "source_offset": start, "passage": number, "passages": count},
            )
            for number, (start, content) in enumerate(spans)
        ]


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
