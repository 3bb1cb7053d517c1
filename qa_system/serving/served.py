"""What a service serves: the collections by name (``ServedCollection``, ``Catalogue``) and how each is opened.

A collection is a named index: a SubjQA domain's, or one of your own (``qa-system index --input``);
``ServedCollection.open`` decides how each is opened. The ``Catalogue`` keeps the names served (the
first one the default) and lists what the store holds besides, for the page's picker.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from haystack import Document

from qa_system.config import Settings
from qa_system.errors import NotFound, QAError, shown
from qa_system.ingestion import CollectionInfo, collection_info, list_collections, open_collection as open_saved_collection
from qa_system.ingestion.collections import is_reserved_name, is_saved_collection
from qa_system.ingestion.indexing import embeddings_match, open_or_build_index
from qa_system.serving.background import Report
from qa_system.stores import Index, index_name
from qa_system.stores.factory import saved_manifest

# The search page's own collection, built from SubjQA when it is first asked for.
PAGE_DOMAIN = "electronics"
PAGE_COLLECTION = index_name(PAGE_DOMAIN)


@dataclass(frozen=True)
class ServedCollection:
    """A collection served under ``name``: the SubjQA domain ``name`` (``subjqa_domain``, as ``--domain``), or a
    collection that `qa-system collections` lists (as ``--collection``: yours, or ``subjqa-<domain>``).

    Usage::

        index = ServedCollection("electronics", subjqa_domain=True).open(Settings.from_env())
    """

    name: str
    subjqa_domain: bool = False

    def open(self, settings: Settings, on_progress: Report | None = None, embeddings: bool | None = None) -> Index:
        """A SubjQA domain's index is built on first use, also when named as its collection (``subjqa-electronics``);
        any other collection is opened as saved (an unknown name is a QAError that names `qa-system collections`).
        Both re-index SubjQA when its files changed. ``embeddings`` (None: ``embeddings_at_start(settings)``):
        a SubjQA index is embedded (again, when its encoder changed) before it is returned."""
        embeddings = embeddings_at_start(settings) if embeddings is None else embeddings
        domain = self.name if self.subjqa_domain else self.name.removeprefix("subjqa-")
        if self.subjqa_domain or (
            domain != self.name and (settings.data_dir / domain).is_dir() and saved_manifest(settings, self.name) is None
        ):
            return open_or_build_index(settings, domain, embeddings=embeddings, progress=False, on_progress=on_progress)
        return open_saved_collection(settings, self.name, embeddings=embeddings, progress=False, on_progress=on_progress)


DEFAULT_COLLECTIONS = (ServedCollection("electronics", subjqa_domain=True),)


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


class Catalogue:
    """The collections a service serves, by name (the first one the default), and the store's listing.

    :param settings: the store and folders listed.
    :param any_collection: also serve any other collection of the store, opened when first asked for (the page).

    Usage::

        catalogue = Catalogue(settings, [ServedCollection("my-reviews")])
        catalogue.resolve(None).name  # "my-reviews"
    """

    def __init__(self, settings: Settings, collections, any_collection: bool = False):
        if not collections:
            raise QAError("No collection to serve.", "name one, e.g. --domain electronics or --collection my-reviews.")
        self.settings = settings
        self.served: dict[str, ServedCollection] = {}
        for collection in collections:
            self.serve(collection)
        self.any_collection = any_collection
        self.serve_own = False  # also serve every collection of your own in the store (the API with document routes)
        self.lock = threading.Lock()
        self._listed: tuple[float, dict[str, CollectionInfo], int | None] | None = None

    @property
    def names(self) -> list[str]:
        """The names served, the default first."""
        return list(self.served)

    def serve(self, collection: ServedCollection) -> None:
        """Serve ``collection`` too (listed after those served already)."""
        if self.served.setdefault(collection.name, collection) != collection:
            raise QAError(f"'{collection.name}' names both a SubjQA domain and a collection to serve.", "serve one of them.")

    def resolve(self, collection: str | None) -> ServedCollection:
        """What ``collection`` (None: the default) names; NotFound for a name not served here."""
        name = self.names[0] if collection is None else collection
        if name in self.served:
            return self.served[name]
        if self.any_collection:
            return ServedCollection(name)
        if self.serve_own and (own := self._saved_since(name)) is not None:
            return own
        served = ", ".join(map(shown, self.names))
        if is_saved_collection(self.settings, name):  # saved, but not what this server was started with
            raise NotFound(
                f"Collection '{shown(name)}' is not served here (this server serves: {served}).",
                f"start the server with it too (`qa-system api --collection {shown(name)}`), or ask one of those.",
            )
        raise NotFound(f"Unknown collection '{shown(name)}'.", f"use one of: {served}.")

    def serve_own_collections(self) -> None:
        """Serve (opened on first use) every collection of your own the store holds: those the document routes
        created or changed before a restart are served after it, as they were before it."""
        for info in list_collections(self.settings):
            if _own(info):
                with self.lock:
                    if info.name not in self.served:
                        self.serve(ServedCollection(info.name))

    def _saved_since(self, name: str) -> ServedCollection | None:
        """The collection of your own ``name`` that another process (the CLI, another server) saved after this one
        listed the store, served from now on; None when the store holds none. A damaged one is a QAError naming
        the fix the document routes offer, rather than an unknown name."""
        info = next((info for info in list_collections(self.settings) if info.name == name), None)
        if info is not None and info.kind == "unreadable":
            raise QAError(
                f"The saved collection '{shown(name)}' is damaged: its files cannot be read.",
                f"delete it (DELETE /collections/{shown(name)}) and add its documents again.",
            )
        if info is None or not _own(info):
            return None
        self.add(name)
        return self.served[name]

    def add(self, name: str) -> None:
        """Serve the collection of your own ``name`` from now on (a no-op when it is served); listed again."""
        with self.lock:
            self.served.setdefault(name, ServedCollection(name))
            self._listed = None

    def remove(self, name: str) -> None:
        """Stop serving ``name`` (it was deleted); the default collection (named first) stays."""
        if name == self.names[0]:
            raise QAError(
                f"'{name}' is the server's default collection.", "delete another collection, or serve another one first (--collection)."
            )
        with self.lock:
            self.served.pop(name, None)
            self._listed = None

    def follow(self, found: dict[str, CollectionInfo]) -> None:
        """Serving every collection of your own (``serve_own``), serve as the store's listing ``found`` has them: those
        another process (the CLI, another server) made since too, and no more those it deleted. The default stays."""
        if not self.serve_own:
            return
        with self.lock:
            for name, collection in list(self.served.items())[1:]:
                if not collection.subjqa_domain and name not in found:
                    self.served.pop(name)
            for info in found.values():
                if _own(info) and info.name not in self.served:
                    self.serve(ServedCollection(info.name))

    def changed(self) -> None:
        """The store changed (an upload): listed again when next asked."""
        self._listed = None

    def listed(self, max_age_s: float) -> tuple[dict[str, CollectionInfo], bool]:
        """The store's readable collections by name (not the encoder-comparison copies ``eval retriever`` makes),
        listed again after ``max_age_s``, and whether this listing is new."""
        now, folder = time.monotonic(), self.settings.index_dir / self.settings.store
        # A local store's folder changes when a collection is added, replaced or deleted: listed again at once.
        changed = folder.stat().st_mtime_ns if folder.is_dir() else None
        fresh = self._listed is None or now - self._listed[0] > max_age_s or self._listed[2] != changed
        if fresh:
            found = {info.name: info for info in list_collections(self.settings) if info.kind != "unreadable" and "@" not in info.name}
            self._listed = (now, found, changed)
        return dict(self._listed[1]), fresh

    def available(self, found: dict[str, CollectionInfo]) -> dict[str, CollectionInfo | None]:
        """The collections this service can open, by name, out of the store's ``found``: the served ones first (None
        before a SubjQA one is built), then, with ``any_collection``, the page's SubjQA one (when its files are
        there) and every other one of the store."""
        served = {name: found.pop(index_name(name) if c.subjqa_domain else name, None) for name, c in self.served.items()}
        if not self.any_collection:
            return served
        if (self.settings.data_dir / PAGE_DOMAIN).is_dir():  # offered before it is built: it is built when picked
            served.setdefault(PAGE_COLLECTION, found.pop(PAGE_COLLECTION, None))
        return {**served, **found}


def _own(info: CollectionInfo) -> bool:
    """Whether ``info`` is a collection of your own that the document routes serve (not SubjQA's, not an encoder
    comparison's copy, not a reserved name)."""
    return info.kind == "ingested" and "@" not in info.name and not is_reserved_name(info.name)


def collection_summary(name: str, index: Index) -> dict:
    """A served collection as the doors list it: name, index, store, kind, documents (and the passages they are
    split into), products, encoder, and whether the files it was indexed from changed since."""
    info = collection_info(index.name, index.backend, index.manifest)
    return {
        "name": name,
        "index": index.name,
        "store": index.backend,
        "kind": info.kind,
        "documents": info.documents,
        "passages": info.passages,
        "products": len(index.item_counts()),
        "embedding_model": index.embedding_model,
        "created": index.manifest.get("created"),
        "source_changed": info.source_notice is not None,
    }


def stored_document(index: Index, document_id: str, collection: str) -> Document:
    """The document ``document_id`` of ``index`` (the collection named ``collection``); NotFound when it holds none."""
    found = index.store.filter_documents({"field": "id", "operator": "==", "value": document_id})
    if not found:
        raise NotFound(
            f"No document '{document_id}' in collection '{collection}'.", "send the document_id of an answer this collection gave."
        )
    return found[0]
