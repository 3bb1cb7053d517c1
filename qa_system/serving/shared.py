"""The process's one ``QAService`` per settings: the API and the page started in one process share it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from qa_system.config import Settings
from qa_system.serving.served import DEFAULT_COLLECTIONS, ServedCollection
from qa_system.serving.service import QAService

_services: dict[tuple[Settings, tuple[ServedCollection, ...]], QAService] = {}
_services_lock = threading.Lock()


def shared_service(
    settings: Settings, collections: Sequence[ServedCollection] = DEFAULT_COLLECTIONS, any_collection: bool = False
) -> QAService:
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
