"""Pipelines that load anywhere: ``export_pipeline`` writes one complete Haystack YAML, settings resolved.

``pipelines/*.yml`` are templates (``${...}`` placeholders for the store backend, the models and the
fitted values) that ``load_pipeline`` fills in and merges: ``haystack.Pipeline.loads`` cannot read them.
``export_pipeline`` builds the same pipeline ``qa-system ask`` runs and writes it out as plain
Haystack YAML that ``Pipeline.loads`` reads as it is, and Hayhooks deploys (its ``inputs`` and
``outputs`` sections name what a caller sends and gets back).

A memory index has no server to point at: its retrievers read a ``SavedMemoryStore``, which opens the
saved index file (``QA_HOME/indexes/memory/NAME.json``) when the pipeline is loaded. Elasticsearch and
OpenSearch stores are written as their own serialisation (hosts and index name).

The components are qa_system's, so Haystack's deserialisation allowlist must name the package:
``Pipeline.loads(text, allowed_modules=["qa_system"])`` or ``HAYSTACK_DESERIALIZATION_ALLOWLIST=qa_system``.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import yaml
from haystack import Document, Pipeline, default_from_dict, default_to_dict

from qa_system.config import DEFAULT_HOME, Settings, default_reader_model, default_selector_model
from qa_system.errors import QAError
from qa_system.pipelines.loading import ANSWER_STAGES, FUSION_CANDIDATES, RERANK_CANDIDATES, RETRIEVAL_OUTPUT, load_pipeline
from qa_system.pipelines.qa_pipeline import check_embeddings
from qa_system.stores import Index
from qa_system.stores.meta_filters import MultiValueInMemoryDocumentStore

ALLOWLIST_ENV = "HAYSTACK_DESERIALIZATION_ALLOWLIST"
PORTABLE_BACKENDS = ("memory", "elasticsearch", "opensearch")
# The machine's settings of a component that are no path: a pipeline loaded from the exported file has no loader
# to hand them over (``use_runtime``), so they are written in; paths (exports, caches) are left to the defaults.
PORTABLE_DEPLOYMENT = ("backend", "batch_wait_ms", "batch_windows")

_loaded: dict[tuple[str, int, int], list[Document]] = {}
_loading = threading.Lock()


def _saved_documents(named: str) -> list[Document]:
    """The documents of the saved memory index file ``named`` by a pipeline (``home_path``), read once per process and
    version of the file."""
    path = home_path(named)
    try:
        stat = path.stat()
    except OSError as error:
        # A relative path is the export's home-independent one: the home it is read under is the one to check.
        fix = (
            "build it with `qa-system index`, or export the pipeline again."
            if Path(named).expanduser().is_absolute()
            else "set QA_HOME to the qa_system home the pipeline was exported from (it names the file relative to that home), or build the collection there with `qa-system index`."
        )
        raise QAError(f"The saved index {path} named by the pipeline cannot be read ({error.strerror}).", fix) from error
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    with _loading:
        if key not in _loaded:
            with path.open(encoding="utf-8") as handle:
                data = json.load(handle)
            _loaded.clear()  # one version of one file at a time: an old one is not kept alive
            _loaded[key] = [Document.from_dict(d) for d in data["documents"]]
        return _loaded[key]


# Models this project ships, written as null in an export: each component's default, wherever the project is installed.
SHIPPED_MODELS = frozenset(str(Path(model).resolve()) for model in (default_reader_model(), default_selector_model()))


def home_path(path: str | Path) -> Path:
    """``path`` as given when absolute, else under the qa_system home of this machine (``QA_HOME``, else the
    default): an exported pipeline names its index relative to the home, so the file moves between machines."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else Path(os.environ.get("QA_HOME") or DEFAULT_HOME).expanduser() / path


class SavedMemoryStore(MultiValueInMemoryDocumentStore):
    """The memory store of a saved index, filled from its file (``path``, relative to the qa_system home unless
    absolute: ``home_path``) when made: what an exported pipeline's retrievers read. Several components naming
    one file share its documents."""

    def __init__(self, path: str, index: str | None = None):
        super().__init__(index=index or Path(path).stem, shared=False, embedding_similarity_function="cosine")
        self.path = str(path)
        self.load_documents(list(_saved_documents(path)))

    def to_dict(self) -> dict[str, Any]:
        """The file it reads and the index's name, as Haystack serialises a store."""
        return default_to_dict(self, path=self.path, index=self.index)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SavedMemoryStore:
        """The store from ``to_dict``'s output (the file is read again)."""
        return default_from_dict(cls, data)


def _store_dict(index: Index, settings: Settings) -> dict[str, Any]:
    """How the exported YAML names the index's store: the saved file for memory, the server's index otherwise."""
    if index.backend == "memory":
        path = (settings.index_dir / "memory" / f"{index.name}.json").resolve()
        home = Path(settings.home).expanduser().resolve()
        return {
            "type": f"{SavedMemoryStore.__module__}.{SavedMemoryStore.__name__}",
            "init_parameters": {"path": str(path.relative_to(home) if path.is_relative_to(home) else path), "index": index.name},
        }
    return index.store.to_dict()


