"""The reader's scheduler: one inference lane per ONNX session (or PyTorch model on a GPU), shared by every reader, pipeline and thread of a process.

Concurrent questions (the API's worker threads, the page's visitors) used to call ONNX Runtime at
the same time, each with one intra-op thread per core: four workers on two cores ran eight busy
threads, and each question's reading took several times longer. Here a question's windows are queued;
one thread runs the session (its intra-op threads sized to the physical cores), in arrival order.

Windows of several questions share one call where that gives each question exactly what it would
get alone: a fp32 graph (ONNX Runtime with masked padding gives bit-identical logits whatever a
window's batch-mates). The call waits up to ``wait_s`` after its first question for others, takes at
most ``max_windows`` windows, and groups them by length (``length_buckets``) so that each group is
padded only to its own longest window.

The int8 export is not batch-invariant: its dynamic quantisation picks one activation scale per
call from the whole batch, so a window's logits depend on the windows beside it (up to 1.1 logits
on the SubjQA reader, measured). There each question's windows run as their own calls, still in one
lane and in arrival order: an answer never depends on who else asked at the same time.

A PyTorch reader on a GPU gets a lane too (``TorchQAModel``): there batching questions pays most (a
batch of 64 windows reads about 60 times as many windows a second as one). Whether its windows may
share a call is measured when the lane starts: windows read alone and beside others must agree
within ``MIX_TOLERANCE`` in every logit. Kernels pick other tilings for other call shapes, and
half-precision ones round each layer's outputs to 8 bits of precision, so a window's logits move with
its batch-mates' number and lengths (the shipped reader in bfloat16 on a CPU: 0.03 logits). On a GPU
the lane's calls therefore all have a few fixed shapes (``rows`` windows, padded to a multiple of
``FIXED_LENGTH_QUANTUM`` tokens, spare rows repeating a window): a window's call shape then depends on
its own length alone, and every row of a call is computed alike, so a question's logits are the same
to the bit whoever else asked (measured: 0 in bfloat16 on a CPU). Questions then share calls in 16-bit
precision, and a call of 64 windows costs a GPU little more than one of 5. Where windows still move
(a lane of bucketed calls, or kernels that differ by row), the lane reads in float32, where they move
by rounding alone (3e-6); only a model that moves in float32 too runs each question alone, as int8 does.
Its one thread launches every question's calls, so it runs the model as a graph traced from it (``torchscript``):
the same logits, without a few milliseconds of Python and the GIL held in every call.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qa_system.reading.onnx import OUTPUT_NAMES, OnnxQAModel, bucketed_logits, length_buckets

logger = logging.getLogger(__name__)


@dataclass
class Job:
    """One question's windows waiting for the session; ``done`` receives their (start, end) logits."""

    encoding: dict[str, np.ndarray]
    batch_size: int
    done: Future = field(default_factory=Future)
    queued: float = field(default_factory=time.perf_counter)
    started: float = 0.0  # when its inference began

    @property
    def windows(self) -> int:
        """How many windows the question has."""
        return len(self.encoding["attention_mask"])


MIX_TOLERANCE = 1e-3  # the most a logit may move when other questions' windows share its call
# A lane of fixed shapes pads its calls to a multiple of this many tokens: the reader's usual window, so that a lane
# call is one model call. A GPU has compute to spare for the padding; the one thread launching its kernels has not.
FIXED_LENGTH_QUANTUM = 384


