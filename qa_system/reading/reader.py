"""Extractive reader: the answer span inside the retrieved reviews, or "no answer".

The approach is the one of transformers' ``run_qa.py`` / ``utils_qa.py``: question and review
are tokenised together into overlapping windows (``max_seq_length`` tokens, ``doc_stride``
tokens of overlap), the model scores every token as a span start and end, and the n-best
(start, end) pairs are mapped back to character offsets in ``Document.content``.

Scores must be comparable across windows and documents, so there is no per-window softmax. A
span's *logit* is the mean of its start and end logits, and its score is ``sigmoid(logit)``.
The no-answer candidate is the model's CLS span ([CLS] as both start and end): its logit is the
*minimum* over the windows of a document (the window that can see the answer is the one that
matters) and the *minimum* over documents ("no answer" claims that none of the documents holds
one, so it is only as strong as the document most likely to hold one; adding documents can then
only make an answer more likely, never less).

``no_answer_threshold`` is in the same logit units: an answer must beat the no-answer logit by
at least this margin, so the no-answer candidate is ranked with ``sigmoid(null_logit +
threshold)``. Positive values give more "no answer", negative ones fewer; ``0`` is the model's
raw decision. ``train_reader`` tunes it on held-out data and stores it in the model directory's
``qa_system.json``, which the reader reads as its default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, ExtractedAnswer, component, default_from_dict, default_to_dict

from qa_system.errors import QAError, check_count, check_number
from qa_system.reading.model import load_qa_model, read_model_info
from qa_system.reading.windows import WindowEncoder, Windows, shared_window_encoder


@dataclass(frozen=True)
class SpanCandidate:
    """One candidate span, before the no-answer decision (offsets in ``documents[document].content``)."""

    document: int
    start: int
    end: int
    logit: float
    window: int

    def __deepcopy__(self, memo: dict) -> SpanCandidate:
        """Itself: it holds numbers alone and is frozen (a Haystack pipeline deep-copies every component's inputs)."""
        return self


@dataclass(frozen=True)
class ReaderOutput:
    """Threshold-free reader output: deduplicated spans (best first) and the no-answer logit."""

    spans: list[SpanCandidate]
    null_logit: float
    # Each read document's own no-answer logit (the minimum over its windows), by position in ``documents``.
    document_nulls: dict[int, float] = field(default_factory=dict)

    @property
    def best_gap(self) -> float:
        """How far the best span beats "no answer" (in logits); -inf when there is no span."""
        return self.spans[0].logit - self.null_logit if self.spans else -math.inf

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as Haystack serialises a component's inputs (a failed run's snapshot takes them all)."""
        return {
            "spans": [asdict(span) for span in self.spans],
            "null_logit": self.null_logit,
            "document_nulls": [[position, logit] for position, logit in self.document_nulls.items()],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReaderOutput:
        """The output from ``to_dict``'s data."""
        return cls(
            [SpanCandidate(**span) for span in data["spans"]],
            data["null_logit"],
            {int(position): logit for position, logit in data.get("document_nulls", [])},
        )


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for large negative ``x``."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


