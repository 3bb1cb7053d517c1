"""Reader and retriever-reader evaluation: per-question records, summary tables, SQuAD predictions.

``evaluate_reader`` gives the reader each question's own (gold) review: it measures reading
alone. ``evaluate_pipeline`` gives it what a retriever returns (typically the top reviews of the
question's product): it measures the whole system. Both score the top-1 answer and the best of
the top-k answers, the no-answer being one of the candidates, with the official SQuAD v2 EM/F1.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import pandas as pd
from haystack import Document

from qa_system.metrics.calibration import expected_calibration_error
from qa_system.metrics.squad import RIGHT_F1, best_scores, gold_answers, is_right
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.selection import AnswerSelector
from qa_system.sources.subjqa import LabelledQuestion, gold_document

Retrieve = Callable[[LabelledQuestion], list[Document]]


# A record's columns that belong to one decision; with a selector, the reader's own are kept too as "reader_<column>".
DECISION_COLUMNS = ("prediction", "predictions", "score", "confidence", "answer_document", "em", "f1", "em_top_k", "f1_top_k")


def _decision(answers: list, golds: list[str]) -> dict:
    """The columns of one decision: its answers best first, scored against the gold answers."""
    candidates = [answer.data or "" for answer in answers]
    scores = [best_scores(text, golds) for text in candidates]
    top = answers[0]
    return {
        "prediction": candidates[0],
        "predictions": candidates,
        "score": top.score,
        # The probability that the deciding answer is right: the selector's; the reader's scores are none.
        "confidence": top.meta.get("probability", math.nan),
        "answer_document": top.document.id if top.document is not None else None,
        "em": scores[0][0],
        "f1": scores[0][1],
        "em_top_k": max(em for em, _ in scores),
        "f1_top_k": max(f1 for _, f1 in scores),
    }


def _record(
    question: LabelledQuestion, reader: ExtractiveReader, documents: list[Document], top_k: int, selector: AnswerSelector | None = None
) -> dict:
    """One question's record: the deciding answers (the selector's when there is one, else the reader's), the reader's
    own as ``reader_*`` beside a selector's, and the reader's threshold-free view (best span and its margin over "no
    answer"), so that any threshold can be scored afterwards."""
    began = time.perf_counter()
    output = reader.run(query=question.question, documents=documents, top_k=top_k)
    # Asked across every document (no item), the doors weigh each answer by its document's retrieval score: so does this.
    selected = (
        None
        if selector is None
        else selector.run(question.question, documents, output["reading"], top_k=top_k, all_documents=not question.item_id)["answers"]
    )
    latency = time.perf_counter() - began
    golds = gold_answers(question.answer_texts)
    reading = output["reading"]
    best = reading.spans[0] if reading.spans else None
    own = _decision(output["answers"], golds)
    return {
        "id": question.id,
        "question": question.question,
        "domain": question.domain,
        "split": question.split,
        "item_id": question.item_id,
        **(own if selected is None else {**_decision(selected, golds), **{f"reader_{k}": v for k, v in own.items()}}),
        "gold": golds,
        "gold_document": question.document_id,
        "best_span": documents[best.document].content[best.start : best.end] if best else "",
        "gap": reading.best_gap,
        "threshold": reader.threshold,
        "top_k": top_k,
        "answerable": not question.no_answer,
        "subjective": question.is_subjective,
        "read_latency_s": latency,
    }


def readers_own_decision(records: pd.DataFrame) -> pd.DataFrame:
    """The records as the reader decided alone (its threshold), where a selector decided: its ``reader_*`` columns."""
    own = [c for c in records.columns if c.startswith("reader_") and c.removeprefix("reader_") in DECISION_COLUMNS]
    if not own:
        return records
    return records.drop(columns=list(DECISION_COLUMNS)).rename(columns={c: c.removeprefix("reader_") for c in own})


def _progress(questions: Sequence[LabelledQuestion], progress: bool, desc: str):
    from qa_system.progress import track

    return track(questions, desc, "questions", enabled=progress)


def evaluate_reader(
    questions: Sequence[LabelledQuestion],
    reader: ExtractiveReader,
    top_k: int = 3,
    progress: bool = True,
    selector: AnswerSelector | None = None,
) -> pd.DataFrame:
    """The reader alone (then ``selector``, when given), given each question's gold review: one record per question."""
    reader.warm_up()
    records = []
    for question in _progress(questions, progress, "reading"):
        record = _record(question, reader, [gold_document(question)], top_k, selector)
        record["latency_s"] = record["read_latency_s"]
        records.append(record)
    return pd.DataFrame.from_records(records)


def evaluate_pipeline(
    questions: Sequence[LabelledQuestion],
    retrieve: Retrieve,
    reader: ExtractiveReader,
    top_k: int = 3,
    progress: bool = True,
    selector: AnswerSelector | None = None,
) -> pd.DataFrame:
    """Retriever then reader (then ``selector``, when given): ``retrieve(question)`` returns the documents the reader reads.

    Records add the retrieved ids, whether the gold review was among them, and the retrieval time.
    """
    reader.warm_up()
    records = []
    for question in _progress(questions, progress, "retrieving and reading"):
        began = time.perf_counter()
        documents = retrieve(question)
        retrieve_latency = time.perf_counter() - began
        record = _record(question, reader, documents, top_k, selector)
        # A long document is several passages, each knowing its document.
        sources = list(dict.fromkeys(d.meta.get("document_id", d.id) for d in documents))
        record.update(
            documents=[d.id for d in documents],
            source_documents=sources,
            gold_retrieved=question.document_id in sources,
            retrieve_latency_s=retrieve_latency,
            latency_s=retrieve_latency + record["read_latency_s"],
        )
        records.append(record)
    return pd.DataFrame.from_records(records)


def decision_shares(records: pd.DataFrame) -> dict[str, float]:
    """Shares of questions answered and right, answered wrongly (a wrong span, or any span for a question
    with no answer), and abstained wrongly (a question that had an answer); the rest abstained rightly."""
    answered = records["prediction"] != ""
    right = records["f1"] >= RIGHT_F1
    return {
        "answered_right": float((answered & right).mean()),
        "answered_wrong": float((answered & ~right).mean()),
        "abstained_wrong": float((~answered & records["answerable"]).mean()),
    }


def right_answers(records: pd.DataFrame) -> pd.Series:
    """Per question, whether the deciding answer was right (``metrics.squad.is_right``)."""
    return pd.Series(
        [is_right(p != "", f, a) for p, f, a in zip(records["prediction"], records["f1"], records["answerable"])],
        index=records.index,
        dtype=bool,
    )


def calibration_error(records: pd.DataFrame) -> float:
    """ECE of the deciding answers' probabilities of being right (NaN when the answers carry none: the reader's own)."""
    if "confidence" not in records or records["confidence"].isna().any() or records.empty:
        return math.nan
    return expected_calibration_error(records["confidence"], right_answers(records))


def no_answer_f1(records: pd.DataFrame) -> float:
    """The F1 of saying "no answer" to every question of ``records`` (NaN for none)."""
    return sum(best_scores("", gold)[1] for gold in records["gold"]) / len(records) if len(records) else math.nan


def summarize_answers(records: pd.DataFrame) -> pd.DataFrame:
    """EM/F1 (top-1 and top-k) overall, answerable vs unanswerable, subjective vs factual (where any question is
    subjective), for a pipeline
    whether the annotated review was retrieved, and the "always answer nothing" baseline, one row each;
    with each group's own always-no F1 (``no_answer_f1``), the shares of right and wrong decisions and,
    when the answers carry a probability of being right, its expected calibration error (``ece``, 10 bins)."""
    groups = {"all": records, "answerable": records[records["answerable"]], "unanswerable": records[~records["answerable"]]}
    if records["subjective"].any():  # SubjQA marks it; labels of one's own do not say, so they have no such rows
        groups.update(subjective=records[records["subjective"]], factual=records[~records["subjective"]])
    if "gold_retrieved" in records:
        # Under annotated gold an answer read in another review scores only where it repeats the annotated
        # one's words: the second group shows what reading other reviews costs against saying "no answer".
        groups["gold retrieved"] = records[records["gold_retrieved"]]
        groups["gold not retrieved"] = records[~records["gold_retrieved"]]
    rows = {}
    for name, group in groups.items():
        rows[name] = {
            "questions": len(group),
            "em": group["em"].mean(),
            "f1": group["f1"].mean(),
            "em_top_k": group["em_top_k"].mean(),
            "f1_top_k": group["f1_top_k"].mean(),
            "no_answer_f1": no_answer_f1(group),
            "answered": (group["prediction"] != "").mean(),
            **decision_shares(group),
            "ece": calibration_error(group),
            "latency_ms": 1000 * group["latency_s"].mean(),
        }
    # The "all" group's no_answer_f1, already computed; saying nothing scores the same EM as F1 (1 or 0 a question).
    em = f1 = rows["all"]["no_answer_f1"] if len(records) else 0.0
    unanswerable = float((~records["answerable"]).mean()) if len(records) else 0.0
    rows["always no answer"] = {
        "questions": len(records),
        "em": em,
        "f1": f1,
        "em_top_k": em,
        "f1_top_k": f1,
        "no_answer_f1": f1,
        "answered": 0.0,
        "answered_right": 0.0,
        "answered_wrong": 0.0,
        "abstained_wrong": 1.0 - unanswerable,
        "ece": math.nan,
        "latency_ms": 0.0,
    }
    return pd.DataFrame.from_dict(rows, orient="index")


def squad_predictions(records: pd.DataFrame) -> dict[str, str]:
    """Top-1 predictions in the official SQuAD v2 format: {question id: text, "" = no answer}."""
    return dict(zip(records["id"].astype(str), records["prediction"]))
