"""One factory over the backends: open, save and read the manifest of a named index in the configured store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from qa_system.config import Settings, check_settings
from qa_system.errors import QAError, check_type
from qa_system.stores.elasticsearch import _load_elasticsearch, _save_elasticsearch, elasticsearch_client
from qa_system.stores.faiss import _faiss_dir, _load_faiss, _save_faiss, faiss_manifest
from qa_system.stores.index import Index, check_domains, index_name
from qa_system.stores.memory import _load_memory, _memory_manifest, _memory_path, _save_memory
from qa_system.stores.opensearch import _load_opensearch, _save_opensearch, opensearch_client

_LOADERS = {"memory": _load_memory, "faiss": _load_faiss, "elasticsearch": _load_elasticsearch, "opensearch": _load_opensearch}
_SAVERS = {"memory": _save_memory, "faiss": _save_faiss, "elasticsearch": _save_elasticsearch, "opensearch": _save_opensearch}


def open_index(settings: Settings, domains: str | Sequence[str] = "electronics", name: str | None = None) -> Index:
    """Open a saved index; a clear error naming the `qa-system index` command when there is none (or
    ``open_collection``, when ``domains`` names a collection of your own documents)."""
    check_settings(settings)
    if check_type(name, "name", str, "an index's name (str) or None", optional=True) is None:
        check_domains(domains)
    name = name or index_name(domains)
    index = _LOADERS[settings.store](settings, name)
    if index is None:
        if isinstance(domains, str) and name == index_name(domains) and _is_collection(settings, domains):
            raise QAError(
                f"No {settings.store} index named '{name}': '{domains}' is a collection of your own documents, not a SubjQA domain.",
                f'open it with qa_system.open_collection(settings, "{domains}").',
            )
        domain_args = " ".join(f"--domain {d}" for d in ([domains] if isinstance(domains, str) else domains))
        raise QAError(
            f"No {settings.store} index named '{name}' exists yet.",
            f"build it with `qa-system index {domain_args} --store {settings.store}`.",
        )
    return index


def _is_collection(settings: Settings, name: str) -> bool:
    """Whether a saved index of that very name exists (a name that could point outside the index directory is none)."""
    if not name or "/" in name or "\\" in name or ".." in name:
        return False
    try:
        return saved_manifest(settings, name) is not None
    except QAError:  # unreadable: it exists, but the plain message suits it as well
        return False


def try_open_index(settings: Settings, name: str) -> Index | None:
    """The saved index ``name`` in the configured store, or None when there is none."""
    return _LOADERS[settings.store](settings, name)


def saved_manifest(settings: Settings, name: str) -> dict | None:
    """The manifest of the saved index ``name`` (None when there is none); a memory index's is read
    from its last line, without loading its documents."""
    if settings.store == "faiss":
        return faiss_manifest(settings, name)
    if settings.store != "memory":
        index = try_open_index(settings, name)
        return None if index is None else index.manifest
    path = _memory_path(settings, name)
    if not path.exists():
        return None
    try:
        return _memory_manifest(path)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as error:
        raise QAError(
            f"The saved index {path} is unreadable ({error}).",
            f"delete it (`qa-system collections --delete {name}`) and index it again (`qa-system index`).",
        ) from error


def saved_signature(settings: Settings, name: str) -> tuple | None:
    """What changes whenever the index ``name`` is saved again, for a store saved in files (memory, FAISS: its manifest
    file's identity, size and time; one stat, cheap enough before every question); None for a search server's, or none."""
    if settings.store == "memory":
        path = _memory_path(settings, name)
    elif settings.store == "faiss":
        path = _faiss_dir(settings, name) / "manifest.json"
    else:
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def saved_document_count(settings: Settings, name: str) -> int | None:
    """How many documents the saved index ``name`` holds (None when there is none), from its manifest."""
    try:
        manifest = saved_manifest(settings, name)
    except QAError:
        if settings.store == "memory":
            return None  # an unreadable index is no good index to protect
        raise
    return None if manifest is None else int(manifest.get("documents", 0))


def save_index(index: Index, settings: Settings) -> None:
    """Save ``index`` in its backend, replacing the saved one of that name in one atomic step. Its manifest records when
    (``saved_version``), so that a process serving the collection sees any change: its documents, and a fit stored
    in it (``fit-confidence``) too."""
    index.manifest["saved"] = datetime.now(UTC).isoformat()
    _SAVERS[index.backend](index, settings)


def store_problem(settings: Settings) -> str | None:
    """Why the settings' search server cannot be used now, in one line; None when it answers, or when the store lives in
    this process (memory, FAISS)."""
    if settings.store not in ("opensearch", "elasticsearch"):
        return None
    try:
        (opensearch_client if settings.store == "opensearch" else elasticsearch_client)(settings)
    except QAError as error:
        return str(error)
    return None