@component
class ExtractiveReader:
    """Finds answer spans in documents with any Hugging Face extractive-QA model.

    :param model: model directory or hub id; None = the reader this project trains (models/).
    :param top_k: how many answer spans to return (the no-answer candidate comes on top of them).
    :param no_answer_threshold: logit margin an answer needs over "no answer" (see module doc);
        None = the value tuned at training time (``qa_system.json``), else 0.
    :param max_seq_length: tokens per window (question + review).
    :param doc_stride: tokens shared by consecutive windows of a long review.
    :param max_answer_length: longest answer, in tokens.
    :param n_best: candidate spans kept per window before deduplication.
    :param context_chars: characters of review kept on each side of an answer in ``context``.
    :param batch_size: windows per forward pass (all windows of a query, in chunks of this size).
    :param backend: "onnx" (the default): ONNX Runtime, int8, length-bucketed windows
        (``qa_system.reading.onnx``), or "torch" (the reference). The reader never reads the
        environment: ``from_settings`` passes the settings' backend, manual export and cache.
    :param onnx_model: a manual export (.onnx file or export directory) to use; None = the int8
        export built into ``onnx_cache`` on first use, or PyTorch with a warning when it cannot be built.
    :param onnx_cache: where automatic exports live; None = the default home's (``~/.cache/qa_system/models/reader-onnx``).
    :param batch_wait_ms: the ONNX reader's scheduler (``reading.batching``), which every reader of one export
        in a process shares: how long a call waits for other questions' windows (where sharing a call is exact).
    :param batch_windows: the same scheduler's most windows of several questions in one call (on a GPU, every call's).
    :param device: where it reads (``devices``: auto, cpu, cuda, cuda:N). On a GPU the ONNX backend runs the
        export's fp32 graph on ONNX Runtime's CUDA provider when this ONNX Runtime has it, else PyTorch reads
        there in bfloat16 (float16 without it) with float32 span logits, through a lane of its own that batches
        concurrent questions' windows in calls of fixed shapes, in float32 where even these would make their logits
        depend on their batch-mates (``reading.batching``: the same scheduler settings). The machine's setting, not the
        pipeline's: ``to_dict`` leaves it out and ``use_runtime`` sets it, as it sets ``backend``, ``onnx_model``,
        ``onnx_cache`` and the scheduler's settings of a pipeline loaded from YAML (``RUNTIME_SETTINGS``).

    Usage::

        reader = ExtractiveReader(model="models/reader-minilm-subjqa", backend="torch", top_k=2)
        reader.warm_up()
        answers = reader.run("Is the screen sharp?", [Document(content="The screen is very sharp.")])["answers"]
    """

    def __init__(
        self,
        model: str | Path | None = None,
        top_k: int = 3,
        no_answer_threshold: float | None = None,
        max_seq_length: int = 384,
        doc_stride: int = 128,
        max_answer_length: int = 30,
        n_best: int = 20,
        context_chars: int = 100,
        batch_size: int = 32,
        backend: str = "onnx",
        onnx_model: str | Path | None = None,
        onnx_cache: str | Path | None = None,
        batch_wait_ms: float = 0.0,
        batch_windows: int = 64,
        device: str = "auto",
    ):
        from qa_system.config import READER_BACKENDS
        from qa_system.devices import check_device

        if backend not in READER_BACKENDS:
            raise QAError(f"Unknown reader backend '{backend}'.", f"use one of: {', '.join(READER_BACKENDS)}.")
        if doc_stride >= max_seq_length:
            raise QAError(f"doc_stride ({doc_stride}) must be smaller than max_seq_length ({max_seq_length}).", "lower doc_stride.")
        self.model = str(model) if model is not None else None
        self.top_k = check_count(top_k, "top_k")
        self.no_answer_threshold = check_number(no_answer_threshold, "no_answer_threshold", optional=True)
        self.max_seq_length = max_seq_length
        self.doc_stride = doc_stride
        self.max_answer_length = max_answer_length
        self.n_best = n_best
        self.context_chars = context_chars
        self.batch_size = batch_size
        self.backend = backend
        self.onnx_model = str(onnx_model) if onnx_model is not None else None
        self.onnx_cache = str(onnx_cache) if onnx_cache is not None else None
        self.batch_wait_ms = check_number(batch_wait_ms, "batch_wait_ms", 0)
        self.batch_windows = check_count(batch_windows, "batch_windows")
        self.device = check_device(device)
        self._device: str | None = None  # resolved by warm_up: "cpu" or "cuda:N"
        self._tokenizer = None
        self._windows: WindowEncoder | None = None  # of the tokenizer (_windows_of), found on first use
        self._windows_of = None
        self._model = None
        self._onnx = None  # the ONNX export's lane
        self._lane = None  # a PyTorch model's lane, on a GPU
        self._default_threshold = 0.0

    @classmethod
    def from_loaded(cls, model, tokenizer, **kwargs) -> ExtractiveReader:
        """A reader around an already loaded PyTorch model and tokenizer (training, tests)."""
        reader = cls(backend="torch", **kwargs)
        reader._model, reader._tokenizer = model.eval(), tokenizer
        return reader

    @classmethod
    def from_settings(cls, settings, model: str | Path | None = None, **kwargs) -> ExtractiveReader:
        """The reader of ``settings`` (or ``model``), with their backend, manual export and cache."""
        return cls(
            model=model or settings.reader_model,
            backend=settings.reader_backend,
            onnx_model=settings.reader_onnx_model,
            onnx_cache=settings.reader_onnx_cache,
            device=settings.device,
            **kwargs,
        )

    # The machine's settings, not the pipeline's: ``to_dict`` leaves them out and ``use_runtime`` sets them,
    # by this parameter -> ``Settings`` field table (the pipeline loader reads it).
    RUNTIME_SETTINGS = {
        "backend": "reader_backend",
        "onnx_model": "reader_onnx_model",
        "onnx_cache": "reader_onnx_cache",
        "batch_wait_ms": "reader_batch_wait_ms",
        "batch_windows": "reader_batch_windows",
    }

    def use_runtime(self, device: str, home: str | Path | None = None, **deployment: Any) -> None:
        """Read on ``device`` (a QA_DEVICE setting), with the machine's ``deployment`` settings (``RUNTIME_SETTINGS``'
        parameters: backend, manual export, export cache, scheduler); none of them changes a loaded reader."""
        from qa_system.devices import check_device

        if self._loaded:
            return
        self.device = check_device(device)
        if unknown := set(deployment) - set(self.RUNTIME_SETTINGS):
            raise TypeError(f"Not a deployment setting of the reader: {', '.join(sorted(unknown))}")
        settled = ExtractiveReader(
            **{"model": self.model, "device": device, **{name: getattr(self, name) for name in self.RUNTIME_SETTINGS}, **deployment}
        )
        for name in self.RUNTIME_SETTINGS:  # checked as the constructor checks them
            setattr(self, name, getattr(settled, name))

    @property
    def model_name(self) -> str:
        """The model read: the one given, else the reader this project ships."""
        if self.model is not None:
            return self.model
        from qa_system.config import default_reader_model

        return default_reader_model()

    def warm_up(self) -> None:
        """Load the model (once) on the device; the tuned threshold comes from the model directory when there is one."""
        if self._loaded:
            return
        from qa_system.devices import is_cuda, onnx_providers, resolve_device
        from qa_system.model_client import model_server

        name = self.model_name
        self._device = resolve_device(self.device)
        providers = onnx_providers(self._device)
        # On a GPU, ONNX Runtime without its CUDA provider would read on the CPU: PyTorch reads on the GPU instead.
        if self.backend == "onnx" and (not is_cuda(self._device) or "CUDAExecutionProvider" in str(providers[0])):
            loaded = self._load_onnx(name, providers if is_cuda(self._device) else None)
            if loaded is not None:
                from qa_system.reading.batching import shared_scheduler

                self._tokenizer, session, export_dir = loaded
                self._onnx = shared_scheduler(session, self.batch_wait_ms / 1000, self.batch_windows)
                # The export carries a copy of the model's qa_system.json (and is rebuilt when it changes).
                self._default_threshold = float(read_model_info(export_dir).get("no_answer_threshold", 0.0))
                return
        server = model_server()
        self._tokenizer, model = load_qa_model(name, weights=server is None)
        if server is not None:  # the API's model server reads for every process (model_client)
            self._lane = server.reader(name, self.batch_wait_ms / 1000, self.batch_windows)
        else:
            self._model = on_device(model.eval(), self._device)
            if is_cuda(self._device):
                self._lane = torch_lane(self._model, name, self.batch_wait_ms / 1000, self.batch_windows)
        if Path(name).is_dir():
            self._default_threshold = float(read_model_info(name).get("no_answer_threshold", 0.0))

    def _load_onnx(self, name: str, providers: list | None = None):
        """A manual export (its problems are errors: it was asked for), else the cached one (None: use PyTorch)."""
        if self.onnx_model is not None:
            from qa_system.reading.onnx import load_onnx_reader

            return load_onnx_reader(name, self.onnx_model, providers=providers)
        from qa_system.config import DEFAULT_HOME, reader_onnx_cache
        from qa_system.reading.onnx_cache import load_cached_reader

        on_gpu = {"providers": providers} if providers else {}
        return load_cached_reader(name, self.onnx_cache or reader_onnx_cache(DEFAULT_HOME), **on_gpu)

    @property
    def _loaded(self) -> bool:
        return self._model is not None or self._onnx is not None or self._lane is not None

    @property
    def runs_on(self) -> str | None:
        """The device that reads once loaded ("cpu", "cuda:0"); None before ``warm_up``."""
        return self._device if self._loaded else None

    @property
    def active_backend(self) -> str | None:
        """What reads once loaded: "onnx int8" (or "onnx (<file>)", another manual export), or "torch"
        (asked for, or the fallback when no ONNX export could be built); None before ``warm_up``."""
        if self._onnx is not None:
            from qa_system.reading.onnx import INT8_FILE

            return "onnx int8" if self._onnx.path.name == INT8_FILE else f"onnx ({self._onnx.path.name})"
        if self._model is not None:
            precision = str(next(self._model.parameters()).dtype).removeprefix("torch.")
        elif self._lane is not None:  # the model server's
            precision = self._lane.precision
        else:
            return None
        return "torch" if precision == "float32" else f"torch {precision}"

    @property
    def queue_s(self) -> float:
        """How long the calling thread's last question waited for the shared inference lane (0 without one)."""
        return getattr(self._onnx or self._lane, "waited_s", 0.0)

    @property
    def threshold(self) -> float:
        """The no-answer threshold in force (explicit, else tuned, else 0)."""
        return self.no_answer_threshold if self.no_answer_threshold is not None else self._default_threshold

    def to_dict(self) -> dict[str, Any]:
        """The component's init parameters, as Haystack serialises a pipeline: the reading, not the machine's
        deployment settings (``RUNTIME_SETTINGS``, the device)."""
        return default_to_dict(
            self,
            model=self.model,
            top_k=self.top_k,
            no_answer_threshold=self.no_answer_threshold,
            max_seq_length=self.max_seq_length,
            doc_stride=self.doc_stride,
            max_answer_length=self.max_answer_length,
            n_best=self.n_best,
            context_chars=self.context_chars,
            batch_size=self.batch_size,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtractiveReader:
        """The component from ``to_dict``'s output."""
        return default_from_dict(cls, data)

    @component.output_types(answers=list[ExtractedAnswer], reading=ReaderOutput)
    def run(
        self,
        query: str,
        documents: list[Document],
        top_k: int | None = None,
        no_answer_threshold: float | None = None,
    ) -> dict[str, Any]:
        """Answers best first: up to ``top_k`` spans plus the no-answer candidate (``data=None``), and
        ``reading``: every candidate span and each document's no-answer logit, for an answer selector.

        With no documents (or only empty ones) the result is the no-answer alone, with score 1.
        """
        top_k = self.top_k if top_k is None else check_count(top_k, "top_k")
        threshold = self.threshold if no_answer_threshold is None else check_number(no_answer_threshold, "no_answer_threshold")
        output = self.predict(query, documents)
        answers = [self._answer(query, documents, span) for span in output.spans[:top_k]]
        if math.isfinite(output.null_logit):
            null_score, null_logit = sigmoid(output.null_logit + threshold), output.null_logit
        else:  # nothing to read
            null_score, null_logit = 1.0, None
        meta = {"null_logit": null_logit, "threshold": threshold, **({"no_documents": True} if null_logit is None else {})}
        no_answer = ExtractedAnswer(query=query, score=null_score, data=None, meta=meta)
        # The no-answer ranks above exactly the answers whose logit does not beat null_logit + threshold.
        rank = sum(1 for span in output.spans[:top_k] if span.logit - output.null_logit >= threshold)
        return {"answers": answers[:rank] + [no_answer] + answers[rank:], "reading": output}

    def predict(self, query: str, documents: Sequence[Document]) -> ReaderOutput:
        """Candidate spans of all documents (deduplicated, best first) and the no-answer logit."""
        contents, encoding = self.encode(query, documents)
        if not contents:
            return ReaderOutput([], math.inf)
        start_logits, end_logits = self._logits(encoding)
        spans: list[SpanCandidate] = []
        doc_null: dict[int, float] = {}
        for window, sample in enumerate(encoding["overflow_to_sample_mapping"]):
            doc_index, content = contents[sample]
            null, window_spans = self._window_candidates(encoding, window, start_logits[window], end_logits[window], content)
            doc_null[doc_index] = min(doc_null.get(doc_index, math.inf), null)
            spans.extend(SpanCandidate(doc_index, s, e, logit, window) for s, e, logit in window_spans)
        return ReaderOutput(deduplicate(spans, [source_position(d) for d in documents]), min(doc_null.values()), doc_null)

    def encode(self, query: str, documents: Sequence[Document]) -> tuple[list[tuple[int, str]], Windows | None]:
        """(index, text) of the documents with text, and their windows tokenised with the question (None without text)."""
        self.warm_up()
        contents = [(i, d.content) for i, d in enumerate(documents) if d.content and d.content.strip()]
        if not contents:
            return [], None
        if self._windows is None or self._windows_of is not self._tokenizer:
            self._windows, self._windows_of = shared_window_encoder(self._tokenizer, self.max_seq_length, self.doc_stride), self._tokenizer
        return contents, self._windows(query, [c for _, c in contents])

    def _logits(self, encoding) -> tuple[np.ndarray, np.ndarray]:
        """Start and end logits of every window: the one step a different backend replaces."""
        if self._onnx is not None:
            return self._onnx.logits(encoding, self.batch_size)
        if self._lane is not None:
            return self._lane.logits(encoding, self.batch_size)
        import torch

        names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in encoding]
        device = next(self._model.parameters()).device  # a model handed over loaded (training) may be anywhere
        starts, ends = [], []
        with torch.inference_mode():
            for begin in range(0, len(encoding["input_ids"]), self.batch_size):
                batch = {n: torch.as_tensor(encoding[n][begin : begin + self.batch_size]).to(device) for n in names}
                output = self._model(**batch)
                starts.append(output.start_logits.float().cpu().numpy())
                ends.append(output.end_logits.float().cpu().numpy())
        return np.concatenate(starts), np.concatenate(ends)

    def _window_candidates(self, encoding: Windows, window: int, start: np.ndarray, end: np.ndarray, content: str):
        """The window's no-answer logit and its n-best (start char, end char, logit) spans."""
        input_ids = encoding["input_ids"][window]
        cls_positions = np.flatnonzero(input_ids == self._tokenizer.cls_token_id)
        cls = int(cls_positions[0]) if len(cls_positions) else 0
        null = float(start[cls] + end[cls]) / 2
        # Context tokens are contiguous, so token distance = position distance: tokens first .. first + count - 1.
        first, count = encoding.context_span(window)
        if count == 0:
            return null, []
        # Only spans shorter than max_answer_length are scored: band[i, k] is the span of tokens i .. i + k.
        ends = np.arange(count)[:, None] + np.arange(min(self.max_answer_length, count))[None, :]
        context_start, context_end = start[first : first + count], end[first : first + count]
        band = np.where(ends < count, (context_start[:, None] + context_end[np.minimum(ends, count - 1)]) / 2, -np.inf)
        keep = min(self.n_best, band.size)
        best = np.argpartition(band, band.size - keep, axis=None)[band.size - keep :]
        best = best[np.argsort(band.ravel()[best])[::-1]]
        rows, lengths = np.unravel_index(best, band.shape)
        logits = band.ravel()[best]
        finite = np.isfinite(logits)
        rows, lengths, logits = rows[finite], lengths[finite], logits[finite]  # -inf: past the review's end
        offsets = np.asarray(encoding["offset_mapping"][window])
        begins, stops = offsets[first + rows, 0].tolist(), offsets[first + rows + lengths, 1].tolist()
        # Python numbers from here on: numpy's scalars cost a microsecond or more at every step.
        spans = []
        for begin, stop, logit in zip(begins, stops, logits.tolist()):
            text = content[begin:stop]
            words = text.strip()
            if words:
                # Some tokenizers count a token's leading space in its offsets (RoBERTa's, at the start of each part
                # of a long review): an answer is its words alone.
                begin += len(text) - len(text.lstrip())
                spans.append((begin, begin + len(words), logit))
        return null, spans

    def _answer(self, query: str, documents: Sequence[Document], span: SpanCandidate) -> ExtractedAnswer:
        content = documents[span.document].content
        context_start = max(0, span.start - self.context_chars)
        context_end = min(len(content), span.end + self.context_chars)
        return ExtractedAnswer(
            query=query,
            score=sigmoid(span.logit),
            data=content[span.start : span.end],
            document=documents[span.document],
            context=content[context_start:context_end],
            document_offset=ExtractedAnswer.Span(span.start, span.end),
            context_offset=ExtractedAnswer.Span(span.start - context_start, span.end - context_start),
            meta={"logit": span.logit, "window": span.window, "context_start": context_start, "context_end": context_end},
        )


