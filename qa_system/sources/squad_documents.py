"""SQuAD v1.1 / v2.0 JSON -> Records: each paragraph's context is a document, its article's title the item.

The questions are labels, not documents: ``qa_system.ingestion.labels`` reads them for evaluation
and finds their contexts among the collection's documents. The file is checked by the one SQuAD
validator (``sources.squad``: ``load_squad_json``, ``squad_paragraphs``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from qa_system.sources.records import IngestOptions, ReadCounts, Record, check_text_length
from qa_system.sources.squad import load_squad_json, squad_paragraphs


def squad_record(title: str, context: str, where: str) -> Record:
    """The document of one context (the labels reader builds the same one, and so the same id)."""
    return Record(check_text_length(context, where), title or None, {}, where)


def read_squad_documents(binary: IO[bytes], name: str, options: IngestOptions, counts: ReadCounts) -> Iterator[Record]:
    """Records from a SQuAD file: one per paragraph, its context the text and its article's title the item."""
    for paragraph in squad_paragraphs(load_squad_json(binary.read(), name, options.encoding), name):
        counts.rows += 1
        if not paragraph.context.strip():
            counts.empty_texts += 1
            continue
        yield squad_record(paragraph.title.strip(), paragraph.context, f"{name} {paragraph.where}")
