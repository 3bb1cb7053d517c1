"""What a long-running door serves from one process: its collections opened once, pipelines (models)
built once, answer feedback.

``QAService.start()`` opens the collections' indexes (building one on first start, as the page does)
and loads the default pipeline's models in a background task, reporting progress; ``status()`` says
whether it is loading, ready or failed. A search server that cannot be reached yet (a container still
starting, a restart) is waited for: the load is tried again after a pause that doubles up to a
minute, and ``status()`` says why it waits; any other error fails the load.

Every other method is thread-safe and blocking, meant to be called from worker threads: a pipeline
is built once per (collection, retriever, answer stage) by whichever request needs it first, and then
shared (Haystack pipelines keep no state between runs; ``timing.component_timings`` records per run).

A collection is a named index: a SubjQA domain's, or one of your own (``qa-system index --input``);
``ServedCollection.open`` decides how each is opened.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from haystack import Document

from qa_system.config import Settings
from qa_system.errors import NotFound, QAError, Unavailable, check_count, check_number
from qa_system.ingestion import collection_info
from qa_system.ingestion import open_collection as open_saved_collection
from qa_system.ingestion.indexing import open_or_build_index
from qa_system.pipelines import QAPipeline, build_qa_pipeline, validate_question
from qa_system.retrieval.filters import check_filters
from qa_system.serving.background import BackgroundTask, Report
from qa_system.serving.feedback import Feedback, FeedbackExport, FeedbackStore
from qa_system.stores import Index

logger = logging.getLogger(__name__)

# Longest question read, in characters: questions are a sentence, and a reader window must keep room for the review.
MAX_QUESTION_CHARS = 1000


def check_length(question: object) -> None:
    """A question a door serves is at most ``MAX_QUESTION_CHARS`` long (asked, or judged in feedback)."""
    if isinstance(question, str) and len(question) > MAX_QUESTION_CHARS:
        raise QAError(f"The question is {len(question)} characters long.", f"ask in at most {MAX_QUESTION_CHARS} characters.")


@dataclass(frozen=True)
class ServedCollection:
    """A collection served under ``name``: the SubjQA domain ``name`` (``subjqa_domain``, as ``--domain``), or a
    collection that `qa-system collections` lists (as ``--collection``: yours, or ``subjqa-<domain>``)."""

    name: str
    subjqa_domain: bool = False

    def open(self, settings: Settings, on_progress: Report | None = None) -> Index:
        """A SubjQA domain's index is built on first use (as the page does); any other collection is opened as saved
        (an unknown name is a QAError that names `qa-system collections`). Both re-index SubjQA when its files changed."""
        if self.subjqa_domain:
            return open_or_build_index(settings, self.name, embeddings=True, progress=False, on_progress=on_progress)
        return open_saved_collection(settings, self.name, embeddings=True, progress=False, on_progress=on_progress)


DEFAULT_COLLECTIONS = (ServedCollection("electronics", subjqa_domain=True),)


def pipeline_label(settings: Settings, retriever: str, answer_stage: str | None, reader_backend: str | None = None) -> str:
    """Which pipeline produced an answer, as feedback records it: "bm25 + extractive (reader-minilm-subjqa, onnx int8)"."""
    reader = ", ".join(filter(None, [Path(settings.reader_model).name, reader_backend]))
    return f"{retriever} + {answer_stage}" + (f" ({reader})" if answer_stage == "extractive" else "")


@dataclass(frozen=True)
class Question:
    """One question as a door received it; ``QAService.check`` applies the rules every door shares."""

    query: str
    item_id: str | None  # None: any document (only where the collection has no products)
    collection: str | None = None
    retriever: str | None = None  # None: the configured one
    mode: str = "extractive"
    top_k: int = 3
    top_k_reader: int | None = None
    no_answer_threshold: float | None = None
    filters: dict | None = None  # more conditions on the documents' metadata (Haystack's syntax), ANDed with item_id


class QAService:
    """:param retry_first_s, retry_max_s: the first pause before loading again while the search server
        is unreachable, and the longest one (each pause doubles the last)."""

    def __init__(
        self, settings: Settings, collections: Sequence[ServedCollection] = DEFAULT_COLLECTIONS, retry_first_s: float = 2.0, retry_max_s: float = 60.0,
    ):  # fmt: skip
        if not collections:
            raise QAError("No collection to serve.", "name one, e.g. --domain electronics or --collection my-reviews.")
        self.settings = settings
        self.served: dict[str, ServedCollection] = {}  # by name, the first one the default
        for collection in collections:
            if self.served.setdefault(collection.name, collection) != collection:
                raise QAError(f"'{collection.name}' names both a SubjQA domain and a collection to serve.", "serve one of them.")
        self.names = list(self.served)
        self.feedback = FeedbackStore(settings.feedback_db)
        self._indexes: dict[str, Index] = {}
        self._pipelines: dict[tuple[str, str, str], QAPipeline] = {}
        self._building: dict[tuple[str, str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._loading: BackgroundTask[None] | None = None
        self._loaded_s: float | None = None
        self.retry_first_s, self.retry_max_s = retry_first_s, retry_max_s
        self._waiting: tuple[str, float] | None = None  # while the load waits: why, and when it tries again (monotonic)
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ loading

    def start(self) -> "QAService":
        """Load in the background (``status()`` follows it); returns at once."""
        self._loading = BackgroundTask(self.load, name="qa-service-load")
        return self

    def stop(self) -> None:
        """Ends a load that waits for its search server (the server process is shutting down)."""
        self._stopping.set()

    def load(self, report: Report | None = None) -> None:
        """Open every collection, then load the models of the default pipeline (configured retriever,
        extractive); tried again while the search server is unreachable, until ``stop()``."""
        began = time.perf_counter()
        pause = self.retry_first_s
        while True:
            try:
                for name, collection in self.served.items():
                    if name not in self._indexes:
                        self._indexes[name] = collection.open(self.settings, report)
                break
            except Unavailable as error:
                self._waiting = (str(error), time.monotonic() + pause)
                logger.warning("%s Loading again in %.0f s.", error, pause)
                if self._stopping.wait(pause):
                    raise
                pause = min(2 * pause, self.retry_max_s)
        self._waiting = None
        for name in self.names:
            self.pipeline(name, self.settings.retriever, "extractive")
        self._loaded_s = time.perf_counter() - began

    def status(self) -> dict[str, Any]:
        """``{"status": "loading" | "ready" | "failed", ...}``: progress while loading, the one-line error when it failed."""
        task = self._loading
        if task is None or not task.wait(0):
            done, total = task.progress if task else (0, 0)
            loading: dict[str, Any] = {"status": "loading", "progress": {"done": done, "total": total}}
            if waiting := self._waiting:
                loading["waiting"] = {"error": waiting[0], "retry_in_s": round(max(0.0, waiting[1] - time.monotonic()), 1)}
            return loading
        if task.failed:
            try:
                task.result()
            except QAError as error:
                return {"status": "failed", "error": str(error)}
            except Exception as error:  # noqa: BLE001 - reported, not raised: the server stays up to say why
                return {"status": "failed", "error": f"{type(error).__name__}: {error}"}
        return {"status": "ready", "load_s": round(self._loaded_s or 0.0, 3)}

    @property
    def ready(self) -> bool:
        """Whether the collections and pipelines are loaded (``status`` says ``ready``)."""
        return self.status()["status"] == "ready"

    # ------------------------------------------------------------------ collections

    def index(self, collection: str | None) -> Index:
        """The index of ``collection`` (None: the first one served); NotFound for a name not served here."""
        name = self.names[0] if collection is None else collection
        if name not in self._indexes:
            if name in self.names:
                raise QAError(f"Collection '{name}' is still loading.", "wait until GET /health answers ready.")
            raise NotFound(f"Unknown collection '{name}'.", f"use one of: {', '.join(self.names)}.")
        return self._indexes[name]

    def collections(self) -> list[dict[str, Any]]:
        """Each collection served: name, index, store, kind, documents (and the passages they are split into), products, encoder."""
        out = []
        for name in self.names:
            index = self.index(name)
            info = collection_info(index.name, index.backend, index.manifest)
            out.append({
                "name": name, "index": index.name, "store": index.backend, "kind": info.kind, "documents": info.documents, "passages": info.passages,
                "products": len(index.item_counts()), "embedding_model": index.embedding_model, "created": index.manifest.get("created"),
            })  # fmt: skip
        return out

    def reopen(self, name: str) -> None:
        """Serve the collection ``name`` as it is saved now (after its documents changed; served from now on if it was not):
        its index opened again, its pipelines built afresh on their next use."""
        collection = self.served.get(name, ServedCollection(name))
        index = collection.open(self.settings)
        with self._lock:
            self.served[name] = collection
            if name not in self.names:
                self.names.append(name)
            self._indexes[name] = index
            self._pipelines = {key: pipeline for key, pipeline in self._pipelines.items() if key[0] != index.name}

    def forget(self, name: str) -> None:
        """Stop serving the collection ``name`` (it was deleted); the default collection (named first) stays."""
        if name == self.names[0]:
            raise QAError(f"'{name}' is the server's default collection.", "delete another collection, or serve another one first (--collection).")
        with self._lock:
            index = self._indexes.pop(name, None)
            self.served.pop(name, None)
            self.names = [n for n in self.names if n != name]
            if index is not None:
                self._pipelines = {key: pipeline for key, pipeline in self._pipelines.items() if key[0] != index.name}

    def products(self, collection: str | None) -> dict[str, int]:
        """Reviews per product, most reviewed first."""
        counts = self.index(collection).item_counts()
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def document(self, collection: str | None, document_id: str) -> Document:
        """The document ``document_id`` of a collection (None: the default one); NotFound when it holds no such document."""
        index = self.index(collection)
        found = index.store.filter_documents({"field": "id", "operator": "==", "value": document_id})
        if not found:
            raise NotFound(f"No document '{document_id}' in collection '{collection or self.names[0]}'.", "send the document_id of an answer this collection gave.")
        return found[0]

    # ------------------------------------------------------------------ answering

    def pipeline(self, collection: str | None, retriever: str | None, mode: str | None) -> QAPipeline:
        """The pipeline for (collection, retriever, answer stage), built on first use and shared afterwards."""
        index = self.index(collection)
        key = (index.name, retriever or self.settings.retriever, mode or "retrieval")
        with self._lock:
            if key in self._pipelines:
                return self._pipelines[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:  # one build per key; requests for other pipelines go on meanwhile
            if key not in self._pipelines:
                self._pipelines[key] = build_qa_pipeline(key[1], self.settings, index=index, answer_stage=mode)
        return self._pipelines[key]

    def check(self, question: Question) -> Question:
        """The question with the library's rules applied (counts, an empty question, an unknown
        collection or product): one QAError (NotFound for names) naming the problem, before any work."""
        check_length(question.query)
        index = self.index(question.collection)
        validate_question(index, question.query, question.item_id)
        products = index.item_counts()
        if question.item_id is None and products:
            raise QAError(
                f"The question names no product (item_id), and collection '{question.collection or self.names[0]}' holds {len(products)} products.",
                "send the item_id of one (GET /products lists them); only a collection without products is asked as a whole.",
            )
        check_count(question.top_k, "top_k")
        check_count(question.top_k_reader, "top_k_reader", optional=True)
        check_number(question.no_answer_threshold, "no_answer_threshold", optional=True)
        check_filters(question.filters, index.manifest.get("meta_types"))
        return question

    def ask(self, question: Question, streaming_callback=None) -> dict[str, Any]:
        """``QAPipeline.run``'s result for the question, with ``pipeline``: its label, as feedback records it."""
        self.check(question)
        retriever = question.retriever or self.settings.retriever
        pipeline = self.pipeline(question.collection, retriever, question.mode)
        result = pipeline.run(
            question.query, item_id=question.item_id, top_k=question.top_k, top_k_reader=question.top_k_reader,
            no_answer_threshold=question.no_answer_threshold, streaming_callback=streaming_callback, filters=question.filters,
        )  # fmt: skip
        return {**result, "pipeline": pipeline_label(self.settings, retriever, question.mode, result.get("reader_backend"))}

    # ------------------------------------------------------------------ feedback

    def record_feedback(self, collection: str | None, document_id: str | None, **values: Any) -> Feedback:
        """One click on an answer of ``document_id`` (the review it came from, or the closest one for a
        "no answer"): the review's text is read from the collection, never taken from the client."""
        check_length(values.get("question"))
        document = None if document_id is None else self.document(collection, document_id)
        return self.feedback.record(Feedback.about(document, item_id=document.meta.get("item_id") if document else None, **values))

    def export_feedback(self) -> FeedbackExport:
        """The feedback as SQuAD v2, in memory: requests at once share no file."""
        return self.feedback.export()
