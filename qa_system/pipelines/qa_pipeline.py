"""``QAPipeline``: a Haystack pipeline, the index it reads and the one calling convention (``run(query, item_id=..., top_k=...)``).

``build_retrieval_pipeline`` and ``build_qa_pipeline`` open the index and build the pipeline over it;
``validate_question`` holds the checks every door makes before answering.
"""

from __future__ import annotations

import threading
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from haystack import Pipeline
from haystack.core.errors import PipelineRuntimeError
from haystack.dataclasses import StreamingCallbackT
from haystack.errors import FilterError

from qa_system.config import RETRIEVERS, TOP_K_RETRIEVER, Settings
from qa_system.errors import NotFound, QAError, check_count, check_number, check_question_text, check_text, shown
from qa_system.ingestion.indexing import embeddings_match
from qa_system.pipelines.loading import ANSWER_STAGES, FUSION_CANDIDATES, RERANK_CANDIDATES, RETRIEVAL_OUTPUT, load_pipeline
from qa_system.retrieval.filters import FILTER_FIX, check_collection_filters, combine_filters, make_filters
from qa_system.stores import Index, IndexGone, open_index, saved_manifest, saved_signature, saved_version
from qa_system.stores.filter_checks import filter_fields
from qa_system.timing import component_timings


def validate_question(index: Index, query: object, item_id: str | None) -> None:
    """The checks every door makes before answering: a question with words in it, about a product the index holds."""
    if query is not None and not isinstance(query, str):
        raise QAError(
            f"The question must be text (a str), not {type(query).__name__}.", 'pass it as a str, e.g. "Is it good for reading?".'
        )
    check_question_text(query)
    if index.manifest.get("documents") == 0:  # made empty (POST /collections), or emptied: nothing to answer from
        raise NotFound(
            f"Collection '{index.name}' holds no documents.",
            "add documents to it first (`qa-system index --input FILE --collection NAME`, or POST /collections/NAME/documents).",
        )
    check_item(index, item_id)


def check_item(index: Index, item_id: str | None) -> None:
    """NotFound when ``item_id`` is none of the index's products, or the index has none (None: every document)."""
    if item_id is not None and not isinstance(item_id, str):
        raise QAError(
            f"item_id must be one product's id (a str), not {type(item_id).__name__}.",
            'pass item_id="ID" of one product (`qa-system products` lists them), or item_id=None to ask every document.',
        )
    check_text(item_id, "the item id")
    if item_id is not None and not index.item_counts() and not index.manifest.get("domains"):
        raise NotFound(
            f"Collection '{index.name}' has no items: none of its documents names one, so item '{shown(item_id)}' has none.",
            "ask without an item (every document is asked), or give the documents one (`--item-column` when indexing, `item_id` when uploading).",
        )
    if item_id is not None and stored_item(index, item_id) is None:
        wanted = unicodedata.normalize("NFC", item_id.strip()).casefold()
        alike = sorted(stored for stored in index.item_counts() if unicodedata.normalize("NFC", stored.strip()).casefold() == wanted)
        meant = f"'{shown(alike[0])}' (ids are matched as written), or another " if alike else ""  # typed in another case
        if index.manifest.get("domains"):
            raise NotFound(
                f"Product '{shown(item_id)}' has no reviews in index '{index.name}'.",
                f"pick {meant or 'an '}item id that `qa-system products` lists.",
            )
        raise NotFound(
            f"Item '{shown(item_id)}' has no documents in collection '{index.name}'.",
            f"pick {meant or 'an '}item id that `qa-system products --collection {index.name}` lists.",
        )


def stored_item(index: Index, item_id: str | None) -> str | None:
    """``item_id`` as the index spells it: itself, else the one product whose id it is once both are trimmed and in
    Unicode NFC ("Café" typed with one code point for "é", stored with two, or with spaces around it); None when
    none is, or when several are. An index that lists no products takes any id as it is."""
    counts = index.item_counts()
    if item_id is None or not counts or item_id in counts:
        return item_id
    wanted = unicodedata.normalize("NFC", item_id.strip())
    matches = [stored for stored in counts if unicodedata.normalize("NFC", stored.strip()) == wanted]
    return matches[0] if len(matches) == 1 else None


