"""Hostile input, round three (issue 30): ingestion and the command line against neighbours' files,
killed runs, links out of a folder, broken files, and odd bytes, names and numbers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from qa_system.cli import main
from qa_system.config import Settings
from qa_system.ingestion import ingest, open_collection
from tests.test_ingestion import COLUMNS, REVIEWS, documents, pdf, write_csv


@pytest.fixture
def home(tmp_path):
    return Settings.from_env(home=tmp_path / "home", store="memory")


@pytest.fixture
def cli_home(home, monkeypatch):
    monkeypatch.setenv("QA_HOME", str(home.home))
    monkeypatch.delenv("QA_STORE", raising=False)
    return home


def many_rows(count: int, prefix: str = "m") -> list[tuple[str, str, str, str]]:
    return [(f"{prefix}{n}", f"P{n % 5}", f"Review {n}: the lamp number {n} is bright enough to read by.", "4") for n in range(count)]


# ------------------------------------------------------------------ item 1: one collection's cleanup never touches another's files


def test_indexing_cc_while_cc_v2_is_read_leaves_cc_v2_alone(home, tmp_path):
    """`index --collection cc.v2` reading a file while `index --collection cc` runs: cc's cleanup took
    '.cc.v2.<pid>...' for a file of 'cc' whose writer is process 'v2' (not a number: dead), deleted it,
    and cc.v2 failed at its commit with FileNotFoundError."""
    mid = write_csv(tmp_path / "mid.csv", many_rows(600))  # three batches: cc runs after the first is staged
    small = write_csv(tmp_path / "small.csv")
    meanwhile = []

    def index_cc(progress):
        if not meanwhile:
            meanwhile.append(ingest(home, small, "cc", COLUMNS, embed=False, progress=False))

    report = ingest(home, mid, "cc.v2", COLUMNS, embed=False, progress=False, on_progress=index_cc)
    assert (report.documents, meanwhile[0].documents) == (600, 4)
    assert len(documents(home, "cc.v2")) == 600 and len(documents(home, "cc")) == 4


def test_saving_cc_leaves_the_temporary_save_of_cc_json_alone(home, tmp_path):
    """The collection 'cc.json' is saved as cc.json.json through a temporary '.cc.json.json.<pid>...': saving
    'cc' (cc.json) cleaned up '.cc.json.*' and took it for a dead writer's ('json' is no process id)."""
    from qa_system.stores import atomic_file

    saved = home.index_dir / "memory" / "cc.json.json"
    with atomic_file(saved) as handle:  # 'cc.json' half-way through its save
        handle.write("the new cc.json")
        ingest(home, write_csv(tmp_path / "small.csv"), "cc", COLUMNS, embed=False, progress=False)
    assert saved.read_text(encoding="utf-8") == "the new cc.json"
    assert len(documents(home, "cc")) == 4


# ------------------------------------------------------------------ item 2: what killed and failed runs left behind


KILLED_AFTER_FIRST_BATCH = """
import importlib, os, signal, sys
module = importlib.import_module("qa_system.ingestion.ingest")
real = module._Run._flush
def flush_then_die(self, *args):
    real(self, *args)
    os.kill(os.getpid(), signal.SIGKILL)
module._Run._flush = flush_then_die
from qa_system.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_next_ingestion_cleans_what_killed_and_failed_runs_left(cli_home, tmp_path, capsys):
    """A run killed mid-way left its staging file until that very collection was indexed again, and every
    collection name ever tried left a lock file. Now any ingestion removes what no live run holds, and says so;
    a live ingestion's files stay."""
    columns = ["--text-column", "body", "--id-column", "review_id", "--item-column", "product", "--no-embed"]
    staging, locks = cli_home.index_dir / "staging", cli_home.home / "locks"
    for name in ("tried-1", "tried-2"):  # runs that failed on their input
        assert main(["index", "--input", str(tmp_path / "no-such.csv"), "--collection", name, *columns]) == 2
    assert sorted(p.name for p in locks.iterdir()) == ["ingest-memory-tried-2.lock"]  # the second removed the first's
    big = write_csv(tmp_path / "big.csv", many_rows(600))
    env = {**os.environ, "QA_HOME": str(cli_home.home), "QA_STORE": "memory"}
    seen = {}

    def meanwhile(progress):  # while 'busy' is being read: a run killed mid-way, then another collection indexed
        if seen:
            return
        killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_FIRST_BATCH, "index", "--input", str(big), "--collection", "killed", *columns],
                                env=env, capture_output=True, text=True, timeout=600)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        [seen["left"]] = [p for p in staging.iterdir() if "killed" in p.name]
        seen["size"] = seen["left"].stat().st_size
        assert sorted(p.name for p in locks.iterdir()) == ["ingest-memory-busy.lock", "ingest-memory-killed.lock"]  # tried-2's: gone
        capsys.readouterr()
        seen["code"] = main(["index", "--input", str(write_csv(tmp_path / "small.csv")), "--collection", "other", *columns])
        seen["staging"], seen["locks"] = sorted(p.name for p in staging.iterdir()), sorted(p.name for p in locks.iterdir())

    ingest(cli_home, write_csv(tmp_path / "busy.csv", many_rows(600, "b")), "busy", COLUMNS, embed=False, progress=False, on_progress=meanwhile)
    out = capsys.readouterr().out.splitlines()
    left, size = seen["left"], seen["size"]
    assert seen["code"] == 0 and size > 0
    assert f"  note: removed the staging file of a killed ingestion: {left.name} ({size / 1e6:.1f} MB)." in out
    assert "  note: removed 1 lock file that no process held (ingest-memory-killed.lock)." in out
    assert not left.exists()
    assert len(seen["staging"]) == 1 and seen["staging"][0].startswith(".ingest-memory-busy~")  # busy's, alive: kept
    assert seen["locks"] == ["ingest-memory-busy.lock", "ingest-memory-other.lock"]
    assert len(documents(cli_home, "busy")) == 600 and len(documents(cli_home, "other")) == 4


