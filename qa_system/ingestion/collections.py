"""Collections: named, persisted indexes, whatever built them (``--domain`` or ``--input``).

``list_collections`` (name, documents, size on disk, encoder), ``delete_collection``, and
``open_collection``, which opens a SubjQA collection the way ``--domain`` does (re-indexed when
its source files changed) and any other one as it was saved. Collection names are checked here,
once for every door: they name files and server indices, so never '/' or '..'.
"""

from __future__ import annotations

import os
import re
import shutil
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

from qa_system.config import STORE_BACKENDS, Settings, check_settings
from qa_system.disk_cache import taking_turns
from qa_system.errors import NotFound, QAError, described, shown
from qa_system.ingestion.freshness import source_notice
from qa_system.ingestion.indexing import ProgressCallback, open_or_build_index
from qa_system.ingestion.splitting import source_text
from qa_system.stores import (
    CONCRETE_INDEX_NAME,
    MANIFEST_KEY,
    SUBJQA_PREFIX,
    Index,
    delete_opensearch_index,
    elasticsearch_client,
    opensearch_client,
    saved_manifest,
    saved_version,
    temporary_prefix,
    try_open_index,
)

# Lowercase because Elasticsearch and OpenSearch index names must be; "@" for the indexes of
# fine-tuned encoders (subjqa-electronics@retriever-minilm-subjqa) that `eval retriever` builds.
MAX_NAME_CHARS = 200
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.@-]*")  # and at most MAX_NAME_CHARS long
NAME_FIX = "use lowercase letters, digits, '-', '_' and '.', starting with a letter or digit, e.g. my-reviews."


def check_collection_name(name: object) -> str:
    """``name``, once known to be a valid collection name (``NAME_PATTERN``, nothing pointing outside the index directory); else a QAError."""
    if not isinstance(name, str):
        raise QAError(f"The collection name must be a str, not {described(name)}.", NAME_FIX)
    if not name:
        raise QAError("The collection name is empty.", NAME_FIX)
    if "/" in name or "\\" in name or ".." in name:
        raise QAError(f"The collection name '{name}' holds '/' or '..': a name must not point outside the index directory.", NAME_FIX)
    if len(name) > MAX_NAME_CHARS:
        raise QAError(
            f"The collection name is {len(name):,} characters long; at most {MAX_NAME_CHARS} are taken.",
            "pick a shorter name, e.g. my-reviews.",
        )
    if not NAME_PATTERN.fullmatch(name):
        lowered = name.lower()  # "Reviews": the name meant is most likely the lowercase one
        fix = f"write it in lowercase: '{lowered}'." if lowered != name and NAME_PATTERN.fullmatch(lowered) else NAME_FIX
        raise QAError(f"'{shown(name)}' is not a valid collection name.", fix)
    if CONCRETE_INDEX_NAME.fullmatch(name):  # for every store: a name is the same collection whichever store serves it
        raise QAError(
            f"'{name}' is named like the index behind a collection on a search server (NAME--TIME-ID).",
            "pick a name without '--' before a time, e.g. my-reviews.",
        )
    return name


def is_reserved_name(name: str) -> bool:
    """Whether ``name`` is SubjQA's (``subjqa-<domain>``, and the copies `eval retriever` makes of one): what the page and
    the CLI present as SubjQA, so its documents come from `qa-system index --domain` alone."""
    return name.startswith(SUBJQA_PREFIX)


def check_own_collection_name(name: object) -> str:
    """``name``, once known to be a valid name for a collection of your own (not a SubjQA one); else a QAError."""
    check_collection_name(name)
    if is_reserved_name(name):
        raise QAError(
            f"'{name}' is reserved for the SubjQA collections that `qa-system index --domain` builds.",
            "name your own collection otherwise, e.g. my-reviews (`qa-system collections --delete` deletes any collection).",
        )
    return name


def check_not_a_domain(settings: Settings, name: str) -> None:
    """A new collection of your own does not take the name of a SubjQA domain in the data directory: the page and the REST
    API serve that domain under its name, and would hide the collection behind it."""
    from qa_system.sources.subjqa import available_domains

    if name in available_domains(settings.data_dir):
        raise QAError(
            f"'{name}' is the name of the SubjQA domain in {settings.data_dir}, which the search page and the REST API serve "
            "under it: a collection of your own so named would be hidden behind it there.",
            f"name your own collection otherwise, e.g. my-{name}.",
        )


