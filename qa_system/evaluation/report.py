"""Report files every evaluation writes (report.json, report.csv, report.md, PNG plots), and reading them back."""

from __future__ import annotations

import io
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
from qa_system.safe_text import markdown_literal, spreadsheet_table  # noqa: E402


def markdown_table(table: pd.DataFrame, digits: int = 3, literal: bool = False) -> str:
    """The table in GitHub Markdown; ``literal``: every header and cell shown as text (for a page
    showing a report someone else wrote), never as Markdown."""

    def text(value: Any) -> str:
        # Any line break (\r too: CommonMark ends a line there) would cut the row in two.
        return " ".join(markdown_literal(value).splitlines()) if literal else str(value)

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.{digits}f}"
        return text(value)

    header = "| " + " | ".join(text(c) for c in table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def check_out_dir(out_dir: str | Path | None) -> None:
    """Refuse a report folder that is a file, before an evaluation asks its first question (None: no report)."""
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise QAError(f"--out {out_dir} is a file, not a folder.", "pass a folder for the report (it is made when missing).")


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
    (out / "report.json").write_text(json.dumps(payload, indent=2, default=str, ensure_ascii=False), encoding="utf-8")
    _write_csv(table, out / "report.csv")
    if records is not None:
        _write_csv(records, out / "records.csv")
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


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    """``table`` as CSV that a spreadsheet opens as text (``spreadsheet_table``), in RFC 4180's lines: a cell holding a
    line break of either kind is quoted, so that a review's lone "\r" cannot end a row."""
    spreadsheet_table(table).to_csv(path, index=False, lineterminator="\r\n")


# ------------------------------------------------------------------------------------ reading


REPORT_FILE = "report.json"
# report.json / report.csv larger than this are not read: evaluations write kilobytes (per-question rows go to records.csv).
MAX_REPORT_BYTES = 10_000_000
# Figures a page shows: the raster formats plots are saved in, at sizes no plot reaches (a decompression bomb does).
FIGURE_FORMATS = ("PNG", "JPEG")
MAX_FIGURE_BYTES = 20_000_000
MAX_FIGURE_PIXELS = 25_000_000


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
    csv: Path | None = None  # report.csv, when the directory holds one of at most MAX_REPORT_BYTES


def inside(root: str | Path, path: str | Path) -> bool:
    """Whether ``path`` lies inside ``root`` (or is it) once ``..`` and symlinks are resolved."""
    return Path(path).resolve().is_relative_to(Path(root).resolve())


def reports_folder(root: str | Path, requested: str | Path = "") -> Path:
    """The folder ``requested`` names (relative to the reports root ``root``, or absolute), resolved.

    A page lists and serves the reports under ``root`` only: a folder outside it (``/``, ``..``, a
    symlink leading out) is a QAError.
    """
    try:
        folder = (Path(root) / requested).resolve()  # an absolute ``requested`` replaces the root here
        folder.is_dir()  # the system's own check of the name
    except (OSError, ValueError) as error:  # too long, a NUL byte
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise QAError(
            f"{_quoted(requested)} is not a folder name this system accepts ({reason}).",
            f"pick a folder under {Path(root).resolve()} (set by QA_REPORTS_DIR).",
        ) from error
    if not inside(root, folder):
        raise QAError(
            f"{_quoted(requested)} is outside the reports folder.", f"pick a folder under {Path(root).resolve()} (set by QA_REPORTS_DIR)."
        )
    return folder


def _quoted(name: object, limit: int = 200) -> str:
    """``name`` quoted for a one-line message: control characters escaped, at most ``limit`` characters of it."""
    text = repr(str(name))
    return text if len(text) <= limit else text[: limit - 2] + "…" + text[0]


def find_reports(root: str | Path) -> list[Path]:
    """Directories under ``root`` (itself included) holding a report.json, newest first; a report.json
    that is a symlink out of ``root`` does not count."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p.parent for p in root.rglob(REPORT_FILE) if p.is_file() and inside(root, p)]
    return sorted(found, key=lambda d: (d / REPORT_FILE).stat().st_mtime, reverse=True)


def read_report(directory: str | Path) -> Report:
    """Load one report directory; a QAError naming the file when it is missing or unreadable.

    Only files inside ``directory`` are read or listed: report.md's image references (and
    symlinks) that lead elsewhere are ignored, so that a page showing the report serves nothing else.
    """
    directory = Path(directory)

    def own(name: str) -> Path | None:
        try:
            path = directory / name
            return path if path.is_file() and inside(directory, path) else None
        except (OSError, ValueError):  # a name the system refuses (too long, a NUL byte): none of its files
            return None

    path = directory / REPORT_FILE
    if path.exists() and not inside(directory, path):
        raise QAError(f"{path} links outside its report directory.", "copy the report into the directory instead of linking it.")
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise QAError(
                f"{path} is larger than {MAX_REPORT_BYTES // 1_000_000} MB: not a report `qa-system eval` writes.",
                "re-run the evaluation that wrote it.",
            )
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise QAError(f"{directory} holds no {REPORT_FILE}.", "pick a directory written by `qa-system eval ... --out DIR`.") from error
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise QAError(f"{path} is not valid JSON ({error}).", "re-run the evaluation that wrote it.") from error
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("metrics"), list)
        or not all(isinstance(row, dict) for row in payload["metrics"])
    ):
        raise QAError(f"{path} has no 'metrics' table.", "re-run the evaluation with the current `qa-system eval`.")
    sections = {
        k: pd.DataFrame(v)
        for k, v in payload.items()
        if k != "metrics" and isinstance(v, list) and v and all(isinstance(row, dict) for row in v)
    }
    summary = {k: v for k, v in payload.items() if k not in ("title", "metrics", *sections)}
    markdown = own("report.md")
    # report.md gives the figures' order and the notes: undecodable bytes cost a character, never the report.
    lines = (
        markdown.read_text(encoding="utf-8", errors="replace").splitlines()
        if markdown and markdown.stat().st_size <= MAX_REPORT_BYTES
        else []
    )
    shown = [line[line.index("(") + 1 : -1] for line in lines if line.startswith("![") and line.endswith(")")]
    figures = list(dict.fromkeys(filter(None, map(own, shown))))
    figures += sorted(p for p in directory.glob("*.png") if p not in figures and own(p.name))
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
        csv=csv if (csv := own("report.csv")) and csv.stat().st_size <= MAX_REPORT_BYTES else None,
    )


def figure_bytes(path: str | Path) -> bytes:
    """The image file ``path``, once Pillow has decoded it whole: a QAError naming the file when it is
    not a PNG or JPEG image, is damaged, or is too large to show (a decompression bomb)."""
    from PIL import Image

    name, fix = Path(path).name, "re-run the evaluation that wrote the report, or remove the file from its folder."
    too_large = QAError(
        f"The figure {name} is too large to show (at most {MAX_FIGURE_BYTES // 1_000_000} MB and {MAX_FIGURE_PIXELS:,} pixels).", fix
    )
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FIGURE_BYTES + 1)
        if len(data) > MAX_FIGURE_BYTES:
            raise too_large
        with Image.open(io.BytesIO(data), formats=FIGURE_FORMATS) as image:  # reads the header only
            if image.width * image.height > MAX_FIGURE_PIXELS:
                raise too_large
            image.load()  # a damaged or cut file fails here, not in the page
    except Image.DecompressionBombError as error:
        raise too_large from error
    except QAError:
        raise
    except Exception as error:  # Pillow's decoders raise many kinds of error on a file that is not what it claims
        raise QAError(f"The figure {name} is not an image this page can show ({type(error).__name__}).", fix) from error
    return data