# ------------------------------------------------------------------ item 3: links out of the folder


def test_a_folder_never_follows_links_that_lead_outside_it(home, tmp_path):
    """A link to /etc/passwd inside an input folder was indexed and searchable."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "passwd.txt").write_text("root:x:0:0:the secret password file", encoding="utf-8")
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("Plain notes: charge it overnight.", encoding="utf-8")
    (folder / "sub" / "inside.txt").symlink_to(folder / "notes.txt")  # stays inside: followed
    (folder / "passwd.txt").write_text("An ordinary note at first.", encoding="utf-8")  # or indexed through a link by an older release
    ingest(home, folder, "links", embed=False, progress=False)
    assert "passwd.txt" in documents(home, "links")
    (folder / "passwd.txt").unlink()
    (folder / "passwd.txt").symlink_to(secret / "passwd.txt")
    (folder / "sub" / "up.md").symlink_to("../../secret/passwd.txt")
    (folder / "etc").symlink_to(secret, target_is_directory=True)
    report = ingest(home, folder, "links", embed=False, progress=False)  # no --sync: what a link made searchable before goes all the same
    docs = documents(home, "links")
    assert sorted(docs) == ["notes.txt", "sub/inside.txt"]
    assert not any("secret" in d.content for d in docs.values())
    assert report.links_skipped == ["etc", "passwd.txt", "sub/up.md"] and report.deleted == 1
    assert "  3 links to outside the folder not followed: etc, passwd.txt, sub/up.md." in report.summary()


# ------------------------------------------------------------------ item 4: a broken file in a folder


def test_a_broken_pdf_is_skipped_and_the_rest_of_the_folder_indexed(cli_home, tmp_path, capsys, caplog):
    """A broken PDF aborted the whole folder, after two lines logged by the PDF library."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("Plain notes: charge it overnight.", encoding="utf-8")
    (folder / "manual.pdf").write_bytes(pdf("Hold the power button for ten seconds."))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is garbage\n")
    (folder / "scan.pdf").write_bytes(pdf(None))
    assert main(["index", "--input", str(folder), "--collection", "docs", "--no-embed"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(documents(cli_home, "docs")) == ["manual.pdf", "notes.txt"]
    assert "  2 files could not be read and were left out:" in out
    assert any(line.startswith("    broken.pdf: could not be read as a PDF") for line in out)
    assert any(line.startswith("    scan.pdf: has no text layer") for line in out)
    assert not [r for r in caplog.records if r.name.startswith(("pypdf", "haystack"))]  # no library lines around ours
    report = ingest(cli_home, folder, "docs", embed=False, progress=False)
    assert [entry.split(":")[0] for entry in report.files_unreadable] == ["broken.pdf", "scan.pdf"]
    (folder / "notes.txt").unlink()
    (folder / "manual.pdf").unlink()
    assert main(["index", "--input", str(folder), "--collection", "fresh", "--no-embed"]) == 2  # nothing readable: an error that says why
    err = capsys.readouterr().err
    assert "holds no documents" in err and "2 files could not be read (broken.pdf: could not be read as a PDF" in err and err.count("\n") == 1
