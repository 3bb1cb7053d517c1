"""Files that several processes share: written aside then renamed into place, cache folders that stay
bounded, and the locks that make them take turns.

Whatever is saved (an index, a model export, a BM25 cache entry, a dequantised model) is written
beside its target under a temporary name that carries its writer's PID, then renamed into place:
``atomic_file`` for a file, ``built_folder`` for a folder. A reader never sees half of one, a crash
never loses the previous one, and a later run removes what a killed writer left
(``remove_leftovers``).

In a cache folder each entry is a directory whose modification time marks its last use, and only the
most recently used few are kept (indexes and model exports are 100 MB and more each, and would
otherwise pile up with every new collection, model version or library).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

logger = logging.getLogger(__name__)
# A lock held longer than this by another process: say that this one waits.
LOCK_WAIT_NOTICE_S = 0.5
# What built_folder does with a folder already at its target: put the new one in its place, or keep it.
EXISTING_RULES = ("replace", "keep")

# A temporary file or directory is ".<name>~<pid>~<random><suffix>". No collection or index file name
# holds '~', so a name ends at the first '~': a cleanup of 'cc' can never take a file of 'cc.v2' or of
# 'cc.json' for its own (the dotted form before, ".<name>.<pid>.<random>", could: 'v2' read as a pid).
_OWNER_END = "~"
# That dotted form, read from the right (its random part is 8 characters without a dot), so that the
# leftovers of runs killed before the change are still recognised.
_DOTTED = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.(?:[a-z0-9_]{8}(?:\.tmp|\.jsonl|\.old)?|deleted)")


class TemporaryOwner(NamedTuple):
    """Who wrote a temporary file or directory, read from its name: the name it stands in for and the writer's process id."""

    name: str
    pid: int
    dotted: bool  # named in the dotted form of older releases

    def alive(self) -> bool:
        """Whether the writer's process runs (in this machine's, or container's, process ids)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's live process
            return True
        return True


def temporary_prefix(name: str) -> str:
    """Hidden, and carrying ``name`` and the writer's PID, so that a later run can tell whose leftovers a file is."""
    if _OWNER_END in name:
        raise ValueError(f"a name with '{_OWNER_END}' cannot name temporary files: {name!r}")
    return f".{name}{_OWNER_END}{os.getpid()}{_OWNER_END}"


def temporary_owner(file_name: str) -> TemporaryOwner | None:
    """Who wrote a file that ``temporary_prefix`` named (or the dotted form before it); None for any other file."""
    if file_name.startswith(".") and _OWNER_END in file_name:
        name, _, rest = file_name[1:].partition(_OWNER_END)
        pid = rest.partition(_OWNER_END)[0]
        return TemporaryOwner(name, int(pid), False) if name and pid.isdigit() else None
    dotted = _DOTTED.fullmatch(file_name)
    return TemporaryOwner(dotted["name"], int(dotted["pid"]), True) if dotted else None


def dead_leftovers(directory: Path, name: str | None = None) -> list[Path]:
    """The temporary files and directories of ``name`` (None: of any name) in ``directory`` whose writer process is gone."""
    if not directory.is_dir():
        return []
    owners = ((path, temporary_owner(path.name)) for path in directory.glob(".*"))
    return sorted(path for path, owner in owners if owner is not None and name in (None, owner.name) and not owner.alive())


def remove_leftovers(directory: Path, name: str | None = None) -> list[Path]:
    """Delete what writers of ``name`` (None: of any name) killed mid-save left in ``directory`` (temporary
    files, staging and retired directories); a live writer's files stay. Returns what was removed."""
    removed = dead_leftovers(directory, name)
    for leftover in removed:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    return removed


