"""Pipeline YAML in -> a Haystack pipeline out: ``pipelines/*.yml`` rendered for the store backend and the settings, stages merged.

A YAML file names components by role; ``${...}`` placeholders pick the component classes that fit
the store backend and the models from the settings (``render_pipeline_yaml``). ``load_pipeline``
merges the re-ranking and answer stages into the retrieval pipeline and hands the opened index's
store object to every component that has a ``document_store``.
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template
from typing import Any

import yaml
from haystack import Pipeline

from qa_system.config import REPO_ROOT, Settings
from qa_system.errors import QAError
from qa_system.ingestion.indexing import embedding_backend
from qa_system.retrieval.fitted import OWN_BM25_STORES, bm25_parameters, fusion_values, recalibration_values, rerank_weight
from qa_system.stores import Index

PIPELINES_DIR = REPO_ROOT / "pipelines"

_COMPONENTS = {
    "memory": {
        "sparse_retriever": "qa_system.retrieval.bm25.BM25sRetriever",
        "dense_retriever": "haystack.components.retrievers.in_memory.embedding_retriever.InMemoryEmbeddingRetriever",
    },
    "faiss": {
        "sparse_retriever": "qa_system.retrieval.bm25.BM25sRetriever",
        "dense_retriever": "qa_system.retrieval.faiss_filtered.FAISSFilteredEmbeddingRetriever",
    },
    "elasticsearch": {
        "sparse_retriever": "haystack_integrations.components.retrievers.elasticsearch.bm25_retriever.ElasticsearchBM25Retriever",
        "dense_retriever": "haystack_integrations.components.retrievers.elasticsearch.embedding_retriever.ElasticsearchEmbeddingRetriever",
    },
    "opensearch": {
        "sparse_retriever": "haystack_integrations.components.retrievers.opensearch.bm25_retriever.OpenSearchBM25Retriever",
        "dense_retriever": "haystack_integrations.components.retrievers.opensearch.embedding_retriever.OpenSearchEmbeddingRetriever",
    },
}
# With fusion, each retriever hands over more candidates than the final top_k.
FUSION_CANDIDATES = 20
# With re-ranking, the retrieval stage hands over more candidates than the final top_k.
RERANK_CANDIDATES = 10
RETRIEVAL_OUTPUT = {"bm25": "sparse_retriever", "dense": "dense_retriever", "hybrid": "fusion"}
ANSWER_STAGES = ("extractive", "rag")


# OpenSearch's BM25 query as the integration writes it, with the words made optional under a filter: a filter in the
# bool query makes its `should` clause optional, so the documents a filter allows that share no word with the question
# follow the matching ones at score 0, as in the memory store (``BM25sRetriever.return_unmatched``); a product's reviews
# often answer in other words. Without a filter (`null` is skipped by the server) a word must match, as before.
OPENSEARCH_BM25_QUERY = {
    "query": {
        "bool": {
            "should": [{"multi_match": {"query": "$query", "fuzziness": 0, "type": "most_fields", "operator": "OR"}}],
            "filter": "$filters",
        }
    }
}


def _backend_parameters(index: Index, settings: Settings) -> dict[str, dict[str, Any]]:
    """Init parameters a backend's components need beside those of the YAML files: OpenSearch's k-NN
    search must filter inside the search (else the k nearest of all products are filtered afterwards), and its BM25
    search reads a filtered product's reviews as the memory store does (``OPENSEARCH_BM25_QUERY``); the project's own
    BM25 (memory and FAISS stores) takes the setting ``tune-bm25 --apply`` stored for the collection."""
    if index.backend == "opensearch":
        return {"dense_retriever": {"efficient_filtering": True}, "sparse_retriever": {"custom_query": OPENSEARCH_BM25_QUERY}}
    if index.backend in OWN_BM25_STORES and (fitted := bm25_parameters(index)):
        return {"sparse_retriever": fitted}
    return {}


def render_pipeline_yaml(name: str, index: Index, settings: Settings, extra: dict | None = None, directory: Path = PIPELINES_DIR) -> str:
    """``pipelines/<name>.yml`` with its placeholders filled for the index's backend, the settings' models and the fitted values."""
    path = directory / f"{name}.yml"
    if not path.exists():
        known = sorted(p.stem for p in directory.glob("*.yml"))
        raise QAError(f"No pipeline named '{name}' in {directory}.", f"use one of: {', '.join(known)}.")
    store_dict = index.store.to_dict()
    if index.backend == "faiss":
        store_dict["init_parameters"]["index_path"] = None  # the loaded store is injected instead
    values = {
        **_COMPONENTS[index.backend],
        "document_store": json.dumps(store_dict),
        "query_embedding_model": json.dumps(settings.query_embedding_model or settings.embedding_model),
        "query_embedding_backend": json.dumps(embedding_backend(index.manifest)),
        "reader_model": json.dumps(settings.reader_model),
        "selector_model": json.dumps(settings.selector_model),
        **fusion_values(index, settings),
        **recalibration_values(index, settings),
        **(extra or {}),
    }
    return Template(path.read_text(encoding="utf-8")).substitute(values)


def selector_fits(settings: Settings) -> bool:
    """Whether the answer selector of ``settings`` was trained for its reader (else the reader decides alone)."""
    from qa_system.reading.selection import selector_fits_reader

    return selector_fits_reader(settings.selector_model, settings.reader_model)


def _remove_selector(stage: dict) -> None:
    """The answer selector taken out of a stage: what it sent, the reader's answers send instead."""
    del stage["components"]["selector"]
    connections = []
    for connection in stage.get("connections", []):
        if connection["receiver"].startswith("selector."):
            continue
        if connection["sender"] == "selector.answers":
            connection = {**connection, "sender": "reader.answers"}
        connections.append(connection)
    stage["connections"] = connections


