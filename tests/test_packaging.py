"""`pip install .` without extras: qa_system imports and answers, and the two paths that need an extra say which.

The extras' packages (pypdf, markdown-it-py: `files`; selenium: `browser`) are made
unimportable in a subprocess by a meta-path finder in a sitecustomize on its PYTHONPATH, as if never installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.subjqa import write_subjqa

EXTRAS = {"files": ("pypdf", "markdown_it"), "browser": ("selenium",)}
BLOCKER = '''
import sys

BLOCKED = {blocked!r}


class NotInstalled:
    """Finds the blocked packages nowhere, as if they had never been installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
'''
ANSWER = textwrap.dedent("""
    import json, sys
    import qa_system
    from qa_system.cli import main

    code = main(["ask", "Is it good for reading?", "--item", "KINDLE", "--retriever", "bm25", "--top-k", "2"])
    print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)}))
""")


@pytest.fixture
def bare_install(tmp_path, tiny_reader):
    """Run Python code as with `pip install .` alone: the extras' packages blocked, settings from the environment."""
    blocked = sorted(name for names in EXTRAS.values() for name in names)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=blocked))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(Path(__file__).resolve().parent.parent)]),
        "QA_HOME": str(tmp_path / "home"),
        "QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")),
        "QA_READER_MODEL": str(tiny_reader),
        "QA_READER_BACKEND": "torch",
    }

    def run(code: str) -> subprocess.CompletedProcess:
        script = f"BLOCKED = {blocked!r}\n" + code
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)

    return run


def test_the_blocker_blocks(bare_install):
    for name in ("pypdf", "selenium", "markdown_it"):
        assert f"ModuleNotFoundError: No module named '{name}'" in bare_install(f"import {name}").stderr


def test_without_extras_qa_system_imports_and_answers(bare_install):
    result = bare_install(ANSWER)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": []}, result.stderr[-2000:]  # answered, and no extra's package was asked for


@pytest.mark.parametrize("suffix, packages", [(".pdf", "pypdf"), (".md", "markdown_it")])
def test_without_the_files_extra_indexing_such_a_file_names_it(bare_install, tmp_path, suffix, packages):
    document = tmp_path / f"doc{suffix}"
    document.write_bytes(b"%PDF-1.4\n" if suffix == ".pdf" else b"Great for reading.")
    code = f"import sys\nfrom qa_system.cli import main\nsys.exit(main(['index', '--input', {str(document)!r}, '--collection', 'mine']))"
    result = bare_install(code)
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        result.stderr == f"error: Reading {suffix} files needs {packages}, which is not installed. Fix: pip install 'qa_system[files]'.\n"
    )


def test_without_the_files_extra_plain_text_still_indexes(bare_install, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "note.txt").write_text("The battery lasts a week.")
    code = f"import sys\nfrom qa_system.cli import main\nsys.exit(main(['index', '--input', {str(folder)!r}, '--collection', 'notes', '--no-embed']))"
    result = bare_install(code)
    assert result.returncode == 0, result.stderr[-2000:]


def test_without_the_browser_extra_bench_page_names_it(bare_install):
    result = bare_install(
        "import sys\nfrom qa_system.cli import main\nsys.exit(main(['bench', 'page', '--sessions', '1', '--seconds', '1']))"
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        result.stderr
        == "error: Driving the page in a browser needs selenium, which is not installed. Fix: pip install 'qa_system[browser]'.\n"
    )
