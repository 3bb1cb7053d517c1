"""Amazon-style reviews under the user's own column names, with a rating and a date to filter on."""

from __future__ import annotations

import csv
from pathlib import Path

from qa_system.ingestion import IngestOptions

OPTIONS = IngestOptions(text_column="reviewText", item_column="asin", id_column="reviewerID")


def rating(number: int) -> int:
    return 1 + (number * 7) % 5  # 1..5, every product gets every rating


def write_reviews(path: Path, rows: int = 40, helpful: str | None = None) -> Path:
    """Amazon-style reviews under the user's own column names: the rating is `overall`, the date `reviewTime`."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["reviewerID", "asin", "reviewText", "overall", "reviewTime", "zip", "price"])
        for n in range(rows):
            text = f"Review {n}: the battery lasts {n} hours and the screen is sharp."
            writer.writerow(
                [
                    f"R{n:03d}",
                    f"P{n % 2}",
                    text,
                    rating(n),
                    f"2013-{1 + n % 12:02d}-{1 + n % 28:02d}",
                    f"0{n:04d}",
                    f"{n}.5" if n % 2 else str(n),
                ]
            )
    return path
