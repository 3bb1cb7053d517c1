"""The training, dev and held-out files of the two GPU reader recipes (judged spans, with or without SubjQA).

    python scripts/gpu_reader_data.py OUT_DIR [--data DIR] [--rehearsal 3000] [--held-out 1000]

Writes into OUT_DIR:

- ``<domain>-train-answerable.json``: SubjQA train, answerable questions only (its ANSWERNOTFOUND
  labels mark "no answer" on reviews that answer: see the judged protocol);
- ``<domain>-dev.json``: SubjQA dev as exported for training (epoch selection and the threshold);
- ``judged-train-x3.json``: the judged train spans, each question three times (scripts/judged_to_squad.py);
- ``amazon-heldout.json``: 1,000 SQuADShifts-Amazon questions drawn with ``random.Random(0)``, never
  trained on; ``amazon-rehearsal.json``: 3,000 more drawn from the rest (seed 1), general reading
  rehearsed while the reader learns review spans.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

from qa_system.config import REPO_ROOT
from qa_system.training.reader_data import subjqa_to_squad_files

DOMAINS = ("electronics", "restaurants", "tripadvisor")
DATA = REPO_ROOT.parent / "shared" / "data"


def keep_questions(squad: dict, keep) -> dict:
    """The file with only the questions ``keep(qa)`` accepts; emptied paragraphs and articles dropped."""
    data = []
    for article in squad["data"]:
        paragraphs = [{**p, "qas": [qa for qa in p["qas"] if keep(qa)]} for p in article["paragraphs"]]
        paragraphs = [p for p in paragraphs if p["qas"]]
        if paragraphs:
            data.append({**article, "paragraphs": paragraphs})
    return {"version": squad.get("version", "v2.0"), "data": data}


def count(squad: dict) -> int:
    return sum(len(p["qas"]) for a in squad["data"] for p in a["paragraphs"])


def write(squad: dict, path: Path) -> None:
    path.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    print(f"{path}: {count(squad)} questions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--rehearsal", type=int, default=3000)
    parser.add_argument("--held-out", type=int, default=1000)
    args = parser.parse_args()
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)

    subjqa_to_squad_files(DOMAINS, ["train", "dev"], out, args.data / "subjqa")
    for domain in DOMAINS:
        exported = out / f"{domain}-train.json"
        write(
            keep_questions(json.loads(exported.read_text(encoding="utf-8")), lambda qa: not qa.get("is_impossible") and qa["answers"]),
            out / f"{domain}-train-answerable.json",
        )
        exported.unlink()
        print(f"{out / f'{domain}-dev.json'}: {count(json.loads((out / f'{domain}-dev.json').read_text(encoding='utf-8')))} questions")

    subprocess.run(
        [sys.executable, str(Path(__file__).with_name("judged_to_squad.py")), str(out / "judged-train-x3.json"), "--repeat", "3"],
        check=True,
    )

    amazon = json.loads((args.data / "squadshifts" / "amazon_reviews_v1.0.json").read_text(encoding="utf-8"))
    ids = [qa["id"] for a in amazon["data"] for p in a["paragraphs"] for qa in p["qas"]]
    held_out = set(random.Random(0).sample(ids, args.held_out))
    rest = [i for i in ids if i not in held_out]
    rehearsal = set(random.Random(1).sample(rest, args.rehearsal))
    write(keep_questions(amazon, lambda qa: qa["id"] in held_out), out / "amazon-heldout.json")
    write(keep_questions(amazon, lambda qa: qa["id"] in rehearsal), out / "amazon-rehearsal.json")


if __name__ == "__main__":
    main()
