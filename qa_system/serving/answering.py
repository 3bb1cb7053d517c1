"""The rules a question meets before any work (``check_question``), and how an answer names its pipeline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from qa_system.config import Settings
from qa_system.errors import NotFound, QAError, check_count, check_number
from qa_system.pipelines import ANSWER_STAGES, QAPipeline, validate_question  # noqa: F401 - the doors' choice of answer stages
from qa_system.retrieval.filters import check_collection_filters
from qa_system.serving.question import Question, check_length
from qa_system.stores import Index


def check_question(question: Question, index: Index, collection: str) -> Question:
    """``question`` as asked of ``index`` (the collection named ``collection``), with the library's rules applied
    (counts, an empty question, an unknown product, a filter on fields the collection lacks): one QAError
    (NotFound for names) naming the problem, before any work."""
    check_length(question.query)
    validate_question(index, question.query, question.item_id)
    products = index.item_counts()
    if question.all_products and question.item_id is not None:
        raise QAError(
            f"The question names the product '{question.item_id}' and asks about all products.", "send item_id or all_products, not both."
        )
    if question.item_id is None and products and not question.all_products:
        raise QAError(
            f"The question names no product (item_id), and collection '{collection}' holds {len(products)} products.",
            "send the item_id of one (GET /products lists them), or all_products: true to ask every document (each answer names its product).",
        )
    check_count(question.top_k, "top_k", optional=True)
    check_count(question.top_k_reader, "top_k_reader", optional=True)
    check_number(question.no_answer_threshold, "no_answer_threshold", optional=True)
    check_collection_filters(question.filters, index.manifest)
    return question


def pipeline_label(
    settings: Settings, retriever: str, answer_stage: str | None, reader_backend: str | None = None, device: str | None = None
) -> str:
    """Which pipeline produced an answer, as feedback records it, and on which device:
    "bm25 + extractive (reader-minilm-subjqa, onnx int8) on cpu" (``device`` None: the settings' device, resolved)."""
    from qa_system.devices import resolve_device

    reader = ", ".join(filter(None, [Path(settings.reader_model).name, reader_backend]))
    label = f"{retriever} + {answer_stage}" + (f" ({reader})" if answer_stage == "extractive" else "")
    return f"{label} on {device or resolve_device(settings.device)}"


def run_question(pipeline: QAPipeline, question: Question, streaming_callback=None) -> dict[str, Any]:
    """``pipeline``'s result for ``question``, asked with every setting the question carries."""
    return pipeline.run(
        question.query,
        item_id=question.item_id,
        split=question.split,
        top_k=question.top_k,
        top_k_reader=question.top_k_reader,
        no_answer_threshold=question.no_answer_threshold,
        streaming_callback=streaming_callback,
        filters=question.filters,
    )


def answer_stage_or_retrieval(
    pipeline: Callable[[str | None], QAPipeline], mode: str | None, fallback: bool
) -> tuple[QAPipeline, dict[str, str]]:
    """``pipeline(mode)``; with ``fallback``, when that answer stage cannot be built (a reader that does not load), the
    retrieval pipeline and ``{"answer_stage_error": why}``: the retrieved documents are still shown."""
    try:
        return pipeline(mode), {}
    except QAError as error:
        if not fallback or isinstance(error, NotFound):
            raise
        return pipeline(None), {"answer_stage_error": str(error)}
