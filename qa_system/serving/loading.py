"""A service's load in the background, waiting for a search server that cannot be reached yet.

A search server that cannot be reached (a container still starting, a restart) is waited for: the
load is tried again after a pause that doubles up to a minute, and ``status()`` says why it waits;
any other error fails the load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from qa_system.errors import QAError, Unavailable
from qa_system.serving.background import BackgroundTask, Report

logger = logging.getLogger(__name__)


class Loading:
    """One background load at a time, its retries while the search server is unreachable, and its status.

    :param retry_first_s: the first pause before loading again while the search server is unreachable.
    :param retry_max_s: the longest pause (each pause doubles the last).

    Usage::

        loading = Loading()
        loading.start(lambda report: loading.retrying(lambda: open_everything(report)))
        loading.status()  # {"status": "loading", "progress": {...}}
    """

    def __init__(self, retry_first_s: float = 2.0, retry_max_s: float = 60.0):
        self.retry_first_s, self.retry_max_s = retry_first_s, retry_max_s
        self.task: BackgroundTask[None] | None = None
        self.loaded_s: float | None = None
        self.opened: set[str] = set()  # the served collections the load has opened (the budget may have closed them since)
        self._waiting: tuple[str, float] | None = None  # while the load waits: why, and when it tries again (monotonic)
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def start(self, load: Callable[[Report], None]) -> None:
        """Run ``load`` in the background; started again, it goes on loading, or loads again when that failed."""

        def logged(report: Report) -> None:  # /health says why too, but a server of several processes answers it from one
            try:
                load(report)
            except QAError as error:
                logger.error("Loading failed: %s", error)
                raise
            except Exception:
                logger.exception("Loading failed.")
                raise

        with self._lock:
            if self.task is None or self.task.failed:
                self._stopping.clear()
                self.task = BackgroundTask(logged, name="qa-service-load")

    def stop(self) -> None:
        """End a load that waits for its search server (the server process is shutting down)."""
        self._stopping.set()

    def retrying(self, step: Callable[[], None]) -> None:
        """``step`` run until it does not raise Unavailable, pausing between tries, until ``stop()``."""
        pause = self.retry_first_s
        while True:
            try:
                step()
                break
            except Unavailable as error:
                self._waiting = (str(error), time.monotonic() + pause)
                logger.warning("%s Loading again in %.0f s.", error, pause)
                if self._stopping.wait(pause):
                    raise
                pause = min(2 * pause, self.retry_max_s)
        self._waiting = None

    def still_opening(self, name: str, served: bool) -> bool:
        """Whether the load is running and has not opened the served collection ``name`` yet."""
        task = self.task
        return task is not None and not task.wait(0) and served and name not in self.opened

    def status(self) -> dict[str, Any]:
        """``{"status": "loading" | "ready" | "failed", ...}``: progress while loading, the one-line error when it failed."""
        task = self.task
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
        return {"status": "ready", "load_s": round(self.loaded_s or 0.0, 3)}
