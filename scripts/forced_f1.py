"""Forced (best span, no threshold) SQuAD EM / F1 of readers on a SQuAD or MRQA file, each question read on its own context.

    python scripts/forced_f1.py FILE MODEL [MODEL ...] [--device auto|cpu|cuda] [--out RESULTS.json]

For all-answerable files such as the held-out SQuADShifts slice; runs on a GPU when there is one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from qa_system.devices import resolve_device
from qa_system.reading.model import load_qa_model
from qa_system.reading.reader import ExtractiveReader
from qa_system.sources.qa_files import read_qa_file
from qa_system.training.reader_data import dev_predictions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = resolve_device(args.device)
    examples = read_qa_file(args.file)[0][: args.limit]
    results = {}
    for name in args.models:
        began = time.time()
        tokenizer, model = load_qa_model(name)
        reader = ExtractiveReader.from_loaded(model.to(device), tokenizer)
        predictions = dev_predictions(reader, examples)
        results[name] = {
            "questions": len(predictions),
            "forced_em": 100 * sum(p.answer_em for p in predictions) / len(predictions),
            "forced_f1": 100 * sum(p.answer_f1 for p in predictions) / len(predictions),
            "seconds": round(time.time() - began, 1),
        }
        print(json.dumps({"file": args.file.name, "model": name, "device": device, **results[name]}), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"file": str(args.file), "device": device, "results": results}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