class RecordableCallback:
    """A streaming callback that Haystack can record: a failed run's snapshot serialises every input, and a lambda or a
    nested function (the CLI's, the REST API's) gave two long warnings before the run's one-line error."""

    def __init__(self, callback: StreamingCallbackT):
        self.callback = callback

    def __call__(self, chunk: Any) -> Any:
        return self.callback(chunk)

    def to_dict(self) -> dict[str, str]:
        """The callback by its name: what a snapshot can keep of it."""
        return {"callback": getattr(self.callback, "__qualname__", type(self.callback).__name__)}


@dataclass
class QAPipeline:
    """A Haystack pipeline plus the index it reads and the project's calling convention.

    ``top_k`` and ``top_k_reader``: what ``run`` reads and answers when not told (the settings' ``top_k_retriever``
    and ``top_k_reader``, ``QA_TOP_K_RETRIEVER`` / ``QA_TOP_K_READER``, in ``build_qa_pipeline``).
    With ``settings``, a collection saved in files (memory, FAISS) that was saved again since it was opened (by ``ingest``
    in this process or another, a deletion, an upload) is opened again before the next question, so that it is
    answered from the documents as they are now (a search server's store is read live anyway)."""

    pipeline: Pipeline
    index: Index
    retriever: str
    answer_stage: str | None = None
    rerank: bool = False
    top_k: int = TOP_K_RETRIEVER
    top_k_reader: int | None = None
    settings: Settings | None = None
    _compared: tuple | None = field(default=None, repr=False)  # the saved files' signature last compared with the index
    _reopening: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __repr__(self) -> str:  # not the whole manifest and Haystack graph a notebook would print
        stage = self.answer_stage or "retrieval"
        return (
            f"QAPipeline(retriever={self.retriever!r}, answer_stage={stage!r}, rerank={self.rerank}, "
            f"collection={self.index.name!r} ({self.index.backend}), top_k={self.top_k}, top_k_reader={self.top_k_reader})"
        )

    def follow_saved_changes(self) -> None:
        """Open the collection again, and build the pipeline over it, when it was saved again since (see the class)."""
        if self.settings is None:
            return
        signature = saved_signature(self.settings, self.index.name)
        if signature is None and self._deleted():
            raise IndexGone(
                f"The collection '{self.index.name}' was deleted since this pipeline opened it.",
                "ask a collection that exists (list_collections, `qa-system collections`), or index this one again.",
            )
        if signature is None or signature == self._compared:
            return
        with self._reopening:
            if signature == self._compared:
                return
            try:
                saved = saved_manifest(self.settings, self.index.name)
            except QAError:  # unreadable now: the question reads what this pipeline holds, as before
                return
            if saved is not None and saved_version(saved) != saved_version(self.index.manifest):
                index = _reopened(self.settings, self.index, embeddings=self.retriever != "bm25")
                fresh = build_qa_pipeline(self.retriever, self.settings, index=index, answer_stage=self.answer_stage, rerank=self.rerank)
                self.pipeline, self.index = fresh.pipeline, fresh.index
            self._compared = signature

    def _deleted(self) -> bool:
        """Whether the collection, saved in files (memory, FAISS) when it was opened, has none now. A SubjQA domain's
        index is built again when asked for; a search server's store says itself when its index is gone."""
        return (
            self.index.backend in ("memory", "faiss")
            and not self.index.manifest.get("domains")
            and saved_version(self.index.manifest) is not None
        )

    @property
    def reader_backend(self) -> str | None:
        """What the extractive reader reads with ("onnx int8", or "torch" when asked for or fallen back to); None without one."""
        if "reader" not in self.pipeline.graph.nodes:
            return None
        return getattr(self.pipeline.get_component("reader"), "active_backend", None)

    @property
    def device(self) -> str:
        """Where the models ran: "cpu", "cuda:0", or each model's device when they differ
        ("reader cuda:0, query_embedder cpu": int8 embeddings run on the CPU). BM25 alone runs on the CPU."""
        devices = {}
        for name in self.pipeline.graph.nodes:
            runs_on = getattr(self.pipeline.get_component(name), "runs_on", None)
            if isinstance(runs_on, str):
                devices[name] = runs_on
        if len(set(devices.values())) <= 1:
            return next(iter(devices.values()), "cpu")
        return ", ".join(f"{name} {device}" for name, device in sorted(devices.items()))

    @property
    def retrieval_output(self) -> str:
        """The component whose documents are the retrieved ones (the re-ranker's when there is one)."""
        return "ranker" if self.rerank else RETRIEVAL_OUTPUT[self.retriever]

    def _top_k(self, component_name: str, top_k: int, has_fusion: bool) -> int:
        """Stages before fusion or re-ranking hand over more candidates than the final top_k."""
        if has_fusion and component_name.endswith("_retriever"):
            return max(top_k, FUSION_CANDIDATES)
        if self.rerank and component_name == RETRIEVAL_OUTPUT[self.retriever]:
            return max(top_k, RERANK_CANDIDATES)
        return top_k

    def _inputs(
        self, query: str, filters: dict | None, top_k: int, reader: dict[str, Any], streaming_callback: StreamingCallbackT | None = None
    ) -> dict[str, dict[str, Any]]:
        has_fusion = "fusion" in self.pipeline.graph.nodes
        inputs: dict[str, dict[str, Any]] = {}
        for component_name, sockets in self.pipeline.inputs().items():
            if component_name in ("reader", "selector"):
                inputs[component_name] = {"query": query, **{k: v for k, v in reader.items() if k in sockets}}
                continue
            values = {}
            for socket in sockets:
                if socket in ("query", "text"):
                    values[socket] = query
                elif socket == "filters":
                    values[socket] = filters
                elif socket == "streaming_callback":
                    values[socket] = None if streaming_callback is None else RecordableCallback(streaming_callback)
                elif socket == "top_k":
                    values[socket] = self._top_k(component_name, top_k, has_fusion)
            inputs[component_name] = values
        return inputs

    def validate(self, query: str, item_id: str | None) -> None:
        """The checks every door makes before answering (``validate_question``)."""
        validate_question(self.index, query, item_id)

    def run(
        self,
        query: str,
        *,
        item_id: str | None = None,
        split: str | None = None,
        filters: dict | None = None,
        top_k: int | None = None,
        top_k_reader: int | None = None,
        no_answer_threshold: float | None = None,
        streaming_callback: StreamingCallbackT | None = None,
    ) -> dict[str, Any]:
        """Retrieve the ``top_k`` reviews for ``query`` (optionally of one product and split), then answer with at most
        ``top_k_reader`` answers (both default to the pipeline's: the settings').

        Returns ``documents`` (retrieved, best first), ``answers`` (when the pipeline has an answer
        stage: ``ExtractedAnswer``s, the answer selector's when it has one, each scored by its calibrated
        probability of being right, unless ``no_answer_threshold`` asks for the reader's own decision;
        or for RAG one ``GeneratedAnswer``), ``timings``: seconds per
        component, plus ``retrieval_s``, ``answer_s`` (the answer stage's components), ``total_s``,
        ``reader_queue_s`` with a reader (the part of ``answer_s`` spent waiting for the shared inference lane),
        ``device``: where the models ran (see the property), and with an extractive reader ``reader_backend`` (see the property);
        when nothing was retrieved, ``nothing_read``: ``no_word_matched`` (some document passes the product and filters,
        none holds a word of the question; else none passes) and ``by_meaning`` (dense retrieval can run on the index).
        ``streaming_callback`` receives the generated text piece by piece (RAG). ``filters``: more
        conditions in Haystack's syntax (``{"field": "meta.rating", "operator": ">=", "value": 4}``, AND / OR / NOT),
        checked by ``check_collection_filters`` against the index's metadata types and fields and ANDed with ``item_id`` and ``split``.
        """
        self.follow_saved_changes()
        # Checked here so every door (CLI, page, Python) gets the same message: top_k=0 read nothing and
        # answered "no answer, score 1.00"; negative values sliced the candidate lists from the end.
        top_k = check_count(self.top_k if top_k is None else top_k, "top_k")
        top_k_reader = check_count(self.top_k_reader if top_k_reader is None else top_k_reader, "top_k_reader", optional=True)
        no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
        self.validate(query, item_id)
        item_id = stored_item(self.index, item_id)
        if split is not None and (fields := filter_fields(self.index.manifest)) is not None and "split" not in fields:
            raise QAError(
                f"Collection '{self.index.name}' has no labelled splits: its documents have no 'split' field.",
                "leave out the split (--split).",
            )
        filters = combine_filters(make_filters(item_id=item_id, split=split), check_collection_filters(filters, self.index.manifest))
        # Across every document (no product asked), which document answers is a retrieval question too (the selector's).
        reader = {"top_k": top_k_reader, "no_answer_threshold": no_answer_threshold, "all_documents": item_id is None}
        inputs = self._inputs(query.strip(), filters, top_k, {k: v for k, v in reader.items() if v is not None}, streaming_callback)
        retrieval_output = self.retrieval_output
        start = time.perf_counter()
        try:
            with component_timings() as timings:
                outputs = self.pipeline.run(inputs, include_outputs_from={retrieval_output})
        except PipelineRuntimeError as error:
            if isinstance(error.__cause__, QAError):  # bad input found by a component: the user's one-line message
                raise error.__cause__ from None
            if isinstance(error.__cause__, FilterError):  # a filter the store cannot apply to these documents
                raise QAError(f"The store cannot apply the filter: {error.__cause__}", FILTER_FIX) from None
            raise
        total = time.perf_counter() - start
        answer_components = self.pipeline.metadata.get("answer_components", [])
        answer_s = sum(t for name, t in timings.items() if name in answer_components)
        # This run's own: one pipeline serves many threads at once, so nothing of a run is kept on it.
        timings = {**timings, "retrieval_s": total - answer_s, "answer_s": answer_s, "total_s": total}
        if "reader" in self.pipeline.graph.nodes:  # part of answer_s: waiting for other questions' inference
            timings["reader_queue_s"] = getattr(self.pipeline.get_component("reader"), "queue_s", 0.0)
        result = {"documents": outputs[retrieval_output]["documents"], "timings": timings, "device": self.device}
        if self.reader_backend is not None:
            result["reader_backend"] = self.reader_backend
        # An explicit no-answer threshold is the reader's own decision: the selector's answers give way to it.
        deciding = [name for name in answer_components if not (name == "selector" and no_answer_threshold is not None)]
        for name in deciding:
            if "answers" in outputs.get(name, {}):
                result["answers"] = outputs[name]["answers"]
        if not result["documents"]:
            # Some document passes what the question was limited to, and none holds a word of it; or none passes.
            unmatched = {"no_word_matched": filters is None or self._some_pass(filters), "by_meaning": self._searchable_by_meaning()}
            result["nothing_read"] = unmatched
            for answer in result.get("answers", []):
                if answer.meta.get("no_documents"):
                    answer.meta.update(unmatched)
        return result

    def _searchable_by_meaning(self) -> bool:
        """Whether a dense or hybrid question can run on this index: it has vectors (a SubjQA domain's are made when such
        a question first needs them) on a store that searches them."""
        manifest = self.index.manifest
        return manifest.get("vector_search") is not False and bool(manifest.get("domains") or self.index.embedding_model)

    def _some_pass(self, filters: dict) -> bool:
        """Whether a document passes ``filters``, where the store counts them (a search server's BM25 returns only
        documents that hold a word of the question; the memory store's, every one that passes)."""
        count = getattr(self.index.store, "count_documents_by_filter", None)
        return count is not None and count(filters) > 0


