"""Document stores behind one factory: memory (default, saved to a file) | elasticsearch | opensearch | faiss.

An *index* is a named, persisted store plus a manifest (what was indexed, with which encoder).
Saving is atomic: the new index is written beside the old one and swapped in with a rename, so a
crash or a bad run never leaves a half-written index behind or loses the previous one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore

from qa_system.config import Settings
from qa_system.errors import QAError, Unavailable
from qa_system.meta_filters import MultiValueInMemoryDocumentStore

MANIFEST_KEY = "qa_system"
logger = logging.getLogger(__name__)


def index_name(domains: str | Sequence[str]) -> str:
    domains = [domains] if isinstance(domains, str) else sorted(domains)
    return "subjqa-" + "-".join(domains)


@dataclass
class Index:
    """A document store together with what we know about its contents."""

    backend: str
    name: str
    store: Any
    manifest: dict = field(default_factory=dict)

    @property
    def embedding_model(self) -> str | None:
        return self.manifest.get("embedding_model")

    def item_counts(self) -> dict[str, int]:
        """Reviews per product (item_id), for product pickers and 'unknown product' errors."""
        return dict(self.manifest.get("item_counts", {}))


# ---------------------------------------------------------------------------- memory


def _memory_path(settings: Settings, name: str) -> Path:
    return settings.index_dir / "memory" / f"{name}.json"


# A temporary file or directory is ".<name>~<pid>~<random><suffix>". No collection or index file name
# holds '~', so a name ends at the first '~': a cleanup of 'cc' can never take a file of 'cc.v2' or of
# 'cc.json' for its own (the dotted form before, ".<name>.<pid>.<random>", could: 'v2' read as a pid).
_OWNER_END = "~"
# That dotted form, read from the right (its random part is 8 characters without a dot), so that the
# leftovers of runs killed before the change are still recognised.
_DOTTED = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.(?:[a-z0-9_]{8}(?:\.tmp|\.jsonl|\.old)?|deleted)")


class TemporaryOwner(NamedTuple):
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


def new_memory_store(name: str) -> InMemoryDocumentStore:
    # Not shared: pipelines get this very object injected (see pipelines.py), and a process-global
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
        raise QAError(f"The saved index {path} is unreadable ({error}).", f"rebuild it with `qa-system index` (or delete {path}).") from error
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
            handle.write(document if isinstance(document, str) else json.dumps(document))
            count += 1
        handle.write("\n" + _MANIFEST_OPEN + json.dumps({**manifest, "documents": count}) + "}\n")
    return count


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


# ---------------------------------------------------------------------------- faiss


def _faiss_dir(settings: Settings, name: str) -> Path:
    return settings.index_dir / "faiss" / name


def new_faiss_store(embedding_dim: int, index_string: str = "Flat"):
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


# ---------------------------------------------------------------------------- elasticsearch


def elasticsearch_client(settings: Settings):
    """An Elasticsearch client on ``settings.es_url``, after checking the server answers."""
    from elasticsearch import Elasticsearch

    fix = "start it with `docker compose up -d elasticsearch` or set QA_ES_URL to a running server."
    try:
        client = Elasticsearch(settings.es_url, request_timeout=5)
        reachable = client.ping()
    except Exception:  # the client raises many types for bad URLs and refused connections
        reachable = False
    if not reachable:
        raise Unavailable(f"Elasticsearch at {settings.es_url} is unreachable.", fix)
    return Elasticsearch(settings.es_url, request_timeout=60)


def elasticsearch_store(settings: Settings, name: str):
    """An ElasticsearchDocumentStore on ``settings.es_url``, after checking the server answers."""
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    elasticsearch_client(settings)
    return ElasticsearchDocumentStore(hosts=settings.es_url, index=name, embedding_similarity_function="cosine")


def _load_elasticsearch(settings: Settings, name: str) -> Index | None:
    store = elasticsearch_store(settings, name)
    if store.count_documents() == 0:
        return None
    mapping = store.client.indices.get_mapping(index=name)
    manifest = mapping[name]["mappings"].get("_meta", {}).get(MANIFEST_KEY, {})
    return Index("elasticsearch", name, store, manifest)


def _save_elasticsearch(index: Index, settings: Settings) -> None:
    # Documents are already written (with deterministic ids, so a re-index overwrites in place);
    # the manifest lives in the index mapping's _meta so that every client sees the same one.
    index.store.client.indices.put_mapping(index=index.name, meta={MANIFEST_KEY: index.manifest})
    index.store.client.indices.refresh(index=index.name)


# ---------------------------------------------------------------------------- opensearch
# The index name is an alias over one concrete index, ``<name>--<utc time>-<random>``. Building an
# index writes a new concrete index beside the one in service and then moves the alias in one
# atomic ``_aliases`` call: searches see the old reviews until the new ones are complete, a failed
# run leaves the old index serving (its half-written successor is deleted), and reviews missing
# from the new corpus are gone after the swap. Servers without the k-NN plugin (e.g. Elasticsearch 7
# OSS, which the tests run) get an index without vectors: BM25 works, dense retrieval says why not.

OPENSEARCH_FIX = "start an OpenSearch server there, or set QA_OPENSEARCH_URL (--opensearch-url) to a running one."
# BM25 as the memory store's bm25s defaults (see retrieval/bm25.py): English (Snowball) stemming,
# stopwords kept, k1 1.2, b 1.0; one shard, so that term statistics are corpus-wide as there.
OPENSEARCH_ANALYZER = {"tokenizer": "standard", "filter": ["lowercase", "porter2_english"]}
OPENSEARCH_SETTINGS = {
    "index": {
        "number_of_shards": 1,
        "similarity": {"default": {"type": "BM25", "k1": 1.2, "b": 1.0}},
        "analysis": {
            "filter": {"porter2_english": {"type": "stemmer", "language": "porter2"}},
            "analyzer": {"default": OPENSEARCH_ANALYZER},
        },
    }
}
# Unit-length vectors (embed_documents normalises), compared by cosine; the Lucene engine filters
# inside the k-NN search (efficient filtering), so a product's reviews are found however few.
OPENSEARCH_KNN_METHOD = {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"}


def _opensearch_auth() -> list[str] | None:
    """The credentials the OpenSearch integration reads (OPENSEARCH_USERNAME / OPENSEARCH_PASSWORD), if set."""
    from haystack.utils.auth import Secret

    username = Secret.from_env_var("OPENSEARCH_USERNAME", strict=False).resolve_value()
    password = Secret.from_env_var("OPENSEARCH_PASSWORD", strict=False).resolve_value()
    return [username, password] if username and password else None


def opensearch_client(settings: Settings):
    """An OpenSearch client on ``settings.opensearch_url``, after checking that the server answers."""
    from opensearchpy import OpenSearch
    from opensearchpy.exceptions import AuthenticationException, AuthorizationException

    url = settings.opensearch_url
    try:
        OpenSearch(hosts=url, http_auth=_opensearch_auth(), timeout=5, max_retries=0).info()
    except (AuthenticationException, AuthorizationException) as error:
        raise QAError(f"OpenSearch at {url} refused the request ({error.status_code}).", "set OPENSEARCH_USERNAME and OPENSEARCH_PASSWORD.") from None
    except Exception:  # the client raises many types for bad URLs and refused connections
        raise Unavailable(f"OpenSearch at {url} is unreachable.", OPENSEARCH_FIX) from None
    return OpenSearch(hosts=url, http_auth=_opensearch_auth(), timeout=60)


def opensearch_has_knn(client) -> bool:
    """Whether the server has the k-NN plugin (vector fields and search); Elasticsearch OSS has not."""
    try:
        plugins = client.cat.plugins(format="json")
    except Exception:  # managed services may forbid _cat/plugins; they ship k-NN
        return True
    return any("knn" in str(plugin.get("component", "")) for plugin in plugins)


def opensearch_index_body(embedding_dim: int | None) -> dict:
    """Settings and mappings of a new concrete index; a k-NN vector field when ``embedding_dim`` is given."""
    mappings: dict[str, Any] = {
        "properties": {"content": {"type": "text"}},
        # Metadata strings (item_id, split, ...) are exact-match keywords, as the integration maps them.
        "dynamic_templates": [{"strings": {"match_mapping_type": "string", "mapping": {"type": "keyword"}}}],
    }
    settings = json.loads(json.dumps(OPENSEARCH_SETTINGS))
    if embedding_dim is not None:
        mappings["properties"]["embedding"] = {"type": "knn_vector", "dimension": embedding_dim, "method": OPENSEARCH_KNN_METHOD}
        settings["index"]["knn"] = True
    return {"settings": settings, "mappings": mappings}


def _opensearch_document_store(settings: Settings, index: str, body: dict | None = None):
    from haystack_integrations.document_stores.opensearch import OpenSearchDocumentStore

    body = body or {}
    dim = body.get("mappings", {}).get("properties", {}).get("embedding", {}).get("dimension", 768)
    # create_index=False: opening a name must never create an index (it would take the alias's name).
    return OpenSearchDocumentStore(
        hosts=settings.opensearch_url, index=index, create_index=False, embedding_dim=dim,
        mappings=body.get("mappings"), settings=body.get("settings"), timeout=60,
    )


def _store_index(store) -> str:
    return store.to_dict()["init_parameters"]["index"]


def new_opensearch_index(settings: Settings, name: str, embedding_dim: int | None):
    """A store on a new, empty concrete index beside the alias ``name`` (which it does not touch yet)."""
    from datetime import datetime, timezone
    from uuid import uuid4

    client = opensearch_client(settings)
    if embedding_dim is not None and not opensearch_has_knn(client):
        raise QAError(f"OpenSearch at {settings.opensearch_url} has no k-NN plugin, so it cannot store review vectors.", "index without vectors (--no-embed) or use a server with the k-NN plugin.")
    concrete = f"{name}--{datetime.now(timezone.utc):%Y%m%d%H%M%S}-{uuid4().hex[:6]}"
    body = opensearch_index_body(embedding_dim)
    client.indices.create(index=concrete, body=body)
    return _opensearch_document_store(settings, concrete, body)


def discard_opensearch_index(settings: Settings, store) -> None:
    """Delete a concrete index that never went into service (a failed build); best effort, the build's error matters more."""
    from opensearchpy import OpenSearch

    concrete = _store_index(store)
    try:
        OpenSearch(hosts=settings.opensearch_url, http_auth=_opensearch_auth(), timeout=60).indices.delete(index=concrete, ignore_unavailable=True)
    except Exception as error:  # noqa: BLE001
        logger.warning("Could not delete the unfinished OpenSearch index %s (%s); delete it by hand.", concrete, error)


