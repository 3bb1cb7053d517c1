"""Reading back the reports `qa-system eval` writes, for the evaluation dashboard."""

import json
import os

import pandas as pd
import pytest

from helpers.reports import png, write
from qa_system.errors import QAError
from qa_system.evaluation.report import MAX_FIGURE_PIXELS, figure_bytes, find_reports, markdown_table, read_report, reports_folder
from qa_system.safe_text import WORD_JOINER


def test_a_written_report_reads_back(tmp_path):
    report = read_report(write(tmp_path / "retriever"))
    assert report.title == "Retriever evaluation"
    assert report.summary == {"split": "test", "questions": 4, "index": {"name": "x"}}
    assert list(report.metrics["group"]) == ["all", "answerable"] and report.metrics.loc[0, "recall@1"] == 0.5
    assert list(report.sections) == ["latency"] and report.sections["latency"].loc[0, "p50_ms"] == 3.0
    assert [p.name for p in report.figures] == ["recall_at_k.png"]
    assert report.notes == ["strict: the question's own review."]
    german = read_report(write(tmp_path / "rückversand", title="Rückversand: Größe"))  # as written, not \u00fc
    assert german.title == "Rückversand: Größe" and "Rückversand: Größe" in (tmp_path / "rückversand" / "report.json").read_text("utf-8")


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


def test_a_folder_name_the_system_refuses_is_a_clear_error(tmp_path):
    for name, reason in (("a" * 300, "File name too long"), ("a\x00b", "embedded null byte"), ("x/" + "a" * 5000, "File name too long")):
        with pytest.raises(QAError, match=f"is not a folder name this system accepts \\({reason}\\)") as raised:
            reports_folder(tmp_path, name)
        assert "\n" not in str(raised.value) and len(str(raised.value)) < 400 + len(str(tmp_path))  # one line, the name shortened


def test_report_file_names_the_system_refuses_are_not_its_files(tmp_path):
    report = write(tmp_path / "r")
    with (report / "report.md").open("a", encoding="utf-8") as markdown:
        markdown.write(f"![long]({'a' * 300}.png)\n![nul](a\x00b.png)\n")
    assert [p.name for p in read_report(report).figures] == ["recall_at_k.png"]


def test_figures_are_checked_before_they_are_shown(tmp_path):
    report = write(tmp_path / "r")
    plot = report / "recall_at_k.png"
    assert figure_bytes(plot) == plot.read_bytes()
    (report / "fake.png").write_text("not an image at all")
    (report / "cut.png").write_bytes(plot.read_bytes()[:200])
    (report / "bomb.png").write_bytes(png(20_000, 20_000))  # 400 million pixels: Pillow itself refuses to open it
    (report / "big.png").write_bytes(png(6_000, 6_000))  # 36 million: Pillow opens it, the page does not
    assert 6_000 * 6_000 > MAX_FIGURE_PIXELS
    for name, problem in (
        ("fake.png", "not an image"),
        ("cut.png", "not an image"),
        ("report.csv", "not an image"),
        ("bomb.png", "too large"),
        ("big.png", "too large"),
    ):
        with pytest.raises(QAError, match=f"The figure {name} is {problem}"):
            figure_bytes(report / name)


def test_report_folders_are_confined_to_the_reports_root(tmp_path):
    root = tmp_path / "reports"
    (root / "runs").mkdir(parents=True)
    (root / "out").symlink_to(tmp_path)  # a symlink leading out of the root
    assert reports_folder(root) == reports_folder(root, "") == root.resolve()
    assert reports_folder(root, "runs") == reports_folder(root, str(root / "runs")) == (root / "runs").resolve()
    assert reports_folder(root, "runs/..") == root.resolve()
    for outside in ("/", "..", "runs/../..", str(tmp_path), "out", "out/elsewhere"):
        with pytest.raises(QAError, match="is outside the reports folder"):
            reports_folder(root, outside)


def test_reports_list_and_serve_only_their_own_files(tmp_path):
    root, elsewhere = tmp_path / "reports", tmp_path / "elsewhere"
    report = write(root / "mine")
    other = write(elsewhere / "theirs", "Someone else's")
    secret = elsewhere / "secret.png"
    secret.write_bytes((report / "recall_at_k.png").read_bytes())
    (root / "linked").mkdir()
    (root / "linked" / "report.json").symlink_to(other / "report.json")  # a report.json leading out
    (report / "escape.png").symlink_to(secret)
    (report / "report.csv").unlink()
    (report / "report.csv").symlink_to(other / "report.csv")
    with (report / "report.md").open("a", encoding="utf-8") as markdown:
        markdown.write(f"![a]({secret})\n![b](../../elsewhere/secret.png)\n![c](escape.png)\n![d](/etc/hostname)\n")
    assert find_reports(root) == [report]
    read = read_report(report)
    assert [p.name for p in read.figures] == ["recall_at_k.png"] and read.csv is None
    with pytest.raises(QAError, match="links outside its report directory"):
        read_report(root / "linked")


def test_literal_tables_show_cells_as_text():
    frame = pd.DataFrame([{"![c](http://x/c.png)": "**b** | x\ny", "n": 0.5}])
    header, _, row = markdown_table(frame, literal=True).split("\n")
    assert header == f"| \\!\\[c\\]\\(http{WORD_JOINER}\\:\\/\\/x\\/c\\.png\\) | n |"
    assert row == "| \\*\\*b\\*\\* \\| x y | 0.500 |"  # one row, its pipe escaped
    assert markdown_table(frame).startswith("| ![c](http://x/c.png) | n |")  # report.md keeps what was written


def test_literal_tables_keep_one_line_per_row_whatever_line_breaks_cells_hold():
    breaks = ["\r", "\r\n", "\n", "\u2028", "\x0b", "\x85"]  # CommonMark ends a line at \r too
    frame = pd.DataFrame([{f"a{b}b": f"x{b}y" for b in breaks}] * 2)
    lines = markdown_table(frame, literal=True).splitlines()
    assert lines[0] == "| a b | a b | a b | a b | a b | a b |" and lines[2:] == ["| x y | x y | x y | x y | x y | x y |"] * 2
