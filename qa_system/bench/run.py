"""`qa-system bench`: indexing, retrieval, reader and end-to-end speed, each beside its baseline.

One process run measures everything side by side: Haystack's stock components are the baselines
(InMemoryBM25Retriever, InMemoryEmbeddingRetriever, TransformersExtractiveReader), the project's
components the contenders, over corpora of increasing size (``corpus.py``). The reader is measured
once (its input does not depend on the corpus size); retrieval and the pipelines at every size.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from qa_system.bench import corpus, endtoend, reader, report, retrieval
from qa_system.bench.measure import Timing, library_versions, machine, peak_rss_mb, rss_mb, timed
from qa_system.config import Settings
from qa_system.errors import QAError, check_count, check_number
from qa_system.reading.onnx import physical_cores
from qa_system.reading.onnx_cache import cached_export
from qa_system.sources import in_split

DEFAULT_SIZES = (1000, 10000, 100000)


def _query_vectors(settings: Settings, questions: Sequence) -> tuple[list[list[float]], Timing]:
    from qa_system.ingestion.embedding import QueryEmbedder, indexing_backend

    embedder = QueryEmbedder(settings.embedding_model, indexing_backend(settings.embedding_backend, settings.device))
    embedder.use_runtime(settings.device, settings.home)
    embedder.warm_up()
    timing = Timing()
    for question in questions:
        vector, seconds = timed(lambda: embedder.run(text=question.question)["embedding"])
        timing.seconds.append(seconds)
        timing.outputs.append(vector)
    return timing.outputs, timing


def run_bench(
    settings: Settings,
    out_dir: str | Path = "reports/bench",
    sizes: Sequence[int] = DEFAULT_SIZES,
    queries: int = 200,
    reader_questions: int | None = None,
    budget_s: float = 60.0,
    rag_questions: int = 3,
    embed_sample: int = 1000,
    seed: int = 0,
    progress: Callable[[str], None] = lambda message: None,
) -> Path:
    """Run every measurement and write ``report.{json,csv,md}`` and the plots to ``out_dir``.

    :param queries: questions (electronics test) for retrieval and end-to-end timing.
    :param reader_questions: questions for the reader comparison and its EM/F1 (None = all).
    :param budget_s: seconds a slow system may spend on one measurement before it stops early.
    :param rag_questions: RAG end-to-end questions at the smallest size (0 = skip).
    :param embed_sample: reviews embedded for real; all other vectors are perturbed copies of theirs.
    """
    sizes = sorted({check_count(size, "sizes") for size in sizes})
    queries, embed_sample = check_count(queries, "queries"), check_count(embed_sample, "embed_sample")
    reader_questions = check_count(reader_questions, "reader_questions", optional=True)
    rag_questions, seed = check_count(rag_questions, "rag_questions", 0), check_count(seed, "seed", 0)
    budget_s = check_number(budget_s, "budget_s", 0, above=True)
    started, at_start = time.time(), machine(settings.device)
    real, left_out, questions = _corpus_and_questions(settings, sizes[0], queries, progress)
    domain_reviews = [d for d in real if d.meta["domain"] == "electronics"]
    memory: list[dict] = []

    sample = real[: min(embed_sample, len(real))]
    progress(f"embedding {len(sample)} reviews for real ({settings.embedding_model})")
    vectors, embed_s = _embed(settings, sample)
    query_vectors, query_timing = _query_vectors(settings, questions)
    memory.append(_memory_at("embeddings"))

    # The export the readers build on first use (fp32 and int8 graphs); a failed build is an error here.
    export_dir = cached_export(settings.reader_model, settings.reader_onnx_cache)
    reader_qs = corpus.bench_questions(settings, limit=reader_questions)
    tables = _bench_readers(settings, export_dir, domain_reviews, reader_qs, progress)
    memory.append(_memory_at("readers"))

    indexing = [_real_embedding_row(len(sample), embed_s)]
    retrieval_rows = [_query_embedding_row(query_timing)]
    e2e_rows, stage_rows, notes = [], [], []
    for size in sizes:
        documents = corpus.with_vectors(corpus.tier_corpus(real, size, seed), vectors, seed)
        tier_indexing, tier_retrieval, store = retrieval.bench_tier(size, documents, questions, query_vectors, budget_s, progress)
        indexing += tier_indexing
        retrieval_rows += tier_retrieval
        memory.append(_memory_at(f"{size} reviews: retrieval"))
        rows, stages, tier_notes = endtoend.bench_tier(
            size, store, documents, questions, settings, export_dir, budget_s, rag_questions if size == sizes[0] else 0, progress
        )
        e2e_rows += rows
        stage_rows += stages
        notes += tier_notes
        memory.append(_memory_at(f"{size} reviews: end to end"))
        del documents, store
        gc.collect()

    tables.update(
        {
            "end_to_end": pd.DataFrame(e2e_rows),
            "end_to_end_stages": pd.DataFrame(stage_rows),
            "retrieval": pd.DataFrame(retrieval_rows[1:]),
            "query_embedding": pd.DataFrame(retrieval_rows[:1]),
            "indexing": pd.DataFrame(indexing),
            "memory": pd.DataFrame(memory),
        }
    )
    at_end = machine(settings.device)
    summary = {
        **_setup(settings, at_start, at_end, export_dir),
        "sizes": sizes,
        "queries": len(questions),
        "reader_questions": len(reader_qs),
        "budget_s": budget_s,
        "seed": seed,
        "embedded_for_real": len(sample),
        "seconds": round(time.time() - started, 1),
    }
    counts = {"questions": len(questions), "reader_questions": len(reader_qs), "reviews": len(real), "embedded": len(sample)}
    return report.write(Path(out_dir), tables, summary, [*_notes(at_start, at_end, counts, seed, budget_s, left_out), *notes])


def _corpus_and_questions(settings: Settings, smallest: int, queries: int, progress: Callable[[str], None]) -> tuple[list, list[str], list]:
    """The real SubjQA reviews the corpora are made of, what was left out of them, and the ``queries`` questions asked.

    Raises QAError when the smallest corpus cannot hold the electronics test reviews the questions are about.
    """
    real, left_out = corpus.real_reviews(settings, corpus.bench_questions(settings))
    if left_out:
        progress(f"left out of the corpus: {'; '.join(left_out)}")
    questions = corpus.bench_questions(settings, limit=queries)
    needed = sum(1 for d in real if d.meta["domain"] == "electronics" and in_split(d, "test"))
    if not questions or smallest < needed:
        raise QAError(
            f"The smallest corpus ({smallest}) must hold the {needed} electronics test reviews the questions are about.",
            f"use --sizes of at least {needed}.",
        )
    return real, left_out, questions


def _embed(settings: Settings, sample: Sequence) -> tuple[dict[str, list[float]], float]:
    """The real vectors of ``sample`` by document id, and the seconds embedding them took."""
    from qa_system.ingestion.indexing import embed_documents, settings_embedder

    embedder = settings_embedder(settings)  # loaded (an ONNX export built) before the clock starts
    embedded, seconds = timed(
        lambda: embed_documents(sample, settings.embedding_model, settings.batch_size, progress=False, embedder=embedder)
    )
    return {d.id: d.embedding for d in embedded}, seconds


def _bench_readers(
    settings: Settings, export_dir: Path, reviews: Sequence, questions: Sequence, progress: Callable[[str], None]
) -> dict[str, pd.DataFrame]:
    """Haystack's reader against the project's backends on the same weights: speed and EM/F1, a profile, and per-operator times."""
    contexts = reader.top_reviews(reviews, questions)
    readers = {
        reader.HAYSTACK_READER: reader.haystack_reader(settings.reader_model),
        **reader.project_readers(settings.reader_model, export_dir),
    }
    reader_rows, profile_rows, _ = reader.bench_readers(readers, questions, contexts, progress)
    operator_rows = reader.operator_profile(readers, questions, contexts)
    progress("reader: sharing the cores among concurrent questions (lanes, batches)")
    return {
        "reader": pd.DataFrame(reader_rows),
        "reader_profile": pd.DataFrame(profile_rows),
        "reader_operators": pd.DataFrame(operator_rows),
        "reader_scheduling": pd.DataFrame(reader.scheduling(readers, questions, contexts)),
    }


def _memory_at(stage: str) -> dict:
    """The process's resident memory after ``stage``, and its peak so far."""
    return {"stage": stage, "rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb()}


def _real_embedding_row(documents: int, seconds: float) -> dict:
    """The indexing table's row of the reviews embedded for real (its own baseline)."""
    return {
        "corpus": documents,
        "stage": "dense embedding (real, MiniLM)",
        "system": "qa_system DocumentEmbedder (QA_EMBEDDING_BACKEND)",
        "documents": documents,
        "seconds": seconds,
        "docs_per_s": documents / seconds,
        "baseline": "itself",
        "speed_ratio": 1.0,
    }


def _query_embedding_row(timing: Timing) -> dict:
    """The retrieval table's first row: embedding the questions (its own baseline), whatever the corpus."""
    return {
        "corpus": 0,
        "retriever": "dense",
        "system": "query embedding (MiniLM)",
        "filter": "-",
        "docs_per_filter": float("nan"),
        "queries": timing.calls,
        "queries_per_s": timing.per_second,
        "p50_ms": timing.p50_ms,
        "p95_ms": timing.p95_ms,
        "baseline": "itself",
        "qps_ratio": 1.0,
        "p50_ratio": 1.0,
        "same_top10": float("nan"),
        "top10_overlap": float("nan"),
    }


def _setup(settings: Settings, at_start: dict, at_end: dict, export_dir: Path) -> dict:
    """The summary's description of what ran: the machine, threads, library versions and models."""
    import torch

    return {
        "machine": at_start,
        "load_average_at_end": at_end["load_average_1_5_15"],
        "threads": {
            "onnxruntime_intra_op": physical_cores(),
            "torch": torch.get_num_threads(),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "not set"),
        },
        "libraries": library_versions(),
        "reader_model": settings.reader_model,
        "onnx_export": str(export_dir),
        "embedding_model": settings.embedding_model,
    }


