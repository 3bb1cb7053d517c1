"""What counts as the right answer: the annotated review's, or every review the same question was asked of (pooled).

SubjQA asked each question of one review by construction, while other reviews of the product often
answer it too: a question asked of several reviews of one product (same product and question text:
15-48% of SubjQA's test questions, by domain) has several annotated answers. The **annotated** gold
scores a question against its own review's answers only, which punishes a right answer found in
another review; the **pooled** gold scores it against the answers of every review it was asked of,
and counts it unanswerable only when none of them has an answer. Its relevant documents, for
retrieval, are those reviews that hold an answer (all of them when none does).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from qa_system.config import GOLD_PROTOCOLS
from qa_system.errors import QAError
from qa_system.metrics.squad import best_scores, gold_answers, normalize_answer
from qa_system.sources.subjqa import LabelledQuestion


def check_golds(golds: str | Sequence[str]) -> list[str]:
    """The gold definitions asked for, in order, each once; a QAError names an unknown one."""
    golds = [golds] if isinstance(golds, str) else list(golds)
    unknown = [g for g in golds if g not in GOLD_PROTOCOLS]
    if unknown or not golds:
        raise QAError(f"Unknown gold '{unknown[0]}'." if unknown else "No gold given.", f"use {' or '.join(GOLD_PROTOCOLS)} (or both).")
    return list(dict.fromkeys(golds))


def _groups(questions: Sequence[LabelledQuestion]) -> dict[str, list[LabelledQuestion]]:
    """Question id -> every question of the same product with the same text (itself included)."""
    by_key: dict[tuple, list[LabelledQuestion]] = {}
    for question in questions:
        by_key.setdefault((question.domain, question.item_id, normalize_answer(question.question)), []).append(question)
    return {q.id: group for group in by_key.values() for q in group}


def pooled_answers(questions: Sequence[LabelledQuestion]) -> dict[str, list[str]]:
    """Question id -> the gold texts of every review it was asked of (``[""]`` when none has an answer)."""
    return {qid: gold_answers([t for q in group for t in q.answer_texts]) for qid, group in _groups(questions).items()}


def pooled_documents(questions: Sequence[LabelledQuestion]) -> dict[str, set[str]]:
    """Question id -> the documents that answer it under the pooled gold (every asked review, when none answers)."""
    relevant = {}
    for qid, group in _groups(questions).items():
        answering = {q.document_id for q in group if not q.no_answer}
        relevant[qid] = answering or {q.document_id for q in group}
    return relevant


def pooled_share(questions: Sequence[LabelledQuestion]) -> float:
    """Share of questions asked of more than one review of their product."""
    groups = _groups(questions)
    return sum(len(groups[q.id]) > 1 for q in questions) / len(questions) if questions else 0.0


def rescored(records: pd.DataFrame, golds: dict[str, list[str]], documents: dict[str, set[str]] | None = None) -> pd.DataFrame:
    """Records scored against other gold answers (``golds`` by question id): EM / F1 of the decision and of the top-k,
    ``answerable``, and, for a pipeline's records, ``gold_retrieved`` against ``documents``."""
    gold = [golds[str(i)] for i in records["id"]]
    top = [best_scores(p, g) for p, g in zip(records["prediction"], gold)]
    top_k = [[best_scores(p, g) for p in predictions] for predictions, g in zip(records["predictions"], gold)]
    changed = records.assign(
        gold=gold,
        answerable=[g != [""] for g in gold],
        em=[e for e, _ in top],
        f1=[f for _, f in top],
        em_top_k=[max(e for e, _ in s) for s in top_k],
        f1_top_k=[max(f for _, f in s) for s in top_k],
    )
    if documents is not None and "source_documents" in records:
        changed["gold_retrieved"] = [bool(documents[str(i)] & set(ids)) for i, ids in zip(records["id"], records["source_documents"])]
    return changed
