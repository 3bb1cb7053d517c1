"""Train the reader shipped in models/ (see its README.md for the figures).

    python scripts/train_default_reader.py [--recipe two-stage|mixed|subjqa] [--output DIR]

Recipes (nothing in any of them is chosen on a test split):

- ``two-stage`` (the reference chapter's "SQuAD, then SubjQA"): stage 1 fine-tunes the
  all-MiniLM-L6-v2 encoder with a fresh QA head on general QA data, SQuAD 2.0 dev (half of it
  unanswerable: the lesson in *whether* to answer) and SQuADShifts Amazon reviews less a fixed
  held-out slice, at 256-token windows, for a budget of optimiser steps that fits 2 CPU cores,
  then two more passes at half the rate on a wider mix (SQuADShifts Reddit and the SQuAD 2.0 train
  articles added: new text, in a new order each time); stage 2 continues on the SubjQA train splits of the
  three domains at 384-token windows, rehearsing a fixed 3% of the Amazon review groups of stage 1
  (``--rehearse``: without it stage 2 forgets much of what stage 1 learnt about reviews outside
  SubjQA), selects the epoch on the three SubjQA dev splits pooled and tunes the no-answer
  threshold there, for SubjQA's own share of unanswerable training questions. With
  ``--interpolate W ...`` a stage 3 mixes the weights of stages 1 and 2 (WiSE-FT) and keeps the
  mix best on the pooled dev splits: tried, not in the shipped reader (its model card says why).
- ``mixed``: one run on all of the above at once (256-token windows).
- ``subjqa``: SubjQA only (the first shipped reader).

SubjQA's dev splits repeat most train questions (same id, question and review; only the
annotators' answers differ), so every recipe leaves the dev questions out of training: otherwise
the epoch and the threshold would be chosen on questions the reader was trained on.

The SQuADShifts held-out slice (``qa_system.sources.squad.is_held_out``) is read after training
as a second selection set and never trained on.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from qa_system.config import REPO_ROOT, default_embedding_model
from qa_system.sources.qa_files import read_qa_files
from qa_system.sources.squad import sample_articles, split_held_out
from qa_system.training.interpolation import interpolate_readers
from qa_system.training.reader import TrainingConfig, train_reader
from qa_system.training.reader_data import POOLED, no_answer_share, subjqa_to_squad_files

DOMAINS = ("electronics", "restaurants", "tripadvisor")
DATA = REPO_ROOT.parent / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=["two-stage", "mixed", "subjqa"], default="two-stage")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder")
    parser.add_argument("--general-epochs", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1, help="SubjQA epochs (at most; patience 1 on pooled dev F1)")
    parser.add_argument("--general-learning-rate", type=float, default=1e-4)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument(
        "--general-max-steps",
        type=int,
        default=600,
        help="optimiser steps on the general data (a budget for 2 CPU cores; 0 = one full epoch)",
    )
    parser.add_argument(
        "--general-more-steps",
        type=int,
        nargs="+",
        default=[700, 700],
        metavar="STEPS",
        help="two-stage: then continue stage 1 with one pass per number, of that many steps, on a wider mix "
        "(SQuADShifts Reddit and SQuAD 2.0 train added; 0 = skip)",
    )
    parser.add_argument(
        "--rehearse",
        type=int,
        default=3,
        metavar="PERCENT",
        help="two-stage: stage 2 also trains on this percent of the SQuADShifts Amazon review groups it may train on, "
        "its threshold still tuned for SubjQA's share of unanswerable questions (0 = SubjQA only)",
    )
    parser.add_argument("--max-steps", type=int, default=None, help="stop each stage early (smoke run)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--stage1", type=Path, help="two-stage: reuse this stage-1 model (both passes) instead of training one")
    parser.add_argument("--stage2", type=Path, help="two-stage: reuse this stage-2 model (trained from --stage1) instead of training one")
    parser.add_argument(
        "--interpolate",
        type=float,
        nargs="+",
        metavar="WEIGHT",
        help="two-stage: then mix stages 1 and 2 at these weights of stage 2 (e.g. 0.25 0.4 0.5 0.6 0.75 1) and keep the best on pooled dev",
    )
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "models" / "reader-minilm-qa")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "reader-training")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    squad_dir = args.work_dir / "squad"
    for path, report in subjqa_to_squad_files(DOMAINS, ("train", "dev"), squad_dir).items():
        print(f"{path}: {report.summary()}", flush=True)
    subjqa_train = [squad_dir / f"{d}-train.json" for d in DOMAINS]
    subjqa_dev = [squad_dir / f"{d}-dev.json" for d in DOMAINS]
    amazon_train, amazon_heldout = split_held_out(args.data / "squadshifts" / "amazon_reviews_v1.0.json", squad_dir)
    general = [args.data / "squad" / "dev-v2.0.json", amazon_train]
    short = dict(max_seq_length=256, doc_stride=96, max_steps=args.max_steps or args.general_max_steps or None)
    final = TrainingConfig(epochs=args.epochs, learning_rate=args.learning_rate, max_steps=args.max_steps)

    if args.recipe == "two-stage":
        stage1 = args.stage1 or args.work_dir / "stage1-general"
        if args.stage1 is None:
            train_reader(
                general,
                [amazon_heldout],
                default_embedding_model(),
                stage1,
                TrainingConfig(epochs=args.general_epochs, learning_rate=args.general_learning_rate, **short),
            )
            # 2 cores afford part of an epoch per pass: each further pass starts from the last one's
            # weights and reads new text, in a new order (its own seed), at half the rate.
            wider = [
                amazon_train,
                args.data / "squadshifts" / "reddit_v1.0.json",
                args.data / "squad" / "train-v2.0-first10articles.json",
                args.data / "squad" / "dev-v2.0.json",
            ]
            for number, steps in enumerate(filter(None, args.general_more_steps), start=1):  # 0 = skip
                more = dict(short, max_steps=args.max_steps or steps)
                wider_dir = args.work_dir / f"stage1-wider{number}"
                train_reader(
                    wider,
                    [amazon_heldout],
                    str(stage1),
                    wider_dir,
                    TrainingConfig(epochs=1, learning_rate=args.general_learning_rate / 2, seed=42 + number, **more),
                )
                stage1 = wider_dir
        stage2 = args.stage2 or (args.work_dir / "stage2-subjqa" if args.interpolate else args.output)
        if args.stage2 is None:
            rehearsal, prior = [], None
            if args.rehearse:
                # Rehearsing a little general data while SubjQA is learnt keeps part of what stage 1
                # knew; the threshold is still for SubjQA's share of unanswerable questions.
                rehearsal = [sample_articles(amazon_train, squad_dir, args.rehearse, salt="rehearse")]
                dev_ids = {e.id for report in read_qa_files(subjqa_dev) for e in report.examples}
                prior = no_answer_share([e for report in read_qa_files(subjqa_train, dev_ids, drop_dev=True) for e in report.examples])
            result = train_reader(
                subjqa_train + rehearsal,
                subjqa_dev,
                str(stage1),
                stage2,
                final,
                select_on=POOLED,
                drop_dev_questions=True,
                no_answer_prior=prior,
            )
            print(
                f"stage 2: best epoch {result.best_epoch}, threshold {result.no_answer_threshold:.3f}, {result.seconds / 60:.1f} min -> {stage2}"
            )
        output = stage2
        if args.interpolate:
            mix = interpolate_readers(stage1, stage2, args.output, subjqa_dev, args.interpolate, report_files=[amazon_heldout])
            print(f"stage 3: stage 2 weight {mix.weight}, threshold {mix.no_answer_threshold:.3f} -> {mix.output_dir}")
            output = mix.output_dir
    else:
        if args.recipe == "mixed":
            config = TrainingConfig(epochs=args.general_epochs, learning_rate=args.general_learning_rate, **short)
            result = train_reader(
                general + subjqa_train,
                subjqa_dev,
                default_embedding_model(),
                args.output,
                config,
                select_on=POOLED,
                drop_dev_questions=True,
            )
        else:
            result = train_reader(
                subjqa_train,
                subjqa_dev,
                default_embedding_model(),
                args.output,
                TrainingConfig(epochs=args.epochs, learning_rate=1e-4, max_steps=args.max_steps),
                select_on=POOLED,
                drop_dev_questions=True,
            )
        print(
            f"best epoch {result.best_epoch}, threshold {result.no_answer_threshold:.3f}, {result.seconds / 60:.1f} min -> {result.output_dir}"
        )
        output = result.output_dir
    print(
        f"held-out SQuADShifts slice: {amazon_heldout} (evaluate with `qa-system eval reader --labels {amazon_heldout} --reader {output}`)"
    )


if __name__ == "__main__":
    main()
