"""Fitted values as data, read from the index manifest: the hybrid's fusion, the re-ranker's mix, the
pipeline's no-answer threshold for a retrieval set-up, the answer selector's recalibration to a collection's
documents and BM25's analyzer and parameters (``qa-system fit-fusion``, ``qa-system fit-threshold``, ``qa-system
fit-confidence``, ``qa-system tune-bm25 --apply``).

``tuning/`` (above the pipelines: it runs them on a dev split) writes them, and nothing else does; ``pipelines``
reads them here when it builds a pipeline. Fits are keyed by the question encoder (name and file
fingerprint) and, for re-ranking, the reader, so a fit never applies to models it was not made for; the
recalibration, which no encoder changes much, by the answer selector and the reader alone.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import TYPE_CHECKING, Any

from qa_system.config import Settings
from qa_system.model_files import model_fingerprint
from qa_system.retrieval.fusion import FusionParameters
from qa_system.stores import Index

if TYPE_CHECKING:
    from qa_system.sources import LabelledQuestion

MANIFEST_KEY = "calibration"
DEFAULT_RETRIEVER_WEIGHT = 0.5


def encoder_key(settings: Settings) -> str:
    """The question encoder a fit belongs to: its name and, for a local directory, its files' digest."""
    model = settings.query_embedding_model or settings.embedding_model
    return f"{model}#{model_fingerprint(model) or ''}"


def fits(index: Index, settings: Settings) -> dict[str, Any]:
    """Everything fitted for this index under the settings' question encoder (fusion, re-ranking, thresholds); empty when nothing is."""
    return index.manifest.get(MANIFEST_KEY, {}).get(encoder_key(settings), {})


def fusion_parameters(index: Index, settings: Settings) -> FusionParameters:
    """The fusion fitted for this index and question encoder, else RankFusion's defaults (min-max, 0.5 / 0.5)."""
    fitted = fits(index, settings).get("fusion")
    return FusionParameters(**{k: fitted[k] for k in ("mode", "k", "sparse_weight", "dense_weight")}) if fitted else FusionParameters()


def fusion_values(index: Index, settings: Settings) -> dict[str, str]:
    """hybrid.yml's fusion placeholders."""
    parameters = fusion_parameters(index, settings)
    return {
        "fusion_mode": json.dumps(parameters.mode),
        "fusion_k": json.dumps(parameters.k),
        "sparse_weight": json.dumps(parameters.sparse_weight),
        "dense_weight": json.dumps(parameters.dense_weight),
    }


def rerank_weight(index: Index, settings: Settings, retriever: str) -> float:
    """The re-ranker's retriever weight fitted for this retriever, question encoder and reader, else 0.5."""
    fitted = fits(index, settings).get("rerank", {}).get(retriever)
    if not fitted or fitted["reader"] != reader_key(settings):
        return DEFAULT_RETRIEVER_WEIGHT
    return float(fitted["retriever_weight"])


def reader_key(settings: Settings) -> str:
    """The settings' reader as fits of the re-ranking mix name it (``model_key``)."""
    return model_key(settings.reader_model)


def model_key(model: str) -> str:
    """A reader a fit belongs to: its name and, for a local directory, its files' digest."""
    return f"{model}#{model_fingerprint(model) or ''}"


def no_answer_setting(retriever: str, top_k_retriever: int, candidates: str) -> str:
    """The retrieval set-up a pipeline's no-answer threshold is fitted for: what the reader is given."""
    return f"{retriever} top-{top_k_retriever}, {candidates} candidates"


def no_answer_fit(index: Index, settings: Settings, setting: str, reader_model: str) -> dict[str, Any] | None:
    """The no-answer threshold fitted on dev for this set-up (``no_answer_setting``) and reader, if any."""
    return fits(index, settings).get("no_answer", {}).get(setting, {}).get(model_key(reader_model))


