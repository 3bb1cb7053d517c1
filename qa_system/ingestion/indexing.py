"""Indexing: SubjQA reviews -> (embedded) documents -> a saved document store."""

from __future__ import annotations

import hashlib
import logging
import platform
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from qa_system.config import Settings, check_settings
from qa_system.errors import QAError, Unavailable
from qa_system.ingestion.embedding import LEGACY_BACKEND, DocumentEmbedder, indexing_backend, load_encoder
from qa_system.model_files import model_fingerprint
from qa_system.sources import SPLITS, available_splits, load_subjqa, source_files
from qa_system.sources.columns import column_types
from qa_system.stores import (
    Index,
    check_domains,
    discard_opensearch_index,
    elasticsearch_store,
    index_name,
    new_faiss_store,
    new_memory_store,
    new_opensearch_index,
    opensearch_client,
    opensearch_has_knn,
    save_index,
    saved_document_count,
    saved_manifest,
    saving_stopped,
    try_open_index,
)

# on_progress(done, total): reviews embedded so far, out of all.
ProgressCallback = Callable[[int, int], None]
EMBED_CHUNK = 8  # batches per progress report
# A re-index that would keep less than this share of the saved index's documents needs force=True:
# a truncated or header-only file must not silently replace a good index.
MIN_KEPT_SHARE = 0.5
# The documents' layout; an index of an older one is rebuilt from its source files. 2: one document
# per review, its ``split`` meta listing its splits (1: one document per review and split).
INDEX_FORMAT = 2

logger = logging.getLogger(__name__)


