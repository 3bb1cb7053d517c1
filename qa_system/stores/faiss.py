"""The FAISS store: a directory per index (the FAISS index and its manifest), swapped in with two renames."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from qa_system.config import Settings
from qa_system.stores.atomic import _dead_leftovers, remove_leftovers, temporary_prefix
from qa_system.stores.index import Index

def _faiss_dir(settings: Settings, name: str) -> Path:
    return settings.index_dir / "faiss" / name


def new_faiss_store(embedding_dim: int, index_string: str = "Flat"):
    """An empty FAISS store for vectors of ``embedding_dim`` dimensions (``index_string``: the FAISS index type)."""
    from haystack_integrations.document_stores.faiss import FAISSDocumentStore

    return FAISSDocumentStore(index_path=None, index_string=index_string, embedding_dim=embedding_dim)


def _load_faiss(settings: Settings, name: str) -> Index | None:
    from haystack_integrations.document_stores.faiss import FAISSDocumentStore

    directory = _faiss_dir(settings, name)
    _restore_interrupted_swap(directory)
    remove_leftovers(directory.parent, name)
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        return None
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    store = FAISSDocumentStore(
        index_path=str(directory / "index"),
        index_string=manifest.get("faiss_index", "Flat"),
        embedding_dim=manifest["embedding_dim"],
    )
    return Index("faiss", name, store, manifest)


def _restore_interrupted_swap(directory: Path) -> None:
    """A writer killed between the swap's two renames left the old index retired and none in place: put it back."""
    if directory.exists() or not directory.parent.is_dir():
        return
    retired = [p for p in _dead_leftovers(directory.parent, directory.name) if p.name.endswith(".old") and (p / "manifest.json").is_file()]
    if retired:
        max(retired, key=lambda p: p.stat().st_mtime).rename(directory)


def _save_faiss(index: Index, settings: Settings) -> None:
    directory = _faiss_dir(settings, index.name)
    directory.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(directory.parent, index.name)
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(index.name), dir=directory.parent))
    try:
        index.store.save(staging / "index")
        (staging / "manifest.json").write_text(json.dumps(index.manifest), encoding="utf-8")
        # Two renames: the old directory survives until the new one is complete.
        retired = Path(tempfile.mkdtemp(prefix=temporary_prefix(index.name), suffix=".old", dir=directory.parent))
        retired.rmdir()
        if directory.exists():
            directory.rename(retired)
        staging.rename(directory)
        shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
