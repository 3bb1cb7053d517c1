"""Train the reader shipped in models/reader-minilm-subjqa (see its README.md for the figures).

    python scripts/train_default_reader.py [--epochs 2] [--max-steps N] [--output DIR]

SubjQA's three domains are exported to SQuAD v2 files, the all-MiniLM-L6-v2 encoder gets a QA
head and is fine-tuned on the three train splits; the epoch is selected on electronics dev F1
and the no-answer threshold is tuned on the three dev splits pooled.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from qa_system.config import REPO_ROOT, default_embedding_model
from qa_system.reading.training import TrainingConfig, subjqa_to_squad_files, train_reader

DOMAINS = ("electronics", "restaurants", "tripadvisor")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-steps", type=int, default=None, help="stop early (smoke run)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "models" / "reader-minilm-subjqa")
    parser.add_argument("--squad-dir", type=Path, default=Path(tempfile.gettempdir()) / "subjqa-squad")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    for path, report in subjqa_to_squad_files(DOMAINS, ("train", "dev"), args.squad_dir).items():
        print(f"{path}: {report.summary()}", flush=True)
    config = TrainingConfig(epochs=args.epochs, learning_rate=args.learning_rate, batch_size=args.batch_size, max_steps=args.max_steps)
    result = train_reader(
        train_files=[args.squad_dir / f"{d}-train.json" for d in DOMAINS],
        dev_files=[args.squad_dir / f"{d}-dev.json" for d in DOMAINS],
        base_model=default_embedding_model(),
        output_dir=args.output,
        config=config,
        select_on=args.squad_dir / "electronics-dev.json",
    )
    print(f"best epoch {result.best_epoch}, threshold {result.no_answer_threshold:.3f}, {result.seconds / 60:.1f} min -> {result.output_dir}")


if __name__ == "__main__":
    main()
