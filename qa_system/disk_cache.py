"""Files that several processes share: cache folders that stay bounded, and the locks that make them
take turns.

In a cache folder each entry is a directory whose modification time marks its last use, and only the
most recently used few are kept (indexes and model exports are 100 MB and more each, and would
otherwise pile up with every new collection, model version or library).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Iterable, Iterator

logger = logging.getLogger(__name__)
# A lock held longer than this by another process: say that this one waits.
LOCK_WAIT_NOTICE_S = 0.5


def _locked(lock_file: Path, wait: bool) -> int | None:
    """A descriptor holding the flock of ``lock_file`` (created if missing); None when another holds it and not ``wait``.

    The kernel drops a flock when its process dies (kill -9 too, in any container sharing the folder),
    so a lock nobody holds is proof that no run owns it. A lock file may be removed by whoever holds it
    (``remove_unheld_locks``): a flock taken on a file that was removed or replaced meanwhile guards
    nothing, so it is taken again on the file the path names now.
    """
    while True:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if _still_named(lock_file, fd):
            return fd
        os.close(fd)  # removed or replaced while this process waited: lock what the path names now


def _still_named(path: Path, fd: int) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def taking_turns(lock_file: str | Path, waiting: str) -> Iterator[None]:
    """Hold the file lock ``lock_file`` (processes of one machine take turns), logging ``waiting`` if another holds it."""
    fd = _locked(Path(lock_file), wait=False)
    if fd is None:
        time.sleep(LOCK_WAIT_NOTICE_S)  # a turn about to end is not worth a notice
        fd = _locked(Path(lock_file), wait=False)
    if fd is None:
        logger.warning(waiting)
        fd = _locked(Path(lock_file), wait=True)
    try:
        yield
    finally:
        os.close(fd)  # releases the flock


@contextlib.contextmanager
def held_if_free(lock_file: Path) -> Iterator[bool]:
    """Hold ``lock_file`` for the block if no process holds it (True), else do not wait (False)."""
    fd = _locked(lock_file, wait=False)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def remove_unheld_locks(directory: Path) -> list[Path]:
    """Remove the ``*.lock`` files of ``directory`` that no process holds (each removed while held: see ``_locked``)."""
    removed = []
    for lock_file in sorted(p for p in directory.glob("*.lock") if p.is_file()):
        with held_if_free(lock_file) as free:
            if free:
                lock_file.unlink(missing_ok=True)
                removed.append(lock_file)
    return removed


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
