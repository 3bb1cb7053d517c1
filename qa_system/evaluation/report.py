"""Report files every evaluation writes (report.json, report.csv, report.md, PNG plots), and reading them back."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: reports are written on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from qa_system.errors import QAError  # noqa: E402


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


# ------------------------------------------------------------------------------------ reading


REPORT_FILE = "report.json"


@dataclass
class Report:
    """A report directory read back: what ``write_report`` wrote, as tables and figure paths."""

    directory: Path
    title: str
    summary: dict[str, Any]  # the scalar and nested-dict entries of report.json
    metrics: pd.DataFrame
    sections: dict[str, pd.DataFrame]  # the other tables (e.g. latency)
    figures: list[Path]  # PNG plots, in the order report.md shows them
    notes: list[str]
    modified: float  # report.json's mtime, to list the newest first


def find_reports(root: str | Path) -> list[Path]:
    """Directories under ``root`` (itself included) holding a report.json, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p.parent for p in root.rglob(REPORT_FILE) if p.is_file()]
    return sorted(found, key=lambda d: (d / REPORT_FILE).stat().st_mtime, reverse=True)


def read_report(directory: str | Path) -> Report:
    """Load one report directory; a QAError naming the file when it is missing or unreadable."""
    directory = Path(directory)
    path = directory / REPORT_FILE
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise QAError(f"{directory} holds no {REPORT_FILE}.", "pick a directory written by `qa-system eval ... --out DIR`.") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise QAError(f"{path} is not valid JSON ({error}).", "re-run the evaluation that wrote it.") from error
    if not isinstance(payload, dict) or not isinstance(payload.get("metrics"), list):
        raise QAError(f"{path} has no 'metrics' table.", "re-run the evaluation with the current `qa-system eval`.")
    sections = {
        k: pd.DataFrame(v) for k, v in payload.items() if k != "metrics" and isinstance(v, list) and v and all(isinstance(row, dict) for row in v)
    }
    summary = {k: v for k, v in payload.items() if k not in ("title", "metrics", *sections)}
    markdown = directory / "report.md"
    lines = markdown.read_text(encoding="utf-8").splitlines() if markdown.is_file() else []
    shown = [line[line.index("(") + 1 : -1] for line in lines if line.startswith("![") and line.endswith(")")]
    figures = [directory / name for name in shown if (directory / name).is_file()]
    figures += sorted(p for p in directory.glob("*.png") if p not in figures)
    notes_end = lines.index("## Metrics") if "## Metrics" in lines else 0
    return Report(
        directory=directory,
        title=str(payload.get("title") or directory.name),
        summary=summary,
        metrics=pd.DataFrame(payload["metrics"]),
        sections=sections,
        figures=figures,
        notes=[line[2:] for line in lines[:notes_end] if line.startswith("- ")],
        modified=path.stat().st_mtime,
    )
