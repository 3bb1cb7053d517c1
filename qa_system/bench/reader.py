"""Reader latency, accuracy and profile: Haystack's TransformersExtractiveReader against the project's
reader on the same weights, with the PyTorch, ONNX fp32 and ONNX int8 backends.

Every reader reads the same top-3 reviews of each question's product (BM25), interleaved question by
question. EM and F1 (official SQuAD v2 definitions, top-1 answer, "" = no answer) come from the same
runs, so the speed and the accuracy of a reader are measured together.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore

from qa_system.bench.measure import Timing, compare, timed
from qa_system.metrics.squad import best_scores
from qa_system.reading.onnx import FP32_FILE, INT8_FILE, OnnxQAModel
from qa_system.reading.reader import ExtractiveReader
from qa_system.retrieval import BM25sRetriever, make_filters
from qa_system.sources import LabelledQuestion

HAYSTACK_READER = "Haystack TransformersExtractiveReader"
TORCH, ONNX_FP32, ONNX_INT8 = "torch fp32", "ONNX fp32", "ONNX int8"
MAX_SEQ_LENGTH, STRIDE = 384, 128


def top_reviews(documents: Sequence[Document], questions: Sequence[LabelledQuestion], top_k: int = 3) -> list[list[Document]]:
    """The ``top_k`` reviews of each question's product, as the extractive pipeline retrieves them (BM25)."""
    store = InMemoryDocumentStore()
    store.write_documents(list(documents))
    retriever = BM25sRetriever(store, top_k=top_k)
    return [retriever.run(q.question, filters=make_filters(item_id=q.item_id))["documents"] for q in questions]


def haystack_reader(model: str, top_k: int = 3):
    """Haystack's stock reader on the same weights, in float32 (the project stores its reader in fp16)."""
    import torch
    from haystack_integrations.components.readers.transformers import TransformersExtractiveReader

    reader = TransformersExtractiveReader(
        model=model, top_k=top_k, max_seq_length=MAX_SEQ_LENGTH, stride=STRIDE, model_kwargs={"dtype": torch.float32}
    )
    reader.warm_up()
    return reader


def project_readers(model: str, export_dir: Path, top_k: int = 3) -> dict[str, ExtractiveReader]:
    """The project's reader on ``model`` with each backend (PyTorch, ONNX fp32, ONNX int8 from ``export_dir``), warmed up."""
    readers = {
        TORCH: ExtractiveReader(model=model, top_k=top_k, backend="torch"),
        ONNX_FP32: ExtractiveReader(model=model, top_k=top_k, backend="onnx", onnx_model=export_dir / FP32_FILE),
        ONNX_INT8: ExtractiveReader(model=model, top_k=top_k, backend="onnx", onnx_model=export_dir / INT8_FILE),
    }
    for reader in readers.values():
        reader.warm_up()
    return readers


@dataclass
class StageClock:
    """Where one reader's time goes: its model calls and its span search are timed from inside the run.

    Tokenisation is the rest of a run (the few microseconds of building answer objects included).
    """

    reader: ExtractiveReader
    model_s: list[float] = field(default_factory=list)
    spans_s: list[float] = field(default_factory=list)
    windows: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        logits, candidates = self.reader._logits, self.reader._window_candidates

        def timed_logits(encoding):
            start = time.perf_counter()
            result = logits(encoding)
            self.model_s[-1] += time.perf_counter() - start
            self.windows[-1] += len(encoding["input_ids"])
            self.tokens[-1] += int(np.asarray(encoding["attention_mask"]).sum())
            return result

        def timed_candidates(*args):
            start = time.perf_counter()
            result = candidates(*args)
            self.spans_s[-1] += time.perf_counter() - start
            return result

        # Instance attributes: the class and the other readers are untouched.
        self.reader._logits, self.reader._window_candidates = timed_logits, timed_candidates

    def next_question(self) -> None:
        """Start counting a new question's model time, span search time, windows and tokens."""
        for values in (self.model_s, self.spans_s, self.windows, self.tokens):
            values.append(0)


