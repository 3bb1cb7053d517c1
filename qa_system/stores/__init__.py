"""Stores: documents in -> a saved, atomically swapped index out: memory | faiss | elasticsearch | opensearch, with manifests.

An *index* is a named, persisted store plus a manifest (what was indexed, with which encoder),
behind one factory (``factory.py``: ``open_index``, ``save_index``). Saving is atomic
(``qa_system.disk_cache``): the new index is written beside the old one and swapped in with a rename, so a
crash or a bad run never leaves a half-written index behind or loses the previous one. One module
per backend; ``meta_filters.py`` holds the filters over list-valued metadata and the memory store
that uses them.
"""

from qa_system.disk_cache import TemporaryOwner, atomic_file, remove_leftovers, temporary_owner, temporary_prefix
from qa_system.stores.elasticsearch import elasticsearch_client, elasticsearch_store
from qa_system.stores.factory import (
    open_index,
    save_index,
    saved_document_count,
    saved_manifest,
    saved_signature,
    store_problem,
    try_open_index,
)
from qa_system.stores.faiss import new_faiss_store
from qa_system.stores.index import MANIFEST_KEY, SUBJQA_PREFIX, Index, IndexGone, check_domains, index_name, saved_version
from qa_system.stores.memory import memory_documents, new_memory_store, write_memory_index
from qa_system.stores.opensearch import (
    CONCRETE_INDEX_NAME,
    OPENSEARCH_ANALYZER,
    OPENSEARCH_FIX,
    OPENSEARCH_KNN_METHOD,
    OPENSEARCH_SETTINGS,
    delete_opensearch_index,
    discard_opensearch_index,
    new_opensearch_index,
    opensearch_client,
    opensearch_has_knn,
    opensearch_index_body,
    remove_leftover_indices,
    saving_stopped,
)

__all__ = [
    "store_problem",
    "CONCRETE_INDEX_NAME",
    "MANIFEST_KEY",
    "OPENSEARCH_ANALYZER",
    "OPENSEARCH_FIX",
    "OPENSEARCH_KNN_METHOD",
    "OPENSEARCH_SETTINGS",
    "SUBJQA_PREFIX",
    "Index",
    "IndexGone",
    "TemporaryOwner",
    "atomic_file",
    "delete_opensearch_index",
    "discard_opensearch_index",
    "elasticsearch_client",
    "elasticsearch_store",
    "check_domains",
    "index_name",
    "memory_documents",
    "new_faiss_store",
    "new_memory_store",
    "new_opensearch_index",
    "open_index",
    "opensearch_client",
    "opensearch_has_knn",
    "opensearch_index_body",
    "remove_leftover_indices",
    "remove_leftovers",
    "save_index",
    "saved_document_count",
    "saved_manifest",
    "saved_signature",
    "saved_version",
    "saving_stopped",
    "temporary_owner",
    "temporary_prefix",
    "try_open_index",
    "write_memory_index",
]
