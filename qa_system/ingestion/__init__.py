"""Ingestion: your own documents (CSV / TSV, JSON lines, SQuAD JSON, .txt / .md / .html / .pdf) -> named collections.

``ingest(settings, source, collection)`` reads a source into a collection (incrementally), and
``list_collections`` / ``delete_collection`` / ``open_collection`` manage collections.
"""

from qa_system.ingestion.collections import (
    CollectionInfo,
    check_collection_name,
    check_own_collection_name,
    collection_info,
    collection_manifest,
    collection_name_from,
    delete_collection,
    document_text,
    list_collections,
    open_collection,
)
from qa_system.ingestion.ingest import IngestProgress, IngestReport, ingest
from qa_system.ingestion.splitting import PassageSplitter, source_span, source_text
from qa_system.sources.records import IngestOptions

__all__ = [
    "CollectionInfo",
    "IngestOptions",
    "IngestProgress",
    "IngestReport",
    "PassageSplitter",
    "check_collection_name",
    "check_own_collection_name",
    "collection_info",
    "collection_manifest",
    "collection_name_from",
    "delete_collection",
    "document_text",
    "ingest",
    "list_collections",
    "open_collection",
    "source_span",
    "source_text",
]