def _merge(definition: dict, stage: dict) -> None:
    definition["components"].update(stage["components"])
    definition["connections"] = [*definition.get("connections", []), *stage.get("connections", [])]


def load_pipeline(retriever: str, index: Index, settings: Settings, answer_stage: str | None = None, rerank: bool = False) -> Pipeline:
    """The retrieval pipeline, with the re-ranking and answer stages' components and connections merged in."""
    definition = yaml.safe_load(render_pipeline_yaml(retriever, index, settings))
    for role, parameters in _backend_parameters(index, settings).items():
        if role in definition["components"]:
            definition["components"][role]["init_parameters"].update(parameters)
    output = RETRIEVAL_OUTPUT[retriever]
    if rerank:
        extra = {"retrieval_output": f"{output}.documents", "retriever_weight": json.dumps(rerank_weight(index, settings, retriever))}
        stage = yaml.safe_load(render_pipeline_yaml("rerank", index, settings, extra=extra))
        _merge(definition, stage)
        definition["metadata"]["description"] += f", {stage['metadata']['description']}"
        output = "ranker"
    if answer_stage is not None:
        extra = {"retrieval_output": f"{output}.documents"}
        if answer_stage == "rag":
            from qa_system.generation import rag_pipeline_values

            extra.update(rag_pipeline_values(settings))
        stage = yaml.safe_load(render_pipeline_yaml(answer_stage, index, settings, extra=extra))
        if "selector" in stage["components"] and not selector_fits(settings):
            _remove_selector(stage)
        _merge(definition, stage)
        definition["metadata"] = {
            "description": f"{definition['metadata']['description']} + {stage['metadata']['description']}",
            "answer_components": list(stage["components"]),
        }
    pipeline = Pipeline.from_dict(definition, allowed_modules=["qa_system"])
    for component_name in pipeline.graph.nodes:
        component = pipeline.get_component(component_name)
        if hasattr(component, "document_store"):
            component.document_store = index.store
        elif hasattr(component, "_document_store"):  # the search-server retrievers keep theirs private
            component._document_store = index.store
        # The machine's settings (device, caches, backends) are handed over here, never written into the YAML:
        # the embedded stores' BM25 keeps its built index between processes, in the collection's own folder.
        if hasattr(component, "use_cache_dir") and index.backend in ("memory", "faiss"):
            component.use_cache_dir(settings.bm25_cache_of(index.name))
    return use_runtime(pipeline, settings)


def use_runtime(pipeline: Pipeline, settings: Settings) -> Pipeline:
    """``pipeline`` (built here, or loaded from an exported YAML with ``Pipeline.loads``) set to run on this machine as
    the doors do: ``settings``' device, backends and model caches (``$QA_HOME/models``), which no YAML holds. Without
    it, components keep their own defaults (the caches of ``~/.cache/qa_system``)."""
    for component_name in pipeline.graph.nodes:
        component = pipeline.get_component(component_name)
        if hasattr(component, "use_runtime"):
            deployment = {name: getattr(settings, field) for name, field in getattr(component, "RUNTIME_SETTINGS", {}).items()}
            component.use_runtime(settings.device, settings.home, **deployment)
    return pipeline
