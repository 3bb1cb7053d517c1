"""The answer selector's chances recalibrated to a collection's documents, on its labelled questions: ``qa-system fit-confidence``.

The selector's chances are calibrated on product reviews; on other documents (Wikipedia paragraphs, say) the
same "82%" can be right far less often. ``fit_confidence`` asks the labelled questions as the doors do (the
retriever, depth and the question's item), records each first card's chance and whether it was right (an answer
at F1 0.5 or more, or "no answer" to a question without one: the evaluation's definition), and fits a Platt
scaling of that chance (``reading.selection.Recalibration``): two numbers, so that a few dozen questions are
enough, and increasing, so that no decision changes. Before storing the fit in the collection's manifest it
reports the calibration error of the chances as stated and as recalibrated, each scored on questions the fit
did not see (folds grouped by item). ``eval pipeline`` and every door then read the stored fit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion.collections import is_reserved_name
from qa_system.ingestion.labels import Labels
from qa_system.metrics.calibration import expected_calibration_error
from qa_system.reading.selection import REVIEWS_CALIBRATION, Recalibration
from qa_system.retrieval.fitted import CONFIDENCE_KEY, MANIFEST_KEY, answer_models_key, question_key
from qa_system.stores import Index, save_index

if TYPE_CHECKING:
    from qa_system.evaluation.judged import JudgedQuestion

# Fewer questions, or fewer right or wrong first cards among them, and two parameters are fitted on noise.
MIN_QUESTIONS = 20
MIN_EACH = 5
FOLDS = 5
# A map flatter than this states nearly one chance for every card, "no answer" too: the stated chances did not tell
# right first cards from wrong ones on the labels, and a flat map would hide the order they do give.
MIN_SLOPE = 0.2


def fit_platt(confidence: Sequence[float], right: Sequence[float]) -> tuple[float, float]:
    """Slope (never negative) and intercept of ``sigmoid(slope * logit(confidence) + intercept)`` by maximum likelihood,
    with Platt's smoothed targets, which keep a small set from fitting certainties."""
    from scipy.optimize import minimize

    p = np.clip(np.asarray(confidence, dtype=float), 1e-6, 1 - 1e-6)
    y = np.asarray(right, dtype=float)
    positives, negatives = y.sum(), len(y) - y.sum()
    target = np.where(y > 0.5, (positives + 1) / (positives + 2), 1 / (negatives + 2))
    z = np.log(p / (1 - p))

    def loss(parameters: np.ndarray) -> tuple[float, np.ndarray]:
        slope, intercept = parameters
        q = np.clip(1 / (1 + np.exp(-(slope * z + intercept))), 1e-12, 1 - 1e-12)
        residual = q - target
        value = -np.sum(target * np.log(q) + (1 - target) * np.log(1 - q))
        return float(value), np.array([np.sum(residual * z), np.sum(residual)])

    result = minimize(loss, x0=np.array([1.0, 0.0]), jac=True, method="L-BFGS-B", bounds=[(0.0, 20.0), (-20.0, 20.0)])
    slope, intercept = (float(v) for v in result.x)
    return slope, intercept


def recalibrated(confidence: Sequence[float], slope: float, intercept: float) -> np.ndarray:
    """The chances through the fitted map (as ``Recalibration`` applies it)."""
    recalibration = Recalibration(slope, intercept, "")
    return np.array([recalibration(float(c)) for c in confidence])


def held_out_chances(confidence: np.ndarray, right: np.ndarray, groups: Sequence[str], folds: int = FOLDS) -> np.ndarray:
    """Each question's recalibrated chance from a fit on the other folds (questions of one item stay in one fold)."""
    keys = sorted(set(groups))
    if len(keys) < folds:  # too few items to keep them apart: each question is its own group
        groups, keys = [str(i) for i in range(len(confidence))], [str(i) for i in range(len(confidence))]
    fold_of = {key: int(hashlib.sha1(key.encode()).hexdigest(), 16) % folds for key in keys}
    which = np.array([fold_of[g] for g in groups])
    out = np.empty(len(confidence))
    for fold in range(folds):
        test = which == fold
        if not test.any():
            continue
        slope, intercept = fit_platt(confidence[~test], right[~test])
        out[test] = recalibrated(confidence[test], slope, intercept)
    return out


