"""Reader and pipeline evaluation reports: EM / F1 tables, a bar chart, official-format predictions.

``evaluate_readers`` compares readers given the gold review (as in SQuAD evaluation);
``evaluate_pipelines`` runs retriever then reader under one or both candidate protocols (the
product's reviews in the question's split, or all of them: ``evaluation.retrieval.CANDIDATES``).
Both write, beside the usual report files, ``predictions-<system>[-<candidates>].json`` in the
official SQuAD v2 format and ``gold.json`` (the split as a SQuAD v2 dataset), so that the official
evaluation script gives the same numbers.

The pipeline's no-answer threshold can be fitted on dev for a retrieval set-up (retriever, depth,
candidate protocol: what the reader is given), which is what the reader's own threshold, tuned on
single gold reviews, is not: ``qa-system fit-threshold`` (``tuning.threshold``) stores it in the
index manifest, and evaluations of other splits report it beside the reader's own threshold; an
evaluation never stores one. It is never fitted on any other split than dev.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from qa_system.config import Settings
from qa_system.errors import QAError, check_count, check_number
from qa_system.evaluation.reader import evaluate_pipeline, evaluate_reader, squad_predictions, summarize_answers
from qa_system.evaluation.report import write_report
from qa_system.ingestion.labels import Labels, evaluation_index, evaluation_questions
from qa_system.metrics.squad import best_scores
from qa_system.reading.reader import ExtractiveReader
from qa_system.sources import LabelledQuestion, load_subjqa
from qa_system.sources.squad import write_squad
from qa_system.stores import Index
from qa_system.metrics.no_answer import DevPrediction, tune_no_answer_threshold


def reader_label(model: str) -> str:
    """A short name for a model path or hub id (its last path part)."""
    return Path(model.rstrip("/")).name or model


# One system's run: its report columns ({"system": ...}, and "candidates" for a pipeline) and its records.
Run = tuple[dict[str, str], pd.DataFrame]


def em_f1_plot(table: pd.DataFrame, group: str = "all", title: str = "") -> plt.Figure:
    """Grouped bars of EM and F1 per system, as in the reference chapter; the no-answer baseline dashed."""
    rows = table[table["group"] == group]
    labels = rows["system"] + (" (" + rows["candidates"] + ")" if "candidates" in rows else "")
    figure, axes = plt.subplots(figsize=(max(5, 1.6 * len(rows)), 4))
    positions = range(len(rows))
    axes.bar([p - 0.2 for p in positions], rows["em"], width=0.4, label="EM")
    axes.bar([p + 0.2 for p in positions], rows["f1"], width=0.4, label="F1")
    baseline = table[table["group"] == "always no answer"]["f1"]
    if not baseline.empty:
        axes.axhline(baseline.iloc[0], color="grey", linestyle="--", label="always no answer")
    axes.set_xticks(list(positions), labels, rotation=15)
    axes.set_ylim(0, 1)
    axes.set_ylabel("score")
    axes.set_title(title)
    axes.legend()
    return figure


def _write(out_dir, title, runs: list[Run], questions: list[LabelledQuestion], summary: dict, notes: list[str], sections: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    tables = []
    for columns, records in runs:
        table = summarize_answers(records).rename_axis("group").reset_index()
        for position, (name, value) in enumerate(columns.items()):
            table.insert(position, name, value)
        tables.append(table)
    metrics = pd.concat(tables, ignore_index=True)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_squad(questions, out / "gold.json", keep_unlocated=True)
        for columns, records in runs:
            stem = re.sub(r"[^\w+.-]+", "_", "-".join(columns.values()))  # "bm25+reader, dev-tuned threshold" -> a plain file name
            (out / f"predictions-{stem}.json").write_text(json.dumps(squad_predictions(records), indent=1), encoding="utf-8")
        all_records = pd.concat([records.assign(**columns) for columns, records in runs], ignore_index=True)
        write_report(
            out_dir,
            title,
            metrics,
            summary=summary,
            figures={"em_f1.png": em_f1_plot(metrics, title=title)},
            sections=sections,
            records=all_records,
            notes=notes,
        )
    return metrics


def evaluate_readers(
    settings: Settings,
    readers: Sequence[str],
    domain: str = "electronics",
    split: str = "test",
    top_k: int = 3,
    out_dir=None,
    limit: int | None = None,
    no_answer_threshold: float | None = None,
    labels: Labels | None = None,
) -> dict:
    """Each reader (model id or path) reads each question's own review.

    With ``labels`` (``ingestion.labels.load_labels``) the questions are your own: on their
    collection's documents, or, without a collection, each read with its own context (a SQuAD /
    MRQA file, e.g. the held-out SQuADShifts slice of ``squad.split_held_out``); else SubjQA's
    ``domain`` and ``split``.
    """
    top_k, limit = check_count(top_k, "top_k"), check_count(limit, "limit", optional=True)
    no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
    questions, what, source = evaluation_questions(settings, domain, split, labels, limit)
    gold = "context" if labels is not None and labels.collection is None else "review"
    records, backends = {}, {}
    for model in readers:
        reader = ExtractiveReader.from_settings(settings, model, top_k=top_k, no_answer_threshold=no_answer_threshold)
        records[reader_label(model)] = evaluate_reader(questions, reader, top_k=top_k)
        backends[reader_label(model)] = reader.active_backend
    metrics = _write(
        out_dir,
        f"Reader evaluation: {what} (gold {gold})",
        [({"system": system}, r) for system, r in records.items()],
        questions,
        {**source, "questions": len(questions), "readers": list(readers), "top_k": top_k, "reader_backends": backends},
        [
            *(labels.notes if labels else []),
            f"Each reader is given the question's own {gold} (reading alone, as in SQuAD evaluation).",
            "EM and F1 as the official SQuAD v2.0 script; a question whose annotators marked no span has the single gold answer \"\".",
            f"top-k: the best of the top {top_k} answers, the no-answer being one of the candidates.",
        ],
    )
    return {"metrics": metrics, "records": records, "reader_backends": backends}


def no_answer_share(questions: Sequence[LabelledQuestion]) -> float:
    """Share of questions no annotator answered."""
    return sum(q.no_answer for q in questions) / len(questions) if questions else 0.0


def fit_no_answer_threshold(records: pd.DataFrame, no_answer_prior: float | None) -> dict:
    """The threshold (logit margin of the best span over "no answer") that maximises these records' F1.

    As the reader's own tuning (``metrics.no_answer.tune_no_answer_threshold``): unanswerable questions
    are weighted to make up ``no_answer_prior`` (label shift: SubjQA's dev splits are far more often
    unanswerable than its train and test splits).
    """
    predictions = [
        DevPrediction(gap, *best_scores(span, gold), *best_scores("", gold)) for gap, span, gold in zip(records["gap"], records["best_span"], records["gold"])
    ]
    threshold, weighted_f1 = tune_no_answer_threshold(predictions, no_answer_prior)
    return {"threshold": threshold, "no_answer_prior": no_answer_prior, "weighted_f1": weighted_f1, "questions": len(records)}


def at_threshold(records: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """The records as the reader answers at ``threshold``: the best span when it beats "no answer" by that margin, else none.

    Top-k figures do not move: the same answers, the no-answer among them, are only re-ordered.
    """
    answered = records["gap"] >= threshold
    changed = records.assign(prediction=records["best_span"].where(answered, ""), threshold=threshold)
    scores = [best_scores(prediction, gold) for prediction, gold in zip(changed["prediction"], changed["gold"])]
    return changed.assign(em=[em for em, _ in scores], f1=[f1 for _, f1 in scores])


def evaluate_pipelines(
    settings: Settings,
    readers: Sequence[str],
    retriever: str = "bm25",
    domain: str = "electronics",
    split: str = "test",
    top_k_retriever: int = 3,
    top_k: int = 3,
    out_dir=None,
    limit: int | None = None,
    no_answer_threshold: float | None = None,
    candidates: str | Sequence[str] = ("split",),
    tune_threshold: bool = False,
    labels: Labels | None = None,
    index: Index | None = None,
) -> dict:
    """Retriever then each reader, over the domain's index (or ``index``, e.g. a collection, with
    ``labels``: your own labelled questions), under each candidate protocol.

    ``tune_threshold`` (dev only): fit the no-answer threshold for each reader and protocol
    (``fit_no_answer_threshold``, unanswerable questions weighted to the domain's train share) for
    this run only, never saved, and report the figures at it (``tuning.threshold`` stores fits). Any
    split reports a stored dev fit for its set-up as one more system, ``<system>, dev-tuned threshold``.

    Returns {"metrics": DataFrame, "records": {(system, candidates): DataFrame}, "thresholds": DataFrame}.
    """
    from qa_system.evaluation.retrieval import CANDIDATES, candidate_filters, check_candidates
    from qa_system.pipelines import build_retrieval_pipeline
    from qa_system.retrieval.fitted import no_answer_fit, no_answer_setting
    from qa_system.tuning.fusion import fits_in_force

    top_k_retriever, top_k = check_count(top_k_retriever, "top_k_retriever"), check_count(top_k, "top_k")
    limit = check_count(limit, "limit", optional=True)
    no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
    protocols = check_candidates(candidates)
    if tune_threshold and split != "dev":
        raise QAError(
            f"The no-answer threshold is tuned on dev only, never on {split}.",
            "fit it with `qa-system fit-threshold --split dev`; evaluating other splits then reports it beside the reader's own.",
        )
    if tune_threshold and labels is not None:
        raise QAError("--tune-threshold fits a SubjQA domain's dev split.", "drop --tune-threshold with --labels.")
    questions, what, source = evaluation_questions(settings, domain, split, labels, limit)
    prior = no_answer_share(load_subjqa(domain, "train", settings.data_dir).questions) if tune_threshold else None
    index = index or evaluation_index(settings, domain, labels, embeddings=retriever != "bm25")
    retrieval = build_retrieval_pipeline(retriever, settings, index=index)
    runs: list[Run] = []
    records: dict[tuple[str, str], pd.DataFrame] = {}
    thresholds, backends = [], {}
    for model in readers:
        reader = ExtractiveReader.from_settings(settings, model, top_k=top_k, no_answer_threshold=no_answer_threshold)
        system = f"{retriever}+{reader_label(model)}"
        for protocol in protocols:

            def retrieve(question: LabelledQuestion):
                return retrieval.run(question.question, filters=candidate_filters(question, protocol), top_k=top_k_retriever)["documents"]

            run = records[(system, protocol)] = evaluate_pipeline(questions, retrieve, reader, top_k=top_k)
            runs.append(({"system": system, "candidates": protocol}, run))
            backends[system] = reader.active_backend  # known once the reader has run
            setting = no_answer_setting(retriever, top_k_retriever, protocol)
            # A fit made now is for this run only: `qa-system fit-threshold` stores fits (tuning/threshold.py).
            fit = {**fit_no_answer_threshold(run, prior), "fitted_on": f"{domain} {split}"} if tune_threshold else no_answer_fit(index, settings, setting, model)
            if fit is None:
                continue
            tuned = at_threshold(run, fit["threshold"])
            runs.append(({"system": f"{system}, dev-tuned threshold", "candidates": protocol}, tuned))
            thresholds.append({
                "system": system, "candidates": protocol, "reader_threshold": reader.threshold, "dev_tuned_threshold": fit["threshold"],
                "fitted_on": fit["fitted_on"], "no_answer_prior": fit["no_answer_prior"], "dev_questions": fit["questions"],
                "f1_reader_threshold": run["f1"].mean(), "f1_dev_tuned": tuned["f1"].mean(),
            })
    threshold_table = pd.DataFrame(thresholds)
    gold_retrieved = {f"{system} ({protocol})": float(r["gold_retrieved"].mean()) for (system, protocol), r in records.items()}
    notes = [
        *(labels.notes if labels else []),
        f"Each question retrieves the top {top_k_retriever} reviews with {retriever} under each candidate protocol; the reader reads them all.",
        *fits_in_force(settings, index, retriever, rerank=False),  # the stored fusion or the defaults: evaluating never fits
        *(f"{protocol} candidates: {CANDIDATES[protocol]}." for protocol in protocols),
        f"Gold review among them: {', '.join(f'{s} {v:.3f}' for s, v in gold_retrieved.items())}.",
        "EM and F1 as the official SQuAD v2.0 script (top-1, and best of top-k with the no-answer as a candidate).",
    ]
    if thresholds:
        notes.append(
            "'dev-tuned threshold': the reader's answers re-decided at the no-answer threshold fitted on dev for that retriever, depth and "
            "candidate protocol (F1-optimal, unanswerable questions weighted to the domain's train share); "
            + ("fitted on these very questions, so its dev figures are optimistic." if tune_threshold else "never fitted on this split.")
        )
    metrics = _write(
        out_dir,
        f"Pipeline evaluation: {what} ({retriever} top-{top_k_retriever} + reader)",
        runs,
        questions,
        {
            **source, "index": index.name, "questions": len(questions), "retriever": retriever, "candidates": protocols,
            "top_k_retriever": top_k_retriever, "top_k": top_k, "readers": list(readers), "reader_backends": backends,
            "gold_review_retrieved": gold_retrieved,
        },
        notes,
        sections={"no-answer thresholds": threshold_table} if thresholds else None,
    )
    return {"metrics": metrics, "records": records, "thresholds": threshold_table, "reader_backends": backends}
