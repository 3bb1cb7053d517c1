"""What every door serves from one process: collections, pipelines (models), answers, feedback.

The API, the search page and ``qa-system shell`` call one ``QAService`` (``shared_service``: one per
settings in a process), so that nothing about opening, caching or loading lives in a door. Open
collections are kept within a memory budget (``collection_memory_mb``, ``QA_COLLECTION_MEMORY_MB``):
opening one past it closes the least recently used others (and the pipelines over them); a closed
collection is opened again when next asked for. Readers of one model share one ONNX session and one
inference lane (``reading.batching``), however many pipelines use them.

``QAService.start()`` opens the collections' indexes (building one on first start, as the page does)
and loads the default pipeline's models in a background task, reporting progress; ``status()`` says
whether it is loading, ready or failed. A search server that cannot be reached yet (a container still
starting, a restart) is waited for: the load is tried again after a pause that doubles up to a
minute, and ``status()`` says why it waits; any other error fails the load.

Every other method is thread-safe and blocking, meant to be called from worker threads: a pipeline
is built once per (collection, retriever, answer stage) by whichever request needs it first, and then
shared (Haystack pipelines keep no state between runs; ``timing.component_timings`` records per run).

A collection is a named index: a SubjQA domain's, or one of your own (``qa-system index --input``);
``ServedCollection.open`` decides how each is opened. The API serves the collections it was started
with (and, with its document routes, every collection of your own in the store: ``serve_own``); the page
(``any_collection``) any collection of the store, opened on first use.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from haystack import Document

from qa_system.config import Settings
from qa_system.errors import NotFound, QAError, Unavailable, check_count, check_number
from qa_system.ingestion import CollectionInfo, IngestOptions, IngestProgress, IngestReport, collection_info, ingest, list_collections
from qa_system.ingestion import open_collection as open_saved_collection
from qa_system.ingestion.collections import is_reserved_name
from qa_system.ingestion.indexing import embeddings_match, open_or_build_index
from qa_system.pipelines import QAPipeline, build_qa_pipeline, validate_question
from qa_system.reading.onnx_cache import prepare_reader
from qa_system.retrieval.filters import check_collection_filters
from qa_system.serving.background import BackgroundTask, Report, TaskRegistry
from qa_system.serving.feedback import Feedback, FeedbackExport, FeedbackStore
from qa_system.serving.question import Question
from qa_system.sources import SPLITS, LabelledQuestion, load_subjqa
from qa_system.stores import Index, index_name
from qa_system.stores.factory import saved_manifest

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

    def open(self, settings: Settings, on_progress: Report | None = None, embeddings: bool | None = None) -> Index:
        """A SubjQA domain's index is built on first use, also when named as its collection (``subjqa-electronics``);
        any other collection is opened as saved (an unknown name is a QAError that names `qa-system collections`).
        Both re-index SubjQA when its files changed. ``embeddings`` (None: ``embeddings_at_start(settings)``):
        a SubjQA index is embedded (again, when its encoder changed) before it is returned."""
        embeddings = embeddings_at_start(settings) if embeddings is None else embeddings
        domain = self.name if self.subjqa_domain else self.name.removeprefix("subjqa-")
        if self.subjqa_domain or (domain != self.name and (settings.data_dir / domain).is_dir() and saved_manifest(settings, self.name) is None):
            return open_or_build_index(settings, domain, embeddings=embeddings, progress=False, on_progress=on_progress)
        return open_saved_collection(settings, self.name, embeddings=embeddings, progress=False, on_progress=on_progress)


def embeddings_at_start(settings: Settings) -> bool:
    """Whether opening a collection embeds it: when the default retriever needs vectors, or QA_EMBED_AT_START says so.
    Otherwise a collection is embedded when a dense or hybrid question first needs it (``QAService.pipeline``)."""
    return settings.retriever != "bm25" or settings.embed_at_start


def needs_embedding(index: Index, settings: Settings, retriever: str) -> bool:
    """Whether a ``retriever`` question must embed ``index`` first: a SubjQA index without vectors of the configured
    encoder (one of your own is embedded by `qa-system index`, and says so when it is not)."""
    if retriever == "bm25" or not index.manifest.get("source") or index.manifest.get("vector_search") is False:
        return False
    return not embeddings_match(index, settings)


# The search page's own collection, built from SubjQA when it is first asked for.
PAGE_DOMAIN = "electronics"
PAGE_COLLECTION = index_name(PAGE_DOMAIN)


DEFAULT_COLLECTIONS = (ServedCollection("electronics", subjqa_domain=True),)


def pipeline_label(settings: Settings, retriever: str, answer_stage: str | None, reader_backend: str | None = None, device: str | None = None) -> str:
    """Which pipeline produced an answer, as feedback records it, and on which device:
    "bm25 + extractive (reader-minilm-subjqa, onnx int8) on cpu" (``device`` None: the settings' device, resolved)."""
    from qa_system.devices import resolve_device

    reader = ", ".join(filter(None, [Path(settings.reader_model).name, reader_backend]))
    label = f"{retriever} + {answer_stage}" + (f" ({reader})" if answer_stage == "extractive" else "")
    return f"{label} on {device or resolve_device(settings.device)}"


class QAService:
    """:param collections: served first: the API lists and loads them at start, the first is the default.
    :param any_collection: also serve any other collection of the store, opened when first asked for (the page).
    :param retry_first_s, retry_max_s: the first pause before loading again while the search server
        is unreachable, and the longest one (each pause doubles the last)."""

    def __init__(
        self, settings: Settings, collections: Sequence[ServedCollection] = DEFAULT_COLLECTIONS, retry_first_s: float = 2.0, retry_max_s: float = 60.0,
        any_collection: bool = False,
    ):  # fmt: skip
        if not collections:
            raise QAError("No collection to serve.", "name one, e.g. --domain electronics or --collection my-reviews.")
        self.settings = settings
        self.served: dict[str, ServedCollection] = {}  # by name, the first one the default
        for collection in collections:
            self.serve(collection)
        self.names = list(self.served)
        self.any_collection = any_collection
        self.feedback = FeedbackStore(settings.feedback_db)
        self.budget_bytes = settings.collection_memory_mb * 1024 * 1024
        self._open: OrderedDict[str, tuple[Index, int]] = OrderedDict()  # name -> (index, estimated bytes), least recently used first
        self._tasks = TaskRegistry()  # opening collections, uploads, the reader's export: one task per key, progress for every waiter
        self._pipelines: dict[tuple[str, str, str], QAPipeline] = {}
        self._building: dict[tuple[str, str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._loading: BackgroundTask[None] | None = None
        self._loaded_s: float | None = None
        self.retry_first_s, self.retry_max_s = retry_first_s, retry_max_s
        self._waiting: tuple[str, float] | None = None  # while the load waits: why, and when it tries again (monotonic)
        self._stopping = threading.Event()
        self._listed: tuple[float, dict[str, CollectionInfo], int | None] | None = None
        self._loaded: set[str] = set()  # the served collections the load has opened (the budget may have closed them since)
        # Bumped when a collection changed on disk: an open that began before a change is thrown away, never kept.
        self._versions: dict[str, int] = {}
        self.serve_own = False  # also serve every collection of your own in the store (the API with document routes)

    def serve(self, collection: ServedCollection) -> None:
        """Serve ``collection`` too (listed after those served already)."""
        if self.served.setdefault(collection.name, collection) != collection:
            raise QAError(f"'{collection.name}' names both a SubjQA domain and a collection to serve.", "serve one of them.")
        self.names = list(self.served)

    # ------------------------------------------------------------------ loading

    def start(self) -> "QAService":
        """Load in the background (``status()`` follows it); returns at once. Started again (a second door
        of one process), it goes on loading, or loads again when that failed."""
        with self._lock:
            if self._loading is None or self._loading.failed:
                self._stopping.clear()
                self._loading = BackgroundTask(self.load, name="qa-service-load")
        return self

    def stop(self) -> None:
        """Ends a load that waits for its search server (the server process is shutting down)."""
        self._stopping.set()

    def load(self, report: Report | None = None) -> None:
        """Open every served collection, then load the models of the default pipeline (configured retriever,
        extractive); tried again while the search server is unreachable, until ``stop()``."""
        began = time.perf_counter()
        pause = self.retry_first_s
        started = list(self.names)  # your own collections served besides (serve_own) are opened on first use
        while True:
            try:
                for name in started:
                    self._open_now(name, report)
                    self._loaded.add(name)
                if self.serve_own:
                    self._serve_own_collections()
                break
            except Unavailable as error:
                self._waiting = (str(error), time.monotonic() + pause)
                logger.warning("%s Loading again in %.0f s.", error, pause)
                if self._stopping.wait(pause):
                    raise
                pause = min(2 * pause, self.retry_max_s)
        self._waiting = None
        for name in started:
            self.pipeline(name, self.settings.retriever, "extractive")
        self._loaded_s = time.perf_counter() - began

    def _serve_own_collections(self) -> None:
        """Serve (opened on first use) every collection of your own the store holds: those the document routes
        created or changed before a restart are served after it, as they were before it."""
        for info in list_collections(self.settings):
            if info.kind == "ingested" and "@" not in info.name and not is_reserved_name(info.name):
                with self._lock:
                    if info.name not in self.served:
                        self.serve(ServedCollection(info.name))

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
    def device(self) -> str:
        """The device the models run on ("cpu", "cuda:0"): the settings' QA_DEVICE, resolved."""
        from qa_system.devices import resolve_device

        return resolve_device(self.settings.device)

    @property
    def ready(self) -> bool:
        """Whether the collections and pipelines are loaded (``status`` says ``ready``)."""
        return self.status()["status"] == "ready"

    # ------------------------------------------------------------------ collections

    def _served(self, collection: str | None) -> ServedCollection:
        """What ``collection`` (None: the default) names; NotFound for a name not served here."""
        name = self.names[0] if collection is None else collection
        if name in self.served:
            return self.served[name]
        if self.any_collection:
            return ServedCollection(name)
        raise NotFound(f"Unknown collection '{name}'.", f"use one of: {', '.join(self.names)}.")

    def opening(self, collection: str | None) -> BackgroundTask[Index]:
        """The task opening ``collection`` (finished at once when it is open): every caller shares it and its
        progress, and leaving (a page visitor closing the browser) does not stop it."""
        served = self._served(collection)
        return self._tasks.get_or_start(("open", served.name), lambda report: self._open_now(served.name, report), name=f"open-{served.name}")

    def _open_now(self, name: str, report: Report | None = None) -> Index:
        while True:
            if (index := self._already_open(name)) is not None:
                return index
            version = self._versions.get(name, 0)
            index = self._served(name).open(self.settings, report)
            if self._keep(name, index, version):
                return index
            # The collection changed while it was read (a document change committed meanwhile): read it again.

    def index(self, collection: str | None) -> Index:
        """The index of ``collection`` (None: the first one served), opened when it is not (again, after the
        memory budget closed it); NotFound for a name not served here."""
        name = self._served(collection).name
        if (index := self._already_open(name)) is not None:
            return index
        loading = self._loading
        if loading is not None and not loading.wait(0) and name in self.served and name not in self._loaded:
            raise QAError(f"Collection '{name}' is still loading.", "wait until GET /health answers ready.")
        return self.opening(name).result()

    def _already_open(self, name: str) -> Index | None:
        """``name``'s index when it is open (now the most recently used), else None."""
        with self._lock:
            if name not in self._open:
                return None
            self._open.move_to_end(name)
            return self._open[name][0]

    def _keep(self, name: str, index: Index, version: int) -> bool:
        """``index`` open under ``name``, unless the collection changed since ``version`` (False: it was read before
        the change); the least recently used others closed while the open ones exceed the budget."""
        size = index.memory_bytes()
        with self._lock:
            if self._versions.get(name, 0) != version:
                return False
            self._open[name] = (index, size)
            self._open.move_to_end(name)
            while len(self._open) > 1 and sum(size for _, size in self._open.values()) > self.budget_bytes:
                oldest = next(iter(self._open))
                freed = self._close(oldest)
                logger.info("Closed collection '%s' (about %d MB) to stay within QA_COLLECTION_MEMORY_MB=%d.", oldest, freed // 2**20, self.settings.collection_memory_mb)
        if size > self.budget_bytes:
            logger.warning("Collection '%s' alone takes about %d MB, over QA_COLLECTION_MEMORY_MB=%d: it stays open, the others are closed.",
                           name, size // 2**20, self.settings.collection_memory_mb)  # fmt: skip
        return True

    def _close(self, name: str) -> int:
        """Forget ``name``'s index and the pipelines over it (under ``_lock``); its memory, about the bytes returned,
        is freed once no question reads it."""
        index, size = self._open.pop(name)
        self._tasks.forget(("open", name))
        self._tasks.forget(("embed", name))
        for key in [key for key in self._pipelines if key[0] == index.name]:
            del self._pipelines[key]
        return size

    def close(self, collection: str) -> None:
        """Close ``collection`` now (e.g. after an upload changed it): the next question opens it afresh."""
        with self._lock:
            self._changed(collection)

    def _changed(self, name: str) -> None:
        """``name`` changed on disk (under ``_lock``): closed, and an open of it still reading the old version is read
        again rather than kept, whether or not the memory budget had closed it meanwhile."""
        self._versions[name] = self._versions.get(name, 0) + 1
        if name in self._open:
            self._close(name)

    def open_collections(self) -> dict[str, int]:
        """The collections open now, least recently used first, with their estimated bytes."""
        with self._lock:
            return {name: size for name, (_, size) in self._open.items()}

    def available(self, max_age_s: float = 10.0) -> dict[str, CollectionInfo | None]:
        """The collections this service can open, by name: the served ones first (None before a SubjQA one is
        built), then, with ``any_collection``, the page's SubjQA one (when its files are there) and every other
        readable one of the store (not the encoder-comparison copies ``eval retriever`` makes). Listed again after ``max_age_s``; an open one that changed is closed."""
        now, folder = time.monotonic(), self.settings.index_dir / self.settings.store
        # A local store's folder changes when a collection is added, replaced or deleted: listed again at once.
        changed = folder.stat().st_mtime_ns if folder.is_dir() else None
        if self._listed is None or now - self._listed[0] > max_age_s or self._listed[2] != changed:
            found = {info.name: info for info in list_collections(self.settings) if info.kind != "unreadable" and "@" not in info.name}
            self._listed = (now, found, changed)
            self._close_changed(found)
        found = dict(self._listed[1])
        served = {name: found.pop(index_name(name) if c.subjqa_domain else name, None) for name, c in self.served.items()}
        if not self.any_collection:
            return served
        if (self.settings.data_dir / PAGE_DOMAIN).is_dir():  # offered before it is built: it is built when picked
            served.setdefault(PAGE_COLLECTION, found.pop(PAGE_COLLECTION, None))
        return {**served, **found}

    def _close_changed(self, listed: dict[str, CollectionInfo]) -> None:
        with self._lock:
            for name, (index, _) in list(self._open.items()):
                info = listed.get(index.name)
                if info is not None and info.updated not in (None, index.manifest.get("updated", index.manifest.get("created"))):
                    self._changed(name)

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
        closed here, so the next question opens its index and builds its pipelines afresh."""
        with self._lock:
            self.served.setdefault(name, ServedCollection(name))
            if name not in self.names:
                self.names.append(name)
            self._changed(name)
            self._listed = None

    def forget(self, name: str) -> None:
        """Stop serving the collection ``name`` (it was deleted); the default collection (named first) stays."""
        if name == self.names[0]:
            raise QAError(f"'{name}' is the server's default collection.", "delete another collection, or serve another one first (--collection).")
        with self._lock:
            self._changed(name)
            self.served.pop(name, None)
            self.names = [n for n in self.names if n != name]
            self._listed = None

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

    def start_upload(self, source, collection: str, options: IngestOptions, embed: bool, on_progress: Callable[[IngestProgress], None]) -> BackgroundTask[IngestReport] | None:
        """``source`` (an uploaded file) indexed into ``collection`` in the background; None while another upload into
        it runs. The collection is left as it was when it fails (``ingest`` swaps it in at the end); when done, the
        open one is closed, so the next question reads the new version."""

        def work(report: Report) -> IngestReport:
            done = ingest(self.settings, source, collection, options, name=getattr(source, "name", None), embed=embed, progress=False, on_progress=on_progress)
            self.close(collection)
            self._listed = None
            return done

        return self._tasks.start_unless_running(("upload", collection), work, name=f"upload-{collection}")

    def embedding(self, collection: str | None) -> BackgroundTask[Index]:
        """The task embedding ``collection`` for dense and hybrid questions (every caller shares it and its progress:
        reviews embedded, out of all); the embedded index replaces the open one when done."""
        served = self._served(collection)
        return self._tasks.get_or_start(("embed", served.name), lambda report: self._embed_now(served.name, report), name=f"embed-{served.name}")

    def _embed_now(self, name: str, report: Report | None = None) -> Index:
        while True:
            version = self._versions.get(name, 0)
            index = self._served(name).open(self.settings, report, embeddings=True)
            with self._lock:
                if self._versions.get(name, 0) != version:
                    continue  # the collection changed while it was embedded: embed the new version
                self._changed(name)  # the open index without vectors, and its pipelines, give way
                version = self._versions[name]
            if self._keep(name, index, version):
                return index

    def preparing_reader(self) -> BackgroundTask[Path | None]:
        """The task building the reader's int8 ONNX export into the cache (once per model version; finished when built)."""
        return self._tasks.get_or_start(("reader-onnx-export",), lambda report: prepare_reader(self.settings, report), name="reader-onnx-export")

    def labelled_questions(self) -> list[LabelledQuestion]:
        """The labelled SubjQA questions of the page's domain (read once)."""
        return self._tasks.get_or_start(("labelled",), lambda report: load_subjqa(PAGE_DOMAIN, SPLITS, self.settings.data_dir).questions).result()

    # ------------------------------------------------------------------ answering

    def pipeline(self, collection: str | None, retriever: str | None, mode: str | None) -> QAPipeline:
        """The pipeline for (collection, retriever, answer stage), built on first use and shared afterwards. A dense or
        hybrid one over a collection not embedded yet embeds it first (once: ``embedding``)."""
        index = self.index(collection)
        if needs_embedding(index, self.settings, retriever or self.settings.retriever):
            index = self.embedding(collection).result()
        key = (index.name, retriever or self.settings.retriever, mode or "retrieval")
        with self._lock:
            if (built := self._pipelines.get(key)) is not None and built.index is index:
                return built
            building = self._building.setdefault(key, threading.Lock())
        with building:  # one build per key; requests for other pipelines go on meanwhile
            built = self._pipelines.get(key)
            if built is None or built.index is not index:  # a pipeline over an older version of the collection is never reused
                built = build_qa_pipeline(key[1], self.settings, index=index, answer_stage=mode)
                with self._lock:
                    if any(open_index is index for open_index, _ in self._open.values()):  # still the version served
                        self._pipelines[key] = built
        return built

    def check(self, question: Question) -> Question:
        """The question with the library's rules applied (counts, an empty question, an unknown
        collection or product): one QAError (NotFound for names) naming the problem, before any work."""
        check_length(question.query)
        index = self.index(question.collection)
        validate_question(index, question.query, question.item_id)
        products = index.item_counts()
        if question.all_products and question.item_id is not None:
            raise QAError(f"The question names the product '{question.item_id}' and asks about all products.", "send item_id or all_products, not both.")
        if question.item_id is None and products and not question.all_products:
            raise QAError(
                f"The question names no product (item_id), and collection '{question.collection or self.names[0]}' holds {len(products)} products.",
                "send the item_id of one (GET /products lists them), or all_products: true to ask every document (each answer names its product).",
            )
        check_count(question.top_k, "top_k")
        check_count(question.top_k_reader, "top_k_reader", optional=True)
        check_number(question.no_answer_threshold, "no_answer_threshold", optional=True)
        check_collection_filters(question.filters, index.manifest)
        return question

    def ask(self, question: Question, streaming_callback=None) -> dict[str, Any]:
        """``QAPipeline.run``'s result for the question, with ``pipeline``: its label, as feedback records it."""
        self.check(question)
        retriever = question.retriever or self.settings.retriever
        pipeline = self.pipeline(question.collection, retriever, question.mode)
        result = pipeline.run(
            question.query, item_id=question.item_id, split=question.split, top_k=question.top_k, top_k_reader=question.top_k_reader,
            no_answer_threshold=question.no_answer_threshold, streaming_callback=streaming_callback, filters=question.filters,
        )  # fmt: skip
        return {**result, "pipeline": pipeline_label(self.settings, retriever, question.mode, result.get("reader_backend"), result.get("device"))}

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


_services: dict[tuple[Settings, tuple[ServedCollection, ...]], QAService] = {}
_services_lock = threading.Lock()


def shared_service(settings: Settings, collections: Sequence[ServedCollection] = DEFAULT_COLLECTIONS, any_collection: bool = False) -> QAService:
    """The process's one ``QAService`` for ``settings`` and ``collections``: the API and the page started in one
    process with the same ones (and every visitor of the page) share its collections, pipelines and readers;
    ``any_collection`` lets it open any collection of the store."""
    with _services_lock:
        key = (settings, tuple(collections))
        service = _services.get(key)
        if service is None:
            service = _services[key] = QAService(settings, collections)
        service.any_collection |= any_collection
        return service