def kind_errors(confidence: np.ndarray, held_out: np.ndarray, right: np.ndarray, abstained: np.ndarray) -> dict[str, dict]:
    """One map serves both kinds of first card; how each kind (``answer``, ``no answer``: ``abstained``) fares under it:
    its questions, and the calibration error of its chances as stated and as recalibrated (``held_out``)."""
    return {
        kind: {
            "questions": int(chosen.sum()),
            "ece_stated": expected_calibration_error(confidence[chosen], right[chosen]),
            "ece_recalibrated": expected_calibration_error(held_out[chosen], right[chosen]),
        }
        for kind, chosen in (("answer", ~abstained), ("no answer", abstained))
        if chosen.any()
    }


def check_enough(right: np.ndarray, source: str) -> None:
    """Refuse a fit on too few questions, or on first cards all right or all wrong."""
    n, n_right = len(right), int(right.sum())
    if n < MIN_QUESTIONS:
        raise QAError(
            f"Too few labelled questions to fit the chances on: {n} asked, {n_right} first cards right and {n - n_right} wrong ({source}).",
            f"label at least {MIN_QUESTIONS} questions, with at least {MIN_EACH} answered right and {MIN_EACH} not, and run it again.",
        )
    if min(n_right, n - n_right) < MIN_EACH:
        fewer = "wrong" if n - n_right < n_right else "right"
        raise QAError(
            f"Too few first cards {fewer} to fit the chances on: {n} asked, {n_right} first cards right and {n - n_right} wrong ({source}).",
            f"add labelled questions whose first card is {fewer} (at least {MIN_EACH}), and run it again.",
        )


def check_own_collection(name: str) -> None:
    """SubjQA's chances are the selector's own, calibrated on judged reviews: a recalibration is for other documents."""
    if is_reserved_name(name):
        raise QAError(
            f"'{name}' is a SubjQA collection: its chances are calibrated on judged product reviews already.",
            "fit the chances of a collection of your own (`--collection NAME --labels FILE`).",
        )