def _aliased_indices(client, name: str) -> list[str]:
    """The concrete indices behind alias ``name`` (none when it does not exist or is a plain index)."""
    from opensearchpy.exceptions import NotFoundError

    try:
        return sorted(client.indices.get_alias(name=name))
    except NotFoundError:
        return []


def delete_opensearch_index(settings: Settings, name: str) -> None:
    """Remove the alias ``name`` and the concrete indices behind it (or a plain index of that name)."""
    client = opensearch_client(settings)
    for concrete in _aliased_indices(client, name) or [name]:
        client.indices.delete(index=concrete, ignore_unavailable=True)


def _load_opensearch(settings: Settings, name: str) -> Index | None:
    client = opensearch_client(settings)
    if not client.indices.exists(index=name):
        return None
    mapping = client.indices.get_mapping(index=name)
    concrete = next(iter(mapping))  # keyed by the concrete index behind the alias
    manifest = mapping[concrete]["mappings"].get("_meta", {}).get(MANIFEST_KEY)
    if manifest is None and client.count(index=name)["count"] == 0:
        return None
    dim = mapping[concrete]["mappings"].get("properties", {}).get("embedding", {}).get("dimension")
    return Index("opensearch", name, _opensearch_document_store(settings, name, opensearch_index_body(dim)), manifest or {})


