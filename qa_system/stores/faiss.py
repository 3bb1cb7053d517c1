"""The FAISS store: a directory per index (the FAISS index and its manifest), swapped in with two renames."""

from __future__ import annotations

import json
from pathlib import Path

from qa_system.config import Settings
from qa_system.disk_cache import built_folder, dead_leftovers, remove_leftovers
from qa_system.errors import QAError
from qa_system.stores.index import Index


def _faiss_dir(settings: Settings, name: str) -> Path:
    return settings.index_dir / "faiss" / name


def new_faiss_store(embedding_dim: int, index_string: str = "Flat"):
    """An empty FAISS store for vectors of ``embedding_dim`` dimensions (``index_string``: the FAISS index type)."""
    from haystack_integrations.document_stores.faiss import FAISSDocumentStore

    return FAISSDocumentStore(index_path=None, index_string=index_string, embedding_dim=embedding_dim)


def faiss_manifest(settings: Settings, name: str) -> dict | None:
    """The manifest of the saved FAISS index ``name`` (None when there is none), read without loading its vectors;
    a QAError when it is damaged (a file of it missing, its manifest unreadable)."""
    directory = _faiss_dir(settings, name)
    _restore_interrupted_swap(directory)
    remove_leftovers(directory.parent, name)
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        return None
    # Without its vectors file the store would open empty: answers from nothing, and an update that drops every document.
    missing = [f"index.{kind}" for kind in ("faiss", "json") if not (directory / f"index.{kind}").is_file()]
    if missing:
        raise _damaged(name, f"{' and '.join(missing)} missing from its folder")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:
        raise _damaged(name, f"its manifest is unreadable: {error}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("embedding_dim"), int):
        raise _damaged(name, "its manifest is not qa-system's")
    return manifest


def _damaged(name: str, why: str) -> QAError:
    return QAError(
        f"The saved FAISS collection '{name}' is damaged ({why}).",
        f"delete it (`qa-system collections --store faiss --delete {name}`) and index its source again.",
    )


def _load_faiss(settings: Settings, name: str) -> Index | None:
    from haystack_integrations.document_stores.faiss import FAISSDocumentStore

    manifest = faiss_manifest(settings, name)
    if manifest is None:
        return None
    try:
        store = FAISSDocumentStore(
            index_path=str(_faiss_dir(settings, name) / "index"),
            index_string=manifest.get("faiss_index", "Flat"),
            embedding_dim=manifest["embedding_dim"],
        )
    except (RuntimeError, ValueError, KeyError, TypeError, OSError) as error:  # faiss' RuntimeError for a truncated file
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise _damaged(name, reason) from None
    return Index("faiss", name, store, manifest)


def _restore_interrupted_swap(directory: Path) -> None:
    """A writer killed between the swap's two renames left the old index retired and none in place: put it back."""
    if directory.exists() or not directory.parent.is_dir():
        return
    retired = [p for p in dead_leftovers(directory.parent, directory.name) if p.name.endswith(".old") and (p / "manifest.json").is_file()]
    if retired:
        max(retired, key=lambda p: p.stat().st_mtime).rename(directory)


def _save_faiss(index: Index, settings: Settings) -> None:
    directory = _faiss_dir(settings, index.name)
    # Two renames: the old directory survives (retired, restored by the next load) until the new one is complete.
    with built_folder(directory, existing="replace") as staging:
        index.store.save(staging / "index")
        (staging / "manifest.json").write_text(json.dumps(index.manifest), encoding="utf-8")
