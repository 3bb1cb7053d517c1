"""Benchmark corpora of about 1k, 10k and 100k reviews, and the questions asked of them.

SubjQA has about 5,500 reviews in its three provided domains, so the larger tiers are enlarged with
synthetic reviews: real review sentences recombined (as many sentences as a randomly drawn real
review has, so lengths follow the real distribution), under synthetic products of
``SYNTHETIC_PRODUCT_SIZE`` reviews each, so that a per-product filter still selects a few dozen
documents. Everything is seeded: the same sizes and seed give the same corpus, ids included.

Dense vectors: embedding 100k reviews takes most of an hour on 2 cores, so only a sample is
embedded for real (``embed_sample``); every other document gets the vector of a sampled review,
perturbed by seeded noise and renormalised. The report says which vectors are real.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from haystack import Document

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.sources import SPLITS, LabelledQuestion, available_domains, available_splits, in_split, load_subjqa

SYNTHETIC_PRODUCT_SIZE = 32
SYNTHETIC_DOMAIN = "synthetic"
# Standard deviation of the noise added to a borrowed unit vector (per dimension).
VECTOR_NOISE = 0.02
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def real_reviews(
    settings: Settings, questions: Sequence[LabelledQuestion], question_domain: str = "electronics"
) -> tuple[list[Document], list[str]]:
    """Every provided SubjQA review: first those of the questions' products (test split first), then
    the rest of their domain, then the other domains, so that a small corpus still holds the reviews
    the questions are about; and what was left out ("books: no train split"), to be named in the report.
    A domain's missing splits (books and movies have dev and test only) and an unreadable domain are
    left out; the questions' own domain must load."""
    ordered = [question_domain, *sorted(d for d in available_domains(settings.data_dir) if d != question_domain)]
    documents, left_out = [], []
    for domain in ordered:
        splits = available_splits(settings.data_dir, domain)
        left_out += [f"{domain}: no {split} split" for split in SPLITS if split not in splits]
        try:
            documents += load_subjqa(domain, splits, source=settings.data_dir).documents if splits else []
        except QAError as error:
            if domain == question_domain:
                raise
            left_out.append(f"{domain}: {error.problem}")
    rank = {domain: i for i, domain in enumerate(ordered)}
    products = {q.item_id for q in questions}
    return sorted(documents, key=lambda d: (rank[d.meta["domain"]], d.meta["item_id"] not in products, not in_split(d, "test"))), left_out


def bench_questions(
    settings: Settings, domain: str = "electronics", split: str = "test", limit: int | None = None
) -> list[LabelledQuestion]:
    """The first ``limit`` labelled questions of a domain's split (all with None): the questions the benchmark asks."""
    return load_subjqa(domain, split, settings.data_dir).questions[:limit]


def synthetic_reviews(sources: Sequence[Document], count: int, seed: int = 0) -> list[Document]:
    """``count`` reviews made of real sentences, deterministic for ``seed``."""
    if count <= 0:
        return []
    sentence_lists = [_SENTENCE_END.split(d.content.strip()) for d in sources if d.content]
    pool = [s for sentences in sentence_lists for s in sentences if s]
    lengths = np.array([len(s) for s in sentence_lists])
    rng = np.random.default_rng(seed)
    sizes = rng.choice(lengths, size=count)
    picks = rng.integers(0, len(pool), size=int(sizes.sum()))
    documents, cursor = [], 0
    for i, size in enumerate(sizes):
        content = " ".join(pool[j] for j in picks[cursor : cursor + size])
        cursor += size
        meta = {
            "item_id": f"SYN{i // SYNTHETIC_PRODUCT_SIZE:06d}",
            "review_id": f"syn-{seed}-{i}",
            "domain": SYNTHETIC_DOMAIN,
            "split": SYNTHETIC_DOMAIN,
        }
        documents.append(Document(content=content, meta=meta))
    return documents


def tier_corpus(real: Sequence[Document], size: int, seed: int = 0) -> list[Document]:
    """The first ``size`` real reviews, enlarged with synthetic ones when there are fewer."""
    return [*real[:size], *synthetic_reviews(real, size - len(real), seed)]


def with_vectors(documents: Sequence[Document], embedded: dict[str, list[float]], seed: int = 0) -> list[Document]:
    """Documents with their real vector when ``embedded`` has one, else a perturbed copy of a real one."""
    keys = sorted(embedded)
    real = np.asarray([embedded[k] for k in keys], dtype=np.float32)
    missing = [i for i, d in enumerate(documents) if d.id not in embedded]
    rng = np.random.default_rng(seed)
    borrowed = real[rng.integers(0, len(real), size=len(missing))]
    borrowed += rng.normal(0.0, VECTOR_NOISE, size=borrowed.shape).astype(np.float32)
    borrowed /= np.linalg.norm(borrowed, axis=1, keepdims=True)
    vectors: list[list[float] | None] = [embedded.get(d.id) for d in documents]
    for i, vector in zip(missing, borrowed):
        vectors[i] = vector.tolist()
    return [replace(d, embedding=v) for d, v in zip(documents, vectors)]
