"""Retriever evaluation: recall@k, MRR and MAP under two candidate protocols and two definitions of a hit.

Each question is asked over an index of all splits of the domain, with the filters of a
*candidate protocol* (``CANDIDATES``):

* **split** (the reference chapter's): ``item_id`` = its product and ``split`` = its split, so a
  retriever ranks the few reviews of one product in one split (about 3 in electronics test);
* **product** (the search page's): ``item_id`` only, every review of the product (9.4 per
  electronics test question); a review in several splits is one document, so it counts once.

A hit is, by definition:

* **strict** (primary): the question's own review, by its document id (never by its split).
* **chapter**: relevant documents are those containing one of the gold answer texts, and an
  unanswerable question always counts as a hit; this is how the chapter's Haystack 1.x
  evaluation counted, so only this one compares with its figures. "Unanswerable" is as the
  chapter's data (the published ``subjqa`` dataset) labels it: the first annotation is
  ANSWERNOTFOUND (``LabelledQuestion.chapter_no_answer``; 198 of electronics test's 358 questions,
  where only 120 have no span at all).

Variants side by side: ``bm25``, ``dense`` and ``hybrid`` use the configured encoder; ``dense-ft``
and ``hybrid-ft`` the fine-tuned one (``qa-system train-retriever``); ``+rerank`` appends
answerability re-ranking (e.g. ``hybrid-ft+rerank``). Fusion weights and the re-ranking mix are
those ``qa-system fit-fusion [--rerank]`` stored in the index, else the defaults; the report says
which. Evaluating never fits nor writes a fit (see ``tuning.fusion``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from haystack import Document

from qa_system.config import CANDIDATE_PROTOCOLS
from qa_system.errors import QAError, check_count
from qa_system.evaluation.gold import check_golds, pooled_documents
from qa_system.evaluation.report import check_out_dir
from qa_system.metrics.ranking import DEFAULT_KS, retrieval_metrics
from qa_system.progress import track
from qa_system.retrieval.filters import make_filters
from qa_system.sources import LabelledQuestion
from qa_system.stores.meta_filters import document_matches

_BASES = {
    "bm25": ("bm25", False),
    "dense": ("dense", False),
    "hybrid": ("hybrid", False),
    "dense-ft": ("dense", True),
    "hybrid-ft": ("hybrid", True),
}
CHANCE = "chance (random order)"  # the report's reference row: what ranking the candidates at random reaches
VARIANTS = tuple(f"{base}{suffix}" for suffix in ("", "+rerank") for base in _BASES)
_PROTOCOLS = {
    "split": "the product's reviews in the question's split (filters item_id and split: the reference chapter's protocol)",
    "product": "every review of the product, whatever its splits (filter item_id: what the search page asks)",
}
CANDIDATES = {name: _PROTOCOLS[name] for name in CANDIDATE_PROTOCOLS}  # what each candidate protocol asks


def check_candidates(candidates: str | Sequence[str]) -> list[str]:
    """The candidate protocols asked for, in order, each once; a QAError names an unknown one."""
    candidates = [candidates] if isinstance(candidates, str) else list(candidates)
    unknown = [c for c in candidates if c not in CANDIDATES]
    if unknown or not candidates:
        problem = f"Unknown candidate protocol '{unknown[0]}'." if unknown else "No candidate protocol given."
        raise QAError(problem, f"use {' or '.join(CANDIDATES)} (or both).")
    return list(dict.fromkeys(candidates))


def candidate_filters(question: LabelledQuestion, candidates: str) -> dict | None:
    """The filters ``question`` is asked with under a candidate protocol (None: every document, for a question without item or split)."""
    return make_filters(item_id=question.item_id, split=question.split if candidates == "split" else None)


def candidate_finder(store) -> Callable[[LabelledQuestion, str], list[Document]]:
    """``find(question, candidates)``: every document the protocol's filters allow (what chance ranks at random).

    A product's reviews are read from the store once; the split filter is applied as every
    retriever applies it (``document_matches``: a review in several splits is in each).
    """
    products: dict[str, list[Document]] = {}

    def find(question: LabelledQuestion, candidates: str) -> list[Document]:
        if question.item_id not in products:
            products[question.item_id] = store.filter_documents(filters=make_filters(item_id=question.item_id))
        filters = candidate_filters(question, candidates)
        return [d for d in products[question.item_id] if filters is None or document_matches(filters, d)]

    return find


@dataclass(frozen=True)
class Variant:
    """A named retrieval set-up: retriever, fine-tuned encoder or not, answerability re-ranking or not."""

    name: str
    retriever: str
    tuned: bool
    rerank: bool

    @classmethod
    def parse(cls, name: str) -> Variant:
        """The variant a name such as ``hybrid-ft+rerank`` stands for; a QAError lists the known ones."""
        from qa_system.errors import QAError

        base, _, suffix = name.partition("+")
        if base not in _BASES or suffix not in ("", "rerank"):
            raise QAError(f"Unknown retriever variant '{name}'.", f"use one of: {', '.join(VARIANTS)}.")
        return cls(name, *_BASES[base], rerank=suffix == "rerank")


Retrieve = Callable[[LabelledQuestion, int], list[Document]]


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def relevant_ranks(
    question: LabelledQuestion, documents: list[Document], pooled: set[str] | None = None, once_per_document: bool = True
) -> dict[str, list[int]]:
    """1-based ranks of the relevant documents among ``documents``, per definition (strict: the gold review's document;
    pooled, when ``pooled`` names its documents: any review of the product the question was asked of that answers it).

    A collection's long document is split into passages that share its ``document_id`` meta: any of them counts, and
    a document counts once, at its best passage's rank (its other passages further down are no second hit, which
    would lower MAP for a document found first), unless not ``once_per_document``. The chapter's definition judges
    each passage's text.
    """
    strict = _first_of_each(documents, lambda keys: question.document_id in keys, once_per_document)
    answers = [_squash(a.text) for a in question.answers if a.text.strip()]
    chapter = [r for r, d in enumerate(documents, 1) if any(a in _squash(d.content or "") for a in answers)]
    ranks = {"strict": strict, "chapter": chapter}
    if pooled is not None:
        ranks["pooled"] = _first_of_each(documents, lambda keys: bool(keys & pooled), once_per_document)
    return ranks


def _first_of_each(documents: list[Document], relevant: Callable[[set[str]], bool], once_per_document: bool) -> list[int]:
    """1-based ranks of the relevant ones among ``documents`` (``relevant`` of a passage's id and its document's), with
    ``once_per_document`` each document's first passage only."""
    ranks, seen = [], set()
    for rank, document in enumerate(documents, 1):
        keys = {document.id, document.meta.get("document_id")} - {None}
        source = document.meta.get("document_id") or document.id
        if relevant(keys) and not (once_per_document and source in seen):
            seen.add(source)
            ranks.append(rank)
    return ranks


