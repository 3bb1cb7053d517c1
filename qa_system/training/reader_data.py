"""Reader training data and what a training run reads and writes around the loop.

SubjQA exported as SQuAD files, windows labelled with their answer's tokens (the approach of
transformers' ``run_qa.py``), dev questions read with the project's own ``ExtractiveReader`` (so dev
figures are the figures users get), and the saved model: fp16 safetensors with its tokenizer and a
``qa_system.json`` that carries the threshold and the provenance of every stage.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from haystack import Document

from qa_system.metrics.no_answer import DevPrediction
from qa_system.metrics.squad import best_scores
from qa_system.reading.model import MODEL_INFO_FILE, read_model_info
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.windows import context_sequence_id, encode_windows
from qa_system.sources.squad import SquadExample, SquadReport, write_squad

PathLike = str | Path
LABELS = ("span_mask", "start_positions", "end_positions")  # feature keys that are no model input
POOLED = "pooled"  # the pooled dev questions, as a name beside the dev files


def subjqa_to_squad_files(
    domains: Sequence[str],
    splits: Sequence[str],
    out_dir: PathLike,
    data_dir: PathLike | None = None,
) -> dict[Path, SquadReport]:
    """Export SubjQA to one SQuAD v2 file per domain and split: ``<out_dir>/<domain>-<split>.json``."""
    from qa_system.sources.subjqa import load_subjqa

    written = {}
    for domain in domains:
        for split in splits:
            data = load_subjqa(domain, split, source=data_dir)
            path = Path(out_dir) / f"{domain}-{split}.json"
            written[path] = write_squad(data.questions, path)
    return written


def no_answer_share(examples: Sequence[SquadExample]) -> float:
    """Share of unanswerable questions, the prior the threshold is tuned for."""
    return sum(e.is_impossible for e in examples) / len(examples) if examples else 0.0


def dev_predictions(reader: ExtractiveReader, examples: Iterable[SquadExample]) -> list[DevPrediction]:
    """Read each dev question's own context and score both of the reader's options."""
    predictions = []
    for example in examples:
        document = Document(content=example.context)
        output = reader.predict(example.question, [document])
        text = example.context[output.spans[0].start : output.spans[0].end] if output.spans else ""
        answer_em, answer_f1 = best_scores(text, example.answer_texts)
        null_em, null_f1 = best_scores("", example.answer_texts)
        predictions.append(DevPrediction(output.best_gap, answer_em, answer_f1, null_em, null_f1))
    return predictions


def training_features(tokenizer, examples: Sequence[SquadExample], max_seq_length: int, doc_stride: int) -> list[dict[str, list[int]]]:
    """Tokenised windows with start/end token labels ([CLS] when the window holds no answer).

    A window is labelled with the first of its question's answers that it holds whole: the first
    answer, the SQuAD convention, whenever the window holds it; another occurrence or annotation
    rather than "no answer" when it does not (MRQA lists every occurrence of an answer).
    ``span_mask`` marks the positions a reader can answer with ([CLS] and the context), for distillation.
    """
    encoding = encode_windows(
        tokenizer, [e.question for e in examples], [e.context for e in examples], max_seq_length, doc_stride, padding=False
    )
    context_id = context_sequence_id(tokenizer)
    names = [n for n in ("input_ids", "token_type_ids", "attention_mask") if n in encoding]
    features = []
    for window, sample in enumerate(encoding["overflow_to_sample_mapping"]):
        input_ids = encoding["input_ids"][window]
        cls = input_ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in input_ids else 0
        start = end = cls
        offsets = encoding["offset_mapping"][window]
        context = [i for i, s in enumerate(encoding.sequence_ids(window)) if s == context_id]
        for text, start_char in examples[sample].answers:
            end_char = start_char + len(text)
            if offsets[context[0]][0] <= start_char and offsets[context[-1]][1] >= end_char:
                start = next(i for i in context if offsets[i][1] > start_char)
                end = next(i for i in reversed(context) if offsets[i][0] < end_char)
                break
        span_mask = [0] * len(input_ids)
        for i in [cls, *context]:
            span_mask[i] = 1
        features.append({**{n: encoding[n][window] for n in names}, "span_mask": span_mask, "start_positions": start, "end_positions": end})
    return features


def length_grouped_order(lengths: Sequence[int], batch_size: int, seed: int) -> list[int]:
    """The windows' order for one epoch: shuffled, sorted by length within mega-batches of 50 batches, batches shuffled.

    As transformers' ``LengthGroupedSampler`` (far less padding, so far less CPU time, at the same
    randomness), but drawn from its own seed: an epoch's order does not depend on the global random
    state, so a run resumed mid-epoch reads exactly the batches an uninterrupted run would.
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    mega = 50 * batch_size
    order = [i for begin in range(0, len(order), mega) for i in sorted(order[begin : begin + mega], key=lambda i: -lengths[i])]
    batches = [order[begin : begin + batch_size] for begin in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return [i for batch in batches for i in batch]


def pad_batch(features: Sequence[dict], tokenizer) -> dict[str, Any]:
    """Windows padded to the longest of them, as tensors, with their labels and span masks (the training collator)."""
    import torch

    inputs = [{k: v for k, v in f.items() if k not in LABELS} for f in features]
    batch = tokenizer.pad(inputs, padding="longest", return_tensors="pt")
    # Left padding (e.g. XLNet) moves every position of a shorter window right.
    width = batch["input_ids"].shape[1]
    shifts = [width - len(f["input_ids"]) if tokenizer.padding_side == "left" else 0 for f in features]
    batch["span_mask"] = torch.zeros(len(features), width, dtype=torch.bool)
    for row, (f, shift) in enumerate(zip(features, shifts)):
        batch["span_mask"][row, shift : shift + len(f["span_mask"])] = torch.tensor(f["span_mask"], dtype=torch.bool)
    for name in ("start_positions", "end_positions"):
        batch[name] = torch.tensor([f[name] + shift for f, shift in zip(features, shifts)])
    return dict(batch)


def save_reader(model, tokenizer, output_dir: PathLike, info: dict[str, Any]) -> None:
    """fp16 safetensors (half the size; the reader loads it back as float32), tokenizer, qa_system.json."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    copy.deepcopy(model).half().save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    (output_dir / MODEL_INFO_FILE).write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")


def provenance(model: str) -> dict[str, Any] | None:
    """What trained a model this project trained (its qa_system.json less the per-epoch history), else None.

    Nested: a model trained from one of ours carries its base's provenance in turn.
    """
    info = read_model_info(model) if Path(model).is_dir() else {}
    return {k: v for k, v in info.items() if k != "history"} or None
