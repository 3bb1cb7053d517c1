"""Training the answer selector on judged labels: what a user gains from the first card.

SubjQA's labels mark "no answer" where other reviews of the product answer, so a selector fitted on
them learns silence. Judged questions (``evaluation.judged``) say, over every review of the product,
whether the reviews answer and which spans are acceptable. From them the selector learns two things,
on the outputs of the reader over the reviews the pipeline retrieves (the product's, ``top_k``):

* the **span model**: the chance that a candidate, grown to its whole phrase, is a right answer
  (``judged.is_right``);
* the **answerability model**: the chance that saying "no answer" is right (the reviews answer the
  question only partly, or not at all).

Its decision (``reading.selection``'s ``useful``) puts first whichever of the two calibrated chances is
higher, so the first card is the one most likely to be useful, and its stated chance means what it
says. Both calibrations are fitted on out-of-fold predictions (grouped by product): what the models
say of products they never saw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from haystack import Document

from qa_system.evaluation.judged import JudgedQuestion, is_right
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.selection import SELECTOR_FILE, USEFUL
from qa_system.reading.selection_features import features
from qa_system.training.selector import PARAMETERS, FeatureNames, _answer_rows, _isotonic, _read_document, read_documents_record

# Few judged questions: smaller trees than the SubjQA-fitted selector's, and fewer of them.
JUDGED_PARAMETERS = {**PARAMETERS, "n_estimators": 150, "learning_rate": 0.05, "num_leaves": 7, "min_child_samples": 20, "random_state": 0}
MODE = "product"  # the reviews a user's question is asked of: the product's, as the doors ask


def read_judged(
    reader: ExtractiveReader,
    questions: Sequence[JudgedQuestion],
    retrieve: Callable[[JudgedQuestion], list[Document]],
    progress: bool = True,
) -> list[dict]:
    """One record per judged question: what the reader made of each review ``retrieve`` gave for it."""
    from qa_system.progress import track

    return [
        {
            "id": q.id,
            "question": q.question,
            "item_id": q.item_id,
            "domain": q.domain,
            "modes": {MODE: read_documents_record(reader, q.question, retrieve(q))},
        }
        for q in track(questions, "reading the judged questions", "questions", enabled=progress)
    ]


def judged_frames(records: Sequence[dict], judged: dict[str, JudgedQuestion]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Question rows (with ``abstain_ok``: "no answer" is right) and span rows (with ``right``), candidates as whole phrases."""
    questions, spans = [], []
    for record in records:
        label = judged[record["id"]]
        question, candidates, rows = features(record["question"], [_read_document(d) for d in record["modes"][MODE]], phrases=True)
        keys = {"key": record["id"], "id": record["id"], "mode": MODE, "domain": record["domain"], "item": record["item_id"]}
        questions.append({**question, **keys, "answerable": label.answerable != "yes"})
        for candidate, row in zip(candidates, rows):
            spans.append(
                {**row, **keys, "answerable": True, "f1": float(label.answerable != "no" and is_right(candidate.text, label.spans))}
            )
    return pd.DataFrame(questions), pd.DataFrame(spans)


def _classifier(rows: pd.DataFrame, columns: list[str], target: pd.Series, parameters: dict):
    import lightgbm

    return lightgbm.LGBMClassifier(**parameters).fit(rows[columns], target.astype(int))


def _out_of_fold(rows: pd.DataFrame, columns: list[str], target: pd.Series, groups: pd.Series, folds: int, parameters: dict) -> pd.Series:
    """Each row's predicted chance by a model that never saw its product."""
    from sklearn.model_selection import GroupKFold

    predicted = pd.Series(np.nan, index=rows.index)
    for train, test in GroupKFold(folds).split(rows, groups=groups):
        predicted.iloc[test] = _classifier(rows.iloc[train], columns, target.iloc[train], parameters).predict_proba(
            rows.iloc[test][columns]
        )[:, 1]
    return predicted


def fit_judged_selector(
    questions: pd.DataFrame,
    spans: pd.DataFrame,
    output_dir: str | Path,
    reader: dict[str, Any],
    folds: int = 5,
    parameters: dict = JUDGED_PARAMETERS,
    provenance: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Fit both models on all rows and the calibrations on out-of-fold predictions; write them to ``output_dir``.

    :returns: each question's out-of-fold decision: the best candidate's chance and whether it is right,
        the chance that "no answer" is right and whether it is, and what was chosen.
    """
    names = FeatureNames.of(questions, spans)
    span_oof = _out_of_fold(spans, names.span, spans["f1"], spans["item"], folds, parameters)
    answers = _answer_rows(questions, spans, span_oof, names)
    abstain_ok = questions["answerable"].astype(bool)  # in judged_frames, "answerable" holds whether "no answer" is right
    no_answer_oof = _out_of_fold(answers, names.answer, abstain_ok, questions["item"], folds, parameters)
    answer_calibration = _isotonic(answers["best_span_f1"], answers["best_f1_true"])
    no_answer_calibration = _isotonic(no_answer_oof, abstain_ok)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    _classifier(spans, names.span, spans["f1"], parameters).booster_.save_model(str(output_dir / "span.txt"))
    _classifier(answers, names.answer, abstain_ok, parameters).booster_.save_model(str(output_dir / "answerable.txt"))
    info = {
        **reader,
        "decision": USEFUL,
        "phrases": True,
        "span_model": "span.txt",
        "answer_model": "answerable.txt",
        "question_features": names.question,
        "span_features": names.span,
        "answer_features": names.answer,
        "parameters": parameters,
        "folds": folds,
        "calibration": {"answer": answer_calibration, "no_answer": no_answer_calibration},
        "training": provenance or {},
        "questions": int(questions["id"].nunique()),
        "rows": {"questions": len(questions), "spans": len(spans)},
    }
    (output_dir / SELECTOR_FILE).write_text(json.dumps(info, indent=1), encoding="utf-8")
    chance_right = np.interp(answers["best_span_f1"], *answer_calibration)
    chance_none = np.interp(no_answer_oof, *no_answer_calibration)
    answered = chance_right > chance_none
    return questions[["id", "domain", "item"]].assign(
        chance_right=chance_right,
        right=answers["best_f1_true"].astype(bool),
        chance_no_answer=chance_none,
        abstain_ok=abstain_ok,
        answered=answered,
        useful=np.where(answered, answers["best_f1_true"].astype(bool), abstain_ok),
        chance=np.where(answered, chance_right, chance_none),
    )


def summarize_out_of_fold(decisions: pd.DataFrame) -> pd.DataFrame:
    """Per domain and overall: useful first card, answered, right / wrong first, and the chance's calibration error."""
    from qa_system.metrics.calibration import expected_calibration_error

    rows = []
    for name, part in [("all", decisions), *decisions.groupby("domain")]:
        rows.append(
            {
                "set": name,
                "questions": len(part),
                "useful_first": part["useful"].mean(),
                "answered": part["answered"].mean(),
                "right": (part["answered"] & part["right"]).mean(),
                "wrong": (part["answered"] & ~part["right"]).mean(),
                "ece": expected_calibration_error(part["chance"], part["useful"]) if len(part) else math.nan,
            }
        )
    return pd.DataFrame(rows)