def fit_confidence(
    settings: Settings,
    index: Index,
    labels: Labels,
    retriever: str = "bm25",
    top_k_retriever: int | None = None,
    limit: int | None = None,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Recalibrate the answer selector's chances to ``index`` on ``labels`` (questions about its documents) and store the fit.

    Asks the questions with ``retriever`` over each question's item (the search page's way), reports the calibration
    error of the chances as stated and as recalibrated, each on questions its fit did not see, and keeps the fit in
    the manifest, where every door and ``eval pipeline`` read it. ``out_dir``: also write that pipeline evaluation's
    report (with the stated chances). Returns the fit, ``stored`` or not (``_store_fit``).

    >>> fit_confidence(settings, open_collection(settings, "wiki"), load_labels("labels.csv", settings, "wiki"))  # doctest: +SKIP
    """
    from qa_system.evaluation.answering import evaluate_pipelines
    from qa_system.evaluation.reader import right_answers

    check_own_collection(index.name)
    with _stated_chances(settings, index):
        result = evaluate_pipelines(
            settings, [settings.reader_model], retriever, top_k_retriever=top_k_retriever, out_dir=out_dir, limit=limit,
            candidates=("product",), labels=labels, index=index,
        )  # fmt: skip
    records = next((r for (system, _), r in result["records"].items() if system.endswith("+selector")), None)
    if records is None:
        raise _no_chances(settings)
    questions = labels.questions[:limit]
    return _store_fit(
        settings, index, questions, records["confidence"].to_numpy(dtype=float), right_answers(records).to_numpy(dtype=float),
        (records["prediction"] == "").to_numpy(), labels.path.name, retriever, top_k_retriever,
    )  # fmt: skip


def fit_confidence_judged(
    settings: Settings,
    index: Index,
    questions: Sequence[JudgedQuestion],
    labels_name: str,
    retriever: str = "bm25",
    top_k_retriever: int | None = None,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """``fit_confidence`` on judged questions (``evaluation.judged``: each judged over every document of its item, with its
    card verdicts): a first card is right when ``eval judged`` finds it useful (a right answer, or "no answer" where
    the documents do not fully answer). ``out_dir``: also write that judged evaluation's report (with the stated chances)."""
    from qa_system.evaluation.judged import JudgedSystem, evaluate_judged

    check_own_collection(index.name)
    configured = settings.model_copy(update={"retriever": retriever})
    system = JudgedSystem(settings.reader_model, settings.selector_model, top_k_retriever)
    with _stated_chances(settings, index):
        (run,) = evaluate_judged(configured, questions, [system], out_dir=out_dir, index=index)
    confidence = run.records["chance"].to_numpy(dtype=float)
    if np.isnan(confidence).any():
        raise _no_chances(settings)
    right = run.records["useful"].to_numpy(dtype=float)
    abstained = run.records["first"].fillna("").eq("").to_numpy()
    return _store_fit(settings, index, questions, confidence, right, abstained, labels_name, retriever, top_k_retriever)


@contextmanager
def _stated_chances(settings: Settings, index: Index) -> Iterator[None]:
    """The chances as the selector states them while the questions are asked, not as an earlier fit restated them; the
    earlier fit is back afterwards (replaced only by a fit that succeeds)."""
    fits = index.manifest.setdefault(MANIFEST_KEY, {}).setdefault(CONFIDENCE_KEY, {})
    earlier = fits.pop(answer_models_key(settings), None)
    try:
        yield
    finally:
        if earlier is not None:
            fits[answer_models_key(settings)] = earlier


def _no_chances(settings: Settings) -> QAError:
    return QAError(
        f"The answer selector ({settings.selector_model}) was not trained for the reader {settings.reader_model}: its answers have no chance to fit.",
        "use the reader it was trained for (the default), or train one with `qa-system train-selector`.",
    )


def _store_fit(
    settings: Settings,
    index: Index,
    questions: Sequence,
    confidence: np.ndarray,
    right: np.ndarray,
    abstained: np.ndarray,
    labels_name: str,
    retriever: str,
    top_k_retriever: int | None,
) -> dict[str, Any]:
    """Fit the map on each first card's stated chance and whether it was right (``abstained``: the first cards that said
    "no answer"), and keep it in the collection's manifest when it lowers the calibration error on questions it did not
    see and keeps the chances apart (``stored``, ``why_not_stored``); a fit that does not leaves the chances, and any
    earlier fit, as they were."""
    check_enough(right, f"{labels_name}, {retriever}")
    slope, intercept = fit_platt(confidence, right)
    held_out = held_out_chances(confidence, right, [q.item_id or "" for q in questions])
    fit = {
        "slope": slope,
        "intercept": intercept,
        "calibrated_on": f"{len(questions)} labelled questions of '{index.name}' ({labels_name})",
        "questions": len(questions),
        "right": float(right.mean()),
        "stated": float(confidence.mean()),
        "ece_stated": expected_calibration_error(confidence, right),
        "ece_recalibrated": expected_calibration_error(held_out, right),
        "kinds": kind_errors(confidence, held_out, right, abstained),
        "retriever": retriever,
        "top_k_retriever": top_k_retriever or settings.top_k_retriever,
        "labels": labels_name,
        "question_keys": sorted({question_key(q) for q in questions}),
    }
    refusal = why_not_stored(fit, confidence)
    if refusal is not None:
        return {**fit, "stored": False, "not_stored": refusal}
    index.manifest.setdefault(MANIFEST_KEY, {}).setdefault(CONFIDENCE_KEY, {})[answer_models_key(settings)] = fit
    save_index(index, settings)
    return {**fit, "stored": True}


