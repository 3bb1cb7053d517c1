"""Files that several processes share: cache folders that stay bounded, and the locks that make them
take turns.

In a cache folder each entry is a directory whose modification time marks its last use, and only the
most recently used few are kept (indexes and model exports are 100 MB and more each, and would
otherwise pile up with every new collection, model version or library).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Iterable, Iterator

logger = logging.getLogger(__name__)
# A lock held longer than this by another process: say that this one waits.
LOCK_WAIT_NOTICE_S = 0.5


@contextlib.contextmanager
def taking_turns(lock_file: str | Path, waiting: str) -> Iterator[None]:
    """Hold the file lock ``lock_file`` (processes of one machine take turns), logging ``waiting`` if another holds it."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=LOCK_WAIT_NOTICE_S)
    except Timeout:
        logger.warning(waiting)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def mark_used(entry: Path) -> None:
    """Record that ``entry`` was just used (a read-only cache still serves)."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def unused_for(entry: Path) -> float:
    """Seconds since ``entry`` was last used; infinite when it is gone (removed by another process)."""
    try:
        return time.time() - entry.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def keep_most_recent(entries: Iterable[Path], keep: int) -> list[Path]:
    """Remove all but the ``keep`` most recently used of ``entries``; returns what was removed."""
    removed = sorted(entries, key=unused_for)[keep:]
    for entry in removed:
        shutil.rmtree(entry, ignore_errors=True)
    return removed
