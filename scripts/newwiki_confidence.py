"""SQuADShifts' new Wikipedia questions in two halves by article, to fit the answers' chances on one and check them on the other.

    python scripts/newwiki_confidence.py [OUT_DIR] [--data ../shared/data] [--questions 200]

Writes ``fit.json`` and ``check.json`` (SQuAD v1.1 JSON) to OUT_DIR (default ``newwiki-confidence``): ``--questions``
questions each, drawn with ``random.Random(7)`` from the articles whose title hashes even (fit) or odd (check), so that
no article is on both sides. Index the whole file as one collection and asked over each question's article:

    qa-system index --input ../shared/data/squadshifts/new_wiki_v1.0.json --collection newwiki --no-embed
    qa-system fit-confidence --collection newwiki --labels OUT_DIR/fit.json
    qa-system eval pipeline --collection newwiki --labels OUT_DIR/check.json --candidates product

Neither the shipped reader nor the answer selector trained on this file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("newwiki-confidence"))
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    parser.add_argument("--questions", type=int, default=200)
    args = parser.parse_args()
    source = json.loads((args.data / "squadshifts" / "new_wiki_v1.0.json").read_text(encoding="utf-8"))
    halves: dict[str, list[dict]] = {"fit": [], "check": []}
    for article in source["data"]:
        halves["fit" if int(hashlib.sha1(article["title"].encode()).hexdigest(), 16) % 2 == 0 else "check"].append(article)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    for name, articles in halves.items():
        where = [
            (a, p, q)
            for a, article in enumerate(articles)
            for p, paragraph in enumerate(article["paragraphs"])
            for q in range(len(paragraph["qas"]))
        ]
        keep = set(rng.sample(where, args.questions))
        data = []
        for a, article in enumerate(articles):
            paragraphs = [
                {"context": paragraph["context"], "qas": [qa for q, qa in enumerate(paragraph["qas"]) if (a, p, q) in keep]}
                for p, paragraph in enumerate(article["paragraphs"])
            ]
            paragraphs = [paragraph for paragraph in paragraphs if paragraph["qas"]]
            if paragraphs:
                data.append({"title": article["title"], "paragraphs": paragraphs})
        (args.out / f"{name}.json").write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
        print(f"{args.out / f'{name}.json'}: {args.questions} questions of {len(data)} articles (of {len(articles)})")


if __name__ == "__main__":
    main()
