"""Haystack pipelines built from the YAML files in ``pipelines/``.

A YAML file names components by role; ``${...}`` placeholders pick the component classes that
fit the store backend (memory, elasticsearch, opensearch, faiss) and the models from the settings. The
opened index's store object is then handed to every component that has a ``document_store``, so
all pipelines of a process share one loaded index.

A retrieval pipeline may end with answerability re-ranking (``rerank.yml``); hybrid fusion and
re-ranking read the parameters fitted on dev from the index manifest (``retrieval.fitted``, written by ``tuning.fusion``).

An answering pipeline is a retrieval pipeline (``bm25.yml``, ``dense.yml``, ``hybrid.yml``) with an
answer stage appended (``extractive.yml``, or ``rag.yml`` for generated answers), merged into one
Haystack pipeline.

``QAPipeline.run(query, item_id=..., top_k=...)`` is the one calling convention used by the CLI,
the UI and the evaluation; ``.pipeline`` is the plain Haystack pipeline. ``export_pipeline`` writes
that pipeline as plain Haystack YAML, settings resolved, which ``Pipeline.loads`` and Hayhooks read as it is.
"""

from qa_system.pipelines.loading import (
    ANSWER_STAGES,
    FUSION_CANDIDATES,
    PIPELINES_DIR,
    RERANK_CANDIDATES,
    RETRIEVAL_OUTPUT,
    load_pipeline,
    render_pipeline_yaml,
    use_runtime,
)
from qa_system.pipelines.portable import SavedMemoryStore, export_pipeline
from qa_system.pipelines.qa_pipeline import (
    QAPipeline,
    build_qa_pipeline,
    build_retrieval_pipeline,
    check_embeddings,
    check_item,
    validate_question,
)

__all__ = [
    "ANSWER_STAGES",
    "FUSION_CANDIDATES",
    "PIPELINES_DIR",
    "RERANK_CANDIDATES",
    "RETRIEVAL_OUTPUT",
    "QAPipeline",
    "SavedMemoryStore",
    "build_qa_pipeline",
    "build_retrieval_pipeline",
    "check_embeddings",
    "check_item",
    "export_pipeline",
    "load_pipeline",
    "render_pipeline_yaml",
    "use_runtime",
    "validate_question",
]