def _prediction(answers: list) -> str:
    return (answers[0].data or "") if answers else ""


def bench_readers(
    readers: dict[str, Any],
    questions: Sequence[LabelledQuestion],
    contexts: Sequence[list[Document]],
    progress: Callable[[str], None] = print,
) -> tuple[list[dict], list[dict], dict[str, Timing]]:
    """(reader rows, profile rows, timings): all readers on all questions, interleaved."""
    clocks = {name: StageClock(r) for name, r in readers.items() if isinstance(r, ExtractiveReader)}

    def system(name: str, reader: Any):
        def read(i: int) -> str:
            if name in clocks:
                clocks[name].next_question()
            return _prediction(reader.run(query=questions[i].question, documents=contexts[i], top_k=3)["answers"])

        return read

    progress(f"reader: {len(questions)} questions x {len(readers)} readers")
    timings = compare({name: system(name, r) for name, r in readers.items()}, range(len(questions)))
    return _reader_rows(timings, questions, clocks), _profile_rows(timings, clocks), timings


def _reader_rows(timings: dict[str, Timing], questions: Sequence[LabelledQuestion], clocks: dict[str, StageClock]) -> list[dict]:
    scores = {name: [best_scores(p, q.answer_texts) for p, q in zip(t.outputs, questions)] for name, t in timings.items()}
    em = {name: 100 * float(np.mean([e for e, _ in s])) for name, s in scores.items()}
    f1 = {name: 100 * float(np.mean([f for _, f in s])) for name, s in scores.items()}
    baseline = timings[HAYSTACK_READER]
    rows = []
    for name, timing in timings.items():
        clock = clocks.get(name)
        rows.append(
            {
                "reader": name,
                "questions": timing.calls,
                "windows_per_question": float(np.mean(clock.windows)) if clock else float("nan"),
                "p50_ms": timing.p50_ms,
                "p95_ms": timing.p95_ms,
                "mean_ms": 1000 * float(np.mean(timing.seconds)),
                "baseline": HAYSTACK_READER,
                "p50_ratio": timing.p50_ms / baseline.p50_ms,
                "p95_ratio": timing.p95_ms / baseline.p95_ms,
                "em": em[name],
                "f1": f1[name],
                "em_minus_torch_fp32": em[name] - em[TORCH],
                "f1_minus_torch_fp32": f1[name] - f1[TORCH],
                "same_top1_as_torch_fp32": float(np.mean([a == b for a, b in zip(timing.outputs, timings[TORCH].outputs)])),
            }
        )
    return rows


def _profile_rows(timings: dict[str, Timing], clocks: dict[str, StageClock]) -> list[dict]:
    rows = []
    for name, clock in clocks.items():
        total, model, spans = (np.asarray(x) for x in (timings[name].seconds, clock.model_s, clock.spans_s))
        stages = {"tokenisation": total - model - spans, "model": model, "post-processing (span search)": spans}
        for stage, seconds in stages.items():
            rows.append(
                {
                    "reader": name,
                    "stage": stage,
                    "mean_ms": 1000 * float(seconds.mean()),
                    "p50_ms": 1000 * float(np.median(seconds)),
                    "share": float(seconds.sum() / total.sum()),
                    "windows_per_s": float(sum(clock.windows) / model.sum()) if stage == "model" else float("nan"),
                    "tokens_per_window": float(sum(clock.tokens) / sum(clock.windows)) if stage == "model" else float("nan"),
                }
            )
    return rows


