"""SQuADShifts-Amazon's held-out review groups as a collection and judged labels: factual questions on reviews.

    python scripts/squadshifts_judged.py [OUT_DIR] [--data ../shared/data] [--measure-groups 13]

OUT_DIR defaults to ``squadshifts-judged`` in QA_HOME.

Writes, from the fixed held-out slice (``qa_system.sources.squad.is_held_out``: whole groups of five reviews
the shipped reader never trained on):

- ``reviews.csv``: one review per row (``review_id``, ``product`` = the group, ``body``), for
  ``qa-system index --input OUT_DIR/reviews.csv --collection squadshifts-amazon --text-column body
  --id-column review_id --item-column product``;
- ``judged-fit.jsonl`` and ``judged-measure.jsonl``: every question of the groups in the judged label
  format (all answerable, the crowd's spans as the acceptable answers, domain ``squadshifts-amazon`` so that
  ``qa-system train-selector --judged`` reads them in that collection), split by group (``--measure-groups``
  groups, drawn with ``random.Random(0)``, for ``qa-system eval judged`` only).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import random
from pathlib import Path

from qa_system.sources.squad import is_held_out

COLLECTION = "squadshifts-amazon"


def judged_line(title: str, review_id: str, qa: dict) -> dict:
    """One question as a judged label: answerable, every distinct crowd span acceptable."""
    answers = []
    for answer in qa["answers"]:
        span = {"review_id": review_id, "start": answer["answer_start"], "end": answer["answer_start"] + len(answer["text"])}
        if span not in [{k: a[k] for k in span} for a in answers]:
            answers.append({**span, "text": answer["text"]})
    digest = hashlib.sha1(qa["question"].encode("utf-8")).hexdigest()[:10]
    return {
        "id": f"{COLLECTION}:{title}:{digest}:{qa['id']}",
        "domain": COLLECTION,
        "item_id": title,
        "question": qa["question"],
        "split": "heldout",
        "answerable": "yes",
        "answers": answers,
        "best": 0,
        "note": "SQuADShifts crowd spans",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="default: QA_HOME/squadshifts-judged")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    parser.add_argument("--measure-groups", type=int, default=13)
    args = parser.parse_args()
    if args.out is None:
        from qa_system.config import Settings

        args.out = Settings.from_env().home / "squadshifts-judged"
    amazon = json.loads((args.data / "squadshifts" / "amazon_reviews_v1.0.json").read_text(encoding="utf-8"))
    groups = [a for a in amazon["data"] if is_held_out(a["title"])]
    titles = sorted(a["title"] for a in groups)
    random.Random(0).shuffle(titles)
    measure = set(titles[: args.measure_groups])
    args.out.mkdir(parents=True, exist_ok=True)
    reviews, lines = [], {"fit": [], "measure": []}
    for group in groups:
        for position, paragraph in enumerate(group["paragraphs"]):
            review_id = f"{group['title']}-{position}"
            reviews.append({"review_id": review_id, "product": group["title"], "body": paragraph["context"]})
            part = "measure" if group["title"] in measure else "fit"
            lines[part] += [judged_line(group["title"], review_id, qa) for qa in paragraph["qas"]]
    with (args.out / "reviews.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["review_id", "product", "body"])
        writer.writeheader()
        writer.writerows(reviews)
    for part, rows in lines.items():
        (args.out / f"judged-{part}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(
        f"{len(reviews)} reviews of {len(groups)} groups; {len(lines['fit'])} questions to fit on, {len(lines['measure'])} to measure on,"
        f" in {args.out}"
    )


if __name__ == "__main__":
    main()
