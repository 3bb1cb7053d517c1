"""Sentence embeddings of reviews and questions, by one of two backends, on the configured device.

* ``onnx`` (``QA_EMBEDDING_BACKEND``, the default): the encoder's int8 ONNX export on the CPU
  (``onnx_encoder.py``), built into the cache on first use;
* ``torch``: sentence-transformers in float32, on the configured device (``QA_DEVICE``).

On a GPU an index is embedded by PyTorch there (int8 is a CPU's shortcut). An index's manifest
records the backend that embedded it (``embedding_backend``; none recorded: torch, the only one
before), and its questions are embedded by that backend, so that questions and reviews are always
vectors of one kind. A failed export falls back to PyTorch with a warning, recorded as torch. On a GPU a PyTorch
encoder runs as a graph traced from it (``torchscript``), whose calls hold no GIL.
Encoders are loaded once per process (model, backend, device) and shared by every pipeline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict

from qa_system.devices import is_cuda, resolve_device
from qa_system.errors import QAError
from qa_system.hub import quiet_local_load

# What an index embedded before backends were recorded was embedded with.
LEGACY_BACKEND = "torch"
GPU_BATCH = 256  # texts per forward pass on a GPU at least: small batches leave it waiting on Python
# Texts that a traced encoder must embed as its module does, within TRACE_TOLERANCE in every component of a unit
# vector (rounding): batches of other sizes and lengths than the first.
TRACE_TOLERANCE = 1e-5
TRACE_CHECKS = (
    ["Is it good for reading?", "battery", "The screen is sharp and bright even in direct sunlight, and it is light."],
    ["Does it fit in a pocket?", "a very long phrase about the case, the strap, the buttons and the box it came in " * 3],
    ["one text alone"],
    [f"phrase number {i} of a question's candidates" for i in range(13)],
)
# Texts on which a model's Rust tokenizer must give its sentence-transformers module's tokens (with one over the
# model's length): spaces, case, accents, symbols and none.
TOKENIZER_CHECKS = ["  Is it GOOD for reading?  ", "Crème brûlée, 5€ & 3½ ☺", "", "tab\tand\nnew line"]
_FIELDS = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}  # Encoding's names
logger = logging.getLogger(__name__)
_encoders: dict[tuple, Any] = {}
_encoders_lock = threading.Lock()
_failed: dict[tuple[str, str], str] = {}  # (model, cache) -> why its export failed in this process


class TorchSentenceEncoder:
    """sentence-transformers in float32 on ``device`` (resolved: "cpu" or "cuda:N"), unit-length vectors."""

    backend = "torch"
    precision = "float32"

    def __init__(self, model: str, device: str):
        from sentence_transformers import SentenceTransformer

        try:
            with quiet_local_load(model):
                self.model = SentenceTransformer(model, device=device)
        except (OSError, ValueError) as error:
            raise QAError(
                f"Could not load the embedding model '{model}' ({error}).", "pass a local model path or an id of the Hugging Face hub."
            ) from error
        self.name, self.device = model, device
        self.model.eval()
        self._graph, self._inputs = None, []  # a traced graph of the model (``trace``) and its inputs' names
        self._tokenizer = RustTokenizer.matching(self.model)  # None: sentence-transformers tokenises

    def trace(self, checks: Sequence[Sequence[str]] = TRACE_CHECKS) -> None:
        """Run the model as a graph traced from it (``torchscript.traced``) where it gives the same vectors for each
        list of texts in ``checks`` (of other numbers and lengths than the first, which it is traced on): on a GPU,
        where each call's Python, not its arithmetic, holds up the questions. Tried once."""
        from qa_system.torchscript import as_module, traced

        if self._inputs:  # traced, or tried
            return
        examples = [self._features(texts) for texts in checks]
        self._inputs = [name for name, value in examples[0].items() if hasattr(value, "shape")]
        forward = as_module(self.model, lambda *tensors: self.model(dict(zip(self._inputs, tensors)))["sentence_embedding"])
        arguments = [[features[name] for name in self._inputs] for features in examples]
        self._graph = traced(forward, arguments[0], arguments[1:], f"The encoder {self.name}", TRACE_TOLERANCE)

    def _features(self, texts: Sequence[str]) -> dict:
        import torch

        features = self.model.preprocess(list(texts)) if self._tokenizer is None else self._tokenizer(texts)
        return {name: value.to(self.device) if isinstance(value, torch.Tensor) else value for name, value in features.items()}

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """One float32 row per text, as ``SentenceTransformer.encode(normalize_embeddings=True)`` makes it: texts
        sorted by length, so that a batch's texts are padded little. It does not call ``encode``, which on every call
        moves the model to its device and into eval mode, each a walk over all its modules (about 1.3 ms for MiniLM:
        much of the CPU that a question's phrases cost on a GPU)."""
        import torch

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.model.get_embedding_dimension() or 0), dtype=np.float32)
        if is_cuda(self.device):
            batch_size = max(batch_size, GPU_BATCH)
        if self.model.training:  # put in training mode by someone else
            self.model.eval()
        order = np.argsort([-len(text) for text in texts], kind="stable")
        batches = []
        with torch.inference_mode():
            for begin in range(0, len(texts), batch_size):
                features = self._features([texts[i] for i in order[begin : begin + batch_size]])
                if self._graph is not None and all(name in features for name in self._inputs):
                    vectors = self._graph(*[features[name] for name in self._inputs])
                else:
                    vectors = self.model(features)["sentence_embedding"]
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
                batches.append(vectors.float().cpu().numpy())
        embeddings = np.empty((len(texts), batches[0].shape[1]), dtype=np.float32)
        embeddings[order] = np.concatenate(batches)
        return embeddings


