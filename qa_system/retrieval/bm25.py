"""Sparse-matrix BM25 (bm25s) behind a Haystack component.

Haystack's InMemoryBM25Retriever re-tokenises and scores every candidate document in Python at
each query; bm25s precomputes the BM25 weight of every (term, document) pair into a sparse
matrix, so a query costs a few sparse-row sums. Statistics (IDF, average length) are corpus-wide,
as in Elasticsearch; metadata filters restrict which documents may be returned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import unicodedata
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import import_class_by_name

from qa_system.devices import import_with_jax_on_cpu
from qa_system.disk_cache import built_folder, dead_leftovers, keep_most_recent, mark_used, temporary_owner, unused_for
from qa_system.errors import QAError, check_count
from qa_system.retrieval.filters import MetaPostings

logger = logging.getLogger(__name__)

WORD_PATTERN = r"\w+"
# Built indexes kept in a cache directory (the pipelines give each collection its own): the newest and
# the one before it, which another process may still serve while this one has the new version.
CACHED_INDEXES = 2
# ``cache_dir`` may be any folder (a pipeline YAML names it), so the retriever removes only what it can
# tell it saved there: a folder named by a digest and holding this marker, written with the index.
CACHE_MARKER = ".qa_system-bm25-index"
_ENTRY_NAME = re.compile(r"[0-9a-f]{32}")
# What bm25s saves: an entry saved before the marker holds all of these, and at most the optional one besides.
BM25S_FILES = frozenset({"data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy", "vocab.index.json", "params.index.json"})
BM25S_OPTIONAL_FILES = frozenset({"nonoccurrence_array.index.npy"})
# The temporary folders of releases before built_folder: ".partial-" and mkdtemp's 8 characters.
_OLDER_PARTIAL = re.compile(r"\.partial-[a-z0-9_]{8}")


def _bm25s():
    """The bm25s module: it runs a JAX top-k as it is imported, which would put JAX (when installed) on a GPU."""
    return import_with_jax_on_cpu("bm25s")


@lru_cache(maxsize=4)
def _stemmer(language: str | None):
    if not language:
        return None
    import Stemmer

    return Stemmer.Stemmer(language)


@lru_cache(maxsize=2)
def _stopwords(name: str | None) -> frozenset[str]:
    if not name:
        return frozenset()
    if name != "en":
        raise QAError(f"Unknown stopword list '{name}'.", "use 'en', or none (None).")
    return frozenset(_bm25s().stopwords.STOPWORDS_EN)


# A word written with a hyphen is a word written without one too ("wi-fi" finds "wifi", "backlit" finds "back-lit"):
# the joined form is added beside the text's own, as the OpenSearch analyzer's char filter does (stores/opensearch.py).
# Only words: each part starts with a letter, so that "2-3 minutes" is no "23" and "2024-01-31" no "202401".
HYPHENATED = re.compile(r"(?<![a-z0-9])([a-z][a-z0-9]*)-([a-z][a-z0-9]*)(?![a-z0-9])")
HYPHENATED_JOINED = r"\1-\2 \1\2"


class Analyzer:
    """Lower-case word tokens, English stopwords removed, Snowball-stemmed (like Elasticsearch's `english`), a hyphenated
    word's joined form added (``join_hyphenated``).

    ``token_pattern`` is the regular expression of a token; with Haystack's
    ``bm25_tokenization_regex``, no stemmer, no stopwords and no joined words, the tokens are those of Haystack's
    InMemoryDocumentStore (text lower-cased and NFC-normalised first, as there).
    """

    def __init__(
        self,
        stemmer_language: str | None = "english",
        stopwords: str | None = "en",
        token_pattern: str = WORD_PATTERN,
        join_hyphenated: bool = True,
    ):
        self.stemmer = _stemmer(stemmer_language)
        self.stopwords = _stopwords(stopwords)
        self.token = re.compile(token_pattern)
        self.join_hyphenated = join_hyphenated

    def __call__(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFC", text.lower())
        if self.join_hyphenated:
            text = HYPHENATED.sub(HYPHENATED_JOINED, text)
        tokens = [t for t in self.token.findall(text) if t not in self.stopwords]
        return self.stemmer.stemWords(tokens) if self.stemmer else tokens


@component
class BM25sRetriever:
    """BM25 over any Haystack document store's documents, with fast per-product filters.

    The index is built at ``warm_up`` (or first use) from ``document_store.filter_documents()`` and
    rebuilt when the store's document count changes. With ``cache_dir`` a built index is saved there
    under a digest of the settings and of every document's id and text, and loaded instead of built
    the next time the same documents are opened (a new process, a restarted page): tokenising and
    indexing a large collection takes most of the time to its first answer.

    With filters, ``return_unmatched`` also returns the filtered documents that share no term with
    the query, ranked after the matching ones (score 0). A product has a handful of reviews and
    SubjQA questions often use other words than the review ("contrast" for "brightness"); this is
    also what Haystack 1.x's Elasticsearch query did (a filter makes its `should` clause optional).

    A query term counts once, however often it occurs in the query (as in Haystack's in-memory
    BM25). With ``method="lucene"`` the scores are Lucene's BM25; Haystack's InMemoryDocumentStore
    with ``bm25_algorithm="BM25Plus"`` and ``delta=0`` computes the same function times ``k1 + 1``,
    so, with the same tokens, both rank the documents identically.

    The defaults (English stemming, stopwords kept, k1 1.2, b 1.0) are what ``qa-system tune-bm25``
    recommended on SubjQA electronics dev: per-product ranking of a few reviews gains from full
    length normalisation and from the words a stopword list would drop ("it", "not", "no").

    :param document_store: the store whose documents are searched (any Haystack document store).
    :param top_k: documents returned by default (0: none).
    :param k1: BM25's term saturation.
    :param b: BM25's length normalisation.
    :param method: the BM25 variant (``bm25s``' names; "lucene" scores as Elasticsearch does).
    :param stemmer_language: the Snowball stemmer's language; None: no stemming.
    :param stopwords: "en" drops English stopwords; None keeps every word.
    :param return_unmatched: with filters, also return the allowed documents sharing no term with the query.
    :param token_pattern: the regular expression of a token.
    :param cache_dir: where built indexes are saved and loaded again (None: built in every process).
    :param join_hyphenated: add a hyphenated word's joined form ("wi-fi" is also "wifi"), to the documents and the query.

    Usage::

        retriever = BM25sRetriever(store, top_k=3)
        retriever.run("Is the battery good?", filters={"field": "meta.item_id", "operator": "==", "value": "B1"})["documents"]
    """

    def __init__(
        self,
        document_store: Any,
        top_k: int = 10,
        k1: float = 1.2,
        b: float = 1.0,
        method: str = "lucene",
        stemmer_language: str | None = "english",
        stopwords: str | None = None,
        return_unmatched: bool = True,
        token_pattern: str = WORD_PATTERN,
        cache_dir: str | None = None,
        join_hyphenated: bool = True,
    ):
        self.document_store = document_store
        self.return_unmatched = return_unmatched
        self.top_k = check_count(top_k, "top_k", 0)
        self.k1, self.b, self.method = k1, b, method
        self.stemmer_language, self.stopwords, self.token_pattern = stemmer_language, stopwords, token_pattern
        self.join_hyphenated = join_hyphenated
        self.analyzer = Analyzer(stemmer_language, stopwords, token_pattern, join_hyphenated)
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self._machine_cache_dir: str | None = None  # the collection's own folder, given at load time (use_cache_dir)
        self._bm25 = None
        self._documents: list[Document] = []
        self._postings = MetaPostings([])

    def warm_up(self) -> None:
        """Build the index (or load it from ``cache_dir``), unless the one built already covers the store's documents."""
        if self._bm25 is None or len(self._documents) != self.document_store.count_documents():
            self._build()

    def _build(self) -> None:
        bm25s = _bm25s()
        documents = [d for d in self.document_store.filter_documents() if d.content]
        cache_dir = self.cache_dir or self._machine_cache_dir
        cached = Path(cache_dir) / self._digest(documents) if cache_dir and documents else None
        bm25 = _load_index(cached, len(documents)) if cached else None
        if bm25 is None:
            bm25 = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            if documents:
                # An empty token list would make bm25s drop the document; "" keeps rows aligned.
                bm25.index([self.analyzer(d.content) or [""] for d in documents], show_progress=False)
                if cached:
                    _save_index(bm25, cached)
        self._bm25, self._documents = bm25, documents
        self._postings = MetaPostings(enumerate(documents))

    def _digest(self, documents: list[Document]) -> str:
        """Names the index of these documents (their order is the index's row order) under these settings."""
        settings = [self.k1, self.b, self.method, self.stemmer_language, self.stopwords, self.token_pattern, _bm25s().__version__]
        settings += (
            ["hyphenated words joined"] if self.join_hyphenated else []
        )  # digests of indexes built without joined words stay as they were
        digest = hashlib.sha256(json.dumps(settings).encode())
        for document in documents:
            for text in (document.id, document.content):
                data = text.encode("utf-8", "surrogatepass")
                digest.update(len(data).to_bytes(8, "little") + data)  # length-prefixed: no two lists hash alike
        return digest.hexdigest()[:32]

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict | None = None, top_k: int | None = None) -> dict[str, list[Document]]:
        """The ``top_k`` documents that best match ``query`` by BM25, best first; ties in corpus order.

        :param query: the question.
        :param filters: Haystack metadata filters; the documents they allow are the only candidates.
        :param top_k: documents returned (default: the component's ``top_k``); 0 returns none.
        :returns: ``{"documents": [...]}``, each with its BM25 score (and without its vector).
        """
        self.warm_up()
        top_k = self.top_k if top_k is None else check_count(top_k, "top_k", 0)
        if not self._documents or top_k <= 0:
            return {"documents": []}
        rows = self._postings.allowed(filters)  # None = all rows
        if rows is not None and rows.size == 0:
            return {"documents": []}
        token_ids = self._bm25.get_tokens_ids(list(dict.fromkeys(self.analyzer(query))))
        scores = self._bm25.get_scores_from_ids(token_ids) if token_ids else np.zeros(len(self._documents), dtype=np.float32)
        if rows is None or not self.return_unmatched:
            # Unfiltered, a document sharing no term with the query is no match (as in Elasticsearch).
            rows = np.flatnonzero(scores > 0) if rows is None else rows[scores[rows] > 0]
        candidate_scores = scores[rows]
        if rows.size > top_k:
            # Everything tied with the k-th best stays a candidate, so that ties go to corpus order.
            kth_best = -np.partition(-candidate_scores, top_k - 1)[top_k - 1]
            best = candidate_scores >= kth_best
            rows, candidate_scores = rows[best], candidate_scores[best]
        order = np.lexsort((rows, -candidate_scores))[:top_k]  # score desc, then corpus order: deterministic
        # Without their vectors, as the embedding retrievers return them: no later stage reads one, and the pipeline
        # deep-copies every component's inputs (8 reviews' vectors were most of a question's copying).
        return {"documents": [replace(self._documents[rows[i]], score=float(candidate_scores[i]), embedding=None) for i in order]}

    def use_cache_dir(self, folder: str | Path) -> None:
        """Save and load built indexes in ``folder`` (the machine's, e.g. the collection's own) unless the pipeline
        names a ``cache_dir``; not serialised."""
        self._machine_cache_dir = str(folder)

    def to_dict(self) -> dict[str, Any]:
        """The component's settings and its document store, serialised for a pipeline YAML."""
        return default_to_dict(
            self,
            document_store=self.document_store.to_dict(),
            top_k=self.top_k,
            k1=self.k1,
            b=self.b,
            method=self.method,
            stemmer_language=self.stemmer_language,
            stopwords=self.stopwords,
            return_unmatched=self.return_unmatched,
            token_pattern=self.token_pattern,
            cache_dir=self.cache_dir,
            join_hyphenated=self.join_hyphenated,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BM25sRetriever:
        """The component from ``to_dict``'s data (left as it is), its document store rebuilt from its own serialisation."""
        store = data["init_parameters"]["document_store"]
        parameters = {**data["init_parameters"], "document_store": import_class_by_name(store["type"]).from_dict(store)}
        return default_from_dict(cls, {**data, "init_parameters": parameters})


def _load_index(path: Path, documents: int):
    """The index saved at ``path``, or None when there is none or it is unreadable (then it is rebuilt)."""
    if not path.is_dir():
        return None
    try:
        bm25 = _bm25s().BM25.load(str(path), show_progress=False)
        if bm25.scores["num_docs"] != documents:
            raise ValueError(f"{bm25.scores['num_docs']} documents where {documents} were expected")
    except Exception as error:  # a damaged cache entry costs a rebuild, never a failed query
        logger.warning("Ignoring the cached BM25 index %s (%s); it is rebuilt.", path, error)
        if is_cache_entry(path):
            shutil.rmtree(path, ignore_errors=True)
        return None
    mark_used(path)  # kept by _prune
    return bm25


def _save_index(bm25, path: Path) -> None:
    """Save atomically (written aside, then renamed: a reader never sees half an index), then keep the newest few."""
    try:
        # The path names its content (a digest): one that another process saved first is the same index.
        with built_folder(path, existing="keep") as partial:
            bm25.save(str(partial), show_progress=False)
            (partial / CACHE_MARKER).write_text(
                "A BM25 index that qa_system's BM25sRetriever saved; it removes it when it is no longer used.\n", encoding="utf-8"
            )
    except OSError as error:  # a read-only or full disk: the index in memory serves
        logger.info("BM25 index not cached at %s (%s).", path, error)
        return
    _prune(path.parent)


def is_cache_entry(path: Path) -> bool:
    """Whether ``path`` is an index that a BM25sRetriever saved: a folder named by its digest that holds the
    marker (or, saved before the marker, bm25s's files and nothing else)."""
    if path.is_symlink() or not path.is_dir() or not _ENTRY_NAME.fullmatch(path.name):
        return False
    if (path / CACHE_MARKER).is_file():
        return True
    names = {entry.name for entry in path.iterdir()}
    return BM25S_FILES <= names <= BM25S_FILES | BM25S_OPTIONAL_FILES


def _prune(directory: Path) -> None:
    """Keep the CACHED_INDEXES most recently used indexes; drop what a killed process left half-written.
    Nothing else of ``directory`` is touched, whatever it holds."""
    keep_most_recent((p for p in directory.iterdir() if is_cache_entry(p)), CACHED_INDEXES)
    for leftover in dead_leftovers(directory):  # written aside under an entry's name (built_folder): a digest
        if not _ENTRY_NAME.fullmatch(temporary_owner(leftover.name).name) or leftover.is_symlink():
            continue
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    older = (p for p in directory.glob(".partial-*") if _OLDER_PARTIAL.fullmatch(p.name) and not p.is_symlink() and p.is_dir())
    keep_most_recent((p for p in older if {e.name for e in p.iterdir()} <= BM25S_FILES | BM25S_OPTIONAL_FILES and unused_for(p) > 3600), 0)
