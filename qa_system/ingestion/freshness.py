"""Whether the file or folder a collection of your own was indexed from changed since: a notice naming the command
that indexes it again.

Such a collection is answered as last indexed (only SubjQA's re-index themselves). Ingestion records a
fingerprint of its source: each file's path, size and modification time, hashed (the files' contents
are not read again); ``source_notice`` compares it with the files as they are now, at most once every
``CHECK_EVERY_S`` per collection and version, so that asking many questions stats the folder once.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from pathlib import Path

from qa_system.config import SERVER_URL_FLAGS
from qa_system.safe_text import public_url
from qa_system.sources.files import SIDECAR, document_files
from qa_system.sources.records import ReadCounts

CHECK_EVERY_S = 30.0
# (store, collection, server) -> ((its version, its source, the source's time), when it was checked, the notice then)
_checked: dict[tuple[str, str, str | None], tuple[tuple, float, str | None]] = {}


def source_fingerprint(path: Path) -> dict:
    """How many files ``path`` (a folder of documents, or one file) holds, and a digest of their names, sizes and
    modification times (a document's sidecar included)."""
    documents = [(p, p.relative_to(path).as_posix()) for p in document_files(path, ReadCounts())] if path.is_dir() else [(path, path.name)]
    sidecars = [(p.with_name(p.name + SIDECAR), name + SIDECAR) for p, name in documents] if path.is_dir() else []
    digest = hashlib.sha256()
    for file, name in documents + sidecars:
        try:
            stat = file.stat()
        except OSError:  # a sidecar that does not exist, or a file gone meanwhile
            continue
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return {"files": len(documents), "digest": digest.hexdigest()}


def recorded_sources(manifest: dict) -> dict[str, dict]:
    """The files and folders a collection was indexed from, by path: each with its fingerprint, format and options
    (``input`` of a manifest written before several were recorded)."""
    given = manifest.get("input") or {}
    older = {given["path"]: given} if given.get("path") and given.get("source_fingerprint") else {}
    return manifest.get("sources") or older


def source_notice(name: str, store: str, manifest: dict, server_url: str | None = None) -> str | None:
    """One line when a file or folder the collection ``name`` (of ``store``, described by its ``manifest``) was indexed
    from changed since, naming the command to run again (with ``server_url``, the search server's it is on); None when
    none did, when the collection records no fingerprint (an upload, SubjQA, an older qa-system), or when the source is
    gone (the collection is all there is of it then)."""
    sources = recorded_sources(manifest)
    if not sources:
        return None
    # A folder's own time moves when a file is added or removed: that is seen at once, an edit within CHECK_EVERY_S.
    times = {path: _mtime(path) for path in sources}
    stamp = (str(manifest.get("updated")), tuple(times.items()))
    checked = _checked.get((store, name, server_url))
    if checked is not None and checked[0] == stamp and time.monotonic() - checked[1] < CHECK_EVERY_S:
        return checked[2]
    notices = (
        _notice(name, store, manifest, Path(path), recorded, server_url) for path, recorded in sources.items() if times[path] is not None
    )
    notice = next((n for n in notices if n is not None), None)
    _checked[(store, name, server_url)] = (stamp, time.monotonic(), notice)
    return notice


def _mtime(path: str) -> int | None:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return None


def _notice(name: str, store: str, manifest: dict, path: Path, recorded: dict, server_url: str | None = None) -> str | None:
    now, given = source_fingerprint(path), recorded["source_fingerprint"]
    if now == given:
        return None
    count = f" ({now['files']} files now, {given['files']} then)" if now["files"] != given["files"] else ""
    changed = f"files of {path} were added, removed or edited" if path.is_dir() else f"{path} was edited"
    return (
        f"Collection '{name}' is answered as last indexed, and {changed} since{count}. "
        f"Fix: run `{index_command(name, store, manifest, path, recorded, server_url)}` to update it (only what changed is processed again)."
    )


def index_command(name: str, store: str, manifest: dict, path: Path, recorded: dict, server_url: str | None = None) -> str:
    """The `qa-system index` command that indexes ``path`` into the collection ``name`` again, with the options it was
    read with (``recorded``), on the search server at ``server_url`` (its password shown as ***)."""
    options = recorded.get("options") or {}
    words = ["qa-system", "index", "--input", str(path), "--collection", name]
    for key in ("format", "text_column", "id_column", "item_column"):
        if options.get(key) is not None:
            words += [f"--{key.replace('_', '-')}", str(options[key])]
    if options.get("encoding") not in (None, "utf-8"):
        words += ["--encoding", options["encoding"]]
    if options.get("html"):
        words.append("--html")
    words += ["--store", store]  # QA_STORE may name another
    if server_url is not None and store in SERVER_URL_FLAGS:  # the default URL may be another server's
        words += [SERVER_URL_FLAGS[store], public_url(server_url)]
    if not manifest.get("embedding_model"):
        words.append("--no-embed")  # as it was: else every document would be embedded
    return shlex.join(words)
