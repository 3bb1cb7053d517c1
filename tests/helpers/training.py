"""One review with a known answer ("battery lasts"), the labelled questions over it that reader training reads, and a
`train-reader` command line small enough for a test."""

from __future__ import annotations

from qa_system.sources.subjqa import LabelledQuestion

REVIEW = "it is a cheap screen and the sound is bad. " * 6 + "the battery lasts 6000 hours."


def labelled(qid, answers):
    return LabelledQuestion(qid, "how is the battery?", "B1", "r1", "d/r1", "electronics", "train", answers, False, context=REVIEW)


def tiny_training_argv(train_files, dev_file, base, output, max_seq_length: int = 48) -> list[str]:
    """`train-reader` of a tiny base model on small files only (no SubjQA): one step, short windows, into ``output``."""
    files = ["--train-file", *map(str, train_files), "--dev-file", str(dev_file), "--base-model", str(base), "--output", str(output)]
    sizes = ["--epochs", "1", "--max-steps", "1", "--batch-size", "2", "--max-seq-length", str(max_seq_length), "--doc-stride", "16"]
    return ["train-reader", "--no-subjqa", *files, *sizes]