def indexing_backend(backend: str, device: str = "auto") -> str:
    """The backend that embeds an index for the settings' ``backend`` and ``device``: torch on a GPU, else ``backend``."""
    return "torch" if backend == "onnx" and is_cuda(resolve_device(device)) else backend


def default_cache() -> Path:
    """The encoder exports' folder of the default home (components given no cache)."""
    from qa_system.config import DEFAULT_HOME, embedding_onnx_cache

    return embedding_onnx_cache(DEFAULT_HOME)


def load_encoder(model: str, backend: str = "onnx", device: str = "auto", cache: str | Path | None = None):
    """The process's encoder of ``model`` for ``backend`` (onnx: int8 on the CPU whatever ``device``; torch: on ``device``).
    An onnx export that cannot be built falls back to torch after a warning (``.backend`` says which runs)."""
    from qa_system.config import EMBEDDING_BACKENDS

    if backend not in EMBEDDING_BACKENDS:
        raise QAError(f"Unknown embedding backend '{backend}'.", f"use one of: {', '.join(EMBEDDING_BACKENDS)} (QA_EMBEDDING_BACKEND).")
    cache = Path(cache or default_cache()).expanduser()
    resolved = "cpu" if backend == "onnx" else resolve_device(device)
    if backend == "onnx" and (model, str(cache)) in _failed:
        backend, resolved = "torch", resolve_device(device)
    from qa_system.model_client import model_server

    server = model_server()  # an API's model server runs PyTorch encoders for all of its processes (model_client)
    key = (str(model), backend, resolved, str(cache) if backend == "onnx" else "", server.address if server else "")
    with _encoders_lock:
        if key in _encoders:
            return _encoders[key]
        encoder = _onnx_or_none(model, cache) if backend == "onnx" else None
        if encoder is None:
            encoder = (
                server.encoder(model) if server else TorchSentenceEncoder(model, resolve_device(device) if backend == "onnx" else resolved)
            )
            if isinstance(encoder, TorchSentenceEncoder) and is_cuda(encoder.device):
                encoder.trace()
        _encoders[key] = encoder
        return encoder


def _onnx_or_none(model: str, cache: Path):
    from qa_system.ingestion.onnx_encoder import load_onnx_encoder

    try:
        return load_onnx_encoder(model, cache)
    except Exception as error:  # noqa: BLE001 - the exporter and ONNX Runtime raise untyped errors; PyTorch reads the same weights
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        _failed[(model, str(cache))] = reason
        logger.warning("Could not build the ONNX encoder for %s (%s): embedding with PyTorch.", model, reason)
        return None


def describe(encoder) -> str:
    """How an encoder computes, for reports: "onnx int8 on cpu", "torch float32 on cuda:0"."""
    return f"{encoder.backend} {encoder.precision} on {encoder.device}"


class DocumentEmbedder:
    """Embeds documents' content (``run(documents=...)`` as Haystack's document embedders): unit-length vectors,
    so dot product = cosine in every store."""

    def __init__(self, encoder, batch_size: int = 32):
        self.encoder, self.batch_size = encoder, batch_size

    @property
    def backend(self) -> str:
        """The backend that runs (onnx, or torch when asked for or fallen back to)."""
        return self.encoder.backend

    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """Copies of ``documents`` with their ``embedding`` set."""
        vectors = self.encoder.encode([d.content or "" for d in documents], self.batch_size)
        return {"documents": [replace(d, embedding=v.tolist()) for d, v in zip(documents, vectors)]}