@contextlib.contextmanager
def atomic_file(path: Path):
    """A temporary text file beside ``path`` that replaces it (synced, renamed) when the block succeeds; else it goes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; an index is as readable as any other file
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def built_folder(target: Path, existing: str = "replace", complete: Callable[[Path], bool] = Path.exists) -> Iterator[Path]:
    """An empty folder beside ``target`` to build in; renamed to ``target`` when the block succeeds, removed when it fails.

    The folder is named by ``temporary_prefix(target.name)``, so a later run removes it if this
    process dies mid-build (and this one first removes what dead writers of ``target`` left). The
    finished tree is made readable by everyone (0755 / 0644: temporary folders and some writers
    create owner-only files). A folder already at ``target`` when the build is done:

    * ``existing="replace"``: moved aside (``<prefix><random>.old``), the new folder renamed in, the
      old one removed; if the rename fails, the old folder goes back.
    * ``existing="keep"``: kept when ``complete(target)``, and the new folder removed (another process
      built the same thing first); replaced like above when it is incomplete.

    Either way, a folder that another process renames to ``target`` between this one's two renames
    (a race lost) is kept when ``complete`` says it is whole; else the OSError is raised.
    """
    if existing not in EXISTING_RULES:
        raise ValueError(f"existing must be one of {EXISTING_RULES}, not {existing!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target.parent, target.name)
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(target.name), dir=target.parent))
    try:
        yield staging
        _readable_by_all(staging)
        if not (existing == "keep" and target.exists() and complete(target)):
            _swap_in(staging, target, complete)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already once renamed


def _readable_by_all(tree: Path) -> None:
    for folder, _, files in os.walk(tree):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def _swap_in(staging: Path, target: Path, complete: Callable[[Path], bool]) -> None:
    """Rename ``staging`` to ``target``, the folder there moved aside first and removed after."""
    retired = None
    if target.exists():
        retired = target.with_name(f"{temporary_prefix(target.name)}{secrets.token_hex(4)}.old")
        target.rename(retired)
    try:
        staging.rename(target)
    except OSError:
        if target.exists():  # another process renamed its own in meanwhile
            if complete(target):
                return
            raise
        if retired is not None:
            retired.rename(target)
            retired = None
        raise
    finally:
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)


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
def taking_turns(lock_file: str | Path, waiting: str, remove: bool = False) -> Iterator[None]:
    """Hold the file lock ``lock_file`` (processes of one machine take turns), logging ``waiting`` if another holds it.

    ``remove``: the lock file is removed at the end of the turn, while still held (see ``_locked``), so that
    only a killed process leaves one behind (``remove_unheld_locks`` then reports it).
    """
    path = Path(lock_file)
    fd = _locked(path, wait=False)
    if fd is None:
        time.sleep(LOCK_WAIT_NOTICE_S)  # a turn about to end is not worth a notice
        fd = _locked(path, wait=False)
    if fd is None:
        logger.warning(waiting)
        fd = _locked(path, wait=True)
    try:
        yield
    finally:
        try:
            if remove and _still_named(path, fd):
                path.unlink(missing_ok=True)
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


def listed_files(directory: Path, info_file: str) -> dict[str, int] | None:
    """The file sizes that ``directory``'s ``info_file`` lists, when every one of those files is there with
    its size (the info file is written last, so a build cut short has none); else None."""
    try:
        sizes = json.loads((directory / info_file).read_text(encoding="utf-8"))["sizes"]
        if sizes and all((directory / name).stat().st_size == size for name, size in sizes.items()):
            return sizes
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def written_here(directory: Path, info_file: str) -> bool:
    """Whether ``directory`` is a build this code wrote: complete (``listed_files``) and holding nothing else, so
    that a folder of the user's that merely shares a cache's name pattern is never pruned."""
    sizes = listed_files(directory, info_file)
    try:
        return sizes is not None and {entry.name for entry in directory.iterdir()} <= {*sizes, info_file}
    except OSError:
        return False


# Hex digits of the key in a keyed export's folder name, <model name>-<key>.
KEY_LENGTH = 16


def library_versions(names: Iterable[str]) -> dict[str, str | None]:
    """The installed version of each package (None when it is not installed): part of what a build depends on."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def keyed_folder(cache: Path, model: str | Path, depends_on: dict, fallback: str) -> Path:
    """``<cache>/<model name>-<key>``: the key hashes everything the build ``depends_on`` (the model's
    fingerprint, the recipe, library versions), so a change of any of them builds anew beside the old one."""
    key = hashlib.sha256(json.dumps(depends_on, sort_keys=True).encode()).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(model).rstrip("/\\")).name)[:60] or fallback
    return cache / f"{name}-{key[:KEY_LENGTH]}"


def prune_keyed_folders(target: Path, keep: int, info_file: str) -> list[Path]:
    """Keep the ``keep`` most recently used builds of ``target``'s model name (``target`` among them, marked used
    now); only folders named ``keyed_folder``'s way that this code wrote (``written_here``) are ever removed."""
    mark_used(target)
    name = re.escape(target.name[: -(KEY_LENGTH + 1)])
    same_model = (
        p
        for p in target.parent.iterdir()
        if p.is_dir() and re.fullmatch(f"{name}-[0-9a-f]{{{KEY_LENGTH}}}", p.name) and (p == target or written_here(p, info_file))
    )
    return keep_most_recent(same_model, keep)


def keep_most_recent(entries: Iterable[Path], keep: int) -> list[Path]:
    """Remove all but the ``keep`` most recently used of ``entries``; returns what was removed."""
    removed = sorted(entries, key=unused_for)[keep:]
    for entry in removed:
        shutil.rmtree(entry, ignore_errors=True)
    return removed
