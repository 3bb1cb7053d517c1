"""SQuAD v1.1 / v2.0 JSON -> Records: each paragraph's context is a document, its article's title the item.

The questions are labels, not documents: ``qa_system.ingestion.labels`` reads them for evaluation
and finds their contexts among the collection's documents.
"""

from __future__ import annotations

import json
from typing import IO, Iterator

from qa_system.errors import QAError
from qa_system.sources.decoding import check_encoding
from qa_system.sources.records import IngestOptions, ReadCounts, Record, check_text_length

SQUAD_FIX = 'pass a SQuAD file: {"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [...]}]}]}.'


def load_squad_json(binary: IO[bytes], name: str, encoding: str = "utf-8") -> dict:
    """A SQuAD file's JSON, checked to hold a top-level ``data`` list; a QAError (encoding, JSON, shape) names the file."""
    try:
        squad = json.loads(binary.read().decode("utf-8-sig" if check_encoding(encoding) == "utf-8" else encoding))
    except UnicodeDecodeError as error:
        raise QAError(f"{name} is not {encoding} text ({error.reason}).", "pass --encoding with the file's encoding, or re-save it as UTF-8.") from None
    except json.JSONDecodeError as error:
        raise QAError(f"{name} is not valid JSON (line {error.lineno}: {error.msg}).", SQUAD_FIX) from None
    except RecursionError:  # arrays in arrays thousands deep: no SQuAD file, and json's parser recurses
        raise QAError(f"{name} nests JSON arrays or objects too deeply to read.", SQUAD_FIX) from None
    if not isinstance(squad, dict) or not isinstance(squad.get("data"), list):
        raise QAError(f"{name} has no top-level 'data' list.", SQUAD_FIX)
    return squad


def paragraphs(squad: dict, name: str) -> Iterator[tuple[str, str, dict, str]]:
    """(title, context, paragraph, where) of every paragraph, each checked for shape."""
    for a, article in enumerate(squad["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise QAError(f"{name}: data[{a}] has no 'paragraphs' list.", SQUAD_FIX)
        title = str(article.get("title") or "").strip()
        for p, paragraph in enumerate(article["paragraphs"]):
            where = f"{name} data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                raise QAError(f"{where} has no text 'context'.", SQUAD_FIX)
            yield title, paragraph["context"], paragraph, where


def squad_record(title: str, context: str, where: str) -> Record:
    """The document of one context (the labels reader builds the same one, and so the same id)."""
    return Record(check_text_length(context, where), title or None, {}, where)


def read_squad_documents(binary: IO[bytes], name: str, options: IngestOptions, counts: ReadCounts) -> Iterator[Record]:
    """Records from a SQuAD file: one per paragraph, its context the text and its article's title the item."""
    for title, context, _, where in paragraphs(load_squad_json(binary, name, options.encoding), name):
        counts.rows += 1
        if not context.strip():
            counts.empty_texts += 1
            continue
        yield squad_record(title, context, where)