def torch_lane(model, name: str, wait_s: float, max_windows: int):
    """The process's lane of ``model`` (the span model ``name``, on its device): concurrent questions' windows share
    its calls (``reading.batching``), on a GPU calls of ``max_windows`` windows each."""
    from qa_system.reading.batching import TorchQAModel, shared_scheduler

    rows = max_windows if next(model.parameters()).device.type == "cuda" else None
    return shared_scheduler(TorchQAModel(model, Path(name) / "torch", name, rows), wait_s, max_windows)


def on_device(model, device: str):
    """``model`` moved to ``device``: on a GPU in 16-bit (bfloat16 where it has it), its span head kept in float32,
    so that span and no-answer logits, compared with each other and with a threshold, keep float32's precision."""
    if not device.startswith("cuda"):
        return model
    import torch

    from qa_system.devices import half_dtype

    model = model.to(device=device, dtype=half_dtype())
    head = getattr(model, "qa_outputs", None)
    if isinstance(head, torch.nn.Linear):
        head.float()
        head.register_forward_pre_hook(lambda module, args: tuple(a.float() for a in args))
    return model


def source_position(document: Document) -> tuple[str | None, int]:
    """(source document or None, offset of this text in it): a passage of an ingested document names
    its source in ``document_id`` and where it starts there in ``source_offset`` (``ingestion.splitting``)."""
    return document.meta.get("document_id"), int(document.meta.get("source_offset", 0))


def deduplicate(spans: list[SpanCandidate], sources: Sequence[tuple[str | None, int]] | None = None) -> list[SpanCandidate]:
    """Best first; a span overlapping a better one of the same document is dropped.

    With ``sources`` (per document: its source document and offset there) spans are compared in the
    source document, so an answer read twice in the shared words of two overlapping passages is one answer.
    """
    kept: dict[Any, list[tuple[int, int]]] = {}  # per document, (start, end) of the spans kept
    unique: list[SpanCandidate] = []
    for span in sorted(spans, key=lambda s: s.logit, reverse=True):
        source, offset = sources[span.document] if sources is not None else (None, 0)
        document, start, end = span.document if source is None else source, span.start + offset, span.end + offset
        document_kept = kept.setdefault(document, [])
        if not any(k_start < end and start < k_end for k_start, k_end in document_kept):
            document_kept.append((start, end))
            unique.append(span)
    return unique
