"""Work that outlives the page visit that started it: the search page's first-start indexing and uploads.

Streamlit stops a visitor's script when the browser closes; work done inside it (an index being
embedded) would be lost and the next visitor would start again from zero. A ``BackgroundTask``
runs the work once per server process in its own thread; every visitor waits on the same task and
reads its progress, and leaving does not stop it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")
Report = Callable[[int, int], None]  # report(done, total)


class BackgroundTask(Generic[T]):
    """``work(report)`` running in a daemon thread; ``progress`` is the last ``(done, total)`` it reported."""

    def __init__(self, work: Callable[[Report], T], name: str = "background-task"):
        self._work = work
        self._finished = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        self.progress: tuple[int, int] = (0, 0)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _report(self, done: int, total: int) -> None:
        self.progress = (done, total)  # one tuple assignment: readers never see a torn pair

    def _run(self) -> None:
        try:
            self._result = self._work(self._report)
        except BaseException as error:  # handed to every waiter by result()
            self._error = error
        finally:
            self._finished.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the work has finished (successfully or not) within ``timeout`` seconds."""
        return self._finished.wait(timeout)

    @property
    def failed(self) -> bool:
        """Whether the work has finished by raising."""
        return self._finished.is_set() and self._error is not None

    def result(self) -> T:
        """The work's return value, waiting for it; its exception, raised again, when it failed."""
        self._finished.wait()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


class TaskRegistry:
    """One task per key for the whole process; a failed task is started afresh by the next caller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[Hashable, BackgroundTask] = {}

    def get_or_start(self, key: Hashable, work: Callable[[Report], T], name: str = "background-task") -> BackgroundTask[T]:
        """The task of ``key``: the running or finished one, or ``work`` started afresh when there is none or it failed."""
        with self._lock:
            task = self._tasks.get(key)
            if task is None or task.failed:
                task = self._tasks[key] = BackgroundTask(work, name)
            return task

    def forget(self, key: Hashable) -> None:
        """The next ``get_or_start`` of ``key`` starts its work afresh (what it made was thrown away)."""
        with self._lock:
            self._tasks.pop(key, None)

    def start_unless_running(self, key: Hashable, work: Callable[[Report], T], name: str = "background-task") -> BackgroundTask[T] | None:
        """A new task for ``key`` (each call is new work, e.g. an upload), or None while the last one
        started for ``key`` still runs: two uploads into one collection would race."""
        with self._lock:
            running = self._tasks.get(key)
            if running is not None and not running.wait(0):
                return None
            task = self._tasks[key] = BackgroundTask(work, name)
            return task
