"""Fine-tuning an extractive reader on SQuAD v1.1 / v2.0 or MRQA files (SubjQA exported, or any the user brings).

transformers' ``Trainer`` runs the loop: windows labelled with the answer's token span (or [CLS]
when the window cannot see it, ``reader_data.training_features``), AdamW with linear warm-up and
decay, length-grouped batches, a fixed seed, and checkpoints that an interrupted run resumes from
(``resume_from``: model, optimiser, schedule, random state and the epoch's position) — a long
training on 2 CPU cores can continue in another session. A teacher's start/end distributions can
be distilled into the student (``distillation``). A question held by several files is trained on
once, and what each file gave is printed and stored (``sources/qa_files.py``).

After each epoch the dev files are read with the project's own ``ExtractiveReader`` (so dev
figures are the figures users get), the no-answer threshold is tuned on the pooled dev questions
and the epoch is selected on one dev file's F1 at that threshold; training stops after
``patience`` epochs without improvement. The best model is saved in fp16 with a ``qa_system.json``
(threshold, data, hyperparameters, time, machine, metrics, the base model's provenance).

Why pool the dev files for the threshold: SubjQA's electronics dev split is 61% unanswerable
while its test split is 34%, so a threshold fitted on electronics dev alone learns to answer
nothing; the three domains' dev splits together (50% unanswerable) are closer to test.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qa_system.devices import resolve_device
from qa_system.errors import QAError, check_count, check_number
from qa_system.metrics.no_answer import scores_at, tune_no_answer_threshold
from qa_system.reading.model import MODEL_INFO_FILE, load_qa_model
from qa_system.reading.reader import ExtractiveReader
from qa_system.reproducibility import machine, seed_everything
from qa_system.sources.qa_files import read_qa_file, read_qa_files
from qa_system.training.distillation import DistillationConfig, DistillationLoss, check_same_tokenizer, distillation_loss
from qa_system.training.progress import quiet_progress
from qa_system.training.reader_data import (
    LABELS,
    POOLED,
    dev_predictions,
    length_grouped_order,
    no_answer_share,
    pad_batch,
    provenance,
    save_reader,
    training_features,
)

PathLike = str | Path
CHECKPOINTS = "checkpoints"  # inside the output folder while training; removed once the run has finished
SELECTION_STATE = "selection.json"  # the epoch selection's state, saved in each checkpoint


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
    max_steps: int | None = None  # stop after this many optimiser steps (a budget, or a smoke run)
    checkpoint_steps: int = 100  # a checkpoint every this many steps (the last two are kept)

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_seq_length", "doc_stride", "patience", "checkpoint_steps"):
            check_count(getattr(self, name), name)
        check_count(self.seed, "seed", 0)
        check_count(self.max_steps, "max_steps", optional=True)
        check_number(self.learning_rate, "learning_rate", 0, above=True)
        check_number(self.warmup_ratio, "warmup_ratio", 0, maximum=1)
        check_number(self.weight_decay, "weight_decay", 0)
        if self.doc_stride >= self.max_seq_length:
            raise QAError(
                f"doc_stride ({self.doc_stride}) must be smaller than max_seq_length ({self.max_seq_length}).", "lower doc_stride."
            )


@dataclass
class TrainingResult:
    """Where the selected model was saved, its epoch, no-answer threshold and dev metrics, and every epoch's record."""

    output_dir: Path
    best_epoch: int
    no_answer_threshold: float
    dev_metrics: dict[str, dict[str, float]]
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Selection:
    """What the epoch selection knows so far; saved in every checkpoint so that a resumed run selects as an uninterrupted one."""

    history: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None  # epoch, threshold and metrics of the model saved in the output folder
    stale: int = 0
    seconds_before: float = 0.0  # training time spent before a resume


def training_device(setting: str = "auto") -> str:
    """ "cpu" or "cuda" for the Trainer, from the one device setting (``devices.resolve_device``: an absent GPU is
    refused there). The Trainer trains on the first GPU it sees, so another one is chosen with CUDA_VISIBLE_DEVICES."""
    device = resolve_device(setting)
    if device not in ("cpu", "cuda:0"):
        raise QAError(
            f"Training runs on the first GPU it sees; {setting} names GPU {device[5:]}.",
            f"set CUDA_VISIBLE_DEVICES={device[5:]} and use --device cuda.",
        )
    return "cpu" if device == "cpu" else "cuda"


