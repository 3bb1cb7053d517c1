"""The open collections of a service, within a memory budget, and the versions that keep a stale one out.

Open collections are kept within ``collection_memory_mb`` (``QA_COLLECTION_MEMORY_MB``): opening one past
it closes the least recently used others (and, through ``on_close``, the pipelines over them); a closed
collection is opened again when next asked for. A collection that changed on disk has its version
counted up: an open or an embedding that began before the change is read again, never kept.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from qa_system.config import Settings
from qa_system.serving.background import BackgroundTask, Report, TaskRegistry
from qa_system.serving.served import ServedCollection
from qa_system.stores import Index, saved_version

logger = logging.getLogger(__name__)


class OpenCollections:
    """Indexes open by name, least recently used first, each opened by one shared task.

    :param settings: the memory budget (``collection_memory_mb``) and what ``ServedCollection.open`` reads.
    :param resolve: a name (None: the default) -> the ``ServedCollection`` it names (NotFound when none).
    :param tasks: the service's background tasks (opening and embedding share it with uploads and exports).

    Usage::

        cache = OpenCollections(settings, catalogue.resolve, TaskRegistry())
        index = cache.opening("my-reviews").result()
    """

    def __init__(self, settings: Settings, resolve: Callable[[str | None], ServedCollection], tasks: TaskRegistry):
        self.settings, self.resolve, self.tasks = settings, resolve, tasks
        self.budget_bytes = settings.collection_memory_mb * 1024 * 1024
        self.lock = threading.Lock()  # also held by the pipeline cache: a pipeline is kept only over an index still open
        self._open: OrderedDict[str, tuple[Index, int]] = OrderedDict()  # name -> (index, estimated bytes)
        # Bumped when a collection changed on disk: an open that began before a change is thrown away, never kept.
        self._versions: dict[str, int] = {}
        self.on_close: list[Callable[[str], None]] = []  # called with the closed index's name (under ``lock``)

    def opening(self, collection: str | None) -> BackgroundTask[Index]:
        """The task opening ``collection`` (finished at once when it is open): every caller shares it and its
        progress, and leaving (a page visitor closing the browser) does not stop it."""
        served = self.resolve(collection)
        return self.tasks.get_or_start(("open", served.name), lambda report: self.open_now(served.name, report), name=f"open-{served.name}")

    def open_now(self, name: str, report: Report | None = None) -> Index:
        """``name``'s index, opened here and now when it is not open."""
        while True:
            if (index := self.already_open(name)) is not None:
                return index
            version = self._versions.get(name, 0)
            index = self.resolve(name).open(self.settings, report)
            if self.keep(name, index, version):
                return index
            # The collection changed while it was read (a document change committed meanwhile): read it again.

    def embedding(self, collection: str | None) -> BackgroundTask[Index]:
        """The task embedding ``collection`` for dense and hybrid questions (every caller shares it and its progress:
        reviews embedded, out of all); the embedded index replaces the open one when done."""
        served = self.resolve(collection)
        return self.tasks.get_or_start(
            ("embed", served.name), lambda report: self._embed_now(served.name, report), name=f"embed-{served.name}"
        )

    def _embed_now(self, name: str, report: Report | None = None) -> Index:
        while True:
            version = self._versions.get(name, 0)
            index = self.resolve(name).open(self.settings, report, embeddings=True)
            with self.lock:
                if self._versions.get(name, 0) != version:
                    continue  # the collection changed while it was embedded: embed the new version
                self._changed(name)  # the open index without vectors, and its pipelines, give way
                version = self._versions[name]
            if self.keep(name, index, version):
                return index

    def already_open(self, name: str) -> Index | None:
        """``name``'s index when it is open (now the most recently used), else None."""
        with self.lock:
            if name not in self._open:
                return None
            self._open.move_to_end(name)
            return self._open[name][0]

    def is_open(self, index: Index) -> bool:
        """Whether ``index`` is the version open now (call under ``lock``)."""
        return any(open_index is index for open_index, _ in self._open.values())

    def keep(self, name: str, index: Index, version: int) -> bool:
        """``index`` open under ``name``, unless the collection changed since ``version`` (False: it was read before
        the change); the least recently used others closed while the open ones exceed the budget."""
        size = index.memory_bytes()
        with self.lock:
            if self._versions.get(name, 0) != version:
                return False
            self._open[name] = (index, size)
            self._open.move_to_end(name)
            while len(self._open) > 1 and sum(size for _, size in self._open.values()) > self.budget_bytes:
                oldest = next(iter(self._open))
                freed = self._close(oldest)
                logger.info(
                    "Closed collection '%s' (about %d MB) to stay within QA_COLLECTION_MEMORY_MB=%d.",
                    oldest,
                    freed // 2**20,
                    self.settings.collection_memory_mb,
                )
        if size > self.budget_bytes:
            logger.warning(
                "Collection '%s' alone takes about %d MB, over QA_COLLECTION_MEMORY_MB=%d: it stays open, the others are closed.",
                name,
                size // 2**20,
                self.settings.collection_memory_mb,
            )
        return True

    def _close(self, name: str) -> int:
        """Forget ``name``'s index and the pipelines over it (under ``lock``); its memory, about the bytes returned,
        is freed once no question reads it."""
        index, size = self._open.pop(name)
        self.tasks.forget(("open", name))
        self.tasks.forget(("embed", name))
        for closed in self.on_close:
            closed(index.name)
        return size

    def changed(self, name: str) -> None:
        """``name`` changed on disk: closed, and an open of it still reading the old version is read again rather
        than kept, whether or not the memory budget had closed it meanwhile."""
        with self.lock:
            self._changed(name)

    def _changed(self, name: str) -> None:
        self._versions[name] = self._versions.get(name, 0) + 1
        if name in self._open:
            self._close(name)

    def close_changed(self, listed: dict) -> None:
        """Close every open collection whose saved version (in the store's listing ``listed``) is newer than the one open,
        or that the listing lacks (deleted, or damaged): the next question opens it again, or says why it cannot."""
        with self.lock:
            for name, (index, _) in list(self._open.items()):
                info = listed.get(index.name)
                if info is None and "@" not in index.name:  # "@": a copy of eval's, never listed
                    self._changed(name)
                elif info is not None and info.updated not in (None, saved_version(index.manifest)):
                    self._changed(name)

    def sizes(self) -> dict[str, int]:
        """The collections open now, least recently used first, with their estimated bytes."""
        with self.lock:
            return {name: size for name, (_, size) in self._open.items()}