def run_retriever(
    questions: Sequence[LabelledQuestion],
    retrieve: Retrieve,
    depth: int,
    label: str = "",
    progress: bool = True,
    candidates: Callable[[LabelledQuestion], list[Document]] | None = None,
    pooled: dict[str, set[str]] | None = None,
) -> pd.DataFrame:
    """One record per question: its relevant ranks under each definition and the latency.

    ``candidates(question)``: every document the retriever could return for it; the records then
    hold how many there are and how many are relevant, so that chance is exact at any depth.
    ``pooled`` (``evaluation.gold.pooled_documents``): question id -> its relevant documents under the pooled gold.
    """
    records = []
    for question in track(questions, f"retrieving {label}".strip(), "questions", enabled=progress):
        start = time.perf_counter()
        documents = retrieve(question, depth)
        latency = time.perf_counter() - start
        relevant_documents = pooled.get(question.id) if pooled is not None else None
        ranks = relevant_ranks(question, documents, relevant_documents)
        pool = {}
        if candidates is not None:
            allowed = candidates(question)
            # Chance counts every relevant passage among the candidates: any of them is a hit.
            relevant = relevant_ranks(question, allowed, relevant_documents, once_per_document=False)
            pool = {"n_candidates": len(allowed), **{f"{name}_relevant": len(found) for name, found in relevant.items()}}
        records.append(
            {
                "question_id": question.id,
                "question": question.question,
                "item_id": question.item_id,
                "split": question.split,
                "answerable": not question.no_answer,
                "chapter_unanswerable": question.chapter_no_answer,
                "subjective": question.is_subjective,
                "retrieved": len(documents),
                **{f"{name}_ranks": found for name, found in ranks.items()},
                "latency_s": latency,
                **pool,
            }
        )
    return pd.DataFrame(records)


