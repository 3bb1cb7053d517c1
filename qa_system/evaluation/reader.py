"""Reader and retriever-reader evaluation: per-question records, summary tables, SQuAD predictions.

``evaluate_reader`` gives the reader each question's own (gold) review: it measures reading
alone. ``evaluate_pipeline`` gives it what a retriever returns (typically the top reviews of the
question's product): it measures the whole system. Both score the top-1 answer and the best of
the top-k answers, the no-answer being one of the candidates, with the official SQuAD v2 EM/F1.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import pandas as pd
from haystack import Document

from qa_system.metrics.squad import best_scores, gold_answers
from qa_system.reading.reader import ExtractiveReader
from qa_system.sources.subjqa import LabelledQuestion

Retrieve = Callable[[LabelledQuestion], list[Document]]


def gold_document(question: LabelledQuestion) -> Document:
    """The labelled review as the index holds it (same id and content; of its splits, the question's)."""
    meta = {"item_id": question.item_id, "review_id": question.review_id, "domain": question.domain, "split": [question.split]}
    return Document(id=question.document_id, content=question.context, meta=meta)


def _record(question: LabelledQuestion, reader: ExtractiveReader, documents: list[Document], top_k: int) -> dict:
    began = time.perf_counter()
    answers = reader.run(query=question.question, documents=documents, top_k=top_k)["answers"]
    latency = time.perf_counter() - began
    golds = gold_answers(question.answer_texts)
    candidates = [answer.data or "" for answer in answers]
    scores = [best_scores(text, golds) for text in candidates]
    top = answers[0]
    # Threshold-free: the best span's margin over "no answer" (logits), so that any threshold can be scored afterwards.
    spans = [answer for answer in answers if answer.data is not None]
    null_logit = next((a.meta.get("null_logit") for a in answers if a.data is None), None)
    best_span = spans[0].data if spans else ""
    gap = spans[0].meta["logit"] - null_logit if spans and null_logit is not None else -math.inf
    return {
        "id": question.id,
        "question": question.question,
        "domain": question.domain,
        "split": question.split,
        "item_id": question.item_id,
        "prediction": candidates[0],
        "predictions": candidates,
        "score": top.score,
        "answer_document": top.document.id if top.document is not None else None,
        "gold": golds,
        "gold_document": question.document_id,
        "em": scores[0][0],
        "f1": scores[0][1],
        "em_top_k": max(em for em, _ in scores),
        "f1_top_k": max(f1 for _, f1 in scores),
        "best_span": best_span,
        "gap": gap,
        "threshold": next((a.meta.get("threshold") for a in answers if a.data is None), None),
        "top_k": top_k,
        "answerable": not question.no_answer,
        "subjective": question.is_subjective,
        "read_latency_s": latency,
    }


def _progress(questions: Sequence[LabelledQuestion], progress: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(questions, desc=desc, disable=not progress)


def evaluate_reader(questions: Sequence[LabelledQuestion], reader: ExtractiveReader, top_k: int = 3, progress: bool = True) -> pd.DataFrame:
    """The reader alone, given each question's gold review: one record per question."""
    reader.warm_up()
    records = []
    for question in _progress(questions, progress, "reading"):
        record = _record(question, reader, [gold_document(question)], top_k)
        record["latency_s"] = record["read_latency_s"]
        records.append(record)
    return pd.DataFrame.from_records(records)


def evaluate_pipeline(
    questions: Sequence[LabelledQuestion],
    retrieve: Retrieve,
    reader: ExtractiveReader,
    top_k: int = 3,
    progress: bool = True,
) -> pd.DataFrame:
    """Retriever then reader: ``retrieve(question)`` returns the documents the reader reads.

    Records add the retrieved ids, whether the gold review was among them, and the retrieval time.
    """
    reader.warm_up()
    records = []
    for question in _progress(questions, progress, "retrieving and reading"):
        began = time.perf_counter()
        documents = retrieve(question)
        retrieve_latency = time.perf_counter() - began
        record = _record(question, reader, documents, top_k)
        ids = [d.id for d in documents]
        record.update(
            documents=ids,
            # A long document is several passages, each knowing its document.
            gold_retrieved=question.document_id in {d.meta.get("document_id", d.id) for d in documents},
            retrieve_latency_s=retrieve_latency,
            latency_s=retrieve_latency + record["read_latency_s"],
        )
        records.append(record)
    return pd.DataFrame.from_records(records)


def summarize_answers(records: pd.DataFrame) -> pd.DataFrame:
    """EM/F1 (top-1 and top-k) overall, answerable vs unanswerable, subjective vs factual, and the
    "always answer nothing" baseline, one row each."""
    groups = {
        "all": records,
        "answerable": records[records["answerable"]],
        "unanswerable": records[~records["answerable"]],
        "subjective": records[records["subjective"]],
        "factual": records[~records["subjective"]],
    }
    rows = {}
    for name, group in groups.items():
        rows[name] = {
            "questions": len(group),
            "em": group["em"].mean(),
            "f1": group["f1"].mean(),
            "em_top_k": group["em_top_k"].mean(),
            "f1_top_k": group["f1_top_k"].mean(),
            "answered": (group["prediction"] != "").mean(),
            "latency_ms": 1000 * group["latency_s"].mean(),
        }
    baseline = [best_scores("", gold) for gold in records["gold"]]
    em = sum(e for e, _ in baseline) / max(len(baseline), 1)
    f1 = sum(f for _, f in baseline) / max(len(baseline), 1)
    rows["always no answer"] = {"questions": len(records), "em": em, "f1": f1, "em_top_k": em, "f1_top_k": f1, "answered": 0.0, "latency_ms": 0.0}
    return pd.DataFrame.from_dict(rows, orient="index")


def squad_predictions(records: pd.DataFrame) -> dict[str, str]:
    """Top-1 predictions in the official SQuAD v2 format: {question id: text, "" = no answer}."""
    return dict(zip(records["id"].astype(str), records["prediction"]))
