"""BM25's analyzer and parameters scored on a labelled split: the grid behind BM25sRetriever's defaults.

``qa-system tune-bm25 --domain electronics --split dev`` scores every combination of stemming,
stopwords, k1 and b with per-product and split filters (as ``eval retriever`` asks), writes the
table as a report and names the recommended setting (``--collection NAME --labels FILE``: your own
labelled questions over a collection's documents); ``--apply`` stores the recommended setting in the collection, where
every pipeline built over it reads it (memory and FAISS stores; a search server's BM25 is its own). The extractive pipeline reads the top 3
reviews, so settings are ranked by how often an answerable question's own review is among them
(strict recall@3 on answerable questions), then strict MRR over all questions.

A dev split has a few hundred questions, so MRR differences under one question's worth (1/n) are
noise. Among the settings with the best recall@3 and an MRR within 1/n of the best, the one that
changes the fewest parameters from the settings in force (``IN_FORCE``, or the collection's applied one) is
recommended: change only what the data clearly asks for. BM25's defaults are the setting this picked on electronics
dev, counting changes from the standard then (Elasticsearch's English analyzer with Lucene's k1 = 1.2, b = 0.75).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from haystack.document_stores.in_memory import InMemoryDocumentStore

from qa_system.config import Settings
from qa_system.errors import QAError, check_count
from qa_system.evaluation.report import write_report
from qa_system.evaluation.retrieval import run_retriever
from qa_system.ingestion.labels import Labels, evaluation_questions, labels_index
from qa_system.metrics.ranking import retrieval_metrics
from qa_system.progress import track
from qa_system.retrieval.bm25 import BM25sRetriever
from qa_system.retrieval.filters import make_filters
from qa_system.retrieval.fitted import BM25_KEY, BM25_PARAMETERS, MANIFEST_KEY, OWN_BM25_STORES, bm25_defaults, bm25_fit, describe_bm25
from qa_system.sources import SPLITS, load_subjqa
from qa_system.stores import Index, save_index

RANK_BY = ("answerable strict recall@3", "strict mrr")


@dataclass(frozen=True)
class BM25Setting:
    """One point of the BM25 grid: the analyzer (stemmer, stopwords) and the parameters k1 and b."""

    stemmer_language: str | None
    stopwords: str | None
    k1: float
    b: float


STANDARD = BM25Setting("english", "en", 1.2, 0.75)  # Elasticsearch's English analyzer with Lucene's k1 and b
# BM25sRetriever's defaults, which the tuning on electronics dev picked with STANDARD as the reference: what a
# recommendation counts its changes from now, so that where the grid ties it recommends what is in force.
IN_FORCE = BM25Setting(**bm25_defaults())


def rule(in_force: BM25Setting = IN_FORCE) -> str:
    """How the recommended setting is picked, naming the setting in force that it counts changes from."""
    return f"best recall@3, MRR within one question of the best, fewest changes from the setting in force ({describe_setting(in_force)})"


def describe_setting(setting: BM25Setting) -> str:
    """A setting in one line (stemmer, stopwords, k1, b)."""
    return describe_bm25(asdict(setting))


def setting_in_force(index: Index | None) -> BM25Setting:
    """The BM25 setting questions over ``index`` use: the one ``apply_bm25`` stored, else the retriever's defaults."""
    fit = bm25_fit(index) if index is not None else None
    return BM25Setting(**{name: fit[name] for name in BM25_PARAMETERS}) if fit else IN_FORCE


def bm25_grid(k1s: Sequence[float] = (0.9, 1.2, 1.5, 2.0), bs: Sequence[float] = (0.5, 0.75, 0.9, 1.0)) -> list[BM25Setting]:
    """English stemming on/off x English stopwords on/off x k1 x b."""
    return [BM25Setting(*values) for values in itertools.product(("english", None), ("en", None), k1s, bs)]


def recommended(table: pd.DataFrame, questions: int, reference: BM25Setting = IN_FORCE) -> pd.Series:
    """The row to use: best recall@3, MRR within one question of the best, fewest changes from ``reference`` (the table
    writes "none" for no stemmer or stopwords)."""
    recall, mrr = RANK_BY
    top = table[table[recall] == table[recall].max()]
    near = top[top[mrr] >= top[mrr].max() - 1.0 / questions]
    wanted = {name: "none" if value is None else value for name, value in asdict(reference).items()}
    changes = near.apply(lambda row: sum(row[name] != value for name, value in wanted.items()), axis=1)
    return near.loc[changes.sort_values(kind="stable").index[0]]


def row_setting(row: pd.Series) -> BM25Setting:
    """A grid row's setting (the table writes "none" for no stemmer or stopwords)."""
    return BM25Setting(
        *(None if row[name] == "none" else row[name] for name in ("stemmer_language", "stopwords")), float(row["k1"]), float(row["b"])
    )


def describe(row: pd.Series) -> str:
    """A grid row's setting in one line (stemmer, stopwords, k1, b)."""
    return describe_setting(row_setting(row))