def _notes(at_start: dict, at_end: dict, counts: dict[str, int], seed: int, budget_s: float, left_out: Sequence[str]) -> list[str]:
    """How to read the report: the machine, what the ratios compare, how the corpora and vectors were made.

    :param counts: ``questions`` (retrieval and end to end), ``reader_questions``, ``reviews`` (real) and ``embedded`` (for real).
    """
    import torch

    return [
        f"Machine: {at_start['physical_cores']} physical cores ({at_start['cpu']}), load average {at_start['load_average_1_5_15']} at the start "
        f"and {at_end['load_average_1_5_15']} at the end: other processes share the CPU, so compare the ratios, which are measured interleaved in this one run.",
        f"int8 dot-product instructions: {', '.join(at_start['int8_dot_product']) or 'none'}. The int8 reader's speed-up over fp32 depends on them: "
        "without (AVX2 only) ONNX Runtime's int8 matrix products are under 2x its fp32 ones.",
        "Every ratio is system / baseline of the same row, measured in this run on the same queries, interleaved query by query.",
        f"Questions: SubjQA electronics test ({counts['questions']} for retrieval and end to end, {counts['reader_questions']} for the readers); "
        "filters: the question's own product, or a synthetic product of ~32 reviews.",
        f"Corpora: the first N of the {counts['reviews']} real SubjQA reviews (those of the questions' products first, then the rest of electronics), enlarged with deterministic synthetic reviews "
        f"(real sentences recombined, seed {seed}). Dense vectors: {counts['embedded']} reviews embedded for real; all others are seeded "
        "perturbations of those vectors (noise 0.02 per dimension, renormalised). Query vectors are real.",
        f"A slow system stops after {budget_s:.0f} s of one measurement (at least 5 queries); 'queries' says how many it ran.",
        "BM25 'same scoring': bm25s Lucene BM25 on Haystack's tokens, against Haystack's BM25Plus with delta=0 (the same function times k1+1); "
        "'same_top10' is the share of queries with identical top-10 ids in identical order.",
        "Reader: top-3 reviews of the question's product by BM25; EM/F1 are the official SQuAD v2 figures of the top-1 answer, in points.",
        f"Threads: ONNX Runtime {physical_cores()} intra-op threads without spinning; PyTorch {torch.get_num_threads()} threads, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'not set')} (the CLI sets PASSIVE, so that PyTorch does not spin either).",
        "Memory: resident set after each stage and the process's peak so far (ru_maxrss).",
        *([f"SubjQA left out of the corpus: {'; '.join(left_out)}."] if left_out else []),
    ]