CONFIDENCE_KEY = "confidence"
BM25_KEY = "bm25"
# The stores whose BM25 is the project's own (``BM25sRetriever``), which a BM25 fit sets; a search server's is its own.
OWN_BM25_STORES = ("memory", "faiss")
# The BM25sRetriever parameters a BM25 fit sets (``qa-system tune-bm25 --apply``).
BM25_PARAMETERS = ("stemmer_language", "stopwords", "k1", "b")


def bm25_fit(index: Index) -> dict[str, Any] | None:
    """The BM25 setting ``qa-system tune-bm25 --apply`` stored for this collection, if any (no encoder or reader changes it)."""
    return index.manifest.get(MANIFEST_KEY, {}).get(BM25_KEY)


def bm25_defaults() -> dict[str, Any]:
    """The BM25 setting of a collection without one stored: ``BM25sRetriever``'s defaults."""
    from qa_system.retrieval.bm25 import BM25sRetriever

    parameters = inspect.signature(BM25sRetriever.__init__).parameters
    return {name: parameters[name].default for name in BM25_PARAMETERS}


def fits_for_other_bm25(index: Index, parameters: dict[str, Any]) -> list[str]:
    """The stored fits (the hybrid's fusion, re-ranking) that were made with a BM25 setting other than ``parameters``."""
    stale = set()
    for key, node in index.manifest.get(MANIFEST_KEY, {}).items():
        if key in (BM25_KEY, CONFIDENCE_KEY) or not isinstance(node, dict):
            continue
        made = [("the hybrid's fusion", node.get("fusion"))] + [(f"the re-ranking of {r}", f) for r, f in node.get("rerank", {}).items()]
        for what, fit in made:
            seen = (fit or {}).get("sparse")
            if seen is not None and any(seen.get(name) != parameters[name] for name in BM25_PARAMETERS):
                stale.add(what)
    return sorted(stale)


def describe_bm25(parameters: dict[str, Any]) -> str:
    """A BM25 setting (``BM25_PARAMETERS``) in one line: "stemmer english, stopwords none, k1 1.2, b 1"."""
    return (
        f"stemmer {parameters['stemmer_language'] or 'none'}, stopwords {parameters['stopwords'] or 'none'}, "
        f"k1 {parameters['k1']:g}, b {parameters['b']:g}"
    )


def bm25_parameters(index: Index) -> dict[str, Any]:
    """The sparse retriever's init parameters a stored BM25 fit sets ({}: the retriever's defaults)."""
    fit = bm25_fit(index)
    return {name: fit[name] for name in BM25_PARAMETERS} if fit else {}


def answer_models_key(settings: Settings, reader_model: str | None = None) -> str:
    """The answer selector and reader a recalibration belongs to (``model_key`` of each)."""
    return f"{model_key(settings.selector_model)}|{model_key(reader_model or settings.reader_model)}"


def confidence_fit(index: Index, settings: Settings, reader_model: str | None = None) -> dict[str, Any] | None:
    """The recalibration of the answer selector's chances fitted on this collection's labelled questions for these models, if any."""
    return index.manifest.get(MANIFEST_KEY, {}).get(CONFIDENCE_KEY, {}).get(answer_models_key(settings, reader_model))


def recalibration(index: Index, settings: Settings, reader_model: str | None = None) -> dict[str, Any] | None:
    """The ``AnswerSelector``'s ``recalibration`` init parameter for this index and models (None: as calibrated on reviews)."""
    fit = confidence_fit(index, settings, reader_model)
    return {key: fit[key] for key in ("slope", "intercept", "calibrated_on")} if fit else None


def recalibration_values(index: Index, settings: Settings) -> dict[str, str]:
    """extractive.yml's recalibration placeholder."""
    return {"recalibration": json.dumps(recalibration(index, settings))}


def question_key(question: LabelledQuestion) -> str:
    """A short digest of a question and its item: which questions a fit saw, without storing them."""
    return hashlib.sha1(f"{question.item_id}\0{question.question}".encode()).hexdigest()[:12]