def _save_opensearch(index: Index, settings: Settings) -> None:
    client = opensearch_client(settings)
    target = _store_index(index.store)
    client.indices.put_mapping(index=target, body={"_meta": {MANIFEST_KEY: index.manifest}})
    client.indices.refresh(index=target)
    if target == index.name:  # the index in service (e.g. a manifest update): nothing to swap
        return
    retired = _aliased_indices(client, index.name)
    actions = [{"remove": {"index": old, "alias": index.name}} for old in retired]
    actions.append({"add": {"index": target, "alias": index.name}})
    if not retired and client.indices.exists(index=index.name):
        actions.append({"remove_index": {"index": index.name}})  # a plain index of that name: replaced in the same step
    client.indices.update_aliases(body={"actions": actions})
    index.store = _opensearch_document_store(settings, index.name, opensearch_index_body(index.manifest.get("embedding_dim")))
    for old in retired:  # out of service now; a failure here must not undo the swap
        try:
            client.indices.delete(index=old, ignore_unavailable=True)
        except Exception as error:  # noqa: BLE001
            logger.warning("Could not delete the retired OpenSearch index %s (%s); delete it by hand.", old, error)


# ---------------------------------------------------------------------------- factory

_LOADERS = {"memory": _load_memory, "faiss": _load_faiss, "elasticsearch": _load_elasticsearch, "opensearch": _load_opensearch}
_SAVERS = {"memory": _save_memory, "faiss": _save_faiss, "elasticsearch": _save_elasticsearch, "opensearch": _save_opensearch}


def open_index(settings: Settings, domains: str | Sequence[str] = "electronics", name: str | None = None) -> Index:
    """Open a saved index; a clear error naming the `qa-system index` command when there is none."""
    name = name or index_name(domains)
    index = _LOADERS[settings.store](settings, name)
    if index is None:
        domain_args = " ".join(f"--domain {d}" for d in ([domains] if isinstance(domains, str) else domains))
        raise QAError(
            f"No {settings.store} index named '{name}' exists yet.",
            f"build it with `qa-system index {domain_args} --store {settings.store}`.",
        )
    return index


def try_open_index(settings: Settings, name: str) -> Index | None:
    return _LOADERS[settings.store](settings, name)


def saved_manifest(settings: Settings, name: str) -> dict | None:
    """The manifest of the saved index ``name`` (None when there is none); a memory index's is read
    from its last line, without loading its documents."""
    if settings.store != "memory":
        index = try_open_index(settings, name)
        return None if index is None else index.manifest
    path = _memory_path(settings, name)
    if not path.exists():
        return None
    try:
        return _memory_manifest(path)
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as error:
        raise QAError(f"The saved index {path} is unreadable ({error}).", f"rebuild it with `qa-system index` (or delete {path}).") from error


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
    _SAVERS[index.backend](index, settings)
