"""What the texts read are called where users read about them: SubjQA's are reviews, a collection's documents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a client of a running server prints cards without importing Haystack
    from haystack import Document

# SubjQA's texts are reviews (their meta holds a ``review_id``), a collection's documents.
REVIEWS, DOCUMENTS = "reviews", "documents"


def noun_of(documents: Sequence[Document]) -> str | None:
    """``REVIEWS`` when the documents are SubjQA's reviews (their meta holds a ``review_id``), ``DOCUMENTS`` when they are
    a collection's; None when there are none (nothing was read: the caller knows what would have been)."""
    if not documents:
        return None
    return REVIEWS if any((d.meta or {}).get("review_id") for d in documents) else DOCUMENTS
