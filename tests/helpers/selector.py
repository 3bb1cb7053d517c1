"""Synthetic records of the answer selector's training data (questions read in two modes, as the reader leaves them), and a real
selector fitted on them whose calibrations are set by hand."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = "battery screen sound price size weight light case cable button".split()


def synthetic_records(count: int, seed: int = 0) -> list[dict]:
    """Questions read in two modes, where a high margin over the review's "no answer" means the span is the answer."""
    rng = random.Random(seed)
    records = []
    for n in range(count):
        answerable = rng.random() < 0.6
        modes = {}
        gold_text = None
        for mode, documents in (("gold", 1), ("split", 3)):
            read = []
            for rank in range(documents):
                words = rng.sample(WORDS, 6)
                content = " ".join(words) + "."
                spans = []
                for i, word in enumerate(words[:3]):
                    start = content.index(word)
                    logit = (4.0 if answerable and rank == 0 and i == 0 else 0.0) + rng.gauss(0, 1)
                    spans.append([start, start + len(word), logit])
                spans.sort(key=lambda s: -s[2])
                if answerable and rank == 0 and mode == "gold":
                    gold_text = words[0]
                read.append(
                    {
                        "id": f"{n}-{mode}-{rank}",
                        "content": content,
                        "rank": rank,
                        "score": 10.0 - rank,
                        "null": rng.gauss(1.5, 1),
                        "spans": spans,
                    }
                )
            if answerable and mode == "split":  # the same answer in the question's first retrieved review
                first = read[0]
                first["content"] = gold_text + " " + first["content"]
                first["spans"] = [[0, len(gold_text), 4.0 + rng.gauss(0, 1)]] + [
                    [s + len(gold_text) + 1, e + len(gold_text) + 1, logit] for s, e, logit in first["spans"][1:]
                ]
            modes[mode] = read
        records.append(
            {
                "id": f"q{n}",
                "question": "how is the battery?",
                "item_id": f"item{n % 23}",
                "domain": "electronics",
                "split": "train",
                "gold": [gold_text] if answerable else [""],
                "no_answer": not answerable,
                "modes": modes,
            }
        )
    return records


def close_call_selector(folder: Path, reader: Path, calibration: dict | None = None) -> Path:
    """A real selector (two LightGBM models) for ``reader``, its calibrations making "no answer" (55%) a close call over every answer
    (50%), or ``calibration`` ({"answer": [xs, ys], "no_answer": [xs, ys]})."""
    from qa_system.model_files import model_fingerprint
    from qa_system.reading.selection import SELECTOR_FILE
    from qa_system.training.selector import fit_selector, selector_frames

    questions, spans = selector_frames(synthetic_records(120))
    fit_selector(questions, spans, folder, {"reader_fingerprint": model_fingerprint(reader)}, folds=2)
    info = json.loads((folder / SELECTOR_FILE).read_text())
    info["calibration"] = calibration or {"answer": [[0.0, 1.0], [0.5, 0.5]], "no_answer": [[0.0, 1.0], [0.55, 0.55]]}
    (folder / SELECTOR_FILE).write_text(json.dumps(info))
    return folder