def build_retrieval_pipeline(
    retriever: str = "bm25",
    settings: Settings | None = None,
    domains: str | Sequence[str] = "electronics",
    index: Index | None = None,
    rerank: bool = False,
    follow_saved_changes: bool = True,
) -> QAPipeline:
    """Open the domain's index and build the named retrieval pipeline over it (``rerank``: answerability re-ranking appended;
    ``follow_saved_changes``: as ``build_qa_pipeline``'s).

    >>> pipeline = build_retrieval_pipeline("hybrid")
    >>> pipeline.run("Is it good for reading?", item_id="B0074BW614", top_k=3)["documents"]
    """
    return build_qa_pipeline(retriever, settings, domains, index, None, rerank, follow_saved_changes)


def build_qa_pipeline(
    retriever: str = "bm25",
    settings: Settings | None = None,
    domains: str | Sequence[str] = "electronics",
    index: Index | None = None,
    answer_stage: str | None = "extractive",
    rerank: bool = False,
    follow_saved_changes: bool = True,
) -> QAPipeline:
    """Retrieval followed by an answer stage (``extractive``: the span reader of ``settings.reader_model``,
    int8 ONNX unless ``settings.reader_backend`` is torch, exported into the cache on first use;
    ``rag``: a prompt of the retrieved reviews for ``settings.generator``, answers citing them).
    ``follow_saved_changes``: answer from the collection as saved now when it changes (see ``QAPipeline``).

    >>> pipeline = build_qa_pipeline("bm25")
    >>> pipeline.run("Is it good for reading?", item_id="B0074BW614", top_k=3)["answers"]
    """
    _check_arguments(retriever, settings, index)
    settings = settings or Settings.from_env()
    if retriever not in RETRIEVERS:
        raise QAError(f"Unknown retriever '{shown(retriever)}'.", f"use one of: {', '.join(RETRIEVERS)}.")
    if answer_stage is not None and answer_stage not in ANSWER_STAGES:
        raise QAError(f"Unknown answer stage '{answer_stage}'.", f"use one of: {', '.join(ANSWER_STAGES)}.")
    index = index or open_index(settings, domains)
    if retriever != "bm25":
        check_embeddings(index, settings, retriever)
    pipeline = load_pipeline(retriever, index, settings, answer_stage, rerank)
    pipeline.warm_up()
    followed = settings if follow_saved_changes else None  # a service reopens its collections itself
    return QAPipeline(pipeline, index, retriever, answer_stage, rerank, settings.top_k_retriever, settings.top_k_reader, followed)