def collection_name_from(file_name: str) -> str:
    """A valid collection name made from a file name (an upload's): "My Reviews (2).csv" -> "my-reviews-2"."""
    stem = unicodedata.normalize("NFKD", Path(file_name).stem).encode("ascii", "ignore").decode().lower()  # "Ü" -> "u"
    name = re.sub(r"[^a-z0-9_.-]+", "-", stem)
    name = re.sub(r"\.{2,}", ".", name).strip("-_.")[:200]
    return name or "my-documents"


@dataclass(frozen=True)
class CollectionInfo:
    """What `qa-system collections` lists of one collection: its size, encoder, kind, source and last update."""

    name: str
    store: str
    documents: int  # source documents (reviews, rows, files)
    passages: int  # what the store holds: a long document is several passages
    size_bytes: int | None  # on disk (for a server: the index's store size)
    encoder: str | None  # None: BM25 only
    kind: str  # "subjqa" (built by --domain) or "ingested" (built by --input)
    source: str | None
    updated: str | None
    source_notice: str | None = None  # the files it was indexed from changed since (``freshness.source_notice``)

    def as_dict(self) -> dict:
        """The information as JSON-ready data (``qa-system collections --json``)."""
        return asdict(self)


def collection_info(name: str, store: str, manifest: dict, size: int | None = None, server_url: str | None = None) -> CollectionInfo:
    """What the collection ``name`` holds, read from its manifest (``server_url``: the search server it is on)."""
    subjqa = bool(manifest.get("domains"))
    source = ", ".join(manifest["domains"]) if subjqa else manifest.get("input", {}).get("source")
    passages = int(manifest.get("documents", 0))
    return CollectionInfo(
        name=name,
        store=store,
        documents=int(manifest.get("source_documents", passages)),
        passages=passages,
        size_bytes=size,
        encoder=manifest.get("embedding_model"),
        kind="subjqa" if subjqa else "ingested",
        source=source,
        updated=saved_version(manifest),
        source_notice=source_notice(name, store, manifest, server_url),
    )


def _local_names(settings: Settings) -> list[tuple[str, Path]]:
    if settings.store == "memory":
        folder = settings.index_dir / "memory"
        return [(p.stem, p) for p in sorted(folder.glob("*.json")) if not p.name.startswith(".")] if folder.is_dir() else []
    folder = settings.index_dir / "faiss"
    return (
        [(p.name, p) for p in sorted(folder.iterdir()) if not p.name.startswith(".") and (p / "manifest.json").is_file()]
        if folder.is_dir()
        else []
    )


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _server_collections(settings: Settings) -> dict[str, tuple[dict, int | None]]:
    """{collection name: (manifest, store size in bytes)} of a search server's indices that qa-system wrote."""
    client = opensearch_client(settings) if settings.store == "opensearch" else elasticsearch_client(settings)
    mappings = client.indices.get_mapping(index="*")
    sizes = {row["index"]: int(row.get("store.size") or 0) for row in client.cat.indices(format="json", bytes="b")}
    aliases = {concrete: sorted(entry.get("aliases", {})) for concrete, entry in client.indices.get_alias(index="*").items()}
    found = {}
    for concrete, mapping in mappings.items():
        manifest = mapping.get("mappings", {}).get("_meta", {}).get(MANIFEST_KEY)
        # An index behind no alias yet or any more (an unfinished run's, a retired one): no collection, and no name one may take.
        if manifest is None or (CONCRETE_INDEX_NAME.fullmatch(concrete) and not aliases.get(concrete)):
            continue
        name = (aliases.get(concrete) or [concrete])[0]  # OpenSearch serves an index under its alias
        found[name] = (manifest, sizes.get(concrete))
    return found


def list_collections(settings: Settings) -> list[CollectionInfo]:
    """Every collection of the configured store, by name."""
    check_settings(settings)
    if settings.store in ("memory", "faiss"):
        infos = []
        for name, path in _local_names(settings):
            try:
                manifest = saved_manifest(settings, name) or {}
            except QAError:  # listed, so that it can be deleted
                infos.append(CollectionInfo(name, settings.store, 0, 0, _size(path), None, "unreadable", None, None))
                continue
            infos.append(collection_info(name, settings.store, manifest, _size(path)))
        return infos
    return [
        collection_info(name, settings.store, manifest, size, settings.server_url)
        for name, (manifest, size) in sorted(_server_collections(settings).items())
    ]


