"""Reader and pipeline evaluation reports: EM / F1 tables, calibration, a bar chart, official-format predictions.

``evaluate_readers`` compares readers given the gold review (as in SQuAD evaluation);
``evaluate_pipelines`` runs retriever then reader under one or both candidate protocols (the
product's reviews in the question's split, or all of them: ``evaluation.retrieval.CANDIDATES``)
and one or both gold definitions (``evaluation.gold``: the annotated review's answers, or those of
every review the question was asked of). Where a reader has its answer selector
(``reading.selection``), each question is read once and scored twice: as the selector decides
(``<reader>+selector``, with the expected calibration error of its probabilities and a reliability
diagram) and as the reader decides alone at its threshold (``<reader>``). Both write, beside the
usual report files, ``predictions-<system>[-<candidates>].json`` in the official SQuAD v2 format
and ``gold.json`` (the split as a SQuAD v2 dataset), so that the official evaluation script gives
the same numbers.

The pipeline's no-answer threshold can be fitted on dev for a retrieval set-up (retriever, depth,
candidate protocol: what the reader is given), which is what the reader's own threshold, tuned on
single gold reviews, is not: ``qa-system fit-threshold`` (``tuning.threshold``) stores it in the
index manifest, and evaluations of other splits report it beside the reader's own threshold; an
evaluation never stores one. It is never fitted on any other split than dev.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from qa_system.config import Settings
from qa_system.errors import QAError, check_count, check_number
from qa_system.evaluation.gold import check_golds, pooled_answers, pooled_documents, pooled_share, rescored
from qa_system.evaluation.reader import (
    evaluate_pipeline,
    evaluate_reader,
    readers_own_decision,
    right_answers,
    squad_predictions,
    summarize_answers,
)
from qa_system.evaluation.report import check_out_dir, write_report
from qa_system.ingestion.labels import Labels, evaluation_index, evaluation_questions
from qa_system.metrics.calibration import reliability_diagram, reliability_table
from qa_system.metrics.no_answer import DevPrediction, tune_no_answer_threshold
from qa_system.metrics.squad import RIGHT_F1, best_scores
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.selection import AnswerSelector, selector_fits_reader
from qa_system.sources import LabelledQuestion, load_subjqa
from qa_system.sources.squad import write_squad
from qa_system.stores import Index


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


def _label(columns: dict[str, str]) -> str:
    """A run's name in plots and file names: its columns' values joined."""
    return " ".join(columns.values())


def _reliability(runs: list[Run]) -> dict[str, pd.DataFrame]:
    """The reliability table of every run whose answers carry a probability of being right."""
    tables = {}
    for columns, records in runs:
        if "confidence" in records and records["confidence"].notna().all() and not records.empty:
            tables[_label(columns)] = reliability_table(records["confidence"], right_answers(records))
    return tables


def _write(
    out_dir,
    title,
    runs: list[Run],
    questions: list[LabelledQuestion],
    summary: dict,
    notes: list[str],
    sections: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """The metrics of every run, one table; with ``out_dir``, the report, gold.json, predictions and plots written there."""
    tables = []
    for columns, records in runs:
        table = summarize_answers(records).rename_axis("group").reset_index()
        for position, (name, value) in enumerate(columns.items()):
            table.insert(position, name, value)
        tables.append(table)
    metrics = pd.concat(tables, ignore_index=True)
    if out_dir is None:
        return metrics
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_squad(questions, out / "gold.json", keep_unlocated=True)
    for columns, records in runs:
        stem = re.sub(r"[^\w+.-]+", "_", "-".join(columns.values()))  # "bm25+reader, dev-tuned threshold" -> a plain file name
        (out / f"predictions-{stem}.json").write_text(
            json.dumps(squad_predictions(records), indent=1, ensure_ascii=False), encoding="utf-8"
        )
    plotted = metrics[metrics["gold"] == "annotated"] if "gold" in metrics else metrics  # one bar pair per system
    figures = {"em_f1.png": em_f1_plot(plotted, title=title)}
    reliability = _reliability(runs)
    if reliability:
        figures["reliability.png"] = reliability_diagram(reliability, title=f"Reliability: {title}")
        sections = {
            **(sections or {}),
            "reliability (10 bins)": pd.concat([t.assign(system=name) for name, t in reliability.items()], ignore_index=True),
        }
    all_records = pd.concat([records.assign(**columns) for columns, records in runs], ignore_index=True)
    write_report(out_dir, title, metrics, summary=summary, figures=figures, sections=sections, records=all_records, notes=notes)
    return metrics


def answer_selector(
    settings: Settings, model: str, no_answer_threshold: float | None = None, index: Index | None = None
) -> AnswerSelector | None:
    """The answer selector of ``settings`` when it was trained for ``model`` and no threshold was asked for, else None;
    with ``index``, its chances recalibrated to it as the doors' are (``qa-system fit-confidence``)."""
    from qa_system.retrieval.fitted import recalibration

    if no_answer_threshold is not None or not selector_fits_reader(settings.selector_model, model):
        return None
    selector = AnswerSelector(model=settings.selector_model, recalibration=None if index is None else recalibration(index, settings, model))
    selector.use_runtime(settings.device, settings.home)
    selector.warm_up()
    return selector