def _reopened(settings: Settings, index: Index, embeddings: bool) -> Index:
    """``index`` opened again as saved now: a SubjQA domain's (re-indexed when its files changed), else a collection's."""
    from qa_system.ingestion.collections import open_collection
    from qa_system.ingestion.indexing import open_or_build_index

    domains = index.manifest.get("domains")
    if domains:
        return open_or_build_index(settings, domains, embeddings=embeddings, progress=False)
    return open_collection(settings, index.name, embeddings=embeddings, progress=False)


def _check_arguments(retriever: object, settings: object, index: object) -> None:
    """The arguments of the pipeline builders by type: a retriever's name, Settings (or None), an opened Index (or None);
    a misplaced one is a QAError naming it, not an AttributeError deep inside."""
    if not isinstance(retriever, str):
        swapped = isinstance(retriever, Settings) and isinstance(settings, str)
        raise QAError(
            f"retriever must be a retriever's name ({', '.join(RETRIEVERS)}), not {type(retriever).__name__}.",
            f'pass the name first, then the settings: ("{settings if swapped else "bm25"}", settings).',
        )
    if settings is not None and not isinstance(settings, Settings):
        raise QAError(f"settings must be a qa_system.Settings, not {type(settings).__name__}.", "pass Settings.from_env(), or None for it.")
    if index is not None and not isinstance(index, Index):
        opened = (
            f'qa_system.open_collection(settings, "{shown(index)}")'
            if isinstance(index, str)
            else "qa_system.open_collection(settings, NAME)"
        )
        raise QAError(f"index must be an opened index, not {type(index).__name__}.", f"pass index={opened}.")


