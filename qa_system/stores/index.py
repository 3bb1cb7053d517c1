"""An index: a named, persisted document store plus its manifest (what was indexed, with which encoder)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

MANIFEST_KEY = "qa_system"


def index_name(domains: str | Sequence[str]) -> str:
    """The name of the index of one or more SubjQA domains: ``subjqa-<domain>[-<domain>...]``, the domains sorted."""
    domains = [domains] if isinstance(domains, str) else sorted(domains)
    return "subjqa-" + "-".join(domains)


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

    def item_counts(self) -> dict[str, int]:
        """Reviews per product (item_id), for product pickers and 'unknown product' errors."""
        return dict(self.manifest.get("item_counts", {}))
