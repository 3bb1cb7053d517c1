"""Training the answer selector (``reading.selection``) on reader outputs that are honest.

A selector learns when the reader is right from the reader's own outputs, so those outputs must
come from a reader that never trained on the question: on its training questions the reader is
sure of itself in a way it never is on a user's. ``cross_fit_readers`` gives that: the SubjQA
training questions are cut into folds by product (a product's questions and reviews are never on
both sides), and each fold's reader (the reader's SubjQA stage, trained from the same general
stage on the other folds) reads its own fold, alone with the question's review and in the
retrieval pipelines (``MODES``). ``fit_selector`` then trains the two models on those outputs
(LightGBM: fast, small, handles missing features, and saves as plain text that loads without
running code) and fits each probability's isotonic calibration on out-of-fold predictions.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from haystack import Document

from qa_system.errors import check_count
from qa_system.metrics.squad import RIGHT_F1, best_scores
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.selection import SELECTOR_FILE, decide
from qa_system.reading.selection_features import SIMILARITY_FEATURES, ReadDocument, answer_row, features

# The settings a question is read in: its own review alone ("gold", as `eval reader`), or the top three
# BM25 reviews of its product in its split or over all splits (as `eval pipeline --candidates split|product`).
MODES = ("gold", "split", "product")

_KEYS = ("key", "id", "mode", "domain", "item")
PARAMETERS = dict(
    n_estimators=300,
    learning_rate=0.03,
    num_leaves=15,
    min_child_samples=40,
    subsample=0.8,
    subsample_freq=1,
    colsample_bytree=0.8,
    reg_lambda=1.0,
    verbose=-1,
)

Retrieve = Callable[[Any, str], list[Document]]


def fold_of(domain: str, item_id: str, folds: int) -> int:
    """The fold of a product: decided by a hash of its domain and id, so the same on every machine and run."""
    return int(hashlib.sha256(f"{domain}:{item_id}".encode()).hexdigest(), 16) % folds


def read_documents_record(reader: ExtractiveReader, question: str, documents: Sequence[Document]) -> list[dict[str, Any]]:
    """What the reader made of each document (text, own no-answer logit, spans), with the retriever's rank and score."""
    output = reader.predict(question, documents)
    spans: dict[int, list[list[float]]] = {}
    for span in output.spans:
        spans.setdefault(span.document, []).append([span.start, span.end, span.logit])
    return [
        {
            "id": d.id,
            "content": d.content or "",
            "rank": i,
            "score": d.score,
            "null": output.document_nulls.get(i),
            "spans": spans.get(i, []),
        }
        for i, d in enumerate(documents)
    ]


def read_questions(
    reader: ExtractiveReader, questions: Sequence[Any], retrieve: Retrieve, modes: Sequence[str] = MODES, progress: bool = True
) -> list[dict]:
    """One record per question: its gold answers and, per mode, the documents read (``retrieve(question, mode)``)."""
    from qa_system.progress import track

    records = []
    for question in track(questions, "reading for the selector", "questions", enabled=progress):
        modes_read = {mode: read_documents_record(reader, question.question, retrieve(question, mode)) for mode in modes}
        records.append(
            {
                "id": question.id,
                "question": question.question,
                "item_id": question.item_id,
                "domain": question.domain,
                "split": question.split,
                "gold": question.answer_texts,
                "no_answer": question.no_answer,
                "modes": modes_read,
            }
        )
    return records


def _read_document(document: dict[str, Any]) -> ReadDocument:
    null = document["null"] if document["null"] is not None else math.inf
    return ReadDocument(document["content"], null, [tuple(s) for s in document["spans"]], document["rank"], document["score"])