def is_saved_collection(settings: Settings, name: str) -> bool:
    """Whether the store holds a collection ``name`` (False when it cannot be listed now): for messages about a name."""
    try:
        return any(info.name == name for info in list_collections(settings))
    except QAError:
        return False


def _unknown(settings: Settings, name: str, to_use: bool = True) -> NotFound:
    """No collection ``name``: the ones there are, and (``to_use``: it was to be read) how to build it."""
    known = ", ".join(c.name for c in list_collections(settings)) or "none yet"
    flags = settings.store_flags
    build = (
        f"qa-system index --domain {name.removeprefix(SUBJQA_PREFIX)}{flags}"
        if is_reserved_name(name)
        else f"qa-system index --input FILE --collection {name}{flags}"
    )
    others = [store for store in STORE_BACKENDS if store != settings.store]
    elsewhere = f"; one in another store is named with --store ({', '.join(others)})"
    return NotFound(
        f"No {settings.store} collection named '{name}' (there are: {known}).",
        f"build it with `{build}`, or pick one that `qa-system collections{flags}` lists{elsewhere}."
        if to_use
        else f"name one that `qa-system collections{flags}` lists{elsewhere}.",
    )


def ingestion_lock(settings: Settings, collection: str) -> Path:
    """The lock file that ingestions into ``collection`` (and its deletion) take turns on, for the processes of one machine."""
    directory = settings.home / "locks"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"ingest-{settings.store}-{collection}.lock"


def delete_collection(settings: Settings, name: str) -> CollectionInfo:
    """Delete the collection ``name`` (one that ``list_collections`` lists) and return what it was; after the ingestion
    into it that is running, if one is (it would otherwise save the collection again, with only its own documents)."""
    check_settings(settings)
    check_collection_name(name)
    with taking_turns(ingestion_lock(settings, name), f"Waiting for the ingestion into '{name}' to finish, then deleting it.", remove=True):
        return _delete(settings, name)


def _delete(settings: Settings, name: str) -> CollectionInfo:
    info = next((c for c in list_collections(settings) if c.name == name), None)
    if info is None:
        raise _unknown(settings, name, to_use=False)  # nothing to delete: building it is no fix
    if settings.store == "memory":
        (settings.index_dir / "memory" / f"{name}.json").unlink()
    elif settings.store == "faiss":
        directory = settings.index_dir / "faiss" / name
        # Out of the way in one rename (a kill during rmtree leaves a leftover the next run removes, not half an index).
        retired = directory.with_name(f"{temporary_prefix(name)}deleted")
        os.rename(directory, retired)
        shutil.rmtree(retired, ignore_errors=True)
    elif settings.store == "opensearch":
        delete_opensearch_index(settings, name)
    else:
        elasticsearch_client(settings).indices.delete(index=name)
    shutil.rmtree(settings.bm25_cache_of(name), ignore_errors=True)  # its BM25 indexes (embedded stores)
    return info


def collection_manifest(settings: Settings, name: str) -> dict:
    """The manifest of the collection ``name`` (what it holds, its item counts), without loading its documents where the store allows."""
    check_settings(settings)
    check_collection_name(name)
    manifest = saved_manifest(settings, name)
    if manifest is None:
        raise _unknown(settings, name)
    return manifest


def open_collection(
    settings: Settings, name: str, embeddings: bool = False, progress: bool = True, on_progress: ProgressCallback | None = None
) -> Index:
    """The collection ``name``: a SubjQA one re-indexed first when its source files changed (as ``--domain``), any other as saved."""
    check_settings(settings)
    check_collection_name(name)
    index = None if settings.store == "memory" else try_open_index(settings, name)
    manifest = collection_manifest(settings, name) if index is None else index.manifest
    if manifest.get("domains") and manifest.get("source"):
        return open_or_build_index(settings, manifest["domains"], embeddings, progress, on_progress, name=name)
    return index or try_open_index(settings, name)


def document_text(index: Index, document_id: str) -> str:
    """The whole text of one document of ``index``, put back together from its passages (where the page
    highlights an answer, at the offsets ``source_span`` gives)."""
    passages = index.store.filter_documents(filters={"field": "meta.document_id", "operator": "==", "value": document_id})
    if not passages:  # a SubjQA review, or a collection indexed before passages had a document_id
        passages = index.store.filter_documents(filters={"field": "id", "operator": "==", "value": document_id})
    if not passages:
        raise QAError(
            f"No document '{document_id}' in collection '{index.name}'.", "pick a document id that `qa-system search --collection` shows."
        )
    return source_text(passages)