def why_not_stored(fit: dict[str, Any], confidence: np.ndarray) -> str | None:
    """Why a fit of the ``confidence`` stated is not to be stored: ``no lower error`` on questions it did not see, or
    ``flat`` (a slope under ``MIN_SLOPE``: about one chance for every card, where the stated ones differ); None to store it."""
    if fit["ece_recalibrated"] >= fit["ece_stated"]:
        return "no lower error"
    if fit["slope"] < MIN_SLOPE and np.ptp(confidence) > 0.01:  # one stated chance throughout leaves nothing to flatten
        return "flat"
    return None


def reset_confidence(settings: Settings, index: Index, save: bool = True) -> bool:
    """Remove this collection's recalibration for the settings' models (its chances are then as calibrated on reviews);
    False when there was none."""
    fits = index.manifest.get(MANIFEST_KEY, {}).get(CONFIDENCE_KEY, {})
    if fits.pop(answer_models_key(settings), None) is None:
        return False
    if save:
        save_index(index, settings)
    return True


def fit_line(fit: dict[str, Any], collection: str) -> str:
    """What a fit did, in one line: the error of the chances as stated and as recalibrated, on questions the fit did not see."""
    stored = fit.get("stored", True)
    if stored:
        verdict = _worse_kind(fit)
    elif fit.get("not_stored") == "flat":
        verdict = (
            f" The chances as stated did not tell right first cards from wrong ones on these questions, so the map states about "
            f"{fit['right']:.0%} for every card, \u201cno answer\u201d too, and was not stored: the chances stay as they were. "
            "Label more questions (some the documents do not answer) and fit again."
        )
    else:
        verdict = " It did not lower the error here, so it was not stored: the chances stay as they were."
    return (
        f"{'Chances recalibrated' if stored else 'Fitted'} on {fit['calibrated_on']}: first cards were right on {fit['right']:.0%} "
        f"where they stated {fit['stated']:.0%} on average; calibration error {fit['ece_stated']:.3f} as stated, "
        f"{fit['ece_recalibrated']:.3f} recalibrated (each question scored by a fit on the others).{verdict}"
    )


def _worse_kind(fit: dict[str, Any]) -> str:
    """A sentence on a kind of first card (answers, "no answer") whose chances the one map made worse, if any."""
    said = {"answer": "gave an answer", "no answer": 'said "no answer"'}
    for kind, figures in fit.get("kinds", {}).items():
        if figures["questions"] >= MIN_EACH and figures["ece_recalibrated"] > figures["ece_stated"] + 0.02:
            return (
                f" Its {figures['questions']} first cards that {said[kind]} fare worse ({figures['ece_stated']:.3f} as stated, "
                f'{figures["ece_recalibrated"]:.3f} recalibrated): one map serves answers and "no answer" alike, and here they err '
                "differently."
            )
    return ""


def status_line(fit: dict[str, Any] | None, collection: str, store_flags: str = "") -> str:
    """What the chances of ``collection`` are calibrated on now, and the command that changes it (``store_flags``: those
    naming its store, ``Settings.store_flags``)."""
    if fit is None:
        return (
            f"'{collection}': chances as calibrated on {REVIEWS_CALIBRATION}; "
            f"`qa-system fit-confidence --collection {collection} --labels FILE{store_flags}` fits them to its documents."
        )
    return (
        f"'{collection}': chances recalibrated on {fit['calibrated_on']} (calibration error {fit['ece_stated']:.3f} as stated, "
        f"{fit['ece_recalibrated']:.3f} recalibrated); `qa-system fit-confidence --collection {collection} --reset{store_flags}` removes it."
    )
