"""scripts/squadshifts_judged.py: SQuADShifts' held-out review groups as a collection and judged labels."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from qa_system.evaluation.judged import load_judged
from qa_system.sources.squad import is_held_out

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "squadshifts_judged.py"
REVIEW = "The mug holds 14 ounces and keeps coffee hot for hours."


def group(title: str) -> dict:
    answers = [{"text": "14 ounces", "answer_start": 14}] * 2 + [{"text": "14", "answer_start": 14}]  # the crowd repeats itself
    return {
        "title": title,
        "paragraphs": [{"context": REVIEW, "qas": [{"id": f"{title}-q", "question": "How big is it?", "answers": answers}]}],
    }


def test_held_out_groups_become_reviews_and_judged_labels_split_by_group(tmp_path):
    held_out = [t for t in (f"Amazon_Reviews_{n}" for n in range(400)) if is_held_out(t)][:3]
    kept = next(t for t in (f"Amazon_Reviews_{n}" for n in range(400)) if not is_held_out(t))
    data = tmp_path / "data"
    (data / "squadshifts").mkdir(parents=True)
    (data / "squadshifts" / "amazon_reviews_v1.0.json").write_text(json.dumps({"data": [group(t) for t in [*held_out, kept]]}))
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(SCRIPT), str(out), "--data", str(data), "--measure-groups", "1"], check=True, capture_output=True)

    with (out / "reviews.csv").open(newline="", encoding="utf-8") as f:
        reviews = {row["review_id"]: row for row in csv.DictReader(f)}
    assert {row["product"] for row in reviews.values()} == set(held_out)  # the groups the reader trained on stay out
    fit, measure = load_judged([out / "judged-fit.jsonl"]), load_judged([out / "judged-measure.jsonl"])
    assert len(fit) == 2 and len(measure) == 1 and not {q.item_id for q in fit} & {q.item_id for q in measure}
    for question in [*fit, *measure]:
        assert question.domain == "squadshifts-amazon" and question.answerable == "yes"
        assert [a.text for a in question.answers] == ["14 ounces", "14"]  # each distinct span once
        for answer in question.answers:
            assert reviews[answer.review_id]["body"][answer.start : answer.end] == answer.text
