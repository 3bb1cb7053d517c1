"""SQuADShifts' new Wikipedia articles as one collection and judged labels asked across all of its documents.

    python scripts/newwiki_judged.py [OUT_DIR] [--data ../shared/data] [--questions 300]

OUT_DIR defaults to ``newwiki-judged`` in QA_HOME. Writes:

- ``docs.csv``: one paragraph per row (``doc_id``, ``article``, ``body``; 1,581 paragraphs of 48 articles), for
  ``qa-system index --input OUT_DIR/docs.csv --collection newwiki --text-column body --id-column doc_id
  --item-column article --no-embed``;
- ``choose.jsonl`` and ``measure.jsonl``: ``--questions`` questions each (drawn with ``random.Random(1)``) of two
  halves of the articles (split with ``random.Random(0)``), in the judged label format with no ``item_id``, so that
  ``qa-system eval judged --collection newwiki`` asks each across every document, as a user with look-alike
  documents (release notes, contracts, the paragraphs of one article) does. All are answerable; the crowd's spans are
  the acceptable answers. Neither the shipped reader nor the selector trained on this file.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path


def judged_line(doc_id: str, qa: dict) -> dict:
    """One question as a judged label asked across all documents: answerable, every distinct crowd span acceptable."""
    answers = []
    for answer in qa["answers"]:
        span = {"review_id": doc_id, "start": answer["answer_start"], "end": answer["answer_start"] + len(answer["text"])}
        if span not in [{k: a[k] for k in span} for a in answers]:
            answers.append({**span, "text": answer["text"]})
    return {
        "id": f"newwiki:{qa['id']}",
        "domain": "newwiki",
        "item_id": None,
        "question": qa["question"],
        "split": "heldout",
        "answerable": "yes",
        "answers": answers,
        "best": 0,
        "note": "SQuADShifts new-wiki crowd spans",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="default: QA_HOME/newwiki-judged")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    if args.out is None:
        from qa_system.config import Settings

        args.out = Settings.from_env().home / "newwiki-judged"
    articles = json.loads((args.data / "squadshifts" / "new_wiki_v1.0.json").read_text(encoding="utf-8"))["data"]
    titles = sorted(article["title"] for article in articles)
    random.Random(0).shuffle(titles)
    choose = set(titles[: len(titles) // 2])
    documents, lines = [], {"choose": [], "measure": []}
    for article in articles:
        for position, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"{article['title']}-{position}"
            documents.append({"doc_id": doc_id, "article": article["title"], "body": paragraph["context"]})
            lines["choose" if article["title"] in choose else "measure"] += [judged_line(doc_id, qa) for qa in paragraph["qas"]]
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "docs.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["doc_id", "article", "body"])
        writer.writeheader()
        writer.writerows(documents)
    for part, rows in lines.items():
        random.Random(1).shuffle(rows)
        (args.out / f"{part}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[: args.questions]), encoding="utf-8")
    print(
        f"{len(documents)} paragraphs of {len(articles)} articles; {args.questions} questions to choose on and to measure on, in {args.out}"
    )


if __name__ == "__main__":
    main()