def check_embeddings(index: Index, settings: Settings, retriever: str = "dense") -> None:
    """Dense retrieval needs review vectors from the same encoder that will embed the questions."""
    if index.manifest.get("vector_search") is False:
        raise QAError(
            f"The {index.backend} server of index '{index.name}' has no vector search (k-NN plugin), so {retriever} retrieval cannot run on it.",
            f"use --retriever bm25, or a server with the k-NN plugin (OpenSearch's default distribution) and re-run `qa-system index --store {index.backend}`.",
        )
    stored = index.embedding_model
    if stored is None:
        domains = index.manifest.get("domains")
        source = index.manifest.get("input", {}).get("source") or "FILE"
        again = (
            f"`qa-system index --domain {domains[0]}`"
            if domains
            else f"the command that indexed it without --no-embed (`qa-system index --input {source} --collection {index.name} ...`): "
            "its vectors are added, nothing else changes"
        )
        raise QAError(
            f"Index '{index.name}' has no embeddings, so {retriever} retrieval cannot run.", f"run {again}; or use --retriever bm25."
        )
    # The backend may differ: the questions are embedded by the index's own (QueryEmbedder).
    if not embeddings_match(index, settings, backend=False):
        how = (
            f"with {stored}, not with the configured {settings.embedding_model}"
            if stored != settings.embedding_model
            else f"with an earlier version of {stored}"
        )
        raise QAError(f"Index '{index.name}' was embedded {how}.", "re-run `qa-system index` to re-embed the reviews with the new encoder.")
