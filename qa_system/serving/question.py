"""One question as a door (the page, the API, `ask --url`, the shell) received it.

Its own module, light on imports, so that a client of a running server (`qa-system ask --url`)
starts without loading Haystack and the models' libraries.
"""

from __future__ import annotations

from dataclasses import dataclass

from qa_system.errors import MAX_QUESTION_CHARS, check_question_length  # noqa: F401 - the doors import them from here


@dataclass(frozen=True)
class Question:
    """One question as a door received it; ``QAService.check`` applies the rules every door shares."""

    query: str
    item_id: str | None  # None: any document (where the collection has no products, or with all_products)
    collection: str | None = None
    retriever: str | None = None  # None: the configured one
    mode: str = "extractive"
    top_k: int | None = None  # None: the settings' (QA_TOP_K_RETRIEVER)
    split: str | None = None  # only reviews of this SubjQA split (the page's evaluation mode)
    top_k_reader: int | None = None  # None: the settings' (QA_TOP_K_READER)
    no_answer_threshold: float | None = None
    filters: dict | None = None  # more conditions on the documents' metadata (Haystack's syntax), ANDed with item_id
    all_products: bool = False  # asked of every document on purpose (the page's "All documents"), not a forgotten item_id


check_length = check_question_length  # the doors' name for it
