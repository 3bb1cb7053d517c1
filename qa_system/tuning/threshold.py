"""The pipeline's no-answer threshold, fitted on a dev split and kept in the index manifest by ``qa-system fit-threshold``.

The reader's own threshold is tuned on single gold reviews; a pipeline gives it the retriever's top
reviews instead, among which the gold one may be missing. So a threshold is fitted for each
retrieval set-up (retriever, depth, candidate protocol: ``retrieval.fitted.no_answer_setting``) and
reader, F1-optimal with unanswerable questions weighted to the domain's train share
(``evaluation.answering.fit_no_answer_threshold``). Only this command stores one: ``qa-system eval
pipeline`` reports a stored fit beside the reader's own threshold and never writes to the index.
Fitting is refused on any split but dev.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from qa_system.config import Settings
from qa_system.evaluation.answering import evaluate_pipelines, fit_no_answer_threshold, no_answer_share, reader_label
from qa_system.ingestion.labels import evaluation_index
from qa_system.retrieval.fitted import no_answer_setting
from qa_system.sources import load_subjqa
from qa_system.stores import Index
from qa_system.tuning.fusion import store_no_answer_fits


def fit_pipeline_thresholds(
    settings: Settings,
    readers: Sequence[str],
    retriever: str = "bm25",
    domain: str = "electronics",
    split: str = "dev",
    top_k_retriever: int | None = None,
    top_k: int = 3,
    candidates: str | Sequence[str] = ("split",),
    limit: int | None = None,
    out_dir: str | Path | None = None,
    index: Index | None = None,
) -> pd.DataFrame:
    """Fit the no-answer threshold of each reader under each candidate protocol on ``split`` (dev only) and store it.

    Runs the pipeline evaluation of ``split`` (its report, with the dev-tuned rows, goes to
    ``out_dir`` when given) and keeps each fit in the index manifest, where ``qa-system eval
    pipeline`` of any split finds it. Returns one row per reader and protocol with the fit.
    ``top_k_retriever``: reviews read per question (default: the settings', as the doors read).

    >>> fit_pipeline_thresholds(settings, [settings.reader_model], "hybrid", candidates=["split", "product"])  # doctest: +SKIP
    """
    # The evaluation checks every argument (dev only, counts, protocols) before any work.
    top_k_retriever = settings.top_k_retriever if top_k_retriever is None else top_k_retriever
    index = index or evaluation_index(settings, domain, None, embeddings=retriever != "bm25")
    result = evaluate_pipelines(
        settings,
        readers,
        retriever,
        domain,
        split,
        top_k_retriever,
        top_k,
        out_dir,
        limit,
        candidates=candidates,
        tune_threshold=True,
        index=index,
    )
    prior = no_answer_share(load_subjqa(domain, "train", settings.data_dir).questions)
    fits, rows = {}, []
    for model in readers:
        system = f"{retriever}+{reader_label(model)}"
        for (name, protocol), records in result["records"].items():
            if name != system:
                continue
            fit = {**fit_no_answer_threshold(records, prior), "fitted_on": f"{domain} {split}"}
            fits[(no_answer_setting(retriever, top_k_retriever, protocol), model)] = fit
            rows.append({"system": system, "candidates": protocol, **fit})
    store_no_answer_fits(index, settings, fits)
    return pd.DataFrame(rows)
