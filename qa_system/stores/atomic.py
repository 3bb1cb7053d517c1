"""Saving without losing anything: temporary files named after their writer, atomic replacement, leftovers of dead writers.

A new index is written beside the old one and swapped in with a rename, so a crash or a bad run
never leaves a half-written index behind or loses the previous one.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

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


def _dead_leftovers(directory: Path, name: str) -> list[Path]:
    """The temporary files and directories of ``name`` in ``directory`` whose writer process is gone."""
    if not directory.is_dir():
        return []
    owners = ((path, temporary_owner(path.name)) for path in directory.glob(".*"))
    return sorted(path for path, owner in owners if owner is not None and owner.name == name and not owner.alive())


def remove_leftovers(directory: Path, name: str) -> list[Path]:
    """Delete what writers of ``name`` killed mid-save left in ``directory`` (temporary files, staging and
    retired directories); a live writer's files stay. Returns what was removed."""
    removed = _dead_leftovers(directory, name)
    for leftover in removed:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    return removed


@contextmanager
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
