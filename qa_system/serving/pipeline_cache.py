"""The pipelines a service has built, one per (collection, retriever, answer stage), shared by every request.

Haystack pipelines keep no state between runs (``timing.component_timings`` records per run), so one
pipeline serves every thread; it is built once, by whichever request needs it first, while requests
for other pipelines go on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from qa_system.config import Settings
from qa_system.pipelines import QAPipeline, build_qa_pipeline
from qa_system.stores import Index

Key = tuple[str, str, str]  # (index name, retriever, answer stage or "retrieval")


class PipelineCache:
    """Pipelines by (index, retriever, answer stage), each over the version of its collection open now.

    :param settings: what the pipelines are built from.
    :param lock: the open collections' lock (a pipeline is kept only over an index still open).
    :param is_open: whether an index is the version open now (called under ``lock``).

    Usage::

        pipelines = PipelineCache(settings, cache.lock, cache.is_open)
        pipeline = pipelines.get(index, "bm25", "extractive")
    """

    def __init__(self, settings: Settings, lock: threading.Lock, is_open: Callable[[Index], bool]):
        self.settings, self.lock, self.is_open = settings, lock, is_open
        self.built: dict[Key, QAPipeline] = {}
        self._building: dict[Key, threading.Lock] = {}

    def get(self, index: Index, retriever: str, mode: str | None) -> QAPipeline:
        """The pipeline over ``index``, built on first use and shared afterwards."""
        key = (index.name, retriever, mode or "retrieval")
        with self.lock:
            if (built := self.built.get(key)) is not None and built.index is index:
                return built
            building = self._building.setdefault(key, threading.Lock())
        with building:  # one build per key; requests for other pipelines go on meanwhile
            built = self.built.get(key)
            if built is None or built.index is not index:  # a pipeline over an older version of the collection is never reused
                built = build_qa_pipeline(retriever, self.settings, index=index, answer_stage=mode, follow_saved_changes=False)
                with self.lock:
                    if self.is_open(index):  # still the version served
                        self.built[key] = built
        return built

    def forget(self, index_name: str) -> None:
        """Drop the pipelines over ``index_name`` (closed; called under ``lock``)."""
        for key in [key for key in self.built if key[0] == index_name]:
            del self.built[key]
