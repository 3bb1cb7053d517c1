"""Answerability re-ranking: the retrieved reviews ordered by how well the reader answers from each.

BM25 and a bi-encoder score a review without looking at the question and the review together;
the extractive reader does (a cross-encoder), so it can tell which of a product's few reviews
actually holds an answer. A review's *answerability* is the reader's margin, in logits, of its
best span over "no answer" in that review. The final score mixes it with the retriever's score,
both min-max normalised over the candidates:

    score = retriever_weight * minmax(retriever score) + (1 - retriever_weight) * minmax(answerability)

``retriever_weight`` = 1 keeps the retriever's order, 0 is the reader alone; ``qa-system
fit-fusion --rerank`` fits it on a dev split and the ``rerank`` pipeline stage reads the fit.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from qa_system.errors import check_number
from qa_system.reading.reader import ExtractiveReader
from qa_system.retrieval.fusion import minmax_normalise


def mix(documents: list[Document], answerability: list[float], retriever_weight: float) -> list[Document]:
    """Documents re-scored by the mix above, best first (ties keep the retriever's order).

    Each keeps its retriever score in ``meta["retrieval_score"]`` and its ``meta["answerability"]``.
    """
    finite = [a for a in answerability if math.isfinite(a)]
    floor = min(finite) if finite else 0.0
    answerability = [a if math.isfinite(a) else floor for a in answerability]  # nothing to read: least answerable
    retrieval = minmax_normalise([d.score or 0.0 for d in documents])
    reading = minmax_normalise(answerability)
    scored = [
        replace(
            d, score=retriever_weight * r + (1 - retriever_weight) * a, meta={**d.meta, "retrieval_score": d.score, "answerability": raw}
        )
        for d, r, a, raw in zip(documents, retrieval, reading, answerability)
    ]
    return sorted(scored, key=lambda d: -d.score)


@component
class AnswerabilityRanker:
    """Re-orders retrieved documents by a mix of retriever score and reader answerability (see module doc).

    :param model: extractive reader directory or hub id; None = the reader this project trains (models/).
    :param retriever_weight: weight of the normalised retriever score (1 - it goes to the reader).
    :param top_k: documents returned.
    :param max_seq_length: tokens per window (question + review) of the reader.
    :param doc_stride: tokens shared by consecutive windows of a long review.

    Usage::

        ranker = AnswerabilityRanker(model="models/reader-minilm-subjqa", retriever_weight=0.5, top_k=5)
        ranker.warm_up()
        documents = ranker.run(query="Is the screen sharp?", documents=retrieved)["documents"]
    """

    def __init__(
        self,
        model: str | Path | None = None,
        retriever_weight: float = 0.5,
        top_k: int = 10,
        max_seq_length: int = 384,
        doc_stride: int = 128,
    ):
        self.model = str(model) if model is not None else None
        self.retriever_weight = check_number(retriever_weight, "retriever_weight", 0, maximum=1)
        self.top_k = top_k
        self.max_seq_length = max_seq_length
        self.doc_stride = doc_stride
        # PyTorch: the mix was fitted on its answerability margins (fit-fusion --rerank).
        self.reader = ExtractiveReader(model=self.model, max_seq_length=max_seq_length, doc_stride=doc_stride, backend="torch")

    def use_runtime(self, device: str, home: str | None = None) -> None:
        """Read on ``device`` (a QA_DEVICE setting): the machine's, not the pipeline's."""
        self.reader.use_runtime(device, home)

    def warm_up(self) -> None:
        """Load the reader's model."""
        self.reader.warm_up()

    def answerability(self, query: str, documents: list[Document]) -> list[float]:
        """The reader's best-span-over-no-answer margin in each document, read one document at a time."""
        return [self.reader.predict(query, [document]).best_gap for document in documents]

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        """The documents re-ordered by the mix of retriever score and answerability, best first.

        :param query: the question the reader reads each document for.
        :param documents: the retrieved documents, scored by their retriever.
        :param top_k: documents returned (default: the component's ``top_k``).
        :returns: ``{"documents": [...]}``, each with ``retrieval_score`` and ``answerability`` in its metadata.
        """
        top_k = self.top_k if top_k is None else top_k
        if not documents:
            return {"documents": []}
        return {"documents": mix(documents, self.answerability(query, documents), self.retriever_weight)[:top_k]}

    def to_dict(self) -> dict[str, Any]:
        """The component's settings, serialised for a pipeline YAML."""
        return default_to_dict(
            self,
            model=self.model,
            retriever_weight=self.retriever_weight,
            top_k=self.top_k,
            max_seq_length=self.max_seq_length,
            doc_stride=self.doc_stride,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnswerabilityRanker:
        """The component from ``to_dict``'s data."""
        return default_from_dict(cls, data)
