"""End-to-end answering latency at one corpus size, with a stage breakdown.

Stock Haystack (InMemoryBM25Retriever + TransformersExtractiveReader) is the baseline; the project's
extractive pipeline (bm25s + the reader) runs with the PyTorch and the ONNX int8 reader, and with the
answer selector after the ONNX reader when one was trained for the reader; the RAG
pipeline runs a handful of questions (a generator on CPU takes seconds per answer) and is compared
with the fast extractive pipeline. Every pipeline reads the top 3 reviews of the question's product.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

from qa_system.bench.measure import Timing, compare
from qa_system.bench.reader import haystack_reader
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.pipelines import ANSWER_STAGES, build_qa_pipeline
from qa_system.reading.onnx import INT8_FILE
from qa_system.reading.selection import NO_SELECTOR, selector_fits_reader
from qa_system.retrieval import make_filters
from qa_system.sources import LabelledQuestion
from qa_system.stores import Index
from qa_system.timing import component_timings

TOP_K = 3
STOCK = "stock Haystack (InMemoryBM25Retriever + TransformersExtractiveReader)"
PROJECT_TORCH = "project extractive (bm25s + torch reader)"
PROJECT_ONNX = "project extractive (bm25s + ONNX int8 reader)"
PROJECT_SELECTOR = "project extractive (bm25s + ONNX int8 reader + answer selector)"
PROJECT_RAG = "project RAG (bm25s + generator)"
# Each row's p50 and p95 are compared with another's: the stock pipeline's, or the one it adds a stage to.
BASELINES = {PROJECT_RAG: PROJECT_ONNX, PROJECT_SELECTOR: PROJECT_ONNX}


def _stock(store: Any, model: str) -> Callable[[LabelledQuestion], dict[str, float]]:
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(store, top_k=TOP_K))
    pipeline.add_component("reader", haystack_reader(model, TOP_K))
    pipeline.connect("retriever.documents", "reader.documents")

    def run(question: LabelledQuestion) -> dict[str, float]:
        start = time.perf_counter()
        with component_timings() as timings:
            pipeline.run(
                {
                    "retriever": {"query": question.question, "filters": make_filters(item_id=question.item_id)},
                    "reader": {"query": question.question},
                }
            )
        total = time.perf_counter() - start
        return {**timings, "retrieval_s": total - timings["reader"], "answer_s": timings["reader"], "total_s": total}

    return run


def _project(settings: Settings, index: Index, stage: str) -> Callable[[LabelledQuestion], dict[str, float]]:
    pipeline = build_qa_pipeline("bm25", settings, index=index, answer_stage=stage)

    def run(question: LabelledQuestion) -> dict[str, float]:
        return pipeline.run(question.question, item_id=question.item_id, top_k=TOP_K, top_k_reader=TOP_K)["timings"]

    return run


def bench_tier(
    tier: int,
    store: Any,
    documents: Sequence[Document],
    questions: Sequence[LabelledQuestion],
    settings: Settings,
    export_dir: Path,
    budget_s: float,
    rag_questions: int = 0,
    progress: Callable[[str], None] = print,
) -> tuple[list[dict], list[dict], list[str]]:
    """(pipeline rows, stage rows, notes) for the corpus in ``store``."""
    manifest = {"item_counts": dict(Counter(d.meta["item_id"] for d in documents))}
    index = Index("memory", f"bench-{tier}", store, manifest)
    onnx = settings.with_(reader_backend="onnx", reader_onnx_model=str(export_dir / INT8_FILE))
    progress(f"[{tier}] end-to-end: building pipelines")
    systems = {
        STOCK: _stock(store, settings.reader_model),
        PROJECT_TORCH: _project(settings.with_(reader_backend="torch", selector_model=NO_SELECTOR), index, "extractive"),
        PROJECT_ONNX: _project(onnx.with_(selector_model=NO_SELECTOR), index, "extractive"),
    }
    if selector_fits_reader(settings.selector_model, settings.reader_model):
        systems[PROJECT_SELECTOR] = _project(onnx, index, "extractive")
    for run in systems.values():  # first calls build indexes and caches: not part of a query's latency
        run(questions[0])
    progress(f"[{tier}] end-to-end: extractive pipelines")
    timings = compare(systems, questions, budget_s)
    notes = []
    if rag_questions > 0:
        rag, note = _rag(onnx, index, questions[:rag_questions], progress)
        notes.append(note)
        if rag is not None:
            timings[PROJECT_RAG] = rag
    return _rows(tier, timings), _stage_rows(tier, timings), notes


def _rag(
    settings: Settings, index: Index, questions: Sequence[LabelledQuestion], progress: Callable[[str], None]
) -> tuple[Timing | None, str]:
    if "rag" not in ANSWER_STAGES:
        return None, "RAG end-to-end: skipped, this version has no 'rag' answer stage."
    progress(f"end-to-end: RAG on {len(questions)} questions")
    try:
        run = _project(settings, index, "rag")
        run(questions[0])
        timing = compare({PROJECT_RAG: run}, questions)[PROJECT_RAG]
    except QAError as error:
        return None, f"RAG end-to-end: skipped ({error})."
    return (
        timing,
        f"RAG end-to-end: {timing.calls} questions with the {settings.generator} generator, compared with the ONNX extractive pipeline.",
    )


def _rows(tier: int, timings: dict[str, Timing]) -> list[dict]:
    rows = []
    for name, timing in timings.items():
        baseline = BASELINES.get(name, STOCK)
        base = timings[baseline]
        stage = {key: [1000 * t[key] for t in timing.outputs] for key in ("retrieval_s", "answer_s")}
        rows.append(
            {
                "corpus": tier,
                "pipeline": name,
                "queries": timing.calls,
                "p50_ms": timing.p50_ms,
                "p95_ms": timing.p95_ms,
                "retrieval_p50_ms": float(np.median(stage["retrieval_s"])),
                "answer_p50_ms": float(np.median(stage["answer_s"])),
                "baseline": baseline,
                "p50_ratio": timing.p50_ms / base.p50_ms,
                "p95_ratio": timing.p95_ms / base.p95_ms,
            }
        )
    return rows


def _stage_rows(tier: int, timings: dict[str, Timing]) -> list[dict]:
    """Per component of each pipeline: median and mean milliseconds, and its share of the total."""
    rows = []
    for name, timing in timings.items():
        total = sum(t["total_s"] for t in timing.outputs)
        components = [k for k in timing.outputs[0] if not k.endswith("_s")]
        for component in components:
            seconds = [t.get(component, 0.0) for t in timing.outputs]
            rows.append(
                {
                    "corpus": tier,
                    "pipeline": name,
                    "component": component,
                    "p50_ms": 1000 * float(np.median(seconds)),
                    "mean_ms": 1000 * float(np.mean(seconds)),
                    "share": sum(seconds) / total,
                }
            )
    return rows