def selector_frames(records: Sequence[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Question rows (one per question and mode) and span rows (one per candidate), with what each would score."""
    questions, spans = [], []
    for record in records:
        null_f1 = best_scores("", record["gold"])[1]
        for mode, documents in record["modes"].items():
            question, candidates, rows = features(record["question"], [_read_document(d) for d in documents])
            keys = {
                "key": f"{record['id']}|{mode}",
                "id": record["id"],
                "mode": mode,
                "domain": record["domain"],
                "item": record["item_id"],
            }
            questions.append({**question, **keys, "answerable": not record["no_answer"], "null_f1": null_f1})
            for candidate, row in zip(candidates, rows):
                spans.append({**row, **keys, "answerable": not record["no_answer"], "f1": best_scores(candidate.text, record["gold"])[1]})
    return pd.DataFrame(questions), pd.DataFrame(spans)


@dataclass(frozen=True)
class FeatureNames:
    """The columns each model reads, in order (kept in selector.json)."""

    question: list[str]
    span: list[str]
    answer: list[str]

    @classmethod
    def of(cls, questions: pd.DataFrame, spans: pd.DataFrame) -> FeatureNames:
        """The feature columns of ``selector_frames``' two tables (and the answerability model's, made from them)."""
        question = [c for c in questions.columns if c not in (*_KEYS, "answerable", "null_f1")]
        span = [c for c in spans.columns if c not in (*_KEYS, "answerable", "f1")]
        example = answer_row({c: 0.0 for c in question}, {c: 0.0 for c in span}, 0.0, _similarities(span))
        return cls(question, span, list(example))

    @property
    def similarities(self) -> list[str]:
        """The phrase-similarity features among the span model's."""
        return _similarities(self.span)


def _similarities(columns: list[str]) -> list[str]:
    return [name for name in SIMILARITY_FEATURES if name in columns]


def _span_model(spans: pd.DataFrame, names: FeatureNames, parameters: dict):
    import lightgbm

    answerable = spans[spans["answerable"]]
    return lightgbm.LGBMRegressor(**parameters).fit(answerable[names.span], answerable["f1"])


def _answer_rows(questions: pd.DataFrame, spans: pd.DataFrame, predicted: pd.Series, names: FeatureNames) -> pd.DataFrame:
    """Per question: the answerability model's features, given the span model's predictions (aligned with ``spans``)."""
    best = spans.assign(predicted=predicted.clip(0, 1)).sort_values("predicted", ascending=False).groupby("key").head(1).set_index("key")
    rows = []
    for key, question in zip(questions["key"], questions[names.question].to_dict("records")):
        head = best.loc[key] if key in best.index else None
        rows.append(
            answer_row(
                question,
                None if head is None else head[names.span].to_dict(),
                0.0 if head is None else float(head["predicted"]),
                names.similarities,
            )
        )
    frame = pd.DataFrame(rows, index=questions.index)[names.answer]
    return frame.assign(best_f1_true=[float(best.loc[k, "f1"]) if k in best.index else 0.0 for k in questions["key"]])


def _out_of_fold_spans(spans: pd.DataFrame, names: FeatureNames, folds: int, parameters: dict) -> pd.Series:
    """The span model's prediction for each span by a model that never saw its product."""
    from sklearn.model_selection import GroupKFold

    predicted = pd.Series(np.nan, index=spans.index)
    for train, test in GroupKFold(folds).split(spans, groups=spans["item"]):
        predicted.iloc[test] = _span_model(spans.iloc[train], names, parameters).predict(spans.iloc[test][names.span])
    return predicted


def _answer_model(answers: pd.DataFrame, answerable: pd.Series, names: FeatureNames, parameters: dict):
    import lightgbm

    return lightgbm.LGBMClassifier(**parameters).fit(answers[names.answer], answerable)


def out_of_fold(
    questions: pd.DataFrame, answers: pd.DataFrame, names: FeatureNames, folds: int = 5, parameters: dict = PARAMETERS
) -> pd.DataFrame:
    """Each question's decision by models that never saw its product (``answers``: ``_answer_rows`` of out-of-fold
    span predictions): P(answerable), the best span's predicted and true F1, both options' values, the decision, its F1."""
    from sklearn.model_selection import GroupKFold

    p = pd.Series(np.nan, index=questions.index)
    for train, test in GroupKFold(folds).split(questions, groups=questions["item"]):
        model = _answer_model(answers.iloc[train], questions["answerable"].iloc[train], names, parameters)
        p.iloc[test] = model.predict_proba(answers.iloc[test][names.answer])[:, 1]
    out = questions[list(_KEYS) + ["answerable", "null_f1"]].copy()
    out["p_answerable"], out["best_span_f1"], out["best_f1_true"] = p, answers["best_span_f1"], answers["best_f1_true"]
    decisions = [decide(np.array([f1]), pa) for f1, pa in zip(out["best_span_f1"], out["p_answerable"])]
    out["answer_value"] = [d.answer_value for d in decisions]
    out["no_answer_value"] = [d.no_answer_value for d in decisions]
    out["answered"] = [d.answer is not None for d in decisions]
    out["f1"] = np.where(out["answered"], out["best_f1_true"], out["null_f1"])
    return out


def _isotonic(values: Sequence[float], right: Sequence[float]) -> list[list[float]]:
    """An increasing map from ``values`` to the share right, as the points np.interp reads.

    One wrong answer at the highest value and one right answer at the lowest join the fit (Laplace's rule at
    the ends): 20 candidates all right are no proof of certainty, so no card states 100% (or 0%).
    """
    from sklearn.isotonic import IsotonicRegression

    x, y = np.asarray(values, float), np.asarray(right, float)
    x, y = np.r_[x, x.min(), x.max()], np.r_[y, 1.0, 0.0]
    fitted = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(x, y)
    return [fitted.X_thresholds_.tolist(), fitted.y_thresholds_.tolist()]


def fit_selector(
    questions: pd.DataFrame,
    spans: pd.DataFrame,
    output_dir: str | Path,
    reader: dict[str, Any],
    folds: int = 5,
    parameters: dict = PARAMETERS,
    provenance: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Fit both models on all rows and the calibrations on out-of-fold decisions; write them to ``output_dir``.

    The answerability model learns from out-of-fold span predictions: what the span model says of
    questions it never saw, as it will of a user's.

    :param reader: what identifies the reader the outputs came from (``reader_fingerprint``), stored in selector.json.
    :returns: the out-of-fold decisions (``out_of_fold``), whose scores say what the selector is worth.
    """
    names = FeatureNames.of(questions, spans)
    answers = _answer_rows(questions, spans, _out_of_fold_spans(spans, names, folds, parameters), names)
    oof = out_of_fold(questions, answers, names, folds, parameters)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    _span_model(spans, names, parameters).booster_.save_model(str(output_dir / "span.txt"))
    _answer_model(answers, questions["answerable"], names, parameters).booster_.save_model(str(output_dir / "answerable.txt"))
    right = (oof["best_f1_true"] >= RIGHT_F1) & oof["answerable"]
    info = {
        **reader,
        "span_model": "span.txt",
        "answer_model": "answerable.txt",
        "question_features": names.question,
        "span_features": names.span,
        "answer_features": names.answer,
        "right_f1": RIGHT_F1,
        "parameters": parameters,
        "folds": folds,
        "calibration": {
            "answer": _isotonic(oof["answer_value"], right),
            "no_answer": _isotonic(oof["no_answer_value"], ~oof["answerable"]),
        },
        "training": provenance or {},
        "questions": int(questions["id"].nunique()),
        "rows": {"questions": len(questions), "spans": len(spans)},
    }
    (output_dir / SELECTOR_FILE).write_text(json.dumps(info, indent=1), encoding="utf-8")
    return oof


@dataclass(frozen=True)
class Fold:
    """One fold of the cross-fitting: the questions its reader trains on and those it reads (never the same)."""

    number: int
    trained_on: tuple[str, ...]
    reads: tuple[str, ...]


def folds_of(questions: Sequence[Any], folds: int) -> list[Fold]:
    """The questions cut into ``folds`` by product (``fold_of``): fold k's reader trains on the others and reads fold k."""
    check_count(folds, "folds", 2)
    assigned = [fold_of(q.domain, q.item_id, folds) for q in questions]
    return [
        Fold(k, tuple(q.id for q, f in zip(questions, assigned) if f != k), tuple(q.id for q, f in zip(questions, assigned) if f == k))
        for k in range(folds)
    ]


def _subjqa_retrieve(settings, domains: Sequence[str]) -> Callable[[Any, str], list[Document]]:
    """``retrieve(question, mode)``: the question's own review ("gold"), or BM25's top three of its product (split or product protocol)."""
    from qa_system.ingestion.indexing import open_or_build_index
    from qa_system.pipelines import build_retrieval_pipeline
    from qa_system.retrieval.filters import make_filters
    from qa_system.sources.subjqa import gold_document

    pipelines = {d: build_retrieval_pipeline("bm25", settings, index=open_or_build_index(settings, d, embeddings=False)) for d in domains}

    def retrieve(question, mode: str) -> list[Document]:
        if mode == "gold":
            return [gold_document(question)]
        filters = make_filters(item_id=question.item_id, split=question.split if mode == "split" else None)
        return pipelines[question.domain].run(question.question, filters=filters, top_k=3)["documents"]

    return retrieve


def cross_fit_readers(
    settings,
    general_reader: str,
    work_dir: str | Path,
    domains: Sequence[str],
    folds: int = 5,
    config: Any = None,
    rehearsal: Sequence[str | Path] = (),
    modes: Sequence[str] = MODES,
    progress: bool = True,
) -> list[dict]:
    """Train one reader per fold from ``general_reader`` (the SubjQA stage of the default recipe) and read its fold.

    SubjQA's train questions that are not dev questions are cut by product (``folds_of``); fold k's
    reader trains on the other folds' (plus ``rehearsal`` files), its threshold tuned on the pooled dev
    splits as the default reader's, then reads fold k's questions in every mode. Everything is kept in
    ``work_dir`` (``fold-k/fold.json``, ``fold-k/reader``, ``fold-k/records.jsonl``): a fold already
    done is not done again and an interrupted fold's training resumes from its last checkpoint, so the
    work can span sessions. Returns the records of every question (``read_questions``).
    """
    from qa_system.sources.qa_files import read_qa_files
    from qa_system.sources.squad import write_squad
    from qa_system.sources.subjqa import load_subjqa
    from qa_system.training.reader import CHECKPOINTS, TrainingConfig, train_reader
    from qa_system.training.reader_data import POOLED, subjqa_to_squad_files

    work_dir = Path(work_dir)
    dev_files = list(subjqa_to_squad_files(domains, ["dev"], work_dir / "squad", settings.data_dir))
    dev_ids = {e.id for report in read_qa_files(dev_files) for e in report.examples}
    questions = [q for d in domains for q in load_subjqa(d, "train", settings.data_dir).questions if q.id not in dev_ids]
    prior = sum(q.no_answer for q in questions) / len(questions)
    by_id = {q.id: q for q in questions}
    retrieve = _subjqa_retrieve(settings, domains)
    records = []
    for fold in folds_of(questions, folds):
        fold_dir = work_dir / f"fold-{fold.number}"
        fold_dir.mkdir(parents=True, exist_ok=True)
        (fold_dir / "fold.json").write_text(
            json.dumps({"fold": fold.number, "folds": folds, "trained_on": fold.trained_on, "reads": fold.reads}), encoding="utf-8"
        )
        reader_dir = fold_dir / "reader"
        if not (reader_dir / "qa_system.json").is_file() or (reader_dir / CHECKPOINTS).exists():
            write_squad([by_id[i] for i in fold.trained_on], fold_dir / "train.json")
            resume = "last" if any((reader_dir / CHECKPOINTS).glob("checkpoint-*")) else None
            train_reader(
                [fold_dir / "train.json", *rehearsal],
                dev_files,
                general_reader,
                reader_dir,
                config or TrainingConfig(epochs=1, learning_rate=5e-5),
                select_on=POOLED,
                drop_dev_questions=True,
                no_answer_prior=prior,
                progress=progress,
                resume_from=resume,
            )
        records += _fold_records(
            settings, reader_dir, [by_id[i] for i in fold.reads], retrieve, modes, fold_dir / "records.jsonl", progress
        )
    return records


def _fold_records(
    settings, reader_dir: Path, questions: Sequence[Any], retrieve, modes: Sequence[str], path: Path, progress: bool
) -> list[dict]:
    """The fold reader's records of its own questions, read once and kept in ``path``."""
    if path.is_file():
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    reader = ExtractiveReader.from_settings(settings, str(reader_dir))
    records = read_questions(reader, questions, retrieve, modes, progress)
    temporary = path.with_suffix(".partial")
    temporary.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    temporary.replace(path)
    return records
