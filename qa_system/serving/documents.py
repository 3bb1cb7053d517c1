"""Documents and collections changed through a door (the REST API's document routes): create and delete
collections, add or update documents (indexed in the background, followed by a task id), delete
documents by id or by filter. The work is the ingestion library's (``ingest``, ``check_source``,
``qa_system.ingestion.changes``), with its rules and one-line errors; afterwards the service serves
the collection as it is saved now (``QAService.reopen``).

Input is read through once before the background work starts, so that a file the ingestion would
refuse (a missing column, a bad row) is refused at once, with the message `qa-system index --input`
gives. One change per collection runs at a time; another one meanwhile is a ``Conflict``.
"""

from __future__ import annotations

import io
import itertools
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from qa_system.config import Settings
from qa_system.errors import Conflict, NoSpace, NotFound, QAError, Unavailable, disk_error, shown
from qa_system.ingestion import IngestOptions, IngestProgress, check_own_collection_name, delete_collection, ingest
from qa_system.ingestion.changes import DeleteReport, create_collection, delete_documents
from qa_system.ingestion.collections import check_not_a_domain, is_saved_collection
from qa_system.ingestion.ingest import check_source
from qa_system.serving.background import BackgroundTask
from qa_system.serving.service import QAService
from qa_system.stores import saved_manifest

logger = logging.getLogger(__name__)

# Finished tasks kept for polling; the oldest are forgotten first.
KEPT_TASKS = 1000
# How long a stopping server waits for the changes still running, then for those it stopped to end (at their next
# batch): with uvicorn's 10 s for the requests in flight, within the 30 s that a service manager (Kubernetes, systemd)
# gives a process before killing it. A change still embedding when the process ends would end it with an abort.
STOP_GRACE_S = 10.0
STOP_CANCEL_S = 5.0


def error_status(error: BaseException) -> int:
    """The HTTP status a door gives for ``error``: 404 not found, 409 a clash, 503 a server down, 507 a full disk,
    422 other bad input, 500 a bug."""
    for kind, status in ((NotFound, 404), (Conflict, 409), (Unavailable, 503), (NoSpace, 507), (QAError, 422)):
        if isinstance(error, kind):
            return status
    return 500


@dataclass
class Change:
    """Documents being added to (or updated in) a collection in the background: poll ``status()``."""

    id: str
    collection: str
    documents: int  # in the request
    started: float = field(default_factory=time.time)
    progress: IngestProgress | None = None
    task: BackgroundTask | None = None
    stop: threading.Event = field(default_factory=threading.Event)  # set: end at the next batch, nothing saved

    def status(self) -> dict[str, Any]:
        """``running`` (with progress), ``done`` (with the ingestion report) or ``failed`` (with the one-line error and its status)."""
        out: dict[str, Any] = {
            "task_id": self.id,
            "collection": self.collection,
            "documents": self.documents,
            "status": "running",
            "report": None,
            "error": None,
            "error_status": None,
        }
        done = self.progress.documents if self.progress else 0
        out["progress"] = {"documents": done, "embedded": self.progress.embedded if self.progress else 0}
        if self.task is None or not self.task.wait(0):
            return out
        try:
            report = self.task.result()
        except Exception as error:  # noqa: BLE001 - the client polls for it
            message = str(error) if isinstance(error, QAError) else f"Internal error ({type(error).__name__}). Fix: see the server's log."
            return {**out, "status": "failed", "error": message, "error_status": error_status(error)}
        return {**out, "status": "done", "report": report}


