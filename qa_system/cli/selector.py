"""`qa-system train-selector`: the answer selector for the configured reader, trained on cross-fitted reader outputs."""

from __future__ import annotations

import argparse
from pathlib import Path

from qa_system.cli.options import Options, count, number, settings_from_args


def cmd_train_selector(args: argparse.Namespace) -> None:
    """Cross-fit the reader's SubjQA stage by product, then fit the selector on what the fold readers made of their own folds."""
    from qa_system.model_files import model_fingerprint
    from qa_system.training.reader import TrainingConfig
    from qa_system.training.selector import cross_fit_readers, fit_selector, selector_frames

    settings = settings_from_args(args)
    work_dir = args.work_dir or settings.home / "selector"
    config = TrainingConfig(epochs=1, learning_rate=args.learning_rate, seed=args.seed)
    records = cross_fit_readers(settings, args.general_reader, work_dir, args.domain, args.folds, config, rehearsal=args.train_file or [])
    questions, spans = selector_frames(records)
    reader = {"reader": str(settings.reader_model), "reader_fingerprint": model_fingerprint(settings.reader_model)}
    provenance = {"general_reader": str(args.general_reader), "domains": list(args.domain), "folds": args.folds,
                  "rehearsal": [Path(p).name for p in args.train_file or []], "fold_training": config.__dict__}
    oof = fit_selector(questions, spans, args.output, reader, args.folds, provenance=provenance)
    table = oof.groupby(["domain", "mode"])[["f1", "null_f1", "answered"]].mean().rename(columns={"null_f1": "always_no_answer_f1"})
    print("Out-of-fold decisions on the cross-fitted training questions (a product's questions never seen by the models that decided them):")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"Saved the answer selector for {settings.reader_model} to {args.output}; `qa-system eval reader|pipeline --split dev` measures it.")


def register(commands, options: Options) -> None:
    """Add `train-selector` to the command line."""
    from qa_system.config import REPO_ROOT

    p = commands.add_parser(
        "train-selector", parents=[options.common],
        help="train the answer selector of the configured reader on k-fold cross-fitted reader outputs (resumable: work is kept in --work-dir)",
    )
    options.domain(p)
    p.add_argument("--general-reader", required=True, help="the general-QA reader the configured reader's SubjQA stage started from")
    p.add_argument("--train-file", nargs="+", type=Path, help="more training files for each fold's reader (the rehearsal of the reader's recipe)")
    p.add_argument("--folds", type=count("--folds", 2), default=5, help="folds, by product (default 5)")
    p.add_argument("--learning-rate", type=number("--learning-rate", 0, above=True), default=5e-5, help="of each fold's SubjQA stage (the reader's recipe: 5e-5)")
    p.add_argument("--seed", type=count("--seed", 0), default=42)
    p.add_argument("--work-dir", type=Path, help="fold readers and their outputs (default QA_HOME/selector); a second run continues there")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "models" / "answer-selector")
    p.set_defaults(func=cmd_train_selector)