class TorchQAModel:
    """A PyTorch span model as the lane runs an ONNX session: ``session.run(OUTPUT_NAMES, feeds)`` -> float32
    (start, end) logits, on the model's device, in its precision (``reader.on_device``), by its traced graph where
    that gives its own logits (``torchscript.traced``).

    :param source: the model's directory or hub id, to read its float32 weights again (``to_float32``).
    :param rows: every call exactly this many windows, each padded to a multiple of ``FIXED_LENGTH_QUANTUM`` tokens
        (module doc); None: calls by length bucket, each padded only to its longest window.
    """

    def __init__(self, model, path: str | Path, source: str | Path | None = None, rows: int | None = None):
        import inspect

        self.model, self.path, self.session, self.source, self.rows = model, Path(path), self, source, rows
        self.device = next(model.parameters()).device
        names = inspect.signature(model.forward).parameters  # e.g. DistilBERT takes no token_type_ids
        self.input_names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in names]
        self.max_length = getattr(model.config, "max_position_embeddings", None)  # no call is padded past it
        self._graph = self._trace()

    def run(self, output_names, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The model's ``output_names`` (``OUTPUT_NAMES``) for ``feeds`` (int64 arrays by input name), in float32."""
        import torch

        inputs = [torch.as_tensor(feeds[name]).to(self.device) for name in self.input_names]
        with torch.inference_mode():
            logits = dict(zip(OUTPUT_NAMES, (self._graph or self._span_logits)(*inputs)))
        return [logits[name].float().cpu().numpy() for name in output_names]

    def _span_logits(self, *inputs):
        output = self.model(**dict(zip(self.input_names, inputs)))
        return output.start_logits, output.end_logits

    def logits(self, encoding, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """As ``OnnxQAModel.logits``: in calls of the lane's fixed shapes (``rows``), else by length bucket
        (``onnx.bucketed_logits``)."""
        if self.rows is not None and np.asarray(encoding["attention_mask"])[:, 0].all():  # right padding
            (logits,), _ = run_together(self, [encoding], batch_size)
            return logits
        return bucketed_logits(self, self.input_names, encoding, batch_size)

    def _trace(self):
        """The model as a traced graph (``torchscript.traced``), checked on windows of other numbers and lengths, up
        to a call of the lane's shape; None where it runs as a module."""
        import torch

        from qa_system.torchscript import as_module, traced

        def windows(rows: int, length: int, seed: int) -> list:
            vocabulary = int(self.model.config.vocab_size)
            ids = torch.randint(min(1000, vocabulary // 2), vocabulary, (rows, length), generator=torch.Generator().manual_seed(seed))
            mask = torch.ones_like(ids)
            mask[0, length // 2 :] = 0  # a padded window, so that the mask is applied
            arrays = {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
            return [arrays[name].to(self.device) for name in self.input_names]

        longest = min(FIXED_LENGTH_QUANTUM, self.max_length or FIXED_LENGTH_QUANTUM)
        checks = [windows(1, 37, 1), windows(self.rows or 4, longest, 2)]
        forward = as_module(self.model, self._span_logits)
        return traced(forward, windows(2, 64, 0), checks, f"The reader {self.source or self.path}", MIX_TOLERANCE)

    @property
    def precision(self) -> str:
        """The dtype the model computes in: "float32", "bfloat16", "float16"."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def to_float32(self) -> None:
        """Compute in float32 with the weights as saved, not as rounded to 16 bits; in place, so that the reader
        that owns the model reads (and reports) so too."""
        self.model.float()
        if self.source is not None:
            from qa_system.reading.model import load_qa_model

            self.model.load_state_dict(load_qa_model(self.source)[1].state_dict())
        self._graph = self._trace()  # a trace holds the weights it was traced with


def batch_invariant(model: OnnxQAModel | TorchQAModel) -> bool:
    """Whether a window's logits are the same whatever windows share its call: for an ONNX graph, no dynamic (per
    call) quantisation; for a PyTorch model, measured (``batched_deviation`` within ``MIX_TOLERANCE``), in float32
    when its own precision moves them (module doc)."""
    if not isinstance(model, TorchQAModel):
        return not any(node.op_type == "DynamicQuantizeLinear" for node in _graph_nodes(model))
    deviation = batched_deviation(model)
    measured = f"{deviation:.2g} in {model.precision}"
    if deviation > MIX_TOLERANCE and model.precision != "float32":
        model.to_float32()
        deviation = batched_deviation(model)
        measured += f", {deviation:.2g} in float32"
    mix = deviation <= MIX_TOLERANCE
    logger.info(
        "The reader's lane on %s%s: windows read beside others moved by up to %s logits; %s, %s.",
        model.device,
        f" (calls of {model.rows} windows, multiples of {FIXED_LENGTH_QUANTUM} tokens)" if model.rows else "",
        measured,
        model.precision,
        "questions share calls" if mix else "each question is read alone",
    )
    return mix


def batched_deviation(model: TorchQAModel, seed: int = 0) -> float:
    """The most any logit moves between windows of several lengths (up to 384 tokens) read alone and all in one call
    (inf where the windows read differ)."""
    rng = np.random.default_rng(seed)
    vocabulary = int(model.model.config.vocab_size)
    questions = []
    for lengths in ([384, 200], [37], [300, 120, 64], [250]):
        mask = np.zeros((len(lengths), max(lengths)), np.int64)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1
        ids = rng.integers(min(1000, vocabulary // 2), vocabulary, mask.shape) * mask
        questions.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(mask)})
    together, _ = run_together(model, questions, 64)
    deviation = 0.0
    for question, (start, end) in zip(questions, together):
        for mixed, single in zip((start, end), model.logits(question, 1)):
            valid = np.isfinite(single)
            if not np.array_equal(valid, np.isfinite(mixed)):
                return float("inf")
            deviation = max(deviation, float(np.abs(mixed[valid] - single[valid]).max()))
    return deviation


def _graph_nodes(model: OnnxQAModel) -> list:
    import onnx

    return list(onnx.load(str(model.path), load_external_data=False).graph.node)


class ReaderScheduler:
    """Runs ``model`` for every caller of ``logits`` from one thread, batching questions where exact (module doc).

    :param wait_s: how long a call waits after its first question for others to join (batch-invariant models).
    :param max_windows: the most windows of several questions in one call (a question's own are never split up).
    :param mix: whether windows of different questions may share a call; None: when the model is batch-invariant.
    """

    def __init__(self, model: OnnxQAModel | TorchQAModel, wait_s: float = 0.003, max_windows: int = 64, mix: bool | None = None):
        self.model, self.path = model, model.path
        self.wait_s, self.max_windows = wait_s, max_windows
        self.mix = batch_invariant(model) if mix is None else mix
        self._jobs: queue.Queue[Job] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=f"reader-{Path(model.path).parent.name}", daemon=True)
        self._thread.start()
        self.calls = 0  # session calls made, for tests and the benchmark
        self.served, self.busy_s = 0, 0.0  # questions read, and seconds spent reading them: how loaded the lane is
        self._waited = threading.local()  # per calling thread: how long its last question waited for the lane

    def logits(self, encoding, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """As ``OnnxQAModel.logits`` (-inf on padding), computed in the scheduler's thread; blocks until done."""
        names = [*self.model.input_names, "attention_mask"]
        job = Job({name: np.asarray(encoding[name]) for name in dict.fromkeys(names)}, batch_size)
        self._jobs.put(job)
        result = job.done.result()
        self._waited.seconds = job.started - job.queued
        return result

    @property
    def waited_s(self) -> float:
        """How long the calling thread's last question waited for the lane (other questions' inference before it), in seconds."""
        return getattr(self._waited, "seconds", 0.0)

    def _serve(self) -> None:
        while True:
            jobs = self._gather(self._jobs.get())
            began = time.perf_counter()
            for job in jobs:
                job.started = began
            try:
                # A left-padding model's positions depend on its call's width: its questions run alone.
                if self.mix and len(jobs) > 1 and all(job.encoding["attention_mask"][:, 0].all() for job in jobs):
                    results = self._run_together(jobs)
                else:
                    results = [self._run_alone(job) for job in jobs]
                for job, result in zip(jobs, results):
                    job.done.set_result(result)
            except BaseException as error:  # every waiting question hears of it; the lane keeps serving
                logger.exception("The reader's inference call failed.")
                for job in jobs:
                    if not job.done.done():
                        job.done.set_exception(error)
            self.served, self.busy_s = self.served + len(jobs), self.busy_s + time.perf_counter() - began

    def _gather(self, first: Job) -> list[Job]:
        """``first`` and the questions that join it: all queued ones (up to ``max_windows``), and with ``mix`` those arriving within ``wait_s``."""
        jobs, windows = [first], first.windows
        deadline = first.queued + (self.wait_s if self.mix else 0.0)
        while windows < self.max_windows:
            try:
                job = self._jobs.get(timeout=max(0.0, deadline - time.perf_counter())) if self.mix else self._jobs.get_nowait()
            except queue.Empty:
                break
            jobs.append(job)
            windows += job.windows
        return jobs

    def _run_alone(self, job: Job) -> tuple[np.ndarray, np.ndarray]:
        mask = job.encoding["attention_mask"]
        self.calls += len(_call_windows(self.model, mask.sum(axis=1), job.batch_size, right_padded=bool(mask[:, 0].all())))
        return self.model.logits(job.encoding, job.batch_size)

    def _run_together(self, jobs: list[Job]) -> list[tuple[np.ndarray, np.ndarray]]:
        results, calls = run_together(self.model, [job.encoding for job in jobs], max(job.batch_size for job in jobs))
        self.calls += calls
        return results


def run_together(
    model: OnnxQAModel, encodings: list[dict[str, np.ndarray]], batch_size: int
) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Every question's windows in calls grouped by length, each padded to its own longest window (or, for a model of
    fixed ``rows``, each exactly ``rows`` windows of a multiple of ``FIXED_LENGTH_QUANTUM`` tokens); each question's
    (start, end) logits shaped like its encoding (-inf on padding), and the number of calls made."""
    rows = [(j, w) for j, encoding in enumerate(encodings) for w in range(len(encoding["attention_mask"]))]
    columns = [_valid_columns(encoding["attention_mask"]) for encoding in encodings]
    lengths = np.array([columns[j][w].stop - columns[j][w].start for j, w in rows], dtype=np.int64)
    results = [
        (np.full(e["attention_mask"].shape, -np.inf, np.float32), np.full(e["attention_mask"].shape, -np.inf, np.float32))
        for e in encodings
    ]
    fixed = getattr(model, "rows", None)
    buckets = _call_windows(model, lengths, batch_size)
    for bucket in buckets:
        longest = int(lengths[bucket].max())
        if fixed:
            longest = min(-(-longest // FIXED_LENGTH_QUANTUM) * FIXED_LENGTH_QUANTUM, model.max_length or longest)
        feeds = {name: np.zeros((fixed or len(bucket), longest), np.int64) for name in model.input_names}
        for row, (j, w) in enumerate(rows[i] for i in bucket):
            tokens = columns[j][w]
            for name, array in feeds.items():
                array[row, : tokens.stop - tokens.start] = encodings[j][name][w, tokens]
        for array in feeds.values():  # spare rows of a fixed shape: a real window again, read and dropped
            array[len(bucket) :] = array[0]
        start, end = model.session.run(list(OUTPUT_NAMES), feeds)
        for row, (j, w) in enumerate(rows[i] for i in bucket):
            tokens = columns[j][w]
            results[j][0][w, tokens], results[j][1][w, tokens] = (
                start[row, : tokens.stop - tokens.start],
                end[row, : tokens.stop - tokens.start],
            )
    return results, len(buckets)


def _call_windows(model, lengths: np.ndarray, batch_size: int, right_padded: bool = True) -> list[np.ndarray]:
    """The window indices of each call ``model`` makes for windows of ``lengths``: its fixed shapes' (``rows``, for
    right padding) or length buckets of at most ``batch_size``."""
    if getattr(model, "rows", None) and right_padded:
        return length_buckets(lengths, model.rows, FIXED_LENGTH_QUANTUM)
    return length_buckets(lengths, batch_size)


def _valid_columns(mask: np.ndarray) -> list[slice]:
    """The columns of each window that hold tokens: the first ones with right padding, the last ones with left
    padding. One reduction for all of them: numpy's per call costs microseconds, held with the GIL."""
    lengths, width = mask.sum(axis=1).tolist(), mask.shape[1]
    if mask[:, 0].all():
        return [slice(0, length) for length in lengths]
    return [slice(width - length, width) for length in lengths]


_schedulers: dict[tuple[int, float, int], ReaderScheduler] = {}
_lock = threading.Lock()


def shared_scheduler(model: OnnxQAModel | TorchQAModel, wait_s: float = 0.003, max_windows: int = 64) -> ReaderScheduler:
    """The process's scheduler of ``model`` (a session ``onnx.shared_session`` shares between readers, or a PyTorch
    model on a GPU): every reader of one export reads through one lane."""
    key = (id(model), wait_s, max_windows)
    with _lock:
        if key not in _schedulers:
            _schedulers[key] = ReaderScheduler(model, wait_s, max_windows)
        return _schedulers[key]
