"""Indexing: SubjQA reviews -> (embedded) documents -> a saved document store."""

from __future__ import annotations

import platform
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Callable, Sequence

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from qa_system.config import Settings
from qa_system.data import SPLITS, load_subjqa
from qa_system.errors import QAError
from qa_system.stores import Index, elasticsearch_store, index_name, new_faiss_store, new_memory_store, save_index, try_open_index

# on_progress(done, total): reviews embedded so far, out of all.
ProgressCallback = Callable[[int, int], None]
EMBED_CHUNK = 8  # batches per progress report


def embed_documents(
    documents: list[Document],
    model: str,
    batch_size: int = 32,
    progress: bool = True,
    on_progress: ProgressCallback | None = None,
) -> list[Document]:
    """Passage embeddings (unit length, so dot product = cosine in every store).

    Embeds in chunks of ``EMBED_CHUNK`` batches so that a caller (the search page's progress bar)
    hears ``on_progress(done, total)`` while the long first indexing runs.
    """
    from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersDocumentEmbedder
    from tqdm.auto import tqdm

    embedder = SentenceTransformersDocumentEmbedder(
        model=model, batch_size=batch_size, progress_bar=False, normalize_embeddings=True
    )
    try:
        embedder.warm_up()
    except (OSError, ValueError) as error:
        raise QAError(f"Could not load the embedding model '{model}' ({error}).", "pass a local model path or an id of the Hugging Face hub.") from error
    chunk = EMBED_CHUNK * batch_size
    embedded: list[Document] = []
    with tqdm(total=len(documents), desc="embedding", unit="review", disable=not progress) as bar:
        for begin in range(0, len(documents), chunk):
            embedded += embedder.run(documents=documents[begin : begin + chunk])["documents"]
            bar.update(len(embedded) - bar.n)
            if on_progress is not None:
                on_progress(len(embedded), len(documents))
    return embedded


def build_index(
    settings: Settings,
    domains: str | Sequence[str] = "electronics",
    splits: Sequence[str] = SPLITS,
    embed: bool = True,
    progress: bool = True,
    documents: list[Document] | None = None,
    name: str | None = None,
    on_progress: ProgressCallback | None = None,
) -> Index:
    """Index the domain's reviews (all splits by default) and save the index atomically.

    ``documents`` indexes a ready list instead of SubjQA (tests, synthetic corpora). Nothing is
    written until every document is loaded and embedded, so a failed run keeps the old index.
    """
    domains = [domains] if isinstance(domains, str) else list(domains)
    name = name or index_name(domains)
    manifest: dict = {"domains": domains, "splits": list(splits), "created": datetime.now(timezone.utc).isoformat()}
    if documents is None:
        data = load_subjqa(domains, splits, settings.data_dir)
        documents = data.documents
        manifest["load_report"] = data.report.summary()
    if not documents:
        raise QAError("There are no documents to index.", "check the domain, splits and data directory.")
    timings = {}
    start = time.perf_counter()
    if embed:
        documents = embed_documents(documents, settings.embedding_model, settings.batch_size, progress, on_progress)
        manifest["embedding_model"] = settings.embedding_model
        manifest["embedding_dim"] = len(documents[0].embedding)
        timings["embedding_s"] = time.perf_counter() - start
    if settings.store == "faiss":
        if not embed:
            raise QAError("A FAISS index holds vectors, so it cannot be built with --no-embed.", "drop --no-embed, or use --store memory.")
        store = new_faiss_store(manifest["embedding_dim"])
    elif settings.store == "elasticsearch":
        store = elasticsearch_store(settings, name)
    else:
        store = new_memory_store(name)
    write_start = time.perf_counter()
    store.write_documents(documents, policy=DuplicatePolicy.OVERWRITE)
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
    return index


def open_or_build_index(
    settings: Settings,
    domains: str | Sequence[str] = "electronics",
    embeddings: bool = True,
    progress: bool = True,
    on_progress: ProgressCallback | None = None,
) -> Index:
    """The saved index, or a new one on first use (and a re-embedded one when the encoder changed)."""
    index = try_open_index(settings, index_name(domains))
    stale = embeddings and (index is not None) and index.embedding_model != settings.embedding_model
    if index is None or stale:
        index = build_index(settings, domains, embed=embeddings or settings.store == "faiss", progress=progress, on_progress=on_progress)
    return index