class DocumentChanges:
    """The document routes' library object: the changes they make, their background tasks, and the service kept in step."""

    def __init__(self, settings: Settings, service: QAService):
        self.settings, self.service = settings, service
        self._tasks: OrderedDict[str, Change] = OrderedDict()
        self._running: dict[str, Change] = {}  # by collection
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def _check_own(self, name: str) -> None:
        """``name`` may name a collection of your own here: a valid name, neither SubjQA's nor a SubjQA domain this server
        serves under that name (one of your own called so would be hidden behind it, while the CLI's --collection finds it)."""
        check_own_collection_name(name)
        served = self.service.served.get(name)
        if served is not None and served.subjqa_domain:
            mine = is_saved_collection(self.settings, name)
            raise QAError(
                f"'{name}' is the SubjQA domain this server serves (the collection subjqa-{name})"
                + (f"; your own collection '{name}' is hidden behind it here." if mine else "."),
                f"change or delete your own with `qa-system index --collection {name}` / `qa-system collections --delete {name}`, "
                "or from a server that does not serve that domain."
                if mine
                else "name your own collection otherwise, e.g. my-reviews.",
            )

    def create(self, name: str) -> dict[str, Any]:
        """Create the empty collection ``name`` (not a SubjQA name) and serve it."""
        self._check_own(name)
        create_collection(self.settings, name)
        self.service.reopen(name)
        return {"name": name, "documents": 0}

    def drop(self, name: str) -> dict[str, Any]:
        """Delete the collection ``name`` (not a SubjQA one, nor the server's default) and stop serving it."""
        self._check_own(name)
        try:
            manifest = saved_manifest(self.settings, name)
        except QAError:  # damaged (its own message says to delete it): deleted as it is, as `collections --delete` does
            manifest = {}
        if manifest is None:
            raise NotFound(f"No collection named '{shown(name)}'.", "pick one that GET /collections lists.")
        if manifest.get("domains"):
            raise QAError(
                f"'{name}' is a SubjQA collection.", "delete your own collections only (`qa-system collections --delete` deletes any)."
            )
        self._refuse_while_running(name)
        self.service.forget(name)
        info = delete_collection(self.settings, name)
        return {"name": name, "documents": info.documents}

    def add(self, name: str, source: bytes, options: IngestOptions, file_name: str, sync: bool = False, force: bool = False) -> Change:
        """Check ``source`` (a file's bytes, read as `index --input` reads it), then add or update its documents in the background
        (``sync`` and ``force`` as `index`'s)."""
        self._check_own(name)
        manifest = saved_manifest(self.settings, name)
        if manifest is None:
            check_not_a_domain(self.settings, name)  # else the advice below leads to a refusal
            raise NotFound(f"No collection named '{name}'.", f'create it first: POST /collections with {{"name": "{name}"}}.')
        documents = check_source(io.BytesIO(source), options, file_name, into=(name, manifest), sync=sync, force=force)
        # A collection indexed without vectors (`index --no-embed`, BM25 only) stays so: embedding it would mean
        # processing every document again, which a file of a few new ones cannot give.
        embed = manifest.get("embedding_model") is not None or not manifest.get("source_documents")
        with self._lock:
            self._refuse_while_running(name)
            # The random part keeps ids apart across processes: two servers on one QA_HOME count from 1 alike.
            task_id = f"{name}-{next(self._ids)}-{int(time.time())}-{secrets.token_hex(3)}"
            change = self._running[name] = Change(task_id, name, documents)
            self._keep(change)

        def work(report) -> dict[str, Any]:
            def progressed(progress: IngestProgress) -> None:
                if change.stop.is_set():
                    raise QAError("The server stopped before this change was saved; nothing of it was saved.", "send the documents again.")
                change.progress = progress

            try:
                done = ingest(
                    self.settings,
                    io.BytesIO(source),
                    name,
                    options,
                    name=file_name,
                    embed=embed,
                    sync=sync,
                    force=force,
                    progress=False,
                    on_progress=progressed,
                )
                self.service.reopen(name)
                return done.as_dict()
            except Exception as error:
                failure = self._failed(change, error)
                if failure is error:
                    raise
                raise failure from error
            finally:
                with self._lock:
                    self._running.pop(name, None)

        change.task = BackgroundTask(work, name=f"documents-{name}")
        return change

    def _failed(self, change: Change, error: Exception) -> Exception:
        """A task's failure, in the server's log (nobody may poll it) with the task and collection: a user's error or a
        full or closed disk as one line, anything else with its traceback. Returns the error the task ends with:
        the disk's as one line (507, 503), not an internal error."""
        task = f"Adding documents to collection '{change.collection}' failed (task {change.id})"
        if isinstance(error, OSError):
            error = disk_error(error, str(self.settings.home), "send the documents again; nothing already indexed was lost.") or error
        if isinstance(error, QAError):
            logger.error("%s: %s", task, error)
        else:
            logger.error("%s: internal error.", task, exc_info=error)
        return error

    def delete(self, name: str, ids: Sequence[str] | None = None, filters: dict | None = None, force: bool = False) -> DeleteReport:
        """Delete documents of ``name`` by id or by filter (with all their passages; ``force`` as ``delete_documents``'s),
        then serve what is left."""
        self._check_own(name)
        self._refuse_while_running(name)
        if saved_manifest(self.settings, name) is None:
            raise NotFound(f"No collection named '{shown(name)}'.", "pick one that GET /collections lists.")
        report = delete_documents(self.settings, name, ids, filters, force)
        if report.deleted:
            self.service.reopen(name)
        return report

    def task(self, task_id: str) -> dict[str, Any]:
        """The status of a change started by ``add``; NotFound for an id this server does not know."""
        change = self._tasks.get(task_id)
        if change is None:
            raise NotFound(
                f"No task '{shown(task_id)}' on this server: it started none of that id, or it has restarted since "
                f"(a server keeps its last {KEPT_TASKS} tasks until it stops; a change still running then was saved whole or not at all).",
                "poll the task_id that adding documents returned, from the server that returned it; if that server restarted, "
                "see what the collection holds (GET /collections) and add the documents again.",
            )
        return change.status()

    def finish(self) -> None:
        """Let the changes still running finish, for up to ``STOP_GRACE_S`` seconds in all, then stop the others at their
        next batch (``STOP_CANCEL_S``), saying in the log what each became: nobody polls their task any more."""
        with self._lock:
            running = list(self._running.values())
        if not running:
            return
        logger.warning("Stopping: waiting up to %.0f s for %d change(s) of documents still running.", STOP_GRACE_S, len(running))

        def ended(change: Change, deadline: float) -> bool:  # its task is made just after it is listed as running
            return change.task is not None and change.task.wait(max(0.0, deadline - time.monotonic()))

        deadline = time.monotonic() + STOP_GRACE_S
        unfinished = [change for change in running if not ended(change, deadline)]
        for change in unfinished:
            change.stop.set()
        deadline = time.monotonic() + STOP_CANCEL_S
        for change in running:
            task = f"Task {change.id} ({change.documents} documents into collection '{change.collection}')"
            if change in unfinished:
                logger.error(
                    "%s was %s with the server: a change is saved whole or not at all, so the collection keeps what it held "
                    "before it. Fix: once the server is back, send the documents again.",
                    task,
                    "stopped" if ended(change, deadline) else "still running when it ended",
                )
            elif not change.task.failed:  # a failure was logged by the task itself
                logger.info("%s finished before the server stopped.", task)

    def _refuse_while_running(self, name: str) -> None:
        running = self._running.get(name)
        if running is not None:
            raise Conflict(
                f"Documents are being added to '{name}' (task {running.id}).", f"wait until GET /tasks/{running.id} says done, then retry."
            )

    def _keep(self, change: Change) -> None:
        self._tasks[change.id] = change
        while len(self._tasks) > KEPT_TASKS:
            self._tasks.popitem(last=False)