def source_state(files: Sequence[Path]) -> dict:
    """What an index was built from: each file's resolved path, size, modification time and content digest."""
    state = {}
    for path in files:
        stat = path.stat()
        with path.open("rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        state[str(path.resolve())] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    return state


def source_change(index: Index, settings: Settings) -> str | None:
    """Why the index no longer matches its source files (None when it does, or when it recorded none).

    A source file that is gone is an error, not a change: answers would come from data that no
    longer exists. Size and time are compared first; an equal digest means only the time moved.
    """
    recorded = index.manifest.get("source")
    if not recorded:
        return None
    wanted = source_files(index.manifest.get("domains", []), index.manifest.get("splits", []), settings.data_dir)
    missing = [path for path in wanted if not path.is_file()]
    if missing and str(missing[0].resolve()) in recorded:
        raise QAError(
            f"The index '{index.name}' was built from {missing[0].resolve()}, which no longer exists.",
            "put the file back, or rebuild the index from the data you have with `qa-system index --data-dir DIR`.",
        )
    if missing:  # another data directory, without the files: say where the index was built from
        built_from = Path(next(iter(recorded))).parents[2]  # <data dir>/<domain>/splits/<split>.csv
        raise QAError(
            f"{missing[0]} does not exist: the index '{index.name}' was built from the data in {built_from}, not {settings.data_dir}.",
            f"pass --data-dir {built_from} (or set QA_DATA_DIR), or build the index from other data with `qa-system index --data-dir DIR`.",
        )
    if index.manifest.get("format", 1) < INDEX_FORMAT:
        return "it was built by an older qa-system, with one document per review and split"
    current = {str(path.resolve()): path for path in wanted}
    if set(current) != set(recorded):
        return f"the data directory is now {settings.data_dir}"
    changed = []
    for key, path in current.items():
        stat, before = path.stat(), recorded[key]
        if (stat.st_size, stat.st_mtime_ns) != (before["size"], before["mtime_ns"]) and source_state([path])[key]["sha256"] != before[
            "sha256"
        ]:
            changed.append(path.name if path.parent.parent.name == "" else f"{path.parent.parent.name}/{path.name}")
    return f"{', '.join(changed)} changed" if changed else None


def embeddings_match(index: Index, settings: Settings, backend: bool = True) -> bool:
    """Whether the index's vectors come from the configured encoder (same name and, when known, same files)
    and, with ``backend``, from the backend that would embed it now (``embedding.indexing_backend``)."""
    if index.embedding_model != settings.embedding_model:
        return False
    stored = index.manifest.get("embedding_fingerprint")
    # Indexes built before fingerprints were recorded are trusted by name.
    if stored is not None and stored != model_fingerprint(settings.embedding_model):
        return False
    return not backend or embedding_backend(index.manifest) == indexing_backend(settings.embedding_backend, settings.device)


def embedding_backend(manifest: dict) -> str:
    """The backend that embedded an index (its questions are embedded by the same one)."""
    return manifest.get("embedding_backend", LEGACY_BACKEND)


def document_embedder(
    model: str, batch_size: int = 32, backend: str = "torch", device: str = "auto", cache: str | Path | None = None
) -> DocumentEmbedder:
    """A loaded passage embedder (unit-length vectors, so dot product = cosine in every store); ``.backend`` says
    which backend runs (onnx falls back to torch when its export cannot be built)."""
    return DocumentEmbedder(load_encoder(model, backend, device, cache), batch_size)


def settings_embedder(settings: Settings, backend: str | None = None) -> DocumentEmbedder:
    """The passage embedder of ``settings`` (``backend``: a collection's recorded one instead of the settings')."""
    backend = backend or indexing_backend(settings.embedding_backend, settings.device)
    return document_embedder(settings.embedding_model, settings.batch_size, backend, settings.device, settings.embedding_onnx_cache)


def embed_documents(
    documents: list[Document],
    model: str,
    batch_size: int = 32,
    progress: bool = True,
    on_progress: ProgressCallback | None = None,
    embedder: DocumentEmbedder | None = None,
) -> list[Document]:
    """Passage embeddings (by ``embedder``, default ``document_embedder(model, batch_size)``).

    Embeds in chunks of ``EMBED_CHUNK`` batches so that a caller (the search page's progress bar)
    hears ``on_progress(done, total)`` while the long first indexing runs.
    """
    from qa_system.progress import Progress

    embedder = embedder or document_embedder(model, batch_size)
    chunk = EMBED_CHUNK * batch_size
    embedded: list[Document] = []
    with Progress(len(documents), "embedding", "reviews", enabled=progress) as bar:
        for begin in range(0, len(documents), chunk):
            embedded += embedder.run(documents=documents[begin : begin + chunk])["documents"]
            bar.update(len(embedded) - bar.n)
            if on_progress is not None:
                on_progress(len(embedded), len(documents))
    return embedded


def build_index(
    settings: Settings,
    domains: str | Sequence[str] = "electronics",
    splits: Sequence[str] | None = None,
    embed: bool = True,
    progress: bool = True,
    documents: list[Document] | None = None,
    name: str | None = None,
    on_progress: ProgressCallback | None = None,
    force: bool = False,
) -> Index:
    """Index the domain's reviews (by default every split the domains have, e.g. dev and test only for
    books) and save the index atomically.

    ``documents`` indexes a ready list instead of SubjQA (tests, synthetic corpora). Nothing is
    written until every document is loaded and embedded, so a failed run keeps the old index; nor
    when the new documents are fewer than ``MIN_KEPT_SHARE`` of the saved index's, unless ``force``.
    """
    check_settings(settings)
    domains = check_domains(domains)
    name = name or index_name(domains)
    if splits is None:  # the splits every domain has (an unknown domain: all, so that loading names the problem)
        splits = [s for s in SPLITS if all(s in available_splits(settings.data_dir, d) for d in domains)] or SPLITS
    manifest: dict = {"domains": domains, "splits": list(splits), "format": INDEX_FORMAT, "created": datetime.now(UTC).isoformat()}
    if documents is None:
        documents = _subjqa_documents(settings, domains, splits, manifest)
        if kept := _kept_bm25_setting(settings, name):
            manifest["calibration"] = {"bm25": kept}
    else:  # fields of their own, which filters are checked against (not SubjQA's)
        manifest["meta_types"] = column_types(d.meta for d in documents)
    _check_replaceable(settings, name, documents, force)
    timings = {}
    start = time.perf_counter()
    if settings.store == "opensearch":
        # Elasticsearch OSS and OpenSearch without the k-NN plugin hold no vectors: BM25 only (dense says why).
        manifest["vector_search"] = opensearch_has_knn(opensearch_client(settings))
        embed = embed and manifest["vector_search"]
    if embed:
        embedder = settings_embedder(settings)
        documents = embed_documents(documents, settings.embedding_model, settings.batch_size, progress, on_progress, embedder)
        manifest["embedding_model"] = settings.embedding_model
        manifest["embedding_backend"] = embedder.backend
        manifest["embedding_fingerprint"] = model_fingerprint(settings.embedding_model)
        manifest["embedding_dim"] = len(documents[0].embedding)
        timings["embedding_s"] = time.perf_counter() - start
    store = _new_store(settings, name, embed, manifest.get("embedding_dim"))
    try:
        write_start = time.perf_counter()
        # A new OpenSearch index is refreshed once, when it is swapped in, not after every bulk request.
        options = {"refresh": False} if settings.store == "opensearch" else {}
        store.write_documents(documents, policy=DuplicatePolicy.OVERWRITE, **options)
        if settings.store == "elasticsearch":  # written in place: what the new corpus lacks (or an older format's ids) must go
            _delete_others(store, documents)
        timings["write_s"] = time.perf_counter() - write_start
        timings["total_s"] = time.perf_counter() - start
        manifest.update(
            documents=len(documents),
            item_counts=dict(Counter(d.meta.get("item_id") for d in documents if d.meta.get("item_id"))),
            build_timings=timings,
            machine={"platform": platform.platform(), "python": platform.python_version()},
        )
        index = Index(settings.store, name, store, manifest)
        save_index(index, settings)
    except Unavailable:  # an OpenSearch that stopped answering: the alias still serves a complete index
        if settings.store != "opensearch":
            raise
        discard_opensearch_index(settings, store)
        raise saving_stopped(settings, name) from None
    except BaseException:
        if settings.store == "opensearch":
            discard_opensearch_index(settings, store)
        raise
    return index


def _subjqa_documents(settings: Settings, domains: list[str], splits: Sequence[str], manifest: dict) -> list[Document]:
    """The reviews of ``domains`` in ``splits``; the load report and the source files' state go into ``manifest``."""
    files = source_files(domains, splits, settings.data_dir)
    data = load_subjqa(domains, splits, settings.data_dir)
    manifest["load_report"] = data.report.summary()
    manifest["source"] = source_state(files)
    return data.documents


def _kept_bm25_setting(settings: Settings, name: str) -> dict | None:
    """The BM25 setting ``tune-bm25 --apply`` stored in the index rebuilt (``retrieval.fitted.bm25_fit``): it holds for the
    domain's reviews, read again, while the other fits go with the vectors they were made with."""
    try:
        return ((saved_manifest(settings, name) or {}).get("calibration") or {}).get("bm25")
    except QAError:  # an unreadable index: nothing to keep
        return None


def _check_replaceable(settings: Settings, name: str, documents: list[Document], force: bool) -> None:
    """Refuse an empty corpus, and one under ``MIN_KEPT_SHARE`` of the saved index's documents unless ``force``."""
    if not documents:
        raise QAError("There are no documents to index.", "check the domain, splits and data directory.")
    saved = saved_document_count(settings, name)
    if saved and len(documents) < MIN_KEPT_SHARE * saved and not force:
        raise QAError(
            f"The new data holds {len(documents)} documents where the saved index '{name}' holds {saved}; the index was left as it was.",
            "check the data files (a truncated or header-only file?), or pass --force to replace the index anyway.",
        )


def _new_store(settings: Settings, name: str, embedded: bool, embedding_dim: int | None):
    """An empty document store of the configured backend for the index ``name`` (Elasticsearch's is the live one, written in place)."""
    if settings.store == "faiss":
        if not embedded:
            raise QAError("A FAISS index holds vectors, so it cannot be built with --no-embed.", "drop --no-embed, or use --store memory.")
        return new_faiss_store(embedding_dim)
    if settings.store == "elasticsearch":
        return elasticsearch_store(settings, name)
    if settings.store == "opensearch":
        # A new index beside the one in service; save_index swaps it in.
        return new_opensearch_index(settings, name, embedding_dim)
    return new_memory_store(name)


def _delete_others(store, documents: list[Document]) -> None:
    """Delete the store's documents whose ids are not among ``documents``'."""
    keep = {d.id for d in documents}
    stale = [d.id for d in store.filter_documents() if d.id not in keep]
    if stale:
        store.delete_documents(stale)


def open_or_build_index(
    settings: Settings,
    domains: str | Sequence[str] = "electronics",
    embeddings: bool = True,
    progress: bool = True,
    on_progress: ProgressCallback | None = None,
    name: str | None = None,
) -> Index:
    """The saved index (``name``, default named after the domains), or a new one on first use, a
    re-embedded one when the encoder changed (even in place), and a rebuilt one when its source
    files changed (a missing source file is an error)."""
    index = try_open_index(settings, name or index_name(domains))
    # An index on a server without vector search (OpenSearch without k-NN) has none to refresh.
    stale = embeddings and (index is not None) and index.manifest.get("vector_search", True) and not embeddings_match(index, settings)
    changed = index is not None and source_change(index, settings)
    if changed:
        logger.warning("The index '%s' is out of date (%s): re-indexing.", index.name, changed)
    if index is None or stale or changed:
        embed = embeddings or settings.store == "faiss" or bool(changed and index.embedding_model)
        index = build_index(settings, domains, embed=embed, progress=progress, name=name, on_progress=on_progress)
    return index
