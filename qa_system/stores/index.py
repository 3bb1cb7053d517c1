"""An index: a named, persisted document store plus its manifest (what was indexed, with which encoder)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from qa_system.errors import NotFound, QAError, described

MANIFEST_KEY = "qa_system"
# What every SubjQA collection's name starts with (``index_name``).
SUBJQA_PREFIX = "subjqa-"


def index_name(domains: str | Sequence[str]) -> str:
    """The name of the index of one or more SubjQA domains: ``subjqa-<domain>[-<domain>...]``, the domains sorted."""
    domains = [domains] if isinstance(domains, str) else sorted(domains)
    return SUBJQA_PREFIX + "-".join(domains)


def check_domains(domains: object) -> list[str]:
    """``domains``, one SubjQA domain's name or a sequence of them, as a list; else a QAError saying what it got."""
    if isinstance(domains, str):
        return [domains]
    if isinstance(domains, Sequence) and not isinstance(domains, bytes) and domains and all(isinstance(d, str) for d in domains):
        return list(domains)
    raise QAError(
        f"domains must be a SubjQA domain's name (a str) or a list of them, not {described(domains)}.",
        "pass domains such as 'electronics' or ['books', 'movies'].",
    )


def saved_version(manifest: dict) -> str | None:
    """When the index of ``manifest`` was last saved (its ISO time): what tells a version open from a newer one saved
    (``saved``; an index saved by an older version records when its documents last changed)."""
    return manifest.get("saved", manifest.get("updated", manifest.get("created")))


class IndexGone(NotFound):
    """A search server no longer holds the index a store was opened on: another process deleted the collection."""


@dataclass
class Index:
    """A document store together with what we know about its contents."""

    backend: str
    name: str
    store: Any
    manifest: dict = field(default_factory=dict)

    @property
    def embedding_model(self) -> str | None:
        """The passage encoder the index's vectors were made with; None for an index without vectors."""
        return self.manifest.get("embedding_model")

    def memory_bytes(self) -> int:
        """About how much of this process's memory the index holds: its documents' text, metadata, vectors
        (Python floats in Haystack's in-memory store) and BM25 statistics; 0 for a search server's index,
        whose documents live in the server."""
        storage = getattr(self.store, "storage", None)
        if isinstance(storage, dict):
            documents = storage.values()
        elif self.backend == "faiss":
            documents = self.store.filter_documents()
        else:
            return 0
        total = 0
        for document in documents:
            text = len(document.content or "")
            vector = len(document.embedding) if document.embedding is not None else 0
            # str + BM25 token counts ~ 3 bytes a character; a float in a list 32 bytes (faiss: 4, in its index);
            # the Document, its id and metadata ~ 1.5 kB.
            total += 3 * text + (4 if self.backend == "faiss" else 32) * vector + 1500
        return total

    def item_counts(self) -> dict[str, int]:
        """Reviews per product (item_id), for product pickers and 'unknown product' errors."""
        return dict(self.manifest.get("item_counts", {}))
