"""Weight-space ensembling of two readers (WiSE-FT): part of the way back from a specialised reader to its general base."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qa_system.errors import QAError, check_number
from qa_system.metrics.no_answer import scores_at, tune_no_answer_threshold
from qa_system.reading.model import load_qa_model, read_model_info
from qa_system.reading.reader import ExtractiveReader
from qa_system.sources.qa_files import read_qa_files
from qa_system.training.reader_data import POOLED, dev_predictions, provenance, save_reader

PathLike = str | Path


@dataclass
class InterpolationResult:
    """The mixed reader kept: its folder, the weight of the specialised reader, its threshold and dev metrics, and every weight tried."""

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
        raise QAError(
            f"'{specialised}' was not trained from '{general}': their weights differ in shape.",
            "interpolate a reader with the reader it was fine-tuned from.",
        )
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
        trials.append(
            {
                "weight": weight,
                "no_answer_threshold": threshold,
                "prior_weighted_f1": metrics[POOLED]["prior_weighted_f1"],
                "answerable_f1_always_answering": float(np.mean(answerable)) if answerable else None,
                "dev": metrics,
                "reported": reported,
            }
        )
        print(json.dumps(trials[-1]), flush=True)
        if best is None or metrics[POOLED]["prior_weighted_f1"] > best.dev_metrics[POOLED]["prior_weighted_f1"]:
            best = InterpolationResult(Path(output_dir), weight, threshold, metrics, trials)
    with torch.no_grad():
        model.load_state_dict(mix(best.weight))
    save_reader(
        model,
        tokenizer,
        output_dir,
        {
            **info,
            "no_answer_threshold": best.no_answer_threshold,
            "dev_metrics": best.dev_metrics,
            "interpolation": {
                "general": str(general),
                "general_training": provenance(str(general)),
                "specialised": str(specialised),
                "weight": best.weight,
                "selected_on": f"{POOLED}, prior-weighted F1",
                "trials": trials,
            },
        },
    )
    return best
