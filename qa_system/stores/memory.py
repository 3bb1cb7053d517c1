"""The memory store (the default): a multi-valued in-memory store, saved atomically to one JSON file a document per line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore

from qa_system.config import Settings
from qa_system.disk_cache import atomic_file, remove_leftovers
from qa_system.errors import QAError
from qa_system.stores.index import MANIFEST_KEY, Index
from qa_system.stores.meta_filters import MultiValueInMemoryDocumentStore


def _memory_path(settings: Settings, name: str) -> Path:
    return settings.index_dir / "memory" / f"{name}.json"


def new_memory_store(name: str) -> InMemoryDocumentStore:
    """An empty in-memory store of its own (not Haystack's process-wide one), that matches multi-valued metadata."""
    # Not shared: pipelines get this very object injected (see pipelines/loading.py), and a process-global
    # store would keep every index ever opened alive. Multi-valued: a review's ``split`` lists every
    # split it is in, and a split filter must find it under each, as Elasticsearch does.
    return MultiValueInMemoryDocumentStore(index=name, shared=False, embedding_similarity_function="cosine")


def _checked_manifest(data: Any) -> dict:
    """The manifest of a saved memory index whose shape is right, or ValueError naming what is wrong with it."""
    if not isinstance(data, dict) or not isinstance(data.get("documents"), list):
        raise ValueError("no list of documents")
    manifest = data.get(MANIFEST_KEY)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("documents"), int):
        raise ValueError("no qa_system manifest: not written by qa-system")
    for position, document in enumerate(data["documents"]):
        if not (isinstance(document, dict) and isinstance(document.get("id"), str) and isinstance(document.get("content"), str)):
            raise ValueError(f"document {position} has no text id and content")
    if manifest["documents"] != len(data["documents"]):
        raise ValueError(f"{len(data['documents'])} documents where the manifest says {manifest['documents']}")
    return manifest


def _load_memory(settings: Settings, name: str) -> Index | None:
    path = _memory_path(settings, name)
    remove_leftovers(path.parent, path.name)
    if not path.exists():
        return None
    try:
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
        manifest = _checked_manifest(data)
        documents = [Document.from_dict(d) for d in data["documents"]]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as error:
        raise QAError(
            f"The saved index {path} is unreadable ({error}).",
            f"delete it (`qa-system collections --delete {name}`) and index it again (`qa-system index`).",
        ) from error
    store = new_memory_store(name)
    store.load_documents(documents)
    return Index("memory", name, store, manifest)


# A saved memory index is one JSON object written a document per line, with the manifest last:
#     {"type": ..., "init_parameters": {...}, "documents": [
#     {document},
#     {document}
#     ],
#     "qa_system": {manifest}}
# json.load reads it whole (as it reads files of the older single-line layout); the line layout lets
# ingestion stream the documents of a large index and read its manifest without parsing them.
_DOCUMENTS_OPEN = ', "documents": ['
_VECTOR_FORMATS: dict[int, str] = {}  # "[%.9g,...]" by vector length
_MANIFEST_OPEN = '],\n"' + MANIFEST_KEY + '": '


def write_memory_index(settings: Settings, name: str, documents: Iterable[dict | str], manifest: dict) -> int:
    """Write the memory index ``name`` atomically from ``documents`` (``Document.to_dict(flatten=False)``
    dicts, or such dicts already as JSON text), streaming; the manifest's ``documents`` becomes the
    number written, which is returned."""
    header = json.dumps(new_memory_store(name).to_dict())
    count = 0
    with atomic_file(_memory_path(settings, name)) as handle:
        handle.write(header[:-1] + _DOCUMENTS_OPEN)
        for document in documents:
            handle.write(",\n" if count else "\n")
            handle.write(document if isinstance(document, str) else document_line(document))
            count += 1
        handle.write("\n" + _MANIFEST_OPEN + json.dumps({**manifest, "documents": count}) + "}\n")
    return count


def document_line(document: dict) -> str:
    """``document`` (a ``Document.to_dict`` dict) as one line of JSON. A vector is written with 9 significant digits,
    which read back exactly as the float32 values the encoders make, three times as fast as ``json.dumps``
    and 40% shorter: saving is a large share of indexing once a GPU embeds."""
    vector = document.get("embedding")
    values = None if vector is None else np.asarray(vector, dtype=np.float32)
    if values is None or values.ndim != 1 or not len(values) or not np.isfinite(values).all():
        return json.dumps(document)
    rest = json.dumps({key: value for key, value in document.items() if key != "embedding"})
    form = _VECTOR_FORMATS.setdefault(len(values), "[" + ",".join(["%.9g"] * len(values)) + "]")
    return f'{rest[:-1]}{", " if len(rest) > 2 else ""}"embedding": {form % tuple(values.tolist())}}}'


def _save_memory(index: Index, settings: Settings) -> None:
    documents = (doc.to_dict(flatten=False) for doc in index.store.storage.values())
    write_memory_index(settings, index.name, documents, index.manifest)


def _is_line_layout(path: Path) -> bool:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.readline(1 << 20).rstrip("\n").endswith(_DOCUMENTS_OPEN)


def memory_documents(settings: Settings, name: str) -> Iterator[str]:
    """The saved memory index's documents as JSON text, one at a time (none when there is no such index)."""
    path = _memory_path(settings, name)
    if not path.exists():
        return
    if not _is_line_layout(path):  # the older single-line layout: read whole
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
        _checked_manifest(data)
        yield from (json.dumps(d) for d in data["documents"])
        return
    with path.open(encoding="utf-8") as handle:
        handle.readline()
        for line in handle:
            if line.startswith("],"):
                return
            yield line.rstrip("\n").removesuffix(",")
    raise ValueError(f"{path} ends before its list of documents does")


def _memory_manifest(path: Path) -> dict:
    """The manifest of a saved memory index, read from its last line (line layout) or the whole file."""
    if not _is_line_layout(path):
        with path.open(encoding="utf-8") as handle:
            return _checked_manifest(json.load(handle))
    with path.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        size, tail = 1 << 16, b""
        while True:  # read back far enough to hold the whole last line
            start = max(0, end - size)
            handle.seek(start)
            tail = handle.read(end - start)
            found = tail.rfind(b"\n" + _MANIFEST_OPEN.encode())
            if found >= 0 or start == 0:
                break
            size *= 4
    if found < 0:
        raise ValueError("no qa_system manifest: not written by qa-system")
    manifest = json.loads(tail[found + 1 + len(_MANIFEST_OPEN) :].decode("utf-8").rstrip().removesuffix("}"))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("documents"), int):
        raise ValueError("no qa_system manifest: not written by qa-system")
    return manifest
