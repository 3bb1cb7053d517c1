"""A tiny SubjQA-shaped data directory the tests write themselves: six reviews of three products and
questions in train, dev and test splits, as the real CSV files lay them out."""

from __future__ import annotations

import csv
from pathlib import Path

COLUMNS = [
    "item_id",
    "domain",
    "nn_mod",
    "nn_asp",
    "query_mod",
    "query_asp",
    "q_review_id",
    "q_reviews_id",
    "question",
    "question_subj_level",
    "ques_subj_score",
    "is_ques_subjective",
    "review_id",
    "review",
    "human_ans_spans",
    "human_ans_indices",
    "answer_subj_level",
    "ans_subj_score",
    "is_ans_subjective",
]

REVIEWS = {
    # review_id: (item_id, text)
    "r-kindle-1": ("KINDLE", "The screen is sharp and great for reading books at night. Battery lasts a week."),
    "r-kindle-2": ("KINDLE", "Shipping was slow and the box was damaged, but the seller refunded me quickly."),
    "r-kindle-3": ("KINDLE", "I don't like the speakers: the sound is tinny and quiet. Apps crash sometimes."),
    "r-phones-1": ("HEADPHONES", "These headphones have deep bass and a comfortable fit for long flights."),
    "r-phones-2": ("HEADPHONES", "The cord broke after two months. Customer service never answered my emails."),
    "r-mouse-1": ("MOUSE", "A precise wireless mouse; the scroll wheel feels solid and the battery lasts months."),
}


def review_text(review_id: str) -> str:
    return REVIEWS[review_id][1] + " ANSWERNOTFOUND"


def row(split_qid: str, question: str, review_id: str, span: str, start: int | None = None, subjective: bool = True) -> dict:
    item_id, _ = REVIEWS[review_id]
    text = review_text(review_id)
    if span == "ANSWERNOTFOUND":
        start = len(text) - len("ANSWERNOTFOUND")
    elif start is None:
        start = text.index(span)
    values = dict.fromkeys(COLUMNS, "")
    values.update(
        item_id=item_id,
        domain="electronics",
        q_review_id=split_qid,
        question=question,
        is_ques_subjective=str(subjective),
        review_id=review_id,
        review=text,
        human_ans_spans=span,
        human_ans_indices=f"({start}, {start + len(span)})",
    )
    return values


SPLIT_ROWS = {
    "train": [
        row("q1", "Is it good for reading?", "r-kindle-1", "great for reading books at night"),
        row("q1", "Is it good for reading?", "r-kindle-1", "The screen is sharp"),
        row("q2", "How is the bass?", "r-phones-1", "deep bass"),
        row("q3", "How is the delivery?", "r-kindle-2", "ANSWERNOTFOUND", subjective=False),
    ],
    "dev": [
        row("q4", "How is the sound?", "r-kindle-3", "the sound is tinny and quiet"),
        row("q5", "Is the cord durable?", "r-phones-2", "The cord broke after two months"),
    ],
    "test": [
        # PTB-tokenised span ("do n't") whose offset must be repaired against the raw review.
        row("q6", "Do you like the speakers?", "r-kindle-3", "I do n't like the speakers", start=0),
        row("q7", "How is the scroll wheel?", "r-mouse-1", "the scroll wheel feels solid", subjective=False),
        row("q7", "How is the scroll wheel?", "r-mouse-1", "ANSWERNOTFOUND", subjective=False),
        # Annotators dropped words from the middle: cannot be located, must be counted.
        row("q8", "How is the battery?", "r-mouse-1", "battery months", start=70),
        row("q9", "Is it comfortable?", "r-phones-1", "ANSWERNOTFOUND"),
    ],
}


def write_subjqa(root: Path, splits: dict[str, list[dict]] = SPLIT_ROWS, domain: str = "electronics") -> Path:
    folder = root / domain / "splits"
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        with (folder / f"{split}.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return root
