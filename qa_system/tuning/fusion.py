"""Fusion weights and the re-ranking mix, fitted on a dev split and kept in the index manifest by ``qa-system fit-fusion``.

Weights that suit one question encoder do not suit another: BM25 and the stock MiniLM are about
equally good on SubjQA electronics, a fine-tuned question encoder is much better than BM25. So
``fit_fusion_on_dev`` grid-searches the hybrid's fusion (min-max or RRF, weights, k) on the
domain's dev split, strict recall@1 first and MRR to break ties, for the configured question
encoder, and ``fit_rerank_on_dev`` does the same for the answerability re-ranker's mix of
retriever and reader scores. Both are stored in the index's manifest under the question encoder
(name and file fingerprint) that was fitted, where the ``hybrid`` and ``rerank`` pipeline stages
read them (``retrieval/fitted.py``); re-indexing drops them with the vectors they were fitted on. Each fit also records the
BM25 settings it saw (``sparse_setting``). Only the fitting commands write fits: an evaluation reads
what is stored, else the defaults, and says which (``fits_in_force``), so that ``ask`` answers the
same whether or not someone evaluated first.

The grids include each part alone (sparse or dense weight 0, retriever weight 0 or 1), so on the
dev split a fitted combination is never worse than its best part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from haystack import Pipeline

from qa_system.config import Settings
from qa_system.errors import QAError, check_count
from qa_system.ingestion.collections import is_reserved_name
from qa_system.ingestion.labels import Labels
from qa_system.progress import track
from qa_system.retrieval.fitted import (
    BM25_PARAMETERS,
    DEFAULT_RETRIEVER_WEIGHT,
    MANIFEST_KEY,
    OWN_BM25_STORES,
    bm25_defaults,
    bm25_fit,
    describe_bm25,
    encoder_key,
    fits,
    model_key,
    reader_key,
)
from qa_system.retrieval.fusion import FusionParameters, RankedCandidates, fit_fusion, ranking_scores
from qa_system.sources import LabelledQuestion, load_subjqa
from qa_system.stores import Index, save_index

RERANK_WEIGHTS = tuple(w / 20 for w in range(21))


def _put(index: Index, settings: Settings, value: dict[str, Any], *keys: str) -> None:
    """Put one fit at ``keys`` under the question encoder's entry of the manifest (in memory)."""
    node = index.manifest.setdefault(MANIFEST_KEY, {}).setdefault(encoder_key(settings), {})
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def _store(index: Index, settings: Settings, value: dict[str, Any], *keys: str) -> None:
    """Write one fit at ``keys`` and save the index (atomically, like every save)."""
    _put(index, settings, value, *keys)
    save_index(index, settings)


