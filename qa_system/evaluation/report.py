"""Report files every evaluation writes: report.json, report.csv, report.md and PNG plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: reports are written on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def markdown_table(table: pd.DataFrame, digits: int = 3) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.{digits}f}"
        return str(value)

    header = "| " + " | ".join(str(c) for c in table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def write_report(
    out_dir: str | Path,
    title: str,
    table: pd.DataFrame,
    summary: dict[str, Any],
    figures: dict[str, plt.Figure] | None = None,
    sections: dict[str, pd.DataFrame] | None = None,
    records: pd.DataFrame | None = None,
    notes: list[str] | None = None,
) -> Path:
    """Write the report; ``table`` is the main metrics table (also the CSV), ``sections`` extra tables.

    ``records`` (one row per question) go to ``records.csv`` so that any figure can be recomputed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = sections or {}
    payload = {
        "title": title,
        **summary,
        "metrics": table.to_dict(orient="records"),
        **{name: frame.to_dict(orient="records") for name, frame in sections.items()},
    }
    (out / "report.json").write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
    table.to_csv(out / "report.csv", index=False)
    if records is not None:
        records.to_csv(out / "records.csv", index=False)
    lines = [f"# {title}", ""]
    lines += [f"- {note}" for note in notes or []]
    lines += ["", "## Metrics", "", markdown_table(table), ""]
    for name, frame in sections.items():
        lines += [f"## {name.replace('_', ' ').capitalize()}", "", markdown_table(frame), ""]
    for filename, figure in (figures or {}).items():
        figure.savefig(out / filename, dpi=120, bbox_inches="tight")
        plt.close(figure)
        lines += [f"![{filename}]({filename})", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return out
