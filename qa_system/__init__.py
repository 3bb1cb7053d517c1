"""qa_system: retriever-reader question answering over product reviews, built on Haystack.

The public API, imported lazily so that `qa-system --help` starts fast::

    import qa_system
    settings = qa_system.Settings.from_env()
    qa_system.build_index(settings, "electronics")
    pipeline = qa_system.build_retrieval_pipeline("hybrid", settings)
    pipeline.run("Is it good for reading?", item_id="B0074BW614", top_k=3)["documents"]
"""

from importlib import import_module
from typing import TYPE_CHECKING

from qa_system.telemetry import haystack_telemetry_off

if TYPE_CHECKING:  # what type checkers and editors see; at run time each name is imported when first used
    from qa_system.config import Settings as Settings
    from qa_system.errors import QAError as QAError
    from qa_system.evaluation.answering import evaluate_pipelines as evaluate_pipelines, evaluate_readers as evaluate_readers
    from qa_system.evaluation.retrieval import evaluate_retrievers as evaluate_retrievers
    from qa_system.ingestion import (
        IngestOptions as IngestOptions,
        delete_collection as delete_collection,
        ingest as ingest,
        list_collections as list_collections,
        open_collection as open_collection,
    )
    from qa_system.ingestion.changes import delete_documents as delete_documents
    from qa_system.ingestion.indexing import build_index as build_index
    from qa_system.ingestion.labels import load_labels as load_labels
    from qa_system.pipelines import build_qa_pipeline as build_qa_pipeline, build_retrieval_pipeline as build_retrieval_pipeline
    from qa_system.retrieval import make_filters as make_filters
    from qa_system.sources import load_subjqa as load_subjqa
    from qa_system.stores import open_index as open_index

haystack_telemetry_off()  # before anything of qa_system imports Haystack (telemetry.py says why)

__version__ = "0.1.0"

_EXPORTS = {
    "Settings": "qa_system.config",
    "QAError": "qa_system.errors",
    "load_subjqa": "qa_system.sources",
    "build_index": "qa_system.ingestion.indexing",
    "open_index": "qa_system.stores",
    "build_retrieval_pipeline": "qa_system.pipelines",
    "build_qa_pipeline": "qa_system.pipelines",
    "make_filters": "qa_system.retrieval",
    "evaluate_retrievers": "qa_system.evaluation.retrieval",
    "evaluate_pipelines": "qa_system.evaluation.answering",
    "evaluate_readers": "qa_system.evaluation.answering",
    "load_labels": "qa_system.ingestion.labels",
    "ingest": "qa_system.ingestion",
    "IngestOptions": "qa_system.ingestion",
    "list_collections": "qa_system.ingestion",
    "open_collection": "qa_system.ingestion",
    "delete_collection": "qa_system.ingestion",
    "delete_documents": "qa_system.ingestion.changes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'qa_system' has no attribute {name!r}")


def __dir__() -> list[str]:  # tab completion lists the public API before it is imported
    return sorted({*globals(), *_EXPORTS})
