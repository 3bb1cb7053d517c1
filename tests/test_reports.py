"""Reading back the reports `qa-system eval` writes, for the evaluation dashboard."""

import json
import os

import pandas as pd
import pytest

from qa_system.errors import QAError
from qa_system.evaluation.report import find_reports, read_report, write_report


def write(directory, title="Retriever evaluation"):
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.plot([1, 3], [0.5, 0.9])
    metrics = pd.DataFrame([{"retriever": "bm25", "group": "all", "recall@1": 0.5}, {"retriever": "bm25", "group": "answerable", "recall@1": 0.6}])
    latency = pd.DataFrame([{"retriever": "bm25", "p50_ms": 3.0}])
    return write_report(
        directory, title, metrics, summary={"split": "test", "questions": 4, "index": {"name": "x"}},
        figures={"recall_at_k.png": figure}, sections={"latency": latency}, notes=["strict: the question's own review."],
    )  # fmt: skip


def test_a_written_report_reads_back(tmp_path):
    report = read_report(write(tmp_path / "retriever"))
    assert report.title == "Retriever evaluation"
    assert report.summary == {"split": "test", "questions": 4, "index": {"name": "x"}}
    assert list(report.metrics["group"]) == ["all", "answerable"] and report.metrics.loc[0, "recall@1"] == 0.5
    assert list(report.sections) == ["latency"] and report.sections["latency"].loc[0, "p50_ms"] == 3.0
    assert [p.name for p in report.figures] == ["recall_at_k.png"]
    assert report.notes == ["strict: the question's own review."]


def test_reports_are_found_recursively_newest_first(tmp_path):
    old, new = write(tmp_path / "retriever"), write(tmp_path / "runs" / "pipeline", "Pipeline")
    os.utime(old / "report.json", (1, 1))
    assert find_reports(tmp_path) == [new, old]
    assert find_reports(tmp_path / "missing") == []


def test_unreadable_reports_are_clear_errors(tmp_path):
    with pytest.raises(QAError, match="holds no report.json"):
        read_report(tmp_path)
    (tmp_path / "report.json").write_text("{oops")
    with pytest.raises(QAError, match="is not valid JSON"):
        read_report(tmp_path)
    (tmp_path / "report.json").write_text(json.dumps({"title": "t"}))
    with pytest.raises(QAError, match="has no 'metrics' table"):
        read_report(tmp_path)
