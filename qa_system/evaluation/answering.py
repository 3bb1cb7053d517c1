"""Reader and pipeline evaluation reports: EM / F1 tables, a bar chart, official-format predictions.

``evaluate_readers`` compares readers given the gold review (as in SQuAD evaluation);
``evaluate_pipelines`` runs retriever then reader with per-product filters. Both write, beside the
usual report files, ``predictions-<reader>.json`` in the official SQuAD v2 format and
``gold.json`` (the split as a SQuAD v2 dataset), so that the official evaluation script gives the
same numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from qa_system.config import Settings
from qa_system.errors import check_count, check_number
from qa_system.evaluation.reader import evaluate_pipeline, evaluate_reader, squad_predictions, summarize_answers
from qa_system.evaluation.report import write_report
from qa_system.ingestion.labels import Labels
from qa_system.reading.reader import ExtractiveReader
from qa_system.sources import LabelledQuestion, load_subjqa
from qa_system.sources.qa_files import labelled_questions, read_qa_file
from qa_system.sources.squad import write_squad
from qa_system.stores import Index


def reader_label(model: str) -> str:
    """A short name for a model path or hub id (its last path part)."""
    return Path(model.rstrip("/")).name or model


def em_f1_plot(table: pd.DataFrame, group: str = "all", title: str = "") -> plt.Figure:
    """Grouped bars of EM and F1 per system, as in the reference chapter; the no-answer baseline dashed."""
    rows = table[table["group"] == group]
    figure, axes = plt.subplots(figsize=(max(5, 1.6 * len(rows)), 4))
    positions = range(len(rows))
    axes.bar([p - 0.2 for p in positions], rows["em"], width=0.4, label="EM")
    axes.bar([p + 0.2 for p in positions], rows["f1"], width=0.4, label="F1")
    baseline = table[table["group"] == "always no answer"]["f1"]
    if not baseline.empty:
        axes.axhline(baseline.iloc[0], color="grey", linestyle="--", label="always no answer")
    axes.set_xticks(list(positions), rows["system"], rotation=15)
    axes.set_ylim(0, 1)
    axes.set_ylabel("score")
    axes.set_title(title)
    axes.legend()
    return figure


def _write(out_dir, title, records_by_system: dict[str, pd.DataFrame], questions: list[LabelledQuestion], summary: dict, notes: list[str]) -> pd.DataFrame:
    tables = []
    for system, records in records_by_system.items():
        table = summarize_answers(records).rename_axis("group").reset_index()
        table.insert(0, "system", system)
        tables.append(table)
    metrics = pd.concat(tables, ignore_index=True)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_squad(questions, out / "gold.json", keep_unlocated=True)
        for system, records in records_by_system.items():
            (out / f"predictions-{system}.json").write_text(json.dumps(squad_predictions(records), indent=1), encoding="utf-8")
        all_records = pd.concat([r.assign(system=s) for s, r in records_by_system.items()], ignore_index=True)
        write_report(
            out_dir,
            title,
            metrics,
            summary=summary,
            figures={"em_f1.png": em_f1_plot(metrics, title=title)},
            records=all_records,
            notes=notes,
        )
    return metrics


def _source(domain: str, split: str, labels: Labels | None) -> dict:
    """What the questions are, for a report's summary."""
    if labels is None:
        return {"domain": domain, "split": split}
    return {"labels": str(labels.path), "collection": labels.collection}