def _depths(definition: dict, retriever: str, rerank: bool, top_k: int, top_k_reader: int) -> None:
    """Each component's ``top_k`` as ``QAPipeline.run`` sets it: more candidates before fusion and re-ranking."""
    for name, component in definition["components"].items():
        parameters = component["init_parameters"]
        if "top_k" not in parameters:
            continue
        if name in ("reader", "selector"):
            parameters["top_k"] = top_k_reader
        elif "fusion" in definition["components"] and name.endswith("_retriever"):
            parameters["top_k"] = max(top_k, FUSION_CANDIDATES)
        elif rerank and name == RETRIEVAL_OUTPUT[retriever]:
            parameters["top_k"] = max(top_k, RERANK_CANDIDATES)
        else:
            parameters["top_k"] = top_k


def _interface(pipeline: Pipeline, retrieval_output: str, answer_stage: str | None) -> tuple[dict, dict]:
    """Hayhooks' ``inputs`` (``query`` and ``filters``, each sent to every component that takes it) and ``outputs``."""
    query, filters = [], []
    for name, sockets in pipeline.inputs().items():
        query += [f"{name}.{socket}" for socket in sockets if socket in ("query", "text")]
        filters += [f"{name}.{socket}" for socket in sockets if socket == "filters"]
    outputs = {"documents": f"{retrieval_output}.documents"}
    if answer_stage is not None:
        sockets = pipeline.outputs(include_components_with_connected_outputs=True)
        answering = [name for name in pipeline.metadata.get("answer_components", []) if "answers" in sockets.get(name, {})]
        outputs["answers"] = f"{answering[-1]}.answers"  # the deciding component: the selector's, else the reader's
    return {"query": query, "filters": filters}, outputs


def export_pipeline(
    retriever: str,
    index: Index,
    settings: Settings,
    answer_stage: str | None = "extractive",
    rerank: bool = False,
    top_k: int | None = None,
    top_k_reader: int | None = None,
) -> str:
    """The pipeline ``build_qa_pipeline`` makes, as one Haystack YAML with every setting resolved.

    ``Pipeline.loads(text, allowed_modules=["qa_system"])`` reads it as it is, and Hayhooks deploys it:
    inputs ``query`` and ``filters`` (Haystack filters, e.g. on ``meta.item_id``), outputs ``documents``
    (retrieved, best first) and, with an answer stage, ``answers``. ``top_k`` (retrieved reviews) and
    ``top_k_reader`` (answers) default to the settings' ``top_k_retriever`` and ``top_k_reader``.
    """
    if index.backend not in PORTABLE_BACKENDS:
        raise QAError(
            f"A pipeline over a {index.backend} index cannot be exported.", f"index into one of: {', '.join(PORTABLE_BACKENDS)} (--store)."
        )
    if answer_stage is not None and answer_stage not in ANSWER_STAGES:
        raise QAError(f"Unknown answer stage '{answer_stage}'.", f"use one of: {', '.join(ANSWER_STAGES)}.")
    if retriever != "bm25":  # as `ask` refuses it: an exported dense pipeline over no vectors would find nothing
        check_embeddings(index, settings, retriever)
    pipeline = load_pipeline(retriever, index, settings, answer_stage, rerank)
    definition = pipeline.to_dict()
    for component in definition["components"].values():
        if "document_store" in component["init_parameters"]:
            component["init_parameters"]["document_store"] = _store_dict(index, settings)
    for name in pipeline.graph.nodes:
        component = pipeline.get_component(name)
        for setting in [s for s in PORTABLE_DEPLOYMENT if s in getattr(component, "RUNTIME_SETTINGS", {})]:
            definition["components"][name]["init_parameters"][setting] = getattr(component, setting)
    for component in definition["components"].values():  # the models this project ships: null, each component's default
        parameters = component["init_parameters"]
        if parameters.get("model") is not None and str(Path(str(parameters["model"])).resolve()) in SHIPPED_MODELS:
            parameters["model"] = None
    _depths(definition, retriever, rerank, top_k or settings.top_k_retriever, top_k_reader or settings.top_k_reader)
    retrieval_output = "ranker" if rerank else RETRIEVAL_OUTPUT[retriever]
    definition["inputs"], definition["outputs"] = _interface(pipeline, retrieval_output, answer_stage)
    header = (
        f"# {definition['metadata']['description']}: written by `qa-system export-pipeline` from pipelines/*.yml,\n"
        f"# over the {index.backend} index '{index.name}', every setting resolved. Plain Haystack YAML of qa_system's components:\n"
        "#   Pipeline.loads(text, allowed_modules=['qa_system'])   (or HAYSTACK_DESERIALIZATION_ALLOWLIST=qa_system)\n"
        "#   hayhooks pipeline deploy-yaml --name NAME FILE         (the server started with that variable)\n"
    )
    return header + yaml.safe_dump(definition, sort_keys=False, allow_unicode=True)