def decisions(system: str, records: pd.DataFrame, selector: AnswerSelector | None) -> list[tuple[str, pd.DataFrame]]:
    """(system, records) per decision made on one reading: the selector's when it ran, and the reader's own."""
    if selector is None:
        return [(system, records)]
    return [(f"{system}+selector", records), (system, readers_own_decision(records))]


def scored_against(records: pd.DataFrame, gold: str, questions: Sequence[LabelledQuestion]) -> pd.DataFrame:
    """The records under a gold definition (``evaluation.gold``): as recorded (annotated), or rescored (pooled)."""
    return records if gold == "annotated" else rescored(records, pooled_answers(questions), pooled_documents(questions))


NOTES = [
    'EM and F1 as the official SQuAD v2.0 script; a question whose annotators marked no span has the single gold answer "".',
    f"answered_right / answered_wrong / abstained_wrong: shares of questions answered with F1 >= {RIGHT_F1}, answered otherwise "
    "(a wrong span, or any span where there is none), and left unanswered although they had an answer; the rest abstained rightly.",
    "'+selector': the answer selector decides (reading/selection.py); its answers' scores are probabilities of being right, "
    f'and ece is their expected calibration error (10 equal-width bins; right = F1 >= {RIGHT_F1}, or "no answer" to a question '
    "without one). Without '+selector', the reader decides alone at its no-answer threshold; its scores are not probabilities.",
    "no_answer_f1: each group's own \"always no answer\" F1, the baseline to read that group's f1 against.",
]


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
    """Each reader (model id or path) reads each question's own review; with its answer selector, scored as both decide.

    With ``labels`` (``ingestion.labels.load_labels``) the questions are your own: on their
    collection's documents, or, without a collection, each read with its own context (a SQuAD /
    MRQA file, e.g. the held-out SQuADShifts slice of ``squad.split_held_out``); else SubjQA's
    ``domain`` and ``split``. An explicit ``no_answer_threshold`` is the reader's own decision: no selector then.
    """
    top_k, limit = check_count(top_k, "top_k"), check_count(limit, "limit", optional=True)
    no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
    check_out_dir(out_dir)
    questions, what, source = evaluation_questions(settings, domain, split, labels, limit)
    gold = "context" if labels is not None and labels.collection is None else "review"
    records, backends = {}, {}
    for model in readers:
        reader = ExtractiveReader.from_settings(settings, model, top_k=top_k, no_answer_threshold=no_answer_threshold)
        selector = answer_selector(settings, model, no_answer_threshold)
        read = evaluate_reader(questions, reader, top_k=top_k, selector=selector)
        records.update(decisions(reader_label(model), read, selector))
        backends[reader_label(model)] = reader.active_backend
    notes = [
        *(labels.notes if labels else []),
        f"Each reader is given the question's own {gold} (reading alone, as in SQuAD evaluation).",
        *NOTES,
        f"top-k: the best of the top {top_k} answers, the no-answer being one of the candidates.",
    ]
    summary = {**source, "questions": len(questions), "readers": list(readers), "top_k": top_k, "reader_backends": backends}
    metrics = _write(
        out_dir,
        f"Reader evaluation: {what} (gold {gold})",
        [({"system": system}, r) for system, r in records.items()],
        questions,
        summary,
        notes,
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
        DevPrediction(gap, *best_scores(span, gold), *best_scores("", gold))
        for gap, span, gold in zip(records["gap"], records["best_span"], records["gold"])
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


def _tuned_threshold_run(
    records: pd.DataFrame, fit: dict, reader: ExtractiveReader, system: str, protocol: str
) -> tuple[pd.DataFrame, dict]:
    """The reader's answers re-decided at a dev-fitted threshold, and the thresholds table's row comparing both."""
    own = readers_own_decision(records)
    tuned = at_threshold(own, fit["threshold"])
    row = {
        "system": system,
        "candidates": protocol,
        "reader_threshold": reader.threshold,
        "dev_tuned_threshold": fit["threshold"],
        "fitted_on": fit["fitted_on"],
        "no_answer_prior": fit["no_answer_prior"],
        "dev_questions": fit["questions"],
        "f1_reader_threshold": own["f1"].mean(),
        "f1_dev_tuned": tuned["f1"].mean(),
    }
    return tuned, row


def confidence_note(index: Index, settings: Settings, questions: Sequence, reader_model: str) -> str:
    """A report's line on the recalibration the answer selector's chances went through, if any, and whether it saw these
    questions (labelled or judged ones: each has an ``item_id`` and a ``question``)."""
    from qa_system.retrieval.fitted import confidence_fit, question_key

    fit = confidence_fit(index, settings, reader_model)
    if not fit:
        return ""
    seen = set(fit.get("question_keys", []))
    overlap = sum(question_key(q) in seen for q in questions)
    where = (
        f"{overlap} of these {len(questions)} questions were among them, so its ece here is optimistic."
        if overlap
        else "none of these questions were among them."
    )
    return f"The answer selector's chances recalibrated to collection '{index.name}' on {fit['calibrated_on']} (`qa-system fit-confidence`); {where}"


def _pipeline_notes(
    labels, readers, top_k_retriever, retriever, protocols, golds, records, questions, settings, index, tune_threshold, thresholds
) -> list[str]:
    from qa_system.evaluation.retrieval import CANDIDATES, OWN_CANDIDATES
    from qa_system.tuning.fusion import fits_in_force

    gold_retrieved = {f"{system} ({protocol})": float(r["gold_retrieved"].mean()) for (system, protocol), r in records.items()}
    noun = "document" if labels else "review"
    notes = [
        *(labels.notes if labels else []),
        f"Each question retrieves the top {top_k_retriever} {noun}s with {retriever} under each candidate protocol; the reader reads them all.",
        *fits_in_force(settings, index, retriever, rerank=False),  # the stored fusion or the defaults: evaluating never fits
        *filter(None, {confidence_note(index, settings, questions, model) for model in readers}),
        *(f"{protocol} candidates: {OWN_CANDIDATES if labels else CANDIDATES[protocol]}." for protocol in protocols),
        f"Gold {noun} among them: {', '.join(f'{s} {v:.3f}' for s, v in gold_retrieved.items())}. The groups 'gold retrieved' / 'gold not retrieved' split"
        f" the questions by it: where it was not, an answer read in another {noun} scores only where it repeats the labelled {noun}'s words.",
        *NOTES,
        "Top-1, and best of top-k with the no-answer as a candidate.",
    ]
    if "pooled" in golds:
        notes.append(
            f"gold 'pooled': a question asked of several reviews of its product ({pooled_share(questions):.0%} of these) is scored against "
            "the answers of all of them, and is unanswerable only when none has one; 'annotated': its own review's answers only."
        )
    if thresholds:
        notes.append(
            "'dev-tuned threshold': the reader's answers re-decided at the no-answer threshold fitted on dev for that retriever, depth and "
            "candidate protocol (F1-optimal, unanswerable questions weighted to the domain's train share); "
            + ("fitted on these very questions, so its dev figures are optimistic." if tune_threshold else "never fitted on this split.")
        )
    return notes


def evaluate_pipelines(
    settings: Settings,
    readers: Sequence[str],
    retriever: str = "bm25",
    domain: str = "electronics",
    split: str = "test",
    top_k_retriever: int | None = None,
    top_k: int = 3,
    out_dir=None,
    limit: int | None = None,
    no_answer_threshold: float | None = None,
    candidates: str | Sequence[str] = ("split",),
    tune_threshold: bool = False,
    labels: Labels | None = None,
    index: Index | None = None,
    golds: str | Sequence[str] = ("annotated",),
) -> dict:
    """Retriever then each reader (and its answer selector), over the domain's index (or ``index``, e.g. a collection,
    with ``labels``: your own labelled questions), under each candidate protocol, scored under each gold definition.
    ``top_k_retriever``: reviews read per question (default: the settings', as the doors read).

    ``tune_threshold`` (dev only): fit the no-answer threshold for each reader and protocol
    (``fit_no_answer_threshold``, unanswerable questions weighted to the domain's train share) for
    this run only, never saved, and report the figures at it (``tuning.threshold`` stores fits). Any
    split reports a stored dev fit for its set-up as one more system, ``<system>, dev-tuned threshold``.

    Returns {"metrics": DataFrame, "records": {(system, candidates): DataFrame} (annotated gold), "thresholds": DataFrame}.
    """
    from qa_system.evaluation.retrieval import candidate_filters, check_candidates
    from qa_system.pipelines import build_retrieval_pipeline
    from qa_system.retrieval.fitted import no_answer_fit, no_answer_setting

    top_k_retriever = check_count(settings.top_k_retriever if top_k_retriever is None else top_k_retriever, "top_k_retriever")
    top_k = check_count(top_k, "top_k")
    limit = check_count(limit, "limit", optional=True)
    no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
    protocols, golds = check_candidates(candidates), check_golds(golds)
    _check_tuning(tune_threshold, split, labels)
    check_out_dir(out_dir)
    questions, what, source = evaluation_questions(settings, domain, split, labels, limit)
    prior = no_answer_share(load_subjqa(domain, "train", settings.data_dir).questions) if tune_threshold else None
    index = index or evaluation_index(settings, domain, labels, embeddings=retriever != "bm25")
    retrieval = build_retrieval_pipeline(retriever, settings, index=index)
    runs: list[Run] = []
    records: dict[tuple[str, str], pd.DataFrame] = {}
    thresholds, backends = [], {}
    for model in readers:
        reader = ExtractiveReader.from_settings(settings, model, top_k=top_k, no_answer_threshold=no_answer_threshold)
        selector = answer_selector(settings, model, no_answer_threshold, index)
        system = f"{retriever}+{reader_label(model)}"
        for protocol in protocols:

            def retrieve(question: LabelledQuestion):
                return retrieval.run(question.question, filters=candidate_filters(question, protocol), top_k=top_k_retriever)["documents"]

            read = evaluate_pipeline(questions, retrieve, reader, top_k=top_k, selector=selector)
            backends[system] = reader.active_backend  # known once the reader has run
            setting = no_answer_setting(retriever, top_k_retriever, protocol)
            # A fit made now is for this run only: `qa-system fit-threshold` stores fits (tuning/threshold.py).
            fit = (
                {**fit_no_answer_threshold(readers_own_decision(read), prior), "fitted_on": f"{domain} {split}"}
                if tune_threshold
                else no_answer_fit(index, settings, setting, model)
            )
            systems = decisions(system, read, selector)
            if fit is not None:
                tuned, row = _tuned_threshold_run(read, fit, reader, system, protocol)
                systems.append((f"{system}, dev-tuned threshold", tuned))
                thresholds.append(row)
            for name, run in systems:
                records[(name, protocol)] = run
                for gold in golds:
                    columns = {"system": name, "candidates": protocol, **({"gold": gold} if len(golds) > 1 or gold != "annotated" else {})}
                    runs.append((columns, scored_against(run, gold, questions)))
    threshold_table = pd.DataFrame(thresholds)
    notes = _pipeline_notes(
        labels, readers, top_k_retriever, retriever, protocols, golds, records, questions, settings, index, tune_threshold, thresholds
    )
    summary = {
        **source,
        "index": index.name,
        "questions": len(questions),
        "retriever": retriever,
        "candidates": protocols,
        "golds": golds,
        "top_k_retriever": top_k_retriever,
        "top_k": top_k,
        "readers": list(readers),
        "reader_backends": backends,
        "gold_review_retrieved": {f"{s} ({p})": float(r["gold_retrieved"].mean()) for (s, p), r in records.items()},
    }
    title = f"Pipeline evaluation: {what} ({retriever} top-{top_k_retriever} + reader)"
    metrics = _write(
        out_dir, title, runs, questions, summary, notes, sections={"no-answer thresholds": threshold_table} if thresholds else None
    )
    return {"metrics": metrics, "records": records, "thresholds": threshold_table, "reader_backends": backends}


def _check_tuning(tune_threshold: bool, split: str, labels: Labels | None) -> None:
    """A no-answer threshold is fitted on a SubjQA dev split only."""
    if tune_threshold and split != "dev":
        raise QAError(
            f"The no-answer threshold is tuned on dev only, never on {split}.",
            "fit it with `qa-system fit-threshold --split dev`; evaluating other splits then reports it beside the reader's own.",
        )
    if tune_threshold and labels is not None:
        raise QAError("--tune-threshold fits a SubjQA domain's dev split.", "drop --tune-threshold with --labels.")
