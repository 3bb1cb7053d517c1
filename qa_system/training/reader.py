"""Fine-tuning an extractive reader on SQuAD v1.1 / v2.0 or MRQA files (SubjQA exported, or any the user brings).

A plain PyTorch loop in the manner of transformers' ``run_qa.py``: windows labelled with the
answer's token span (or [CLS] when the window cannot see it), AdamW with linear warm-up and
decay, fixed seed; optionally distilled from a teacher's start/end distributions
(distillation.py). A question held by several files is trained on once, and what each file gave
is printed and stored (sources/qa_files.py). After each epoch the dev files are read with the
project's own ``ExtractiveReader`` (so dev figures are the figures users get), the no-answer
threshold is tuned on the pooled dev questions and the epoch is selected on one dev file's F1 at
that threshold; training stops early after ``patience`` epochs without improvement. The best
model is saved in fp16 safetensors with its tokenizer and a ``qa_system.json`` (threshold, data,
hyperparameters, time, machine, metrics) that the reader reads; it also holds the provenance of
the base model and of the teacher when this project trained them, so a two-stage model shows both stages.

Why pool the dev files for the threshold: SubjQA's electronics dev split is 61% unanswerable
while its test split is 34%, so a threshold fitted on electronics dev alone learns to answer
nothing; the three domains' dev splits together (50% unanswerable) are closer to test.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from haystack import Document

from qa_system.errors import QAError, check_count, check_number
from qa_system.metrics.squad import best_scores
from qa_system.reading.model import MODEL_INFO_FILE, load_qa_model, read_model_info
from qa_system.reading.reader import ExtractiveReader, context_sequence_id, encode_windows
from qa_system.reproducibility import machine, seed_everything
from qa_system.sources.qa_files import read_qa_file, read_qa_files
from qa_system.sources.squad import SquadExample, SquadReport, write_squad
from qa_system.training.distillation import DistillationConfig, DistillationLoss, check_same_tokenizer, distillation_loss

PathLike = str | Path
POOLED = "pooled"  # select_on value: select the epoch on the pooled dev questions
LABELS = ("span_mask", "start_positions", "end_positions")  # feature keys that are no model input


@dataclass(frozen=True)
class TrainingConfig:
    """Hyperparameters of one fine-tuning run (all recorded in the model's qa_system.json)."""

    epochs: int = 2
    learning_rate: float = 5e-5
    batch_size: int = 16
    seed: int = 42
    max_seq_length: int = 384
    doc_stride: int = 128
    patience: int = 1
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_steps: int | None = None  # stop after this many optimiser steps (smoke runs)

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_seq_length", "doc_stride", "patience"):
            check_count(getattr(self, name), name)
        check_count(self.seed, "seed", 0)
        check_count(self.max_steps, "max_steps", optional=True)
        check_number(self.learning_rate, "learning_rate", 0, above=True)
        check_number(self.warmup_ratio, "warmup_ratio", 0, maximum=1)
        check_number(self.weight_decay, "weight_decay", 0)
        if self.doc_stride >= self.max_seq_length:
            raise QAError(f"doc_stride ({self.doc_stride}) must be smaller than max_seq_length ({self.max_seq_length}).", "lower doc_stride.")


@dataclass
class TrainingResult:
    output_dir: Path
    best_epoch: int
    no_answer_threshold: float
    dev_metrics: dict[str, dict[str, float]]
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class DevPrediction:
    """One dev question read with the threshold left open: what answering and abstaining would score."""

    gap: float  # best span logit - no-answer logit
    answer_em: float
    answer_f1: float
    null_em: float
    null_f1: float

    @property
    def unanswerable(self) -> bool:
        return self.null_f1 == 1.0  # abstaining scores 1 exactly when the gold answer is ""


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


def tune_no_answer_threshold(predictions: Sequence[DevPrediction], no_answer_prior: float | None = None) -> tuple[float, float]:
    """The threshold maximising mean F1 when answering exactly the questions with gap >= threshold.

    Sweeps the thresholds between consecutive gaps (as the official SQuAD v2 script's
    ``find_best_thresh`` does) and returns (threshold, F1); the midpoint between two gaps is
    chosen so that the decision is not on a knife edge.

    ``no_answer_prior`` corrects for label shift: the questions are weighted so that unanswerable
    ones make up that share. SubjQA's dev splits are far more often unanswerable (51% pooled,
    61% electronics) than its train (38%) and test (32%) splits, and a threshold fitted to them
    unweighted abstains much too often; the training share is the best prior known at training time.
    """
    if not predictions:
        raise QAError("No dev questions to tune the no-answer threshold on.", "pass at least one dev file with questions.")
    weights = _prior_weights(predictions, no_answer_prior)
    order = sorted(range(len(predictions)), key=lambda i: predictions[i].gap, reverse=True)
    ordered = [predictions[i] for i in order]
    weights = [weights[i] for i in order]
    gaps = [p.gap for p in ordered]
    # Threshold above every gap: abstain everywhere; then answer one more question at each step.
    total = best_total = sum(w * p.null_f1 for p, w in zip(ordered, weights))
    best_index = 0
    for i, (p, w) in enumerate(zip(ordered, weights), start=1):
        total += w * (p.answer_f1 - p.null_f1)
        if total > best_total + 1e-9:
            best_total, best_index = total, i
    if best_index == 0:
        threshold = gaps[0] + 1.0 if math.isfinite(gaps[0]) else 0.0
    elif best_index == len(gaps) or not math.isfinite(gaps[best_index]):
        threshold = gaps[best_index - 1] - 1.0
    else:
        threshold = (gaps[best_index - 1] + gaps[best_index]) / 2
    return float(threshold), best_total / sum(weights)


def _prior_weights(predictions: Sequence[DevPrediction], no_answer_prior: float | None) -> list[float]:
    share = sum(p.unanswerable for p in predictions) / len(predictions)
    if no_answer_prior is None or share in (0.0, 1.0):
        return [1.0] * len(predictions)
    unanswerable, answerable = no_answer_prior / share, (1 - no_answer_prior) / (1 - share)
    return [unanswerable if p.unanswerable else answerable for p in predictions]


def no_answer_share(examples: Sequence[SquadExample]) -> float:
    """Share of unanswerable questions, the prior the threshold is tuned for."""
    return sum(e.is_impossible for e in examples) / len(examples) if examples else 0.0


def retune_threshold(model_dir: PathLike, dev_files: Sequence[PathLike], no_answer_prior: float | None) -> dict[str, Any]:
    """Re-tune a trained reader's no-answer threshold (no retraining) and store it with the model."""
    reader = ExtractiveReader(model=str(model_dir), backend="torch")  # the reference backend tunes the threshold
    pooled = [p for report in read_qa_files(dev_files) for p in dev_predictions(reader, report.examples)]
    threshold, _ = tune_no_answer_threshold(pooled, no_answer_prior)
    info_path = Path(model_dir) / MODEL_INFO_FILE
    info = json.loads(info_path.read_text(encoding="utf-8"))
    info.update(no_answer_threshold=threshold, no_answer_prior=no_answer_prior, threshold_tuned_on=[Path(p).name for p in dev_files])
    info_path.write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    return {"no_answer_threshold": threshold, "pooled_dev": scores_at(pooled, threshold, no_answer_prior)}


def scores_at(predictions: Sequence[DevPrediction], threshold: float, no_answer_prior: float | None = None) -> dict[str, float]:
    """EM/F1 (and the answer rate) of dev predictions at one threshold, and ``prior_weighted_f1``: F1 with
    the unanswerable questions reweighted to ``no_answer_prior`` (plain F1 without one), what selects."""
    if not predictions:
        return {"em": 0.0, "f1": 0.0, "answered": 0.0, "questions": 0, "prior_weighted_f1": 0.0}
    answered = [p.gap >= threshold for p in predictions]
    em = np.mean([p.answer_em if a else p.null_em for p, a in zip(predictions, answered)])
    f1s = [p.answer_f1 if a else p.null_f1 for p, a in zip(predictions, answered)]
    weighted = np.average(f1s, weights=_prior_weights(predictions, no_answer_prior))
    return {"em": float(em), "f1": float(np.mean(f1s)), "answered": float(np.mean(answered)), "questions": len(predictions), "prior_weighted_f1": float(weighted)}


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
    encoding = encode_windows(tokenizer, [e.question for e in examples], [e.context for e in examples], max_seq_length, doc_stride, padding=False)
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


def _batches(features: list[dict], batch_size: int, seed: int, tokenizer):
    """Shuffled, length-grouped batches (seeded per epoch), padded to their longest window.

    As transformers' LengthGroupedSampler: shuffle, sort by length within mega-batches of 50
    batches, shuffle the batches; far less padding, so far less CPU time, at the same randomness.
    """
    import torch

    rng = random.Random(seed)
    order = list(range(len(features)))
    rng.shuffle(order)
    mega = 50 * batch_size
    order = [i for begin in range(0, len(order), mega) for i in sorted(order[begin : begin + mega], key=lambda i: -len(features[i]["input_ids"]))]
    batches = [order[begin : begin + batch_size] for begin in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    for indices in batches:
        chunk = [features[i] for i in indices]
        inputs = [{k: v for k, v in f.items() if k not in LABELS} for f in chunk]
        batch = tokenizer.pad(inputs, padding="longest", return_tensors="pt")
        # Left padding (e.g. XLNet) moves every position of a shorter window right.
        width = batch["input_ids"].shape[1]
        shifts = [width - len(f["input_ids"]) if tokenizer.padding_side == "left" else 0 for f in chunk]
        batch["span_mask"] = torch.zeros(len(chunk), width, dtype=torch.bool)
        for row, (f, shift) in enumerate(zip(chunk, shifts)):
            batch["span_mask"][row, shift : shift + len(f["span_mask"])] = torch.tensor(f["span_mask"], dtype=torch.bool)
        for name in ("start_positions", "end_positions"):
            batch[name] = torch.tensor([f[name] + shift for f, shift in zip(chunk, shifts)])
        yield batch


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


def train_reader(
    train_files: Sequence[PathLike],
    dev_files: Sequence[PathLike],
    base_model: str,
    output_dir: PathLike,
    config: TrainingConfig = TrainingConfig(),
    select_on: PathLike | None = None,
    progress: bool = True,
    distillation: DistillationConfig | None = None,
    drop_dev_questions: bool = False,
    no_answer_prior: float | None = None,
) -> TrainingResult:
    """Fine-tune ``base_model`` (any HF model id or path; a bare encoder gets a fresh QA head).

    :param train_files: SQuAD v1.1 / v2.0 or MRQA files (format read from the content); a
        question in several files is trained on once. What each file gave is printed and stored.
    :param dev_files: the same formats, pooled to tune the no-answer threshold after each epoch.
    :param select_on: the dev file whose F1 (at the tuned threshold, unanswerable questions reweighted
        to the training share) selects the epoch, or ``POOLED`` for all dev files pooled; default: the first dev file.
    :param distillation: learn from a teacher's start/end distributions too (see distillation.py);
        the teacher must use the student's tokenizer.
    :param drop_dev_questions: leave out training questions whose id is a dev question's (SubjQA's
        dev splits share most question ids with its train splits, other annotators' answers); by
        default they are only counted.
    :param no_answer_prior: the share of unanswerable questions the threshold is tuned for; default
        the training files' share. Pass the in-domain share when some files are there to rehearse
        other data (SQuADShifts is all answerable: its share would make the reader answer too often).
    :returns: where the best model is, its epoch, threshold and dev metrics per file.
    """
    import torch
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    if not train_files or not dev_files:
        raise QAError("train_reader needs at least one training file and one dev file.", "pass SQuAD or MRQA files (see `qa-system export-squad`).")
    no_answer_prior = check_number(no_answer_prior, "no_answer_prior", 0, maximum=1, optional=True)
    select_on = POOLED if select_on == POOLED else Path(select_on) if select_on is not None else Path(dev_files[0])
    dev_reports = read_qa_files(list(dict.fromkeys(map(Path, dev_files))))
    dev_sets = {report.path: report.examples for report in dev_reports}
    if select_on != POOLED and select_on not in dev_sets:
        dev_sets[select_on] = read_qa_file(select_on)[0]
    selected = POOLED if select_on == POOLED else select_on.name
    dev_ids = {example.id for examples in dev_sets.values() for example in examples}
    train_reports = read_qa_files(train_files, dev_ids, drop_dev_questions)
    for kind, reports in (("train", train_reports), ("dev", dev_reports)):
        for report in reports:
            print(f"{kind} {report.summary()}", flush=True)
    train_examples = [example for report in train_reports for example in report.examples]
    if not train_examples:
        raise QAError("The training files hold no usable question.", "check them with read_qa_file; every answer needs a valid offset in its context.")

    began = time.time()
    seed_everything(config.seed)
    tokenizer, model = load_qa_model(base_model, what="base model")
    teacher = _teacher(distillation, tokenizer)
    features = training_features(tokenizer, train_examples, config.max_seq_length, config.doc_stride)
    steps_per_epoch = math.ceil(len(features) / config.batch_size)
    total_steps = min(steps_per_epoch * config.epochs, config.max_steps or math.inf)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": config.weight_decay},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=config.learning_rate)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total_steps), total_steps)
    reader = ExtractiveReader.from_loaded(model, tokenizer, max_seq_length=config.max_seq_length, doc_stride=config.doc_stride)
    if no_answer_prior is None:
        no_answer_prior = no_answer_share(train_examples)
    info_base = {
        "no_answer_prior": no_answer_prior,
        "base_model": base_model,
        "base_model_training": provenance(base_model),
        "train_files": [Path(p).name for p in train_files],
        "train_questions": len(train_examples),
        "train_windows": len(features),
        "train_data": [report.as_dict() for report in train_reports],
        "dev_files": [p.name for p in dev_sets],
        "dev_data": [report.as_dict() for report in dev_reports],
        "threshold_tuned_on": [Path(p).name for p in dev_files],
        "selected_on": selected,
        "hyperparameters": asdict(config),
        "distillation": None if distillation is None else {**asdict(distillation), "teacher_training": provenance(distillation.teacher)},
        "machine": machine(),
    }
    history: list[dict[str, Any]] = []
    best: TrainingResult | None = None
    step, stale = 0, 0
    for epoch in range(1, config.epochs + 1):
        model.train()
        bar = tqdm(_batches(features, config.batch_size, config.seed + epoch, tokenizer), total=steps_per_epoch, desc=f"epoch {epoch}", disable=not progress)
        losses: dict[str, list[float]] = {"train_loss": [], "train_hard_loss": [], "train_soft_loss": []}
        for batch in bar:
            loss = _loss(model, teacher, batch, distillation)
            loss.total.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            for name, value in zip(losses, loss):
                losses[name].append(value.item())
            bar.set_postfix(loss=f"{np.mean(losses['train_loss'][-50:]):.3f}")
            step += 1
            if step >= total_steps:
                break
        model.eval()
        per_file = {path: dev_predictions(reader, examples) for path, examples in dev_sets.items()}
        pooled = [p for path in dict.fromkeys(map(Path, dev_files)) for p in per_file[path]]
        threshold, _ = tune_no_answer_threshold(pooled, no_answer_prior)
        metrics = {path.name: scores_at(preds, threshold, no_answer_prior) for path, preds in per_file.items()}
        metrics[POOLED] = scores_at(pooled, threshold, no_answer_prior)
        mean_losses = {name: float(np.mean(values)) if values else None for name, values in losses.items() if distillation or name == "train_loss"}
        record = {"epoch": epoch, "steps": step, **mean_losses, "no_answer_threshold": threshold, "dev": metrics}
        history.append(record)
        print(json.dumps(record), flush=True)
        # Prior-weighted: plain F1 on dev splits more often unanswerable than train (SubjQA's) rewards abstaining.
        if best is None or metrics[selected]["prior_weighted_f1"] > best.dev_metrics[selected]["prior_weighted_f1"]:
            best = TrainingResult(Path(output_dir), epoch, threshold, metrics)
            stale = 0
            info = {**info_base, "no_answer_threshold": threshold, "best_epoch": epoch, "dev_metrics": metrics, "history": history, "training_seconds": time.time() - began}
            save_reader(model, tokenizer, output_dir, info)
        else:
            stale += 1
        if stale >= config.patience or step >= total_steps:
            break
    best.history, best.seconds = history, time.time() - began
    info_path = Path(output_dir) / MODEL_INFO_FILE
    info = json.loads(info_path.read_text(encoding="utf-8"))
    info.update(history=history, training_seconds=best.seconds)
    info_path.write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    return best


@dataclass
class InterpolationResult:
    output_dir: Path
    weight: float  # of the specialised reader; 1 - weight is the general one's
    no_answer_threshold: float
    dev_metrics: dict[str, dict[str, float]]
    trials: list[dict[str, Any]]


def interpolate_readers(
    general: PathLike,
    specialised: PathLike,
    output_dir: PathLike,
    dev_files: Sequence[PathLike],
    weights: Sequence[float] = (0.25, 0.4, 0.5, 0.6, 0.75, 1.0),
    report_files: Sequence[PathLike] = (),
    max_seq_length: int = 384,
    doc_stride: int = 128,
) -> InterpolationResult:
    """Weight-space ensembling (WiSE-FT, Wortsman et al. 2022): the reader whose weights are
    ``(1 - w) * general + w * specialised`` for the ``w`` of ``weights`` with the best F1 on the pooled
    ``dev_files``, its no-answer threshold tuned there; both for the specialised reader's no-answer
    prior (the F1 that ``tune_no_answer_threshold`` maximises). Plain dev F1 would reward abstaining:
    SubjQA's dev splits are 51% unanswerable, its train and test splits about a third.

    Fine-tuning on SubjQA (``specialised``, trained from ``general``) forgets much of what the general
    stage learnt about reviews it never saw; moving part of the way back keeps it. ``report_files``
    (e.g. the held-out SQuADShifts slice) are read at every weight and recorded, never selected on.
    """
    import torch

    weights = [check_number(weight, "interpolation weight", 0, maximum=1) for weight in weights]
    if not weights:
        raise QAError("interpolate_readers needs at least one weight.", "pass weights such as 0.5 0.75 1.")
    _, general_model = load_qa_model(general, what="general reader")
    tokenizer, model = load_qa_model(specialised, what="specialised reader")
    # Copies: a state_dict shares its tensors with the model, which each trial overwrites.
    start, end = ({k: v.detach().clone() for k, v in m.state_dict().items()} for m in (general_model, model))
    if start.keys() != end.keys() or any(start[k].shape != end[k].shape for k in end):
        raise QAError(f"'{specialised}' was not trained from '{general}': their weights differ in shape.", "interpolate a reader with the reader it was fine-tuned from.")
    info = read_model_info(specialised)
    prior = info.get("no_answer_prior")
    dev_sets = {report.path: report.examples for report in read_qa_files(dev_files)}
    report_sets = {report.path: report.examples for report in read_qa_files(report_files)} if report_files else {}
    reader = ExtractiveReader.from_loaded(model, tokenizer, max_seq_length=max_seq_length, doc_stride=doc_stride)
    trials: list[dict[str, Any]] = []
    best: InterpolationResult | None = None

    def mix(weight: float) -> dict[str, Any]:
        return {k: (1 - weight) * start[k] + weight * end[k] if end[k].is_floating_point() else end[k] for k in end}

    for weight in weights:
        with torch.no_grad():
            model.load_state_dict(mix(weight))
        per_file = {path: dev_predictions(reader, examples) for path, examples in dev_sets.items()}
        pooled = [p for predictions in per_file.values() for p in predictions]
        threshold, _ = tune_no_answer_threshold(pooled, prior)
        metrics = {path.name: scores_at(predictions, threshold, prior) for path, predictions in per_file.items()}
        metrics[POOLED] = scores_at(pooled, threshold, prior)
        answerable = [p.answer_f1 for p in pooled if not p.unanswerable]
        reported = {path.name: scores_at(dev_predictions(reader, examples), threshold) for path, examples in report_sets.items()}
        trials.append({
            "weight": weight, "no_answer_threshold": threshold, "prior_weighted_f1": metrics[POOLED]["prior_weighted_f1"],
            "answerable_f1_always_answering": float(np.mean(answerable)) if answerable else None, "dev": metrics, "reported": reported,
        })
        print(json.dumps(trials[-1]), flush=True)
        if best is None or metrics[POOLED]["prior_weighted_f1"] > best.dev_metrics[POOLED]["prior_weighted_f1"]:
            best = InterpolationResult(Path(output_dir), weight, threshold, metrics, trials)
    with torch.no_grad():
        model.load_state_dict(mix(best.weight))
    save_reader(model, tokenizer, output_dir, {
        **info, "no_answer_threshold": best.no_answer_threshold, "dev_metrics": best.dev_metrics,
        "interpolation": {"general": str(general), "general_training": provenance(str(general)), "specialised": str(specialised),
                          "weight": best.weight, "selected_on": f"{POOLED}, prior-weighted F1", "trials": trials},
    })
    return best


def _teacher(distillation: DistillationConfig | None, student_tokenizer):
    """The teacher as a function of a batch's inputs to its (start, end) logits, once its tokenizer is checked; None without distillation."""
    import torch

    if distillation is None:
        return None
    teacher_tokenizer, teacher = load_qa_model(distillation.teacher, what="teacher model")
    check_same_tokenizer(student_tokenizer, teacher_tokenizer, distillation.teacher)
    teacher.eval()
    names = teacher_tokenizer.model_input_names  # e.g. DistilBERT takes no token_type_ids

    def logits(inputs):
        with torch.no_grad():
            output = teacher(**{k: v for k, v in inputs.items() if k in names})
        return output.start_logits, output.end_logits

    return logits


def _loss(model, teacher, batch, distillation: DistillationConfig | None):
    """The batch's (total, hard, soft) loss: the model's own (hard labels only) without a teacher."""
    import torch

    inputs = {k: v for k, v in batch.items() if k not in LABELS}
    if teacher is None:
        loss = model(**inputs, start_positions=batch["start_positions"], end_positions=batch["end_positions"]).loss
        return DistillationLoss(loss, loss, torch.zeros(()))
    student = model(**inputs)
    return distillation_loss(
        student.start_logits, student.end_logits, *teacher(inputs),
        batch["start_positions"], batch["end_positions"], batch["span_mask"], distillation.temperature, distillation.alpha,
    )
