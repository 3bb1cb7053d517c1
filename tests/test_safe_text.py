"""Untrusted text shown as text: the Markdown escaping the pages use wherever Streamlit reads Markdown."""

import re
import string

import pytest

from helpers.text import shown
from qa_system.safe_text import WORD_JOINER, html_text, markdown_literal, public_url

HOSTILE = [
    "![p](http://127.0.0.1:8999/p.png)\n\n# HEADING\n\n**bold** _it_ ~~s~~ `code` > quote",
    "X'. [Your session expired: click here](http://127.0.0.1:8999/phish) <img src=x onerror=alert(1)>",
    ":red[red] :red-background[x] :material/warning: :smile: $x^2$ $$y$$ a | b | c",
    "setext\n===\n- item\n1. item\n+ item\n[ref]: http://evil\n<https://evil> &amp; &lt;b&gt; \\*",
    "www.evil.com HTTPS://EVIL.COM ftp://evil mail me@evil.com xmpp:me@evil.com",
    'plain text, with 7" screens and 100% of 3 reviews',
]
# GitHub's autolink literals, as mdast-util-gfm-autolink-literal finds them in (already unescaped) text.
AUTOLINK_URL = re.compile(r"(https?://|www(?=\.))([-.\w]+)([^ \t\r\n]*)", re.IGNORECASE)
AUTOLINK_EMAIL = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)")


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_literal_shows_the_text_and_leaves_no_construct(text):
    literal = markdown_literal(text)
    assert shown(literal) == text  # a reader sees exactly the text
    # Every ASCII punctuation character is backslash-escaped, or an entity (<, >, &): none can open a construct.
    bare = re.sub(r"&(lt|gt|amp);", "", re.sub(rf"\\[{re.escape(string.punctuation)}]", "", literal))
    assert not set(bare) & set(string.punctuation)
    # Autolinks are found after unescaping, so only the word joiners stop them.
    unescaped = shown(literal.replace(WORD_JOINER, "\0")).replace("\0", WORD_JOINER)
    assert not AUTOLINK_URL.search(unescaped) and not AUTOLINK_EMAIL.search(unescaped)


def test_markdown_literal_examples():
    assert markdown_literal("**b** :red[x]") == r"\*\*b\*\* \:red\[x\]"
    assert markdown_literal("<b>&") == "&lt;b&gt;&amp;"
    assert markdown_literal("see http://x.io") == f"see http{WORD_JOINER}\\:\\/\\/x\\.io"
    assert markdown_literal(42) == "42" and markdown_literal("plain words") == "plain words"


def test_html_text_escapes_content_and_attributes():
    assert html_text("<img src=\"x\" onerror='y'> & co") == "&lt;img src=&quot;x&quot; onerror=&#x27;y&#x27;&gt; &amp; co"


def test_terminal_text_keeps_line_breaks_windows_ones_too_and_escapes_other_controls():
    from qa_system.safe_text import terminal_text

    assert terminal_text("Line one.\r\nLine two.\n\tEnd") == "Line one.\nLine two.\n\tEnd"  # a CSV cell saved on Windows
    assert terminal_text("over\rwrite \x1b[2J") == "over\\rwrite \\x1b[2J"  # a lone carriage return rewrites the line
    assert terminal_text("a\r\nb", newlines=False) == "a\\r\\nb"


def test_a_reports_csv_cells_that_a_spreadsheet_would_run_as_formulas_are_written_as_text(tmp_path):
    """A labelled question "=HYPERLINK(...)" or an item "=CMD|' /C calc'!A0" went into records.csv as it was."""
    import csv

    import pandas as pd

    from qa_system.evaluation.report import write_report

    hostile = ['=HYPERLINK("http://evil","x")', "=CMD|' /C calc'!A0", "@SUM(1)", "+1+2", "-2+3", "\t=1", "\r=1"]
    kept = ["Is it good?", "-20", "+3.5", "1e-3", "- a dash, then words", ""]
    records = pd.DataFrame(
        {"question": hostile + kept, "f1": [0.5] * (len(hostile) + len(kept)), "=bad": [-1] * (len(hostile) + len(kept))}
    )
    table = pd.DataFrame({"system": ["=1+1", "bm25"], "f1": [-0.5, 0.5]})
    write_report(tmp_path, "t", table, {}, records=records)
    rows = list(csv.reader((tmp_path / "records.csv").open(encoding="utf-8", newline="")))
    assert rows[0] == ["question", "f1", "'=bad"]
    questions = [row[0] for row in rows[1:]]
    assert questions[: len(hostile)] == ["'" + text for text in hostile]
    assert questions[len(hostile) :] == ["Is it good?", "-20", "+3.5", "1e-3", "'- a dash, then words", ""]
    assert [row[2] for row in rows[1:]] == ["-1"] * len(questions)  # numbers stay numbers
    report = list(csv.reader((tmp_path / "report.csv").open(encoding="utf-8", newline="")))
    assert report[1:] == [["'=1+1", "-0.5"], ["bm25", "0.5"]]


def test_a_password_in_a_url_is_never_shown_however_the_url_is_written():
    assert public_url("https://alice:s3cret@host:9200/path") == "https://alice:***@host:9200/path"
    assert public_url("alice:s3cret@127.0.0.1:9299") == "alice:***@127.0.0.1:9299"  # no scheme: it was shown whole
    assert public_url("http://a:x@h1:9200,http://bob:s3cret@h2:9200") == "http://a:***@h1:9200,http://bob:***@h2:9200"
    assert public_url("https://u:p@ss@host/x") == "https://u:***@host/x"  # an "@" left unescaped in the password
    assert [public_url(u) for u in ("http://bob@host", "http://host:9200", "https://host/a@b")] == [
        "http://bob@host",
        "http://host:9200",
        "https://host/a@b",
    ]