def recall_plot(table: pd.DataFrame, ks: Sequence[int], definition: str = "strict") -> plt.Figure:
    """Recall against k, one line per retriever and candidate protocol (overall questions)."""
    figure, axes = plt.subplots(figsize=(6, 4))
    rows = table[(table["definition"] == definition) & (table["group"] == "all")]
    several = rows["candidates"].nunique() > 1 if "candidates" in rows else False
    for _, row in rows.iterrows():
        style = {"linestyle": "--", "color": "grey"} if row["retriever"] == CHANCE else {"marker": "o"}
        if several and row["candidates"] == "product":
            style["linestyle"] = ":"
        label = f"{row['retriever']} ({row['candidates']})" if several else row["retriever"]
        axes.plot(list(ks), [row[f"recall@{k}"] for k in ks], label=label, **style)
    axes.set_xlabel("k (retrieved reviews)")
    axes.set_ylabel(f"recall@k ({definition})")
    axes.set_xticks(list(ks))
    axes.set_ylim(0, 1.02)
    axes.grid(alpha=0.3)
    axes.legend()
    axes.set_title(f"Retriever recall@k, {definition} definition")
    return figure


def variant_settings(settings, variant: Variant, tuned_model: str | Path):
    """The settings a variant runs with: the fine-tuned encoders in place of the configured ones for ``-ft``."""
    from qa_system.retrieval.encoders import tuned_encoders

    if not variant.tuned:
        return settings
    passage, query = tuned_encoders(tuned_model)
    return settings.model_copy(update={"embedding_model": passage, "query_embedding_model": query})


def side_by_side(metrics: pd.DataFrame, ks: Sequence[int]) -> pd.DataFrame:
    """Strict figures over all questions, one row per retriever, one column per metric and candidate protocol."""
    rows = metrics[(metrics["definition"] == "strict") & (metrics["group"] == "all")]
    wide = rows.pivot(index="retriever", columns="candidates", values=[*(f"recall@{k}" for k in ks), "mrr"])
    wide.columns = [f"{metric} ({candidates})" for metric, candidates in wide.columns]
    order = [c for c in CANDIDATES if c in set(rows["candidates"])]
    columns = [f"{metric} ({c})" for metric in (*(f"recall@{k}" for k in ks), "mrr") for c in order]
    return wide[columns].reindex(list(dict.fromkeys(rows["retriever"]))).reset_index()


