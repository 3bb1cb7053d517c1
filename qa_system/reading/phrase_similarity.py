"""How close in meaning each candidate phrase is to the question: the cosine of their sentence embeddings.

The reader scores a span by how it reads in its review, and often likes a phrase about a neighbouring
aspect ("the rooms were clean" for "Is the lobby clean?"). The sentence encoder that embeds reviews for
dense retrieval says whether the phrase talks about what the question asks. Judged selectors fitted with
it record its model and backend (``to_info``), and are served with the same, so that the feature means at
serving time what it meant when the selector was fitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qa_system.ingestion.embedding import indexing_backend, load_encoder


def _portable(model: str) -> str:
    """The model as a selector records it: the hub id for the default encoder's local copy, never this machine's path."""
    from qa_system.config import HUB_EMBEDDING_MODEL, default_embedding_model

    return HUB_EMBEDDING_MODEL if model == default_embedding_model() else model


def _local(model: str) -> str:
    """The recorded model as this machine loads it: the installed copy of the default encoder when there is one."""
    from qa_system.config import HUB_EMBEDDING_MODEL, default_embedding_model

    return default_embedding_model() if model == HUB_EMBEDDING_MODEL else model


class PhraseSimilarity:
    """The cosine of a question with each of several texts, by one sentence encoder.

    :param model: a sentence-transformers id or path (the default: the dense retriever's all-MiniLM-L6-v2).
    :param backend: "onnx" (int8 on the CPU; PyTorch on a GPU) or "torch", as ``ingestion.embedding.load_encoder`` runs it.
    :param device: where torch runs (a QA_DEVICE setting).
    :param cache: the folder of ONNX exports (None: the default home's).

    Usage::

        similarity = PhraseSimilarity("sentence-transformers/all-MiniLM-L6-v2")
        similarity("Is the staff friendly?", ["the staff are incredible", "the rooms were clean"])  # [0.7..., 0.3...]
    """

    def __init__(self, model: str, backend: str = "onnx", device: str = "auto", cache: str | Path | None = None):
        self.model, self.backend, self.device, self.cache = _local(str(model)), backend, device, cache
        self._encoder = None

    @classmethod
    def from_info(
        cls, info: dict[str, Any], device: str = "auto", cache: str | Path | None = None, folder: str | Path | None = None
    ) -> PhraseSimilarity:
        """The similarity a selector was fitted with (``to_info``'s record), on this machine; a model recorded relative
        to the selector's ``folder`` (one tuned for it) is loaded from there."""
        model = info["model"]
        if folder is not None and not Path(model).is_absolute() and (Path(folder) / model).is_dir():
            model = str(Path(folder) / model)
        return cls(model, info.get("backend", "onnx"), device, cache)

    def to_info(self, folder: str | Path | None = None) -> dict[str, str]:
        """What a selector in ``folder`` records of it: the model (portable: a hub id, or its path relative to ``folder``
        when it lies inside) and the backend."""
        model = _portable(self.model)
        if folder is not None and Path(model).is_dir() and Path(model).resolve().is_relative_to(Path(folder).resolve()):
            model = Path(model).resolve().relative_to(Path(folder).resolve()).as_posix()
        return {"model": model, "backend": self.backend}

    def warm_up(self) -> None:
        """Load the encoder (once per process, shared with the retriever's when it is the same)."""
        if self._encoder is None:
            # int8 is a CPU's shortcut: on a GPU an encoder recorded as onnx runs in PyTorch there, as an index is
            # embedded (its similarities move by about 0.01; 3 of the 120 judged first cards change, docs/experiments.md).
            self._encoder = load_encoder(self.model, indexing_backend(self.backend, self.device), self.device, self.cache)

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        """The cosine of ``query`` with each of ``texts`` (unit-length vectors, so their dot product)."""
        if not texts:
            return []
        self.warm_up()
        vectors = np.asarray(self._encoder.encode([query, *texts], batch_size=32), dtype=np.float32)
        return (vectors[1:] @ vectors[0]).astype(float).tolist()
