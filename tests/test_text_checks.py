"""Text that is not UTF-8 (a lone surrogate: JSON's "\\ud800", or a command-line byte of another encoding,
which Python keeps as "\\udcff") is refused at every door in one line, by the one shared check."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.subjqa import write_subjqa
from qa_system.errors import QAError, check_text
from qa_system.ingestion.indexing import open_or_build_index
from qa_system.pipelines import validate_question

CLI = [sys.executable, "-c", "import sys; from qa_system.cli import main; sys.exit(main())"]


def test_check_text_passes_text_and_names_the_field_and_the_fix():
    assert check_text("Is it 😀 good?", "the question") == "Is it 😀 good?"
    assert check_text(None, "the question") is None and check_text(3, "the question") == 3  # other checks judge other types
    with pytest.raises(QAError) as error:
        check_text("is it \ud800 good", "the question")
    assert (
        str(error.value)
        == "The question is not UTF-8 text: character 7 is a lone surrogate (\\ud800). Fix: send the question as UTF-8 text."
    )
    with pytest.raises(
        QAError, match=r"^'item_id' is not UTF-8 text: character 4 is a lone surrogate \(\\udcff: the byte 0xff of another encoding\)\."
    ):
        check_text("KIN\udcffDLE", "'item_id'")


def test_the_library_refuses_such_a_question_before_the_tokenizer_sees_it(settings):
    """The page and the Python API: it was a TypeError deep in the reader's tokenizer."""
    index = open_or_build_index(settings, "electronics", embeddings=False, progress=False)
    with pytest.raises(QAError, match=r"^The question is not UTF-8 text: character 7 "):
        validate_question(index, "is it \ud800 good", "KINDLE")
    with pytest.raises(QAError, match=r"^The item id is not UTF-8 text: character 4 "):
        validate_question(index, "Is it good?", "KIN\udcff")


@pytest.mark.parametrize(
    "command, argv, message",
    [
        (
            "ask",
            [b"is it \xff good", "--item", "KINDLE"],
            "error: The question is not UTF-8 text: character 7 is a lone surrogate (\\udcff: the byte 0xff",
        ),
        ("ask", ["Is it good?", "--item", b"KIN\xff"], "error: The item id is not UTF-8 text: character 4 "),
        ("search", [b"is it \xff good", "--item", "KINDLE"], "error: The question is not UTF-8 text: character 7 "),
    ],
    ids=["ask-question", "ask-item", "search-question"],
)
def test_the_command_line_refuses_bytes_that_are_not_utf8_in_one_line(tmp_path, command, argv, message):
    """`qa-system ask "$(printf 'is it \\xff good')"` printed a 49-line traceback and exit 1; now one line, exit 2, before any work."""
    data = write_subjqa(tmp_path / "subjqa")
    done = subprocess.run(
        [*CLI, command, *argv, "--data-dir", str(data), "--home", str(tmp_path / "home"), "--store", "memory"],
        capture_output=True,
        timeout=300,
    )
    err = done.stderr.decode("utf-8", "backslashreplace")
    assert done.returncode == 2 and err.startswith(message) and "Fix: send the " in err and len(err.strip().splitlines()) == 1, err[-3000:]
    assert not (tmp_path / "home").exists()  # refused before an index was built