def operator_profile(
    readers: dict[str, Any], questions: Sequence[LabelledQuestion], contexts: Sequence[list[Document]], limit: int = 50
) -> list[dict]:
    """Where the ONNX readers' model time goes, by operator type (ONNX Runtime's own kernel profiler).

    Each ONNX reader's windows for the first ``limit`` questions run through a profiling session of
    the same file and threads; rows give each operator type's share of kernel time and its ms per question.
    """
    rows = []
    asked = list(zip(questions, contexts))[:limit]
    for name, reader in readers.items():
        if not asked or not isinstance(reader, ExtractiveReader) or reader._onnx is None:
            continue
        with tempfile.TemporaryDirectory() as folder:
            model = OnnxQAModel(reader._onnx.path, profile_dir=folder)
            for question, documents in asked:
                contents, encoding = reader.encode(question.question, documents)
                if contents:
                    model.logits(encoding, reader.batch_size)
            events = json.loads(Path(model.session.end_profiling()).read_text())
        kernel_us = Counter()
        for event in events:
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                kernel_us[event["args"]["op_name"]] += event["dur"]
        total = sum(kernel_us.values())
        rows += [
            {"reader": name, "operator": op, "share": us / total, "ms_per_question": us / 1000 / len(asked)}
            for op, us in kernel_us.most_common()
            if us / total >= 0.001
        ]
    return rows


def scheduling(
    readers: dict[str, Any],
    questions: Sequence[LabelledQuestion],
    contexts: Sequence[list[Document]],
    limit: int = 100,
    batches: Sequence[int] = (4, 8),
) -> list[dict]:
    """What the ways of sharing the cores among concurrent questions buy, per ONNX reader, on the same windows.

    - one call per question with one intra-op thread per physical core (how the served lane reads);
    - as many single-thread sessions as cores, each reading its share of the questions at once;
    - ``batches``: that many questions' windows in one call (grouped by length, ``ReaderScheduler``'s batching),
      with the logits' largest change from the one-call-per-question run: 0 for fp32, not for int8 (one
      activation scale per call).

    Questions per second over the first ``limit`` questions (the best of two passes), and the ratio to the first way.
    """
    from concurrent.futures import ThreadPoolExecutor

    from qa_system.reading.batching import run_together
    from qa_system.reading.onnx import physical_cores

    cores = physical_cores()
    rows = []
    for name, reader in readers.items():
        if not isinstance(reader, ExtractiveReader) or reader._onnx is None:
            continue
        encodings = [reader.encode(q.question, docs)[1] for q, docs in list(zip(questions, contexts))[:limit]]
        encodings = [
            {k: np.asarray(v) for k, v in e.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            for e in encodings
            if e is not None
        ]
        if not encodings:
            continue
        whole = OnnxQAModel(reader._onnx.path, threads=cores)
        singles = [OnnxQAModel(reader._onnx.path, threads=1) for _ in range(cores)]
        reference = [whole.logits(e) for e in encodings]

        def one_call_each():
            return [whole.logits(e) for e in encodings]

        def lanes():
            with ThreadPoolExecutor(cores) as pool:
                parts = list(pool.map(lambda lane: [singles[lane].logits(e) for e in encodings[lane::cores]], range(cores)))
            return [parts[i % cores][i // cores] for i in range(len(encodings))]

        def batched(size: int):
            return lambda: [r for i in range(0, len(encodings), size) for r in run_together(whole, encodings[i : i + size], 64)[0]]

        ways = {f"one call per question, {cores} threads": one_call_each, f"{cores} single-thread sessions at once": lanes}
        ways |= {f"{size} questions per call, {cores} threads": batched(size) for size in batches}
        for way, run in ways.items():
            seconds, outputs = min((timed(run)[::-1] for _ in range(2)), key=lambda pair: pair[0])
            change = max(
                float(np.abs(a[np.isfinite(a)] - b[np.isfinite(a)]).max(initial=0.0))
                for out, ref in zip(outputs, reference)
                for a, b in zip(out, ref)
            )
            rows.append(
                {
                    "reader": name,
                    "schedule": way,
                    "questions": len(encodings),
                    "questions_per_s": len(encodings) / seconds,
                    "ms_per_question": 1000 * seconds / len(encodings),
                    "max_logit_change": change,
                }
            )
        first = rows[-len(ways)]["questions_per_s"]
        for row in rows[-len(ways) :]:
            row["ratio_to_one_call_per_question"] = row["questions_per_s"] / first
    return rows
