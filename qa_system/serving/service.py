"""What every door serves from one process: collections, pipelines (models), answers, feedback.

The API, the search page and ``qa-system shell`` call one ``QAService`` (``shared_service``: one per
settings in a process), so that nothing about opening, caching or loading lives in a door. It composes
parts of one concern each: ``served.Catalogue`` (the collections served by name), ``open_collections``
(the open indexes within ``QA_COLLECTION_MEMORY_MB``), ``pipeline_cache`` (one pipeline per collection,
retriever and answer stage, shared), ``loading`` (in the background, waiting for a search server),
``uploads``, ``answering`` (the rules every question meets) and ``feedback``. ``start()`` loads in the
background and ``status()`` follows it; every other method is thread-safe and blocking, for worker threads.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from haystack import Document

from qa_system.config import Settings
from qa_system.devices import resolve_device
from qa_system.errors import QAError, Unavailable
from qa_system.ingestion import CollectionInfo, IngestOptions, IngestProgress, IngestReport
from qa_system.pipelines import QAPipeline
from qa_system.pipelines.qa_pipeline import stored_item
from qa_system.reading.onnx_cache import prepare_reader
from qa_system.serving.answering import ANSWER_STAGES, answer_stage_or_retrieval, check_question, pipeline_label, run_question  # noqa: F401 - ANSWER_STAGES: for the page
from qa_system.serving.background import BackgroundTask, Report, TaskRegistry
from qa_system.serving.feedback import Feedback, FeedbackExport, FeedbackStore
from qa_system.serving.loading import Loading
from qa_system.serving.open_collections import OpenCollections
from qa_system.serving.pipeline_cache import PipelineCache
from qa_system.serving.question import Question, check_length
from qa_system.serving.served import (
    DEFAULT_COLLECTIONS,
    PAGE_DOMAIN,
    Catalogue,
    ServedCollection,
    collection_summary,
    needs_embedding,
    stored_document,
)
from qa_system.serving.uploads import Uploads
from qa_system.sources import SPLITS, LabelledQuestion, load_subjqa
from qa_system.stores import Index, IndexGone, store_problem

logger = logging.getLogger(__name__)
# Seconds between two listings of a search server's collections, which tell an open collection that another
# process changed (a local store's folder tells it at once).
LIST_AGAIN_S = 10.0
# How often ``health`` asks a search server whether it answers (a load balancer may poll every second).
STORE_CHECK_EVERY_S = 5.0


class QAService:
    """The collections, pipelines, answers and feedback every door serves.

    :param settings: the store, models and budgets served.
    :param collections: served first: the API lists and loads them at start, the first is the default.
    :param retry_first_s, retry_max_s: the first pause before loading again while the search server
        is unreachable, and the longest one (each pause doubles the last).
    :param any_collection: also serve any other collection of the store, opened when first asked for (the page).

    Usage::

        service = QAService(Settings.from_env()).start()
        result = service.ask(Question("Is it good for reading?", item_id="B0074BW614"))
    """

    def __init__(
        self,
        settings: Settings,
        collections: Sequence[ServedCollection] = DEFAULT_COLLECTIONS,
        retry_first_s: float = 2.0,
        retry_max_s: float = 60.0,
        any_collection: bool = False,
    ):
        self.settings = settings
        self.catalogue = Catalogue(settings, collections, any_collection)
        self.feedback = FeedbackStore(settings.feedback_db)
        self._store_checked: tuple[float, str | None] = (-math.inf, None)  # when /health last asked the search server, and its answer
        self._left_out: set[str] = set()  # collections GET /collections leaves out now: logged once each, not at every listing
        self._tasks = TaskRegistry()  # opening collections, uploads, the reader's export: one task per key, progress for every waiter
        self.collections_open = OpenCollections(settings, self.catalogue.resolve, self._tasks)
        self.pipelines = PipelineCache(settings, self.collections_open.lock, self.collections_open.is_open)
        self.collections_open.on_close.append(self.pipelines.forget)
        self.loading = Loading(retry_first_s, retry_max_s)
        self.uploads = Uploads(settings, self._tasks, lambda name: (self.close(name), self.catalogue.changed()))

    # The doors read and set these as the service's own.
    served = property(lambda self: self.catalogue.served, doc="The collections served, by name (the first one the default).")
    names = property(lambda self: self.catalogue.names, doc="The names served, the default first.")
    any_collection = property(lambda self: self.catalogue.any_collection, lambda self, on: setattr(self.catalogue, "any_collection", on))
    serve_own = property(lambda self: self.catalogue.serve_own, lambda self, on: setattr(self.catalogue, "serve_own", on))
    budget_bytes = property(lambda self: self.collections_open.budget_bytes, doc="The memory budget of the open collections.")
    _pipelines = property(lambda self: self.pipelines.built)  # the built pipelines by key, as tests look at them
    _loading = property(lambda self: self.loading.task)

    def serve(self, collection: ServedCollection) -> None:
        """Serve ``collection`` too (listed after those served already)."""
        self.catalogue.serve(collection)

    def start(self) -> QAService:
        """Load in the background (``status()`` follows it); returns at once. Started again (a second door
        of one process), it goes on loading, or loads again when that failed."""
        self.loading.start(lambda report: self.load(report))
        return self

    def stop(self) -> None:
        """Ends a load that waits for its search server (the server process is shutting down)."""
        self.loading.stop()

    def load(self, report: Report | None = None) -> None:
        """Open every served collection, then load the models of the default pipeline (configured retriever,
        extractive); tried again while the search server is unreachable, until ``stop()``."""
        began = time.perf_counter()
        started = list(self.names)  # your own collections served besides (serve_own) are opened on first use

        def open_started() -> None:
            for name in started:
                self.collections_open.open_now(name, report)
                self.loading.opened.add(name)
            if self.serve_own:
                self.catalogue.serve_own_collections()

        self.loading.retrying(open_started)
        for name in started:
            self.pipeline(name, self.settings.retriever, "extractive")
        self.loading.loaded_s = time.perf_counter() - began

    def status(self) -> dict[str, Any]:
        """``{"status": "loading" | "ready" | "failed", ...}``: progress while loading, the one-line error when it failed."""
        return self.loading.status()

    def health(self) -> dict[str, Any]:
        """``status()``, and once ready, ``unavailable`` with the one-line error while the search server does not answer
        (asked at most every ``STORE_CHECK_EVERY_S``): every question would fail then, so a load balancer should know."""
        status = self.status()
        if status["status"] != "ready":
            return status
        self._close_changed()  # the collections it names as the store holds them now
        checked_at, problem = self._store_checked
        if time.monotonic() - checked_at > STORE_CHECK_EVERY_S:
            problem = store_problem(self.settings)
            self._store_checked = (time.monotonic(), problem)
        return {**status, "status": "unavailable", "error": problem} if problem else status

    @property
    def device(self) -> str:
        """The device the models run on ("cpu", "cuda:0"): the settings' QA_DEVICE, resolved."""
        return resolve_device(self.settings.device)

    @property
    def reader_backend(self) -> str:
        """What the extractive reader reads with once a pipeline has loaded it ("onnx int8", "torch bfloat16": on a GPU
        without ONNX Runtime's CUDA provider, PyTorch reads); before that, the configured QA_READER_BACKEND."""
        for pipeline in list(self.pipelines.built.values()):
            if (backend := pipeline.reader_backend) is not None:
                return backend
        return self.settings.reader_backend

    @property
    def ready(self) -> bool:
        """Whether the collections and pipelines are loaded (``status`` says ``ready``)."""
        return self.status()["status"] == "ready"

    def opening(self, collection: str | None) -> BackgroundTask[Index]:
        """The task opening ``collection`` (finished at once when it is open), shared by every caller."""
        return self.collections_open.opening(collection)

    def index(self, collection: str | None) -> Index:
        """The index of ``collection`` (None: the first one served), opened when it is not (again, after the
        memory budget closed it); NotFound for a name not served here."""
        self._close_changed()
        name = self.catalogue.resolve(collection).name
        if (index := self.collections_open.already_open(name)) is not None:
            return index
        if self.loading.still_opening(name, name in self.served):
            raise QAError(f"Collection '{name}' is still loading.", "wait until GET /health answers ready.")
        return self.opening(name).result()

    def stored_item(self, collection: str | None, item_id: str) -> str | None:
        """``item_id`` as ``collection`` spells it (``pipelines.stored_item``: trimmed and in Unicode NFC), None when
        it holds no such product: a door checks a linked item before it asks anything."""
        return stored_item(self.index(collection), item_id)

    def embedding(self, collection: str | None) -> BackgroundTask[Index]:
        """The task embedding ``collection`` for dense and hybrid questions, shared by every caller."""
        return self.collections_open.embedding(collection)

    def close(self, collection: str) -> None:
        """Close ``collection`` now (e.g. after an upload changed it): the next question opens it afresh."""
        self.collections_open.changed(collection)

    def open_collections(self) -> dict[str, int]:
        """The collections open now, least recently used first, with their estimated bytes."""
        return self.collections_open.sizes()

    def available(self, max_age_s: float = LIST_AGAIN_S) -> dict[str, CollectionInfo | None]:
        """The collections this service can open, by name (``Catalogue.available``), listed again after
        ``max_age_s``; an open one that changed is closed."""
        found, fresh = self.catalogue.listed(max_age_s)
        if fresh:
            self._listed_again(found)
        return self.catalogue.available(found)

    def _close_changed(self) -> None:
        """An open collection that another process changed (the CLI's `index`, another server's upload) is closed, so
        that it is served as saved now, one it made is served and one it deleted no more (``Catalogue.follow``): the store is
        listed again when its folder changed (a local store), else every ``LIST_AGAIN_S`` seconds."""
        try:
            found, fresh = self.catalogue.listed(LIST_AGAIN_S)
        except QAError:  # the search server unreachable: the question says so, not the listing
            return
        if fresh:
            self._listed_again(found)

    def _listed_again(self, found: dict[str, CollectionInfo]) -> None:
        """The store listed afresh (``found``): an open collection saved since is closed, one made since is served, one
        deleted is served no more."""
        self.collections_open.close_changed(found)
        self.catalogue.follow(found)

    def collections(self) -> list[dict[str, Any]]:
        """Each collection served, as ``served.collection_summary`` describes it. With ``serve_own``, the store's own
        collections as they are now: one saved since (by the CLI, another server) is listed, one deleted or damaged since
        is left out (a question about it says which), so that one of them never fails the whole list."""
        if not self.serve_own:
            return [collection_summary(name, self.index(name)) for name in self.names]
        self.catalogue.serve_own_collections()
        listed, left_out = [], set()
        for name in self.names:
            try:
                listed.append(collection_summary(name, self.index(name)))
            except Unavailable:  # the search server does not answer: no list at all, said as the 503 it is
                raise
            except QAError:  # the default collection too: the others can still be asked by name
                left_out.add(name)
                if name not in self._left_out:
                    logger.warning("Collection '%s' is left out of the list: it was deleted, or cannot be read.", name)
        self._left_out = left_out
        return listed

    def reopen(self, name: str) -> None:
        """Serve the collection ``name`` as it is saved now (after its documents changed; served from now on if it was not):
        closed here, so the next question opens its index and builds its pipelines afresh."""
        self.catalogue.add(name)
        self.collections_open.changed(name)

    def forget(self, name: str) -> None:
        """Stop serving the collection ``name`` (it was deleted); the default collection (named first) stays."""
        self.catalogue.remove(name)
        self.collections_open.changed(name)

    def products(self, collection: str | None) -> dict[str, int]:
        """Reviews per product, most reviewed first."""
        counts = self.index(collection).item_counts()
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def document(self, collection: str | None, document_id: str) -> Document:
        """The document ``document_id`` of a collection (None: the default one); NotFound when it holds no such document."""
        return self._while_there(collection, lambda: stored_document(self.index(collection), document_id, collection or self.names[0]))

    def _while_there(self, collection: str | None, work: Callable[[], Any]) -> Any:
        """``work()``, which reads ``collection``'s store. Its search server index deleted by another process since it was
        opened, it answers as a collection that is not there does, at once (not after the next listing of the store)."""
        try:
            return work()
        except IndexGone:
            self.collections_open.changed(self.catalogue.resolve(collection).name)
            self.catalogue.changed()
            self.index(collection)  # the store listed again: "No ... collection named", unless it was made again meanwhile
            return work()

    def start_upload(
        self, source, collection: str, options: IngestOptions, embed: bool, on_progress: Callable[[IngestProgress], None]
    ) -> BackgroundTask[IngestReport] | None:
        """``source`` indexed into ``collection`` in the background (``Uploads.start``); None while another upload into it runs."""
        return self.uploads.start(source, collection, options, embed, on_progress)

    def preparing_reader(self) -> BackgroundTask[Path | None]:
        """The task building the reader's int8 ONNX export into the cache (once per model version; finished when built)."""
        return self._tasks.get_or_start(
            ("reader-onnx-export",), lambda report: prepare_reader(self.settings, report), name="reader-onnx-export"
        )

    def labelled_questions(self) -> list[LabelledQuestion]:
        """The labelled SubjQA questions of the page's domain (read once)."""
        return self._tasks.get_or_start(
            ("labelled",), lambda report: load_subjqa(PAGE_DOMAIN, SPLITS, self.settings.data_dir).questions
        ).result()

    def pipeline(self, collection: str | None, retriever: str | None, mode: str | None) -> QAPipeline:
        """The pipeline for (collection, retriever, answer stage), built on first use and shared afterwards. A dense or
        hybrid one over a collection not embedded yet embeds it first (once: ``embedding``)."""
        index = self.index(collection)
        if needs_embedding(index, self.settings, retriever or self.settings.retriever):
            index = self.embedding(collection).result()
        return self.pipelines.get(index, retriever or self.settings.retriever, mode)

    def check(self, question: Question) -> Question:
        """The question with the library's rules applied (``answering.check_question``): one QAError (NotFound for
        names) naming the problem, before any work."""
        return check_question(question, self.index(question.collection), question.collection or self.names[0])

    def ask(self, question: Question, streaming_callback=None, retrieval_fallback: bool = False) -> dict[str, Any]:
        """``QAPipeline.run``'s result for the question, with ``pipeline``: its label, as feedback records it.

        ``streaming_callback`` receives a generator's text as it is written (RAG). With ``retrieval_fallback`` (the
        page), an answer stage that cannot be built (a reader that does not load) leaves the retrieved documents
        without answers, and ``answer_stage_error`` says why."""
        return self._while_there(question.collection, lambda: self._ask(question, streaming_callback, retrieval_fallback))

    def _ask(self, question: Question, streaming_callback, retrieval_fallback: bool) -> dict[str, Any]:
        self.check(question)
        retriever = question.retriever or self.settings.retriever
        pipeline, fallback = answer_stage_or_retrieval(
            lambda mode: self.pipeline(question.collection, retriever, mode), question.mode, retrieval_fallback
        )
        result = run_question(pipeline, question, streaming_callback)
        label = pipeline_label(self.settings, retriever, question.mode, result.get("reader_backend"), result.get("device"))
        return {**result, **fallback, "pipeline": label}

    def record_feedback(self, collection: str | None, document_id: str | None, **values: Any) -> tuple[Feedback, bool]:
        """One click on an answer of ``document_id`` (the review it came from, or the closest one for a
        "no answer"): the review's text is read from the collection, never taken from the client. Returns the
        stored click and whether it was new (``FeedbackStore.record_click``)."""
        check_length(values.get("question"))
        document = None if document_id is None else self.document(collection, document_id)
        item_id = document.meta.get("item_id") if document else None
        return self.feedback.record_click(Feedback.about(document, item_id=item_id, collection=collection or self.names[0], **values))

    def export_feedback(self) -> FeedbackExport:
        """The feedback as SQuAD v2, in memory: requests at once share no file."""
        return self.feedback.export()
