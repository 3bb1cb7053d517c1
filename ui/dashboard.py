"""The evaluation dashboard: the reports `qa-system eval ...` wrote, as tables and plots.

Reports come from the reports root (``QA_REPORTS_DIR``, default ``reports/``) only: the folder typed
here is confined to it, and the report's own files are the only ones served. Everything a report
holds (title, notes, cells, file names) is shown as text, through ``markdown_literal``.

The folder and the report shown survive a visit to the search page (``kept``) and are in the URL
(``/dashboard?folder=retriever&report=retriever/bm25``), so that a report can be linked to. The URL
is untrusted like the typed folder: its folder goes through the same confinement, and its report is
only ever matched against the reports found there.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd
import streamlit as st
from kept import keep_widgets, restore_widgets

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.evaluation.report import Report, figure_bytes, find_reports, markdown_table, read_report, reports_folder
from qa_system.safe_text import markdown_literal

HEADLINE_GROUPS = ("all",)
WARNING = ":material/warning:"
KEPT_WIDGETS = ("reports_dir", "report")
MAX_TABLE_ROWS = 1_000


def table(frame: pd.DataFrame) -> None:
    # Markdown, not st.dataframe: that needs pyarrow, whose current release wants NumPy 2 (the project pins 1.x).
    st.markdown(markdown_table(frame.head(MAX_TABLE_ROWS), literal=True))
    if len(frame) > MAX_TABLE_ROWS:  # a page of tens of thousands of rows stalls the browser
        st.caption(f"The first {MAX_TABLE_ROWS:,} of {len(frame):,} rows.")


def show_report(report: Report) -> None:
    st.subheader(markdown_literal(report.title))
    scalars = {k: v for k, v in report.summary.items() if isinstance(v, (str, int, float))}
    if scalars:
        for column, (name, value) in zip(st.columns(min(4, len(scalars))), list(scalars.items())[:4]):
            column.metric(markdown_literal(name.replace("_", " ").capitalize()), markdown_literal(value))
    for note in report.notes:
        st.caption(markdown_literal(note))
    metrics = report.metrics
    if "group" in metrics:
        headline = metrics[metrics["group"].isin(HEADLINE_GROUPS)]
        if not headline.empty:
            st.markdown("##### Headline (all questions)")
            table(headline)
    plots = st.columns(2)  # side by side, and a single plot at half width rather than page-filling
    for i, figure in enumerate(report.figures):
        try:  # checked bytes, not the path: what is shown is what was checked
            plots[i % len(plots)].image(figure_bytes(figure), caption=markdown_literal(figure.name), width="stretch")
        except QAError as error:
            plots[i % len(plots)].warning(markdown_literal(error), icon=WARNING)
    with st.expander(f"All metrics ({len(metrics)} rows)", expanded="group" not in metrics):
        table(metrics)
    for name, frame in report.sections.items():
        st.markdown(f"##### {markdown_literal(name.replace('_', ' ').capitalize())}")
        table(frame)
    if report.csv is not None:
        st.download_button("Download report.csv", report.csv.read_bytes(), file_name=f"{report.directory.name}-report.csv", mime="text/csv")


def init_from_url() -> None:
    """``?folder=...&report=...`` opens a report (once per session: later, the page's own values win)."""
    if st.session_state.get("dashboard_url_read"):
        return
    st.session_state["dashboard_url_read"] = True
    if folder := st.query_params.get("folder"):
        st.session_state["reports_dir"] = folder
    if report := st.query_params.get("report"):
        st.session_state["report_link"] = report


def pick_report(reports: list[Path], root: Path) -> None:
    """Before the report box is drawn: the linked report when it is one of ``reports``, and no
    choice left over that is not (another folder's report, one deleted since)."""
    by_link = {report_link(d, root): d for d in reports}
    linked = by_link.get(st.session_state.pop("report_link", None))
    if linked is not None:
        st.session_state["report"] = linked
    elif st.session_state.get("report") not in reports:
        st.session_state.pop("report", None)


def report_link(directory: Path, root: Path) -> str:
    return directory.relative_to(root).as_posix()


def main() -> None:
    restore_widgets("dashboard", {"reports_dir": ""})
    init_from_url()
    st.title("Evaluation dashboard")
    st.caption(
        "The reports that `qa-system eval retriever | reader | pipeline | judged | rag --out DIR` wrote: pick one to see its tables and plots."
    )
    try:
        root = Settings.from_env().reports_dir.resolve()
    except QAError as error:
        st.error(markdown_literal(error), icon=WARNING)
        return
    requested = st.text_input(
        "Reports folder",
        key="reports_dir",
        placeholder="all reports",
        help=f"A folder under {markdown_literal(root)} (QA_REPORTS_DIR), searched recursively for report.json files.",
    ).strip()
    keep_widgets("dashboard", KEPT_WIDGETS)
    st.query_params.from_dict({"folder": requested} if requested else {})
    try:
        folder = reports_folder(root, requested)
    except QAError as error:
        st.error(markdown_literal(error), icon=WARNING)
        return
    reports = find_reports(folder)
    if not reports:
        st.info(f"No reports under {markdown_literal(folder)} yet. Write some with, for example:")
        # Quoted: the folder comes from the link, and this block is copied into a shell.
        st.code(
            "\n".join(
                f"qa-system eval {stage} --split test --out {shlex.quote(str(folder / stage))}" for stage in ("retriever", "pipeline")
            ),
            language="bash",
        )
        return
    pick_report(reports, root)
    # Labelled by folder alone: a select box's label must not change while its option stays (see search.py's
    # collection_label), and a report's title and time change when it is written again.
    directory = st.selectbox("Report", reports, format_func=lambda d: report_link(d, root), key="report")
    keep_widgets("dashboard", KEPT_WIDGETS)
    st.query_params["report"] = report_link(directory, root)
    try:
        show_report(read_report(directory))
    except QAError as error:
        st.error(markdown_literal(error), icon=WARNING)


main()