def store_no_answer_fits(index: Index, settings: Settings, fits: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Keep pipeline no-answer thresholds fitted on dev, keyed (retrieval set-up, reader), in one save (read by ``fitted.no_answer_fit``)."""
    for (setting, reader_model), fit in fits.items():
        _put(index, settings, fit, "no_answer", setting, model_key(reader_model))
    save_index(index, settings)


def sparse_setting(pipeline: Pipeline) -> dict[str, Any]:
    """The Haystack pipeline's BM25 parameters (its store and depth aside; {} without BM25): a fit holds only for them."""
    if "sparse_retriever" not in pipeline.graph.nodes:
        return {}
    parameters = pipeline.get_component("sparse_retriever").to_dict()["init_parameters"]
    return {name: value for name, value in parameters.items() if name not in ("document_store", "top_k")}


def dev_questions(settings: Settings, domain: str, split: str, limit: int | None = None) -> list[LabelledQuestion]:
    """The first ``limit`` labelled questions of a domain's split to fit on (all with None); a QAError when there are none."""
    questions = load_subjqa(domain, split, settings.data_dir).questions[: check_count(limit, "limit", optional=True)]
    if not questions:
        raise QAError(f"The {domain} {split} split has no questions to fit on.", "pick a domain and split with labelled questions.")
    return questions


def fitting_questions(
    settings: Settings, domain: str, split: str, limit: int | None, labels: Labels | None
) -> tuple[list[LabelledQuestion], str]:
    """The questions a fit is made on, and what they are: the first ``limit`` of ``labels`` (named by their file), else of the domain's split."""
    if labels is None:
        return dev_questions(settings, domain, split, limit), f"{domain} {split}"
    questions = labels.questions[: check_count(limit, "limit", optional=True)]
    if not questions:
        raise QAError(f"{labels.path.name} holds no questions to fit on.", "label questions about the collection's documents.")
    return questions, labels.path.name


def fit_fusion_on_dev(
    settings: Settings, domain: str, index: Index, split: str = "dev", limit: int | None = None, labels: Labels | None = None
) -> dict[str, Any]:
    """Fit the hybrid fusion on ``split`` (per-product and split filters), or on ``labels`` (your own labelled questions about
    ``index``, a collection), store it, return the fit with its figures.

    The candidate lists are those of the ``bm25`` and ``dense`` pipelines at the depth the hybrid
    pipeline asks of its retrievers, so the fit sees what the hybrid fusion sees.
    """
    from qa_system.pipelines import FUSION_CANDIDATES, build_retrieval_pipeline

    questions, fitted_on = fitting_questions(settings, domain, split, limit, labels)
    sparse = build_retrieval_pipeline("bm25", settings, index=index)
    dense = build_retrieval_pipeline("dense", settings, index=index)
    candidates = []
    for question in track(questions, f"fusion candidates ({fitted_on})", "questions"):
        ask = dict(item_id=question.item_id, split=question.split, top_k=FUSION_CANDIDATES)
        candidates.append(
            RankedCandidates(
                sparse.run(question.question, **ask)["documents"], dense.run(question.question, **ask)["documents"], question.document_id
            )
        )
    parameters, scores = fit_fusion(candidates)
    fit = {
        **parameters.as_dict(),
        "sparse": sparse_setting(sparse.pipeline),
        "fitted_on": fitted_on,
        "questions": len(questions),
        "dev": {
            "fused": scores,
            "bm25": dict(zip(("recall@1", "mrr"), ranking_scores((c.sparse, c.relevant_id) for c in candidates))),
            "dense": dict(zip(("recall@1", "mrr"), ranking_scores((c.dense, c.relevant_id) for c in candidates))),
        },
    }
    _store(index, settings, fit, "fusion")
    return fit


def fit_rerank_on_dev(
    settings: Settings,
    domain: str,
    index: Index,
    retriever: str = "hybrid",
    split: str = "dev",
    limit: int | None = None,
    weights: Sequence[float] = RERANK_WEIGHTS,
    labels: Labels | None = None,
) -> dict[str, Any]:
    """Fit the answerability re-ranker's retriever weight for ``retriever`` on ``split`` (or ``labels``); store and return it.

    The reader reads each candidate review once; the weights are then tried on those scores.
    """
    from qa_system.pipelines import RERANK_CANDIDATES, build_retrieval_pipeline
    from qa_system.retrieval.rerank import AnswerabilityRanker, mix

    questions, fitted_on = fitting_questions(settings, domain, split, limit, labels)
    pipeline = build_retrieval_pipeline(retriever, settings, index=index)
    ranker = AnswerabilityRanker(settings.reader_model)
    ranker.warm_up()
    read = []
    for question in track(questions, f"reading candidates ({fitted_on})", "questions"):
        documents = pipeline.run(question.question, item_id=question.item_id, split=question.split, top_k=RERANK_CANDIDATES)["documents"]
        read.append((documents, ranker.answerability(question.question, documents), question.document_id))
    scores = {w: ranking_scores((mix(docs, answerability, w), relevant) for docs, answerability, relevant in read) for w in weights}
    best = max(weights, key=lambda w: (*scores[w], -abs(w - 0.5)))
    fit = {
        "retriever_weight": best,
        "reader": reader_key(settings),
        "sparse": sparse_setting(pipeline.pipeline),
        "fitted_on": fitted_on,
        "questions": len(questions),
        "dev": {
            "reranked": dict(zip(("recall@1", "mrr"), scores[best])),
            "retriever": dict(zip(("recall@1", "mrr"), ranking_scores((documents, relevant) for documents, _, relevant in read))),
        },
    }
    _store(index, settings, fit, "rerank", retriever)
    return fit


def fits_in_force(settings: Settings, index: Index, retriever: str, rerank: bool) -> list[str]:
    """One line per fitted value this pipeline reads, saying where it comes from: a stored fit or the defaults.

    Reads the manifest only: evaluating never fits, so that ``ask`` answers the same before and
    after an evaluation. A stored fit made for other BM25 settings (or, for re-ranking, another
    reader) is named as such, with the command that refits it.
    """
    from qa_system.pipelines import load_pipeline

    notes: list[str] = []
    applied = bm25_fit(index)
    if retriever in ("bm25", "hybrid") and index.backend in OWN_BM25_STORES:
        notes.append(
            f"BM25 {describe_bm25(applied)}: stored by tune-bm25 --apply, fitted on {fitted_on(applied)}."
            if applied
            else f"BM25 {describe_bm25(bm25_defaults())}: the defaults, none stored by tune-bm25 --apply."
        )
    if retriever != "hybrid" and not rerank:
        return notes  # nothing else fitted is read
    # What the fits must have seen, read from the pipeline's definition (not warmed up: no model loads).
    sparse = sparse_setting(load_pipeline(retriever, index, settings))
    domains = index.manifest.get("domains") or []
    own = (
        "".join(f" --domain {domain}" for domain in domains)
        if is_reserved_name(index.name)
        else f" --collection {index.name} --labels FILE"
    ) + settings.store_flags
    refit = f"run `qa-system fit-fusion{own}{' --rerank' if rerank else ''}` with the same encoders to fit it"
    if retriever == "hybrid":
        fit = fits(index, settings).get("fusion")
        if not fit:
            default = FusionParameters()
            notes.append(
                f"fusion {default.mode} (sparse weight {default.sparse_weight:.2f}, dense weight {default.dense_weight:.2f}): the defaults, no fit stored; {refit}."
            )
        else:
            dev = fit["dev"]
            stale = "" if fit.get("sparse") == sparse else f"; it was fitted for other BM25 settings ({_bm25_seen(fit)}): {refit} again"
            notes.append(
                f"fusion {fit['mode']} (sparse weight {fit['sparse_weight']:.2f}, dense weight {fit['dense_weight']:.2f}, k {fit['k']:g}) "
                f"stored by fit-fusion, fitted on {fitted_on(fit)}: strict recall@1 {dev['fused']['recall@1']:.3f} (BM25 {dev['bm25']['recall@1']:.3f}, dense {dev['dense']['recall@1']:.3f}){stale}"
            )
    if rerank:
        fit = fits(index, settings).get("rerank", {}).get(retriever)
        if not fit or fit["reader"] != reader_key(settings):
            other = " (the stored one is for another reader)" if fit else ""
            notes.append(f"re-ranking of {retriever}: retriever weight {DEFAULT_RETRIEVER_WEIGHT:.2f}, the default{other}; {refit}.")
        else:
            dev = fit["dev"]
            stale = "" if fit.get("sparse") == sparse else f"; it was fitted for other BM25 settings ({_bm25_seen(fit)}): {refit} again"
            notes.append(
                f"re-ranking of {retriever}: retriever weight {fit['retriever_weight']:.2f} stored by fit-fusion --rerank, fitted on {fitted_on(fit)}: "
                f"strict recall@1 {dev['reranked']['recall@1']:.3f} ({retriever} alone {dev['retriever']['recall@1']:.3f}){stale}"
            )
    return notes


def fitted_on(fit: dict[str, Any]) -> str:
    """What a stored fit was fitted on, with how many questions ("electronics dev (60 questions)"): a fit made with
    ``--limit`` is told apart from one on the whole split. A fit older than the recorded count: its source alone."""
    count = fit.get("questions")
    return fit["fitted_on"] if count is None else f"{fit['fitted_on']} ({count} question{'' if count == 1 else 's'})"


def _bm25_seen(fit: dict[str, Any]) -> str:
    """The BM25 setting a stored fit saw, in one line (a fit older than the recorded setting: "not recorded")."""
    seen = fit.get("sparse") or {}
    return describe_bm25(seen) if all(name in seen for name in BM25_PARAMETERS) else "not recorded"