def evaluate_readers(
    settings: Settings,
    readers: Sequence[str],
    domain: str = "electronics",
    split: str = "test",
    top_k: int = 3,
    out_dir=None,
    limit: int | None = None,
    no_answer_threshold: float | None = None,
    file: str | Path | None = None,
    labels: Labels | None = None,
) -> dict:
    """Each reader (model id or path) reads each question's own review.

    With ``labels`` the questions are your own labelled questions (``--collection --labels``);
    with ``file`` (SQuAD v1.1 / v2.0 JSON or MRQA JSON lines, e.g. the held-out SQuADShifts slice
    of ``squad.split_held_out``) they are that file's, each read with its own context; else
    SubjQA's ``domain`` and ``split``.
    """
    top_k, limit = check_count(top_k, "top_k"), check_count(limit, "limit", optional=True)
    no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
    if labels is not None:
        questions, source, summary = labels.questions[:limit], labels.title, _source(domain, split, labels)
    elif file is None:
        questions = load_subjqa(domain, split, settings.data_dir).questions[:limit]
        source, summary = f"SubjQA {domain} {split}", _source(domain, split, None)
    else:
        examples, read = read_qa_file(file)
        questions = labelled_questions(examples, Path(file).name)[:limit]
        source, summary = f"{Path(file).name} ({read.format})", {"file": str(file), "format": read.format}
    gold = "context" if file is not None and labels is None else "review"
    records, backends = {}, {}
    for model in readers:
        reader = ExtractiveReader.from_settings(settings, model, top_k=top_k, no_answer_threshold=no_answer_threshold)
        records[reader_label(model)] = evaluate_reader(questions, reader, top_k=top_k)
        backends[reader_label(model)] = reader.active_backend
    metrics = _write(
        out_dir,
        f"Reader evaluation: {source} (gold {gold})",
        records,
        questions,
        {**summary, "questions": len(questions), "readers": list(readers), "top_k": top_k, "reader_backends": backends},
        [
            *(labels.notes if labels else []),
            f"Each reader is given the question's own {gold} (reading alone, as in SQuAD evaluation).",
            "EM and F1 as the official SQuAD v2.0 script; a question whose annotators marked no span has the single gold answer \"\".",
            f"top-k: the best of the top {top_k} answers, the no-answer being one of the candidates.",
        ],
    )
    return {"metrics": metrics, "records": records, "reader_backends": backends}


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
    labels: Labels | None = None,
    index: Index | None = None,
) -> dict:
    """Retriever (per-product and split filters) then each reader, over the domain's index (or ``index``,
    e.g. a collection, with ``labels``: your own labelled questions)."""
    from qa_system.indexing import open_or_build_index
    from qa_system.pipelines import build_retrieval_pipeline

    top_k_retriever, top_k = check_count(top_k_retriever, "top_k_retriever"), check_count(top_k, "top_k")
    limit = check_count(limit, "limit", optional=True)
    no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
    questions = (labels.questions if labels else load_subjqa(domain, split, settings.data_dir).questions)[:limit]
    what = labels.title if labels else f"SubjQA {domain} {split}"
    index = index or open_or_build_index(settings, domain, embeddings=retriever != "bm25")
    retrieval = build_retrieval_pipeline(retriever, settings, index=index)

    def retrieve(question: LabelledQuestion):
        return retrieval.run(question.question, item_id=question.item_id, split=question.split, top_k=top_k_retriever)["documents"]

    records, backends = {}, {}
    for model in readers:
        reader = ExtractiveReader.from_settings(settings, model, top_k=top_k, no_answer_threshold=no_answer_threshold)
        records[f"{retriever}+{reader_label(model)}"] = evaluate_pipeline(questions, retrieve, reader, top_k=top_k)
        backends[f"{retriever}+{reader_label(model)}"] = reader.active_backend
    gold_retrieved = {system: float(r["gold_retrieved"].mean()) for system, r in records.items()}
    filters = f"item_id and split = {split}" if labels is None else "item_id, when the label has one"
    metrics = _write(
        out_dir,
        f"Pipeline evaluation: {what} ({retriever} top-{top_k_retriever} + reader)",
        records,
        questions,
        {
            **_source(domain, split, labels), "index": index.name, "questions": len(questions), "retriever": retriever,
            "top_k_retriever": top_k_retriever, "top_k": top_k, "readers": list(readers), "reader_backends": backends,
            "gold_review_retrieved": gold_retrieved,
        },
        [
            *(labels.notes if labels else []),
            f"Each question retrieves the top {top_k_retriever} reviews of its product (filters {filters}) with {retriever}; the reader reads them all.",
            f"Gold review among them: {', '.join(f'{s} {v:.3f}' for s, v in gold_retrieved.items())}.",
            "EM and F1 as the official SQuAD v2.0 script (top-1, and best of top-k with the no-answer as a candidate).",
        ],
    )
    return {"metrics": metrics, "records": records, "reader_backends": backends}
