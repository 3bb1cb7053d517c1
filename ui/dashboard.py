"""The evaluation dashboard: the reports `qa-system eval ...` wrote, as tables and plots."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd
import streamlit as st

from qa_system.errors import QAError
from qa_system.evaluation.report import Report, find_reports, markdown_table, read_report

HEADLINE_GROUPS = ("all",)


def report_label(directory: Path, root: Path) -> str:
    try:
        report = read_report(directory)
    except QAError:
        return f"{directory} (unreadable)"
    when = datetime.fromtimestamp(report.modified).strftime("%Y-%m-%d %H:%M")
    where = directory.relative_to(root) if directory.is_relative_to(root) else directory
    return f"{report.title}  ·  {where}  ·  {when}"


def table(frame: pd.DataFrame) -> None:
    # Markdown, not st.dataframe: that needs pyarrow, whose current release wants NumPy 2 (the project pins 1.x).
    st.markdown(markdown_table(frame))


def show_report(report: Report) -> None:
    st.subheader(report.title)
    scalars = {k: v for k, v in report.summary.items() if isinstance(v, (str, int, float))}
    if scalars:
        for column, (name, value) in zip(st.columns(min(4, len(scalars))), list(scalars.items())[:4]):
            column.metric(name.replace("_", " ").capitalize(), str(value))
    for note in report.notes:
        st.caption(note)
    metrics = report.metrics
    if "group" in metrics:
        headline = metrics[metrics["group"].isin(HEADLINE_GROUPS)]
        if not headline.empty:
            st.markdown("##### Headline (all questions)")
            table(headline)
    plots = st.columns(2)  # side by side, and a single plot at half width rather than page-filling
    for i, figure in enumerate(report.figures):
        plots[i % len(plots)].image(str(figure), caption=figure.name, width="stretch")
    with st.expander(f"All metrics ({len(metrics)} rows)", expanded="group" not in metrics):
        table(metrics)
    for name, frame in report.sections.items():
        st.markdown(f"##### {name.replace('_', ' ').capitalize()}")
        table(frame)
    csv = report.directory / "report.csv"
    if csv.is_file():
        st.download_button("Download report.csv", csv.read_bytes(), file_name=f"{report.directory.name}-report.csv", mime="text/csv")


def main() -> None:
    st.title("Evaluation dashboard")
    st.caption("The reports that `qa-system eval retriever | reader | pipeline --out DIR` wrote: pick one to see its tables and plots.")
    root = Path(st.text_input("Reports folder", value="reports", key="reports_dir", help="Searched recursively for report.json files."))
    reports = find_reports(root)
    if not reports:
        st.info(f"No reports under `{root}` yet. Write some with, for example:")
        st.code(f"qa-system eval retriever --split test --out {root}/retriever\nqa-system eval pipeline --split test --out {root}/pipeline", language="bash")
        return
    directory = st.selectbox("Report", reports, format_func=lambda d: report_label(d, root), key="report")
    try:
        show_report(read_report(directory))
    except QAError as error:
        st.error(str(error), icon=":material/warning:")


main()