@component
class QueryEmbedder:
    """The question's vector, by the encoder and backend that embedded the index (``embedding_backend`` of its manifest).

    :param model: the question encoder (the passage encoder, or a DPR-style question model).
    :param backend: "onnx" or "torch": the index's, so that questions and reviews are vectors of one kind.
    The device and the export cache are the machine's, not the pipeline's: ``use_runtime`` sets them
    (``load_pipeline`` passes the settings'); a pipeline loaded elsewhere uses ``auto`` and the default home.

    Usage::

        embedder = QueryEmbedder(model="sentence-transformers/all-MiniLM-L6-v2", backend="onnx")
        vector = embedder.run(text="Is the battery good?")["embedding"]
        documents = FAISSFilteredEmbeddingRetriever(document_store=store, top_k=5).run(query_embedding=vector)["documents"]
    """

    def __init__(self, model: str, backend: str = LEGACY_BACKEND):
        self.model, self.backend = str(model), backend
        self.device, self.cache = "auto", None
        self._encoder = None

    def use_runtime(self, device: str, home: str | Path | None = None) -> None:
        """Run on ``device`` (a QA_DEVICE setting), with the exports under ``home``'s cache."""
        from qa_system.config import embedding_onnx_cache

        self.device, self.cache = device, None if home is None else embedding_onnx_cache(Path(home))
        self._encoder = None

    def warm_up(self) -> None:
        """Load the encoder (once per process)."""
        if self._encoder is None:
            self._encoder = load_encoder(self.model, self.backend, self.device, self.cache)

    @property
    def runs_on(self) -> str | None:
        """The device that embeds once loaded ("cpu", "cuda:0"; int8 ONNX always on the CPU); None before ``warm_up``."""
        return self._encoder.device if self._encoder is not None else None

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, list[float]]:
        """The unit-length vector of ``text``."""
        self.warm_up()
        return {"embedding": self._encoder.encode([text], 1)[0].tolist()}

    def to_dict(self) -> dict[str, Any]:
        """The encoder and backend (the device is the machine's)."""
        return default_to_dict(self, model=self.model, backend=self.backend)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueryEmbedder:
        """The component from ``to_dict``'s output."""
        return default_from_dict(cls, data)


class RustTokenizer:
    """A copy of a sentence-transformers model's Rust tokenizer, set to cut and pad as the model's module does, giving
    the module's features. It tokenises without the GIL and skips sentence-transformers' checks of each input: half
    a millisecond of a call's Python, in a lane that tokenises for every question."""

    def __init__(self, rust, names: list[str], extras: dict[str, Any]):
        self.rust, self.names, self.extras = rust, names, extras

    @classmethod
    def matching(cls, model) -> RustTokenizer | None:
        """The tokenizer of ``model`` (a ``SentenceTransformer``) where it gives the module's own features for
        TOKENIZER_CHECKS and TRACE_CHECKS; else None."""
        from tokenizers import Tokenizer

        module = model[0]
        tokenizer, length = getattr(module, "tokenizer", None), getattr(module, "max_seq_length", None)
        if not getattr(tokenizer, "is_fast", False) or not length or tokenizer.padding_side != "right":
            return None
        names = list(tokenizer.model_input_names)
        if not set(names) <= _FIELDS.keys():
            return None
        rust = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        rust.enable_truncation(length, direction=tokenizer.truncation_side)
        rust.enable_padding(pad_id=tokenizer.pad_token_id, pad_type_id=tokenizer.pad_token_type_id, pad_token=tokenizer.pad_token)
        ours = cls(rust, names, {name: value for name, value in model.preprocess(["a"]).items() if name not in _FIELDS})
        for texts in [TOKENIZER_CHECKS + ["a review " * length], *TRACE_CHECKS]:
            own, fast = model.preprocess(list(texts)), ours(texts)
            if own.keys() != fast.keys() or any(not _equal(own[name], fast[name]) for name in own):
                logger.info("The encoder's Rust tokenizer gives other tokens than sentence-transformers: it tokenises through the latter.")
                return None
        return ours

    def __call__(self, texts: Sequence[str]) -> dict[str, Any]:
        """The features of ``texts``, as ``SentenceTransformer.preprocess`` gives them."""
        import torch

        encodings = self.rust.encode_batch(list(texts))
        tensors = {name: torch.from_numpy(np.array([getattr(e, _FIELDS[name]) for e in encodings], dtype=np.int64)) for name in self.names}
        return tensors | self.extras


def _equal(a, b) -> bool:
    """Whether two features are the same: tensors of one dtype and value, or equal values."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b