def evaluate_retrievers(
    settings,
    domain: str = "electronics",
    split: str = "test",
    retrievers: Sequence[str] = ("bm25", "dense", "hybrid"),
    ks: Sequence[int] = DEFAULT_KS,
    out_dir=None,
    limit: int | None = None,
    tuned_model: str | Path | None = None,
    labels=None,
    index=None,
    candidates: str | Sequence[str] = ("split",),
    golds: str | Sequence[str] = ("annotated",),
) -> dict:
    """Evaluate retriever variants (``VARIANTS``) on a labelled split (building the domain's index if there is none),
    or on your own ``labels`` (``ingestion.labels.Labels``) over ``index`` (their collection).

    ``candidates``: the candidate protocols (``CANDIDATES``), each variant is run under each.
    ``golds``: with "pooled" (``evaluation.gold``), a hit is also counted, as the "pooled" definition, when any review
    of the product the same question was asked of, and that answers it, is retrieved.
    ``tuned_model``: the fine-tuned encoder of the ``-ft`` variants (default models/retriever-minilm-subjqa).
    A variant whose passage encoder differs from the configured one reads its own index
    (``<index>@<encoder directory>``), so the configured index is never re-embedded by an evaluation.

    Returns {"metrics": DataFrame, "records": {variant: DataFrame, a "candidates" column naming the
    protocol}, "timings": DataFrame, "notes": [fitted parameters in force, the depth of MRR and MAP]} and writes the report to
    ``out_dir`` when given.
    """
    from qa_system.errors import QAError
    from qa_system.ingestion.labels import evaluation_index, evaluation_questions
    from qa_system.pipelines import build_retrieval_pipeline
    from qa_system.retrieval.encoders import DEFAULT_RETRIEVER_MODEL

    ks = sorted({check_count(k, "k") for k in ks})
    limit = check_count(limit, "limit", optional=True)
    protocols = check_candidates(candidates)
    pool = "pooled" in check_golds(golds)
    check_out_dir(out_dir)
    variants = [Variant.parse(name) for name in retrievers]
    if labels is not None and any(v.tuned for v in variants):
        raise QAError(
            "The -ft variants compare encoders on a SubjQA domain's index.", "evaluate a collection with bm25, dense, hybrid (+rerank)."
        )
    questions, what, source = evaluation_questions(settings, domain, split, labels, limit)
    index = index or evaluation_index(settings, domain, labels, embeddings=any(v.retriever != "bm25" for v in variants))
    find_candidates = candidate_finder(index.store)
    pooled = pooled_documents(questions) if pool else None
    tables, all_records, timings, fitted, encoders = [], {}, [], [], []
    for variant in variants:
        run_settings = variant_settings(settings, variant, tuned_model or DEFAULT_RETRIEVER_MODEL)
        run_index = _variant_index(settings, run_settings, domain, index)
        # The fusion and re-ranking that `qa-system fit-fusion` stored, else the defaults: an evaluation never writes to an index.
        fitted += _fitted_notes(run_settings, run_index, variant)
        encoders.append(
            {
                "variant": variant.name,
                "passage_encoder": run_settings.embedding_model,
                "question_encoder": run_settings.query_embedding_model or run_settings.embedding_model,
                "index": run_index.name,
            }
        )
        pipeline = build_retrieval_pipeline(variant.retriever, run_settings, index=run_index, rerank=variant.rerank)
        by_protocol = []
        for protocol in protocols:
            label = variant.name if len(protocols) == 1 else f"{variant.name}, {protocol} candidates"
            records, table = _run_protocol(variant.name, pipeline, protocol, questions, ks, label, find_candidates, pooled)
            tables.append(table)
            by_protocol.append(records)
            timings.append(_latency_row(variant.name, protocol, records["latency_s"]))
        all_records[variant.name] = pd.concat(by_protocol, ignore_index=True)
    chance_tables, pools = _chance(next(iter(all_records.values()), None), ks, own=labels is not None)
    metrics = pd.concat([*tables, *chance_tables], ignore_index=True)
    timing_table = pd.DataFrame(timings)
    depth = f"MRR and MAP are over each retriever's top {max(ks)} documents (the largest k): one ranked lower counts as not found, so they change with the k asked for."
    result = {"metrics": metrics, "records": all_records, "timings": timing_table, "notes": [*fitted, depth]}
    if out_dir is not None:
        sections = {"latency": timing_table, "encoders": pd.DataFrame(encoders)}
        if len(protocols) > 1:
            sections = {"candidates side by side": side_by_side(metrics, ks), **sections}
        summary = {
            **source,
            "questions": len(questions),
            "candidates": protocols,
            "store": settings.store,
            "embedding_model": settings.embedding_model,
            "fitted": fitted,
            "index": {
                "name": index.name,
                "documents": index.manifest.get("documents"),
                "build_timings": index.manifest.get("build_timings", {}),
            },
        }
        notes = [
            *(labels.notes if labels else []),
            *_protocol_notes(len(questions), index, settings.store, pools, own=labels is not None),
            *fitted,
            depth,
        ]
        _write_retrieval_report(out_dir, f"Retriever evaluation: {what}", metrics, ks, all_records, sections, summary, notes)
    return result


def _variant_index(settings, run_settings, domain: str, index):
    """The index a variant reads: ``index``, or the domain's index under the variant's own passage encoder."""
    from qa_system.ingestion.indexing import open_or_build_index
    from qa_system.stores import index_name

    if run_settings.embedding_model == settings.embedding_model:
        return index
    return open_or_build_index(run_settings, domain, name=f"{index_name(domain)}@{Path(run_settings.embedding_model).name}")


def _fitted_notes(run_settings, index, variant: Variant) -> list[str]:
    """The fusion and re-ranking values a variant runs with (stored by ``qa-system fit-fusion``, else the defaults), one note each."""
    from qa_system.tuning.fusion import fits_in_force

    return [f"{variant.name}: {note}" for note in fits_in_force(run_settings, index, variant.retriever, variant.rerank)]