def _teacher(distillation: DistillationConfig | None, student_tokenizer, device: str = "cpu"):
    """The teacher as a function of a batch's inputs to its (start, end) logits, once its tokenizer is checked; None without distillation."""
    import torch

    if distillation is None:
        return None
    teacher_tokenizer, teacher = load_qa_model(distillation.teacher, what="teacher model")
    check_same_tokenizer(student_tokenizer, teacher_tokenizer, distillation.teacher)
    teacher.to(device).eval()  # the student's batches arrive on the training device
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
        return DistillationLoss(loss, loss, torch.zeros((), device=loss.device))
    student = model(**inputs)
    return distillation_loss(
        student.start_logits,
        student.end_logits,
        *teacher(inputs),
        batch["start_positions"],
        batch["end_positions"],
        batch["span_mask"],
        distillation.temperature,
        distillation.alpha,
    )


def _trainer_class():
    """``Trainer`` with the reader's loss (its own, or distilled from a teacher), logging the hard and soft parts too."""
    import torch
    from transformers import Trainer

    class ReaderTrainer(Trainer):
        def __init__(self, *args, teacher=None, distillation: DistillationConfig | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self.teacher, self.distillation = teacher, distillation
            self._parts: list = []  # (hard, soft) loss tensors since the last log

        def _get_train_sampler(self, train_dataset=None):
            return _EpochSampler([len(f["input_ids"]) for f in self.train_dataset], self.args.train_batch_size, self.args.seed)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = _loss(model, self.teacher, inputs, self.distillation)
            # Kept as tensors until logged: reading a GPU value each step would wait for the GPU each step.
            self._parts.append(torch.stack([loss.hard.detach().float(), loss.soft.detach().float()]))
            return (loss.total, None) if return_outputs else loss.total

        def log(self, logs: dict[str, float], *args, **kwargs) -> None:
            if self._parts and "loss" in logs:
                hard, soft = torch.stack(self._parts).mean(dim=0).tolist()
                logs = {**logs, "hard_loss": hard, "soft_loss": soft}
                self._parts = []
            super().log(logs, *args, **kwargs)

    return ReaderTrainer


class _EpochSampler:
    """Length-grouped windows in an order fixed by the seed and the epoch (``length_grouped_order``): the
    Trainer's ``set_epoch`` picks the epoch, so a resumed epoch is read in the order it was begun."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int):
        self.lengths, self.batch_size, self.seed, self.epoch = list(lengths), batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(length_grouped_order(self.lengths, self.batch_size, self.seed + self.epoch + 1))  # epochs counted from 1, as before

    def __len__(self) -> int:
        return len(self.lengths)


def _epoch_losses(log_history: list[dict[str, Any]], epoch: int, distilled: bool) -> dict[str, float | None]:
    """Mean training losses of one epoch, from the Trainer's log (one entry a step; restored on resume)."""
    steps = [entry for entry in log_history if "loss" in entry and epoch - 1 < entry.get("epoch", 0) <= epoch + 1e-9]
    losses = {"train_loss": float(np.mean([e["loss"] for e in steps])) if steps else None}
    if distilled:
        losses["train_hard_loss"] = float(np.mean([e["hard_loss"] for e in steps])) if steps else None
        losses["train_soft_loss"] = float(np.mean([e["soft_loss"] for e in steps])) if steps else None
    return losses


def _selection_callback(
    evaluate: Callable[[int, int, list], dict],
    save_best: Callable[[dict, _Selection], None],
    selected: str,
    patience: int,
    selection: _Selection,
    began: float,
):
    """A ``TrainerCallback``: after each epoch, read dev, keep the model if it is the best so far, stop when stale; saved with each checkpoint."""
    from transformers import TrainerCallback

    class EpochSelection(TrainerCallback):
        def on_epoch_end(self, args, state, control, **kwargs):
            record = evaluate(math.ceil(state.epoch - 1e-9), state.global_step, state.log_history)
            selection.history.append(record)
            print(json.dumps(record), flush=True)
            # Prior-weighted: plain F1 on dev splits more often unanswerable than train (SubjQA's) rewards abstaining.
            if (
                selection.best is None
                or record["dev"][selected]["prior_weighted_f1"] > selection.best["dev"][selected]["prior_weighted_f1"]
            ):
                selection.best, selection.stale = record, 0
                save_best(record, selection)
            else:
                selection.stale += 1
            if selection.stale >= patience:
                control.should_training_stop = True

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            state_now = {**asdict(selection), "seconds_before": selection.seconds_before + time.time() - began}
            (folder / SELECTION_STATE).write_text(json.dumps(state_now, default=str), encoding="utf-8")

    return EpochSelection()


def resume_point(resume_from: PathLike | None, output_dir: PathLike) -> Path | None:
    """The checkpoint to resume from: a checkpoint folder, or "last" for the newest in the output's checkpoints; None to start afresh."""
    checkpoints = Path(output_dir) / CHECKPOINTS
    if resume_from is None:
        return None
    if str(resume_from) == "last":
        found = sorted(checkpoints.glob("checkpoint-*"), key=lambda p: int(p.name.rpartition("-")[2]))
        if not found:
            raise QAError(f"No checkpoint to resume from in {checkpoints}.", "start the training without --resume-from.")
        return found[-1]
    point = Path(resume_from)
    if not (point / "trainer_state.json").is_file():
        raise QAError(
            f"{point} is not a training checkpoint (no trainer_state.json).", f"pass a checkpoint-N folder from {checkpoints}, or 'last'."
        )
    return point


def _training_arguments(config: TrainingConfig, checkpoints: Path, total_steps: int, progress: bool, device: str = "cpu"):
    import torch
    from transformers import TrainingArguments

    # bf16 autocast where the GPU has it (the Trainer keeps fp32 weights and the loss in fp32); fp32 elsewhere.
    bf16 = device == "cuda" and torch.cuda.is_bf16_supported()
    return TrainingArguments(
        output_dir=str(checkpoints),
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        max_steps=total_steps,
        lr_scheduler_type="linear",
        warmup_steps=int(config.warmup_ratio * total_steps),
        max_grad_norm=1.0,
        seed=config.seed,
        save_strategy="steps",
        save_steps=config.checkpoint_steps,
        save_total_limit=2,
        logging_strategy="steps",
        logging_steps=1 if device == "cpu" else 25,  # each log waits for the GPU
        report_to=[],
        use_cpu=device == "cpu",
        bf16=bf16,
        disable_tqdm=not progress,
        # On a GPU, batches are padded in worker processes while it computes; on a CPU that would take its cores.
        dataloader_num_workers=0 if device == "cpu" else 4,
        dataloader_persistent_workers=device != "cpu",
        eval_strategy="no",
        remove_unused_columns=False,  # span_mask is no model input but the loss needs it
    )


def _read_training_files(train_files, dev_files, select_on, drop_dev_questions):
    """(dev reports, dev examples per file, selection name, training reports), printed as they are read."""
    select_on = POOLED if select_on == POOLED else Path(select_on) if select_on is not None else Path(dev_files[0])
    dev_reports = read_qa_files(list(dict.fromkeys(map(Path, dev_files))))
    dev_sets = {report.path: report.examples for report in dev_reports}
    if select_on != POOLED and select_on not in dev_sets:
        dev_sets[select_on] = read_qa_file(select_on)[0]
    dev_ids = {example.id for examples in dev_sets.values() for example in examples}
    train_reports = read_qa_files(train_files, dev_ids, drop_dev_questions)
    for kind, reports in (("train", train_reports), ("dev", dev_reports)):
        for report in reports:
            print(f"{kind} {report.summary()}", flush=True)
    if not any(report.examples for report in train_reports):
        raise QAError(
            "The training files hold no usable question.", "check them with read_qa_file; every answer needs a valid offset in its context."
        )
    return dev_reports, dev_sets, POOLED if select_on == POOLED else select_on.name, train_reports


def _dev_evaluator(model, reader: ExtractiveReader, dev_sets: dict, dev_files, prior: float, distilled: bool):
    """``evaluate(epoch, step, log_history)``: the epoch's record (losses, tuned threshold, per-file and pooled dev scores)."""

    def evaluate(epoch: int, step: int, log_history: list) -> dict[str, Any]:
        model.eval()  # no dropout while reading dev; the Trainer's next step puts it back in training mode
        per_file = {path: dev_predictions(reader, examples) for path, examples in dev_sets.items()}
        pooled = [p for path in dict.fromkeys(map(Path, dev_files)) for p in per_file[path]]
        threshold, _ = tune_no_answer_threshold(pooled, prior)
        metrics = {path.name: scores_at(predictions, threshold, prior) for path, predictions in per_file.items()}
        metrics[POOLED] = scores_at(pooled, threshold, prior)
        return {
            "epoch": epoch,
            "steps": step,
            **_epoch_losses(log_history, epoch, distilled),
            "no_answer_threshold": threshold,
            "dev": metrics,
        }

    return evaluate


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
    resume_from: PathLike | None = None,
    callbacks: Sequence[Any] = (),
    device: str = "auto",
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
    :param resume_from: a checkpoint folder (``<output_dir>/checkpoints/checkpoint-N``) or ``"last"``:
        continue an interrupted run of the same command from there.
    :param callbacks: more ``transformers.TrainerCallback``s (logging, early stopping, ...).
    :param device: ``auto`` (CUDA when there is one, else CPU), ``cpu``, ``cuda`` or ``cuda:N`` (see training_device).
    :returns: where the best model is, its epoch, threshold and dev metrics per file.
    """
    if not train_files or not dev_files:
        raise QAError(
            "train_reader needs at least one training file and one dev file.", "pass SQuAD or MRQA files (see `qa-system export-squad`)."
        )
    no_answer_prior = check_number(no_answer_prior, "no_answer_prior", 0, maximum=1, optional=True)
    device = training_device(device)
    output_dir = Path(output_dir)
    checkpoints = output_dir / CHECKPOINTS
    resume = resume_point(resume_from, output_dir)
    dev_reports, dev_sets, selected, train_reports = _read_training_files(train_files, dev_files, select_on, drop_dev_questions)
    train_examples = [example for report in train_reports for example in report.examples]
    began = time.time()
    seed_everything(config.seed)
    tokenizer, model = load_qa_model(base_model, what="base model")
    features = training_features(tokenizer, train_examples, config.max_seq_length, config.doc_stride)
    total_steps = min(math.ceil(len(features) / config.batch_size) * config.epochs, config.max_steps or math.inf)
    prior = no_answer_share(train_examples) if no_answer_prior is None else no_answer_prior
    info_base = {
        "no_answer_prior": prior,
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
        "trainer": "transformers.Trainer",
        "machine": machine(device),
        "distillation": None if distillation is None else {**asdict(distillation), "teacher_training": provenance(distillation.teacher)},
    }
    selection = (
        _Selection(**json.loads((resume / SELECTION_STATE).read_text(encoding="utf-8")))
        if resume and (resume / SELECTION_STATE).is_file()
        else _Selection()
    )

    def save_best(record: dict, state: _Selection) -> None:
        seconds = state.seconds_before + time.time() - began
        save_reader(
            model,
            tokenizer,
            output_dir,
            {
                **info_base,
                "no_answer_threshold": record["no_answer_threshold"],
                "best_epoch": record["epoch"],
                "dev_metrics": record["dev"],
                "history": state.history,
                "training_seconds": seconds,
            },
        )

    reader = ExtractiveReader.from_loaded(model, tokenizer, max_seq_length=config.max_seq_length, doc_stride=config.doc_stride)
    evaluate = _dev_evaluator(model, reader, dev_sets, dev_files, prior, distillation is not None)
    trainer = _trainer_class()(
        model=model,
        args=_training_arguments(config, checkpoints, int(total_steps), progress, device),
        train_dataset=features,
        data_collator=functools.partial(pad_batch, tokenizer=tokenizer),  # picklable, for worker processes
        teacher=_teacher(distillation, tokenizer, device),
        distillation=distillation,
        callbacks=[_selection_callback(evaluate, save_best, selected, config.patience, selection, began), *callbacks],
    )
    quiet_progress(trainer, progress, "training the reader")  # a progress bar or log lines, not a printed line per step
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return _finish(output_dir, selection, began)


def _finish(output_dir: Path, selection: _Selection, began: float) -> TrainingResult:
    """The finished run's result; its history and time written beside the saved model, its checkpoints removed."""
    seconds = selection.seconds_before + time.time() - began
    info_path = output_dir / MODEL_INFO_FILE
    info = json.loads(info_path.read_text(encoding="utf-8"))
    info.update(history=selection.history, training_seconds=seconds)
    info_path.write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    shutil.rmtree(output_dir / CHECKPOINTS, ignore_errors=True)
    best = selection.best
    return TrainingResult(output_dir, best["epoch"], best["no_answer_threshold"], best["dev"], selection.history, seconds)
