"""Judged train questions (``shared/judged/train/*.jsonl``) as one SQuAD v2 file to train a reader on.

    python scripts/judged_to_squad.py OUT.json [--judged DIR] [--data DIR] [--repeat N] [--no-answer top-review|skip]

Each acceptable span of an answerable ("yes" / "partly") question becomes one answerable question on
its review (the CSV's ``review`` column, ANSWERNOTFOUND dropped; ``text == review[start:end]`` is
checked). A question judged "no" becomes one unanswerable question on the product's review that
ranks first by IDF-weighted word overlap with the question (a BM25-like pick of the review a reader
would be shown), or is skipped. ``--repeat`` writes each question N times under distinct ids: the
trainer reads a repeated id once, so upweighting needs new ids.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

from qa_system.config import REPO_ROOT
from qa_system.sources.subjqa import clean_review

SHARED = REPO_ROOT.parent / "shared"
WORD = re.compile(r"\w+")


def reviews_by_domain(data: Path, domain: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """(review_id -> review text as stored, item_id -> its review ids) over every split of the domain."""
    csv.field_size_limit(sys.maxsize)
    reviews, items = {}, defaultdict(set)
    for path in sorted((data / "subjqa" / domain / "splits").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                reviews[row["review_id"]] = row["review"]
                items[row["item_id"]].add(row["review_id"])
    return reviews, items


def top_review(question: str, review_ids: set[str], reviews: dict[str, str]) -> str:
    """The review sharing the most IDF-weighted words with the question (ties: the smallest id, for a fixed choice)."""
    words = {rid: set(WORD.findall(reviews[rid].lower())) for rid in review_ids}
    df = defaultdict(int)
    for ws in words.values():
        for w in ws:
            df[w] += 1
    idf = {w: math.log(1 + (len(words) - n + 0.5) / (n + 0.5)) for w, n in df.items()}
    asked = set(WORD.findall(question.lower()))
    return min(sorted(words), key=lambda rid: -sum(idf[w] for w in asked & words[rid]))


def convert(judged: Path, data: Path, repeat: int, no_answer: str) -> tuple[dict, dict[str, int]]:
    articles: dict[str, dict] = {}
    counts = defaultdict(int)
    for path in sorted(judged.glob("*.jsonl")):
        domain = path.stem
        reviews, items = reviews_by_domain(data, domain)
        for line in path.read_text(encoding="utf-8").splitlines():
            q = json.loads(line)
            examples = []  # (review_id, answers)
            if q["answerable"] == "no":
                if no_answer == "skip":
                    counts["no_skipped"] += 1
                    continue
                examples.append((top_review(q["question"], items[q["item_id"]], reviews), []))
                counts["no_on_top_review"] += 1
            for span in q["answers"]:
                review = reviews[span["review_id"]]
                if review[span["start"] : span["end"]] != span["text"]:
                    raise SystemExit(f"{q['id']}: span {span['start']}:{span['end']} is not its text in review {span['review_id']}")
                if span["end"] > len(clean_review(review)):
                    counts["spans_past_review"] += 1
                    continue
                examples.append((span["review_id"], [{"text": span["text"], "answer_start": span["start"]}]))
                counts["answer_spans"] += 1
            for n, (review_id, answers) in enumerate(examples):
                for copy in range(repeat):
                    article = articles.setdefault(
                        review_id,
                        {"title": f"{domain}:{review_id}", "paragraphs": [{"context": clean_review(reviews[review_id]), "qas": []}]},
                    )
                    article["paragraphs"][0]["qas"].append(
                        {"id": f"judged:{q['id']}:{n}:{copy}", "question": q["question"], "answers": answers, "is_impossible": not answers}
                    )
    return {"version": "v2.0", "data": list(articles.values())}, dict(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--judged", type=Path, default=SHARED / "judged" / "train")
    parser.add_argument("--data", type=Path, default=SHARED / "data")
    parser.add_argument("--repeat", type=int, default=1, help="write each question this many times (distinct ids)")
    parser.add_argument("--no-answer", choices=["top-review", "skip"], default="top-review", help="what a question judged 'no' becomes")
    args = parser.parse_args()
    squad, counts = convert(args.judged, args.data, args.repeat, args.no_answer)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    questions = sum(len(p["qas"]) for a in squad["data"] for p in a["paragraphs"])
    print(f"{args.output}: {questions} questions ({counts}, x{args.repeat})")


if __name__ == "__main__":
    main()