def _run_protocol(
    variant: str,
    pipeline,
    protocol: str,
    questions: Sequence[LabelledQuestion],
    ks: Sequence[int],
    label: str,
    find_candidates: Callable[[LabelledQuestion, str], list[Document]],
    pooled: dict[str, set[str]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A variant's retrieval ``pipeline`` under one candidate protocol: its per-question records and its metrics table."""

    def retrieve(question: LabelledQuestion, depth: int) -> list[Document]:
        return pipeline.run(question.question, filters=candidate_filters(question, protocol), top_k=depth)["documents"]

    records = run_retriever(questions, retrieve, max(ks), label=label, candidates=lambda q: find_candidates(q, protocol), pooled=pooled)
    records.insert(0, "candidates", protocol)
    table = retrieval_metrics(records, ks)
    table.insert(0, "candidates", protocol)
    table.insert(0, "retriever", variant)
    return records, table


def _latency_row(retriever: str, protocol: str, latency: pd.Series) -> dict:
    """The latency table's row of one variant under one protocol: queries per second, median and 95th percentile."""
    return {
        "retriever": retriever,
        "candidates": protocol,
        "queries_per_s": len(latency) / latency.sum(),
        "p50_ms": 1000 * latency.quantile(0.5),
        "p95_ms": 1000 * latency.quantile(0.95),
    }


# What the candidate protocols mean for labels of one's own: a collection has no SubjQA splits.
OWN_CANDIDATES = "the documents of the question's item (item_id), or every document when it names none"


def _chance(reference: pd.DataFrame | None, ks: Sequence[int], own: bool = False) -> tuple[list[pd.DataFrame], list[str]]:
    """The chance rows per protocol (ranking the same candidates at random), and a note on each protocol's candidate pool
    (``own``: labels of one's own, over a collection's documents).

    Exact, since the records of any variant (``reference``) count every question's candidates.
    """
    tables, pools = [], []
    if reference is None:
        return tables, pools
    for protocol, records in reference.groupby("candidates", sort=False):
        chance = retrieval_metrics(records, ks, chance=True)
        chance.insert(0, "candidates", protocol)
        chance.insert(0, "retriever", CHANCE)
        tables.append(chance)
        counts = records["n_candidates"]
        what, noun = (OWN_CANDIDATES, "documents") if own else (CANDIDATES[protocol], "reviews")
        pools.append(
            f"{protocol}: {what}; {counts.mean():.1f} candidate {noun} per question (median {counts.median():g}, max {counts.max()})."
        )
    return tables, pools


def _protocol_notes(questions: int, index, store: str, pools: Sequence[str], own: bool = False) -> list[str]:
    """The report's notes on what was asked: the index, the candidate protocols, the two definitions of a hit, chance
    (``own``: labels of one's own, over a collection's documents)."""
    build = index.manifest.get("build_timings", {})
    if own:
        what = [
            f"{questions} questions, over the collection '{index.name}' ({index.manifest.get('source_documents')} documents in "
            f"{index.manifest.get('documents')} passages, store {store}); each asked with the filters of its candidate protocol:",
            *pools,
            "strict: the question's own document (a passage of it) is in the top k (primary metric). "
            "chapter: a retrieved passage contains a gold answer text, questions without an answer always count.",
            f"Last indexing run: {build.get('total_s', float('nan')):.1f} s (embedding {build.get('embedding_s', 0.0):.1f} s).",
        ]
        noun = "document"
    else:
        what = [
            f"{questions} questions, over the index '{index.name}' of all splits ({index.manifest.get('documents')} reviews, "
            f"one document per review, store {store}); each asked with the filters of its candidate protocol:",
            *pools,
            "strict: the question's own review (its document) is in the top k (primary metric). pooled (with --gold pooled): a review "
            "of the product that the same question was asked of and that answers it (any of them when none does) is in the top k. "
            "chapter: a retrieved review contains a gold answer text, unanswerable questions always count (the reference chapter's definition).",
            f"Index build: {build.get('total_s', float('nan')):.1f} s (embedding {build.get('embedding_s', 0.0):.1f} s).",
        ]
        noun = "review"
    return [
        *what,
        f"'{CHANCE}': the figures expected from ranking each question's candidates at random (the floor to compare with); "
        f"'2+ candidates': questions with more than one candidate {noun} (the others are a hit for any retriever).",
    ]


def _write_retrieval_report(
    out_dir,
    title: str,
    metrics: pd.DataFrame,
    ks: Sequence[int],
    all_records: dict[str, pd.DataFrame],
    sections: dict[str, pd.DataFrame],
    summary: dict,
    notes: list[str],
) -> None:
    """Write the report: the metrics, recall@k plots under both definitions, every variant's records, ``sections`` and ``notes``."""
    from qa_system.evaluation.report import write_report

    write_report(
        out_dir,
        title,
        metrics,
        summary=summary,
        figures={"recall_at_k.png": recall_plot(metrics, ks, "strict"), "recall_at_k_chapter.png": recall_plot(metrics, ks, "chapter")},
        sections=sections,
        records=pd.concat([r.assign(retriever=name) for name, r in all_records.items()], ignore_index=True),
        notes=notes,
    )