def score_setting(store: InMemoryDocumentStore, questions: Sequence, setting: BM25Setting) -> dict[str, float]:
    """Strict and chapter-definition recall@1/3 and MRR of one setting."""
    retriever = BM25sRetriever(store, **asdict(setting))

    def retrieve(question, depth: int):
        return retriever.run(question.question, filters=make_filters(item_id=question.item_id, split=question.split), top_k=depth)[
            "documents"
        ]

    metrics = retrieval_metrics(run_retriever(questions, retrieve, depth=10, progress=False), ks=(1, 3)).set_index(["definition", "group"])
    scores = {}
    for definition, group in (("strict", "all"), ("strict", "answerable"), ("chapter", "all")):
        prefix = f"{definition}" if group == "all" else f"{group} {definition}"
        scores.update({f"{prefix} {name}": float(metrics.loc[(definition, group), name]) for name in ("recall@1", "recall@3", "mrr")})
    return scores


def tune_bm25(
    settings: Settings,
    domain: str,
    split: str = "dev",
    out_dir: str | Path | None = None,
    grid: Sequence[BM25Setting] | None = None,
    limit: int | None = None,
    labels: Labels | None = None,
    index: Index | None = None,
    in_force: BM25Setting = IN_FORCE,
) -> pd.DataFrame:
    """One row per setting with its scores, best first (``RANK_BY``), the recommended one flagged (counting changes from
    ``in_force``); written as a report when ``out_dir`` is given. ``attrs`` holds what it was fitted on and how many
    questions.

    The questions are SubjQA's ``domain`` ``split`` over all the domain's reviews, or your own ``labels`` over the
    documents of ``index`` (their collection)."""
    limit = check_count(limit, "limit", optional=True)
    if labels is not None:
        questions, what, source = evaluation_questions(settings, domain, split, labels, limit)
        index = index or labels_index(settings, labels)
        documents, scope = index.store.filter_documents(), f"the {index.manifest.get('documents')} passages of collection '{index.name}'"
    else:
        if split not in SPLITS:
            raise QAError(f"Unknown split '{split}'.", f"use one of: {', '.join(SPLITS)}.")
        data = load_subjqa(domain, list(SPLITS), settings.data_dir)
        questions, what, source = data.questions_for(split)[:limit], f"SubjQA {domain} {split}", {"domain": domain, "split": split}
        documents, scope = data.documents, "all splits of the domain"
        if not questions:
            raise QAError(f"The {domain} {split} split has no questions to tune on.", "pick a domain and split with labelled questions.")
    store = InMemoryDocumentStore()
    store.write_documents(documents)
    rows = [
        {**asdict(setting), **score_setting(store, questions, setting)}
        for setting in track(grid or bm25_grid(), f"BM25 settings ({what})", "settings")
    ]
    table = pd.DataFrame(rows).sort_values(list(RANK_BY), ascending=False, kind="stable").reset_index(drop=True)
    table[["stemmer_language", "stopwords"]] = table[["stemmer_language", "stopwords"]].fillna("none")
    table["recommended"] = table.index == recommended(table, len(questions), in_force).name
    table.attrs.update(fitted_on=labels.path.name if labels else what, questions=len(questions))
    if out_dir is not None:
        best = table[table["recommended"]].iloc[0]
        write_report(
            out_dir,
            f"BM25 settings on {what}",
            table,
            summary={**source, "questions": len(questions), "rank_by": list(RANK_BY), "best": best.to_dict()},
            notes=[
                *(labels.notes if labels else []),
                f"{len(questions)} questions, each asked with filters item_id = its product"
                + ("" if labels else f" and split = {split}")
                + f", over {scope}.",
                *(
                    [f"Scored with the project's BM25 over the documents of the {index.backend} store's collection."]
                    if index is not None and index.backend not in OWN_BM25_STORES
                    else []
                ),
                f"Ranked by {', then '.join(RANK_BY)}; differences of one question are {1 / len(questions):.3f}.",
                f"Recommended: {describe(best)} ({rule(in_force)}).",
            ],
        )
    return table


def check_applies(backend: str, name: str) -> None:
    """A BM25 setting applies to the project's own BM25: that of the memory and FAISS stores (``backend``), not that of
    collection ``name`` on a search server."""
    if backend not in OWN_BM25_STORES:
        raise QAError(
            f"Collection '{name}' is on the {backend} store, where BM25 runs in the search server with the "
            f"settings every index of it is made with ({describe_setting(IN_FORCE)}); --apply sets the BM25 of the memory and "
            "FAISS stores.",
            "leave out --apply, or index the collection into the memory or FAISS store (--store) to use another setting.",
        )


def apply_bm25(settings: Settings, index: Index, table: pd.DataFrame) -> dict[str, Any]:
    """Store ``table``'s recommended setting (``tune_bm25``) as the collection's: every pipeline built over it then reads
    it (``retrieval.fitted.bm25_parameters``). Returns what was stored."""
    check_applies(index.backend, index.name)
    best = table[table["recommended"]].iloc[0]
    fit = {
        **asdict(row_setting(best)),
        "fitted_on": table.attrs.get("fitted_on"),
        "questions": table.attrs.get("questions"),
        "scores": {name: float(best[name]) for name in RANK_BY},
    }
    index.manifest.setdefault(MANIFEST_KEY, {})[BM25_KEY] = fit
    save_index(index, settings)
    return fit


def reset_bm25(settings: Settings, index: Index) -> bool:
    """Remove the collection's stored BM25 setting (its questions then use the retriever's defaults); False when there was none."""
    if index.manifest.get(MANIFEST_KEY, {}).pop(BM25_KEY, None) is None:
        return False
    save_index(index, settings)
    return True
