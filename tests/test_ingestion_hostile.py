"""Hostile input: ingestion and the command line against neighbours' files,
killed runs, links out of a folder, broken files, and odd bytes, names and numbers."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys

import pytest

from helpers.ingestion import COLUMNS, documents, pdf, write_csv
from qa_system.cli import main
from qa_system.errors import NotFound, QAError
from qa_system.ingestion import IngestOptions, collection_manifest, ingest
from qa_system.stores.filter_checks import check_collection_filters


def many_rows(count: int, prefix: str = "m") -> list[tuple[str, str, str, str]]:
    return [(f"{prefix}{n}", f"P{n % 5}", f"Review {n}: the lamp number {n} is bright enough to read by.", "4") for n in range(count)]


# ------------------------------------------------------------------ one collection's cleanup never touches another's files


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


# ------------------------------------------------------------------ what killed and failed runs left behind


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
    assert list(locks.iterdir()) == []  # a run that ends, failed or not, removes its own lock
    big = write_csv(tmp_path / "big.csv", many_rows(600))
    env = {**os.environ, "QA_HOME": str(cli_home.home), "QA_STORE": "memory"}
    seen = {}

    def meanwhile(progress):  # while 'busy' is being read: a run killed mid-way, then another collection indexed
        if seen:
            return
        killed = subprocess.run(
            [sys.executable, "-c", KILLED_AFTER_FIRST_BATCH, "index", "--input", str(big), "--collection", "killed", *columns],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        [seen["left"]] = [p for p in staging.iterdir() if "killed" in p.name]
        seen["size"] = seen["left"].stat().st_size
        assert sorted(p.name for p in locks.iterdir()) == ["ingest-memory-busy.lock", "ingest-memory-killed.lock"]  # the killed run's stays
        capsys.readouterr()
        seen["code"] = main(["index", "--input", str(write_csv(tmp_path / "small.csv")), "--collection", "other", *columns])
        seen["staging"], seen["locks"] = sorted(p.name for p in staging.iterdir()), sorted(p.name for p in locks.iterdir())

    ingest(
        cli_home, write_csv(tmp_path / "busy.csv", many_rows(600, "b")), "busy", COLUMNS, embed=False, progress=False, on_progress=meanwhile
    )
    out = capsys.readouterr().out.splitlines()
    left, size = seen["left"], seen["size"]
    assert seen["code"] == 0 and size > 0
    assert f"  note: removed the staging file of a killed ingestion: {left.name} ({size / 1e6:.1f} MB)." in out
    assert "  note: removed 1 lock file that no process held (ingest-memory-killed.lock)." in out
    assert not left.exists()
    assert len(seen["staging"]) == 1 and seen["staging"][0].startswith(".ingest-memory-busy~")  # busy's, alive: kept
    assert seen["locks"] == ["ingest-memory-busy.lock"]  # busy's, held; other's removed by other itself
    assert len(documents(cli_home, "busy")) == 600 and len(documents(cli_home, "other")) == 4


def test_a_run_that_ends_removes_its_own_lock_and_the_next_run_reports_none(cli_home, tmp_path, capsys):
    """Every ingestion said "removed 1 lock file that no process held": the one the run before had left. Only a
    killed run leaves its lock behind, and only then does the next ingestion say it removed one."""
    columns = ["--text-column", "body", "--id-column", "review_id", "--item-column", "product", "--no-embed"]
    locks = cli_home.home / "locks"
    small = write_csv(tmp_path / "small.csv")
    for name in ("first", "second", "first"):
        assert main(["index", "--input", str(small), "--collection", name, *columns]) == 0
        assert list(locks.iterdir()) == []
    assert "lock file" not in capsys.readouterr().out
    (locks / "ingest-memory-killed.lock").touch()  # what a killed run leaves: a lock file no process holds
    assert main(["index", "--input", str(small), "--collection", "second", *columns]) == 0
    assert "  note: removed 1 lock file that no process held (ingest-memory-killed.lock)." in capsys.readouterr().out.splitlines()
    assert list(locks.iterdir()) == []


# ------------------------------------------------------------------ links out of the folder


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


# ------------------------------------------------------------------ a broken file in a folder


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
    assert (
        "holds no documents" in err and "2 files could not be read (broken.pdf: could not be read as a PDF" in err and err.count("\n") == 1
    )


# ------------------------------------------------------------------ other inputs, fields and commands


def deeply_nested(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


HOSTILE = {
    # name: (file name, bytes, extra flags, message); each was a traceback (exit 1) or worse before
    "a codec that is not a text encoding": (
        "r.csv",
        b"review_id,body\nr1,text\n",
        ["--encoding", "rot13"],
        "'rot13' is not a text encoding",
    ),
    "JSON lines nested 100,000 deep": (
        "r.jsonl",
        ('{"body": "x", "m": ' + deeply_nested() + "}\n").encode(),
        [],
        "r.jsonl line 1 nests JSON arrays or objects too deeply to read",
    ),
    "SQuAD JSON nested 100,000 deep": (
        "r.json",
        ('{"data": ' + deeply_nested() + "}").encode(),
        ["--format", "squad"],
        "r.json nests JSON arrays or objects too deeply to read",
    ),
    "a JSON escape of half a character": (
        "r.jsonl",
        b'{"review_id": "r1", "body": "lone \\udcff surrogate"}\n',
        [],
        "The text of {tmp}/r.jsonl line 1 is not UTF-8 text: character 6 is a lone surrogate",
    ),
    "a lone surrogate in a metadata key": (
        "r.jsonl",
        b'{"review_id": "r1", "body": "fine", "\\ud800": "x"}\n',
        [],
        "The metadata of {tmp}/r.jsonl line 1 is not UTF-8 text",
    ),
    "a header of 40,000 columns": (
        "r.csv",
        ("review_id,body," + ",".join(f"column{n:05d}" for n in range(39_998)) + "\nr1,text\n").encode(),
        [],
        "The header of {tmp}/r.csv has 40,000 columns; at most 1,000 are read.",
    ),
    "a JSON object of 1,001 keys": (
        "r.jsonl",
        (json.dumps({"review_id": "r1", "body": "text", **{f"k{n}": n for n in range(999)}}) + "\n").encode(),
        [],
        "{tmp}/r.jsonl line 1 has 1,001 columns; at most 1,000 are read.",
    ),
    # a clearer message, not a traceback: the fix is the encoding to pass
    "UTF-16 without a byte-order mark": (
        "r.csv",
        "review_id,body\nr1,text\n".encode("utf-16-le"),
        [],
        "looks like UTF-16 text without a byte-order mark",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_are_one_line_and_keep_the_collection(cli_home, tmp_path, capsys, case):
    file_name, data, extra, message = HOSTILE[case]
    columns = ["--text-column", "body", "--id-column", "review_id"]
    assert main(["index", "--input", str(write_csv(tmp_path / "good.csv")), "--collection", "kept", *columns, "--no-embed"]) == 0
    saved = cli_home.index_dir / "memory" / "kept.json"
    before = saved.read_bytes()
    capsys.readouterr()
    (tmp_path / file_name).write_bytes(data)
    assert main(["index", "--input", str(tmp_path / file_name), "--collection", "kept", *columns, "--no-embed", *extra]) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and "Fix:" in err and err.count("\n") == 1, err
    assert saved.read_bytes() == before


@pytest.mark.parametrize(
    "argv, message",
    [
        (["index", "--input", "{folder}", "--collection", "x", "--format", "csv"], "is a folder, and --format csv reads one file"),
        (["index", "--input", "{csv}", "--collection", "x", "--format", "files"], "--format files reads documents (.txt"),
        (
            ["index", "--input", "{csv}", "--collection", "x", "--passage-overlap", "300"],
            "--passage-overlap must be a whole number from 0 to 199, not 300.",
        ),
        # FAISS sets aside room for k results per question: 2**31 took 16 GB before the kernel killed the process.
        (["search", "battery", "--collection", "shop", "--top-k", str(2**31)], "--top-k must be a whole number from 1 to 1000"),
        (["search", "battery", "--collection", "shop", "--top-k", "1001"], "--top-k must be a whole number from 1 to 1000"),
        (
            ["eval", "retriever", "--collection", "shop", "--labels", "{csv}", "--k", "1", "5000"],
            "--k must be a whole number from 1 to 1000",
        ),
    ],
)
def test_flags_out_of_bounds_are_one_line(cli_home, tmp_path, capsys, argv, message):
    csv_path = write_csv(tmp_path / "r.csv")
    assert main(["index", "--input", str(csv_path), "--collection", "shop", "--text-column", "body", "--no-embed"]) == 0
    capsys.readouterr()
    (tmp_path / "folder").mkdir()
    assert main([a.format(folder=tmp_path / "folder", csv=csv_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Fix:" in err and err.count("\n") == 1, err


def test_a_named_pipe_as_input_is_refused_rather_than_waited_on(cli_home, tmp_path):
    """Opening a named pipe waits for a writer: `index --input pipe.csv` hung for ever."""
    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)
    command = [
        sys.executable,
        "-c",
        "import sys; from qa_system.cli import main; sys.exit(main())",
        "index",
        "--input",
        str(pipe),
        "--collection",
        "p",
        "--no-embed",
    ]
    done = subprocess.run(command, env={**os.environ, "QA_HOME": str(cli_home.home)}, capture_output=True, text=True, timeout=300)
    assert (
        done.returncode == 2 and "is not a regular file (a named pipe, socket or device?)" in done.stderr and done.stderr.count("\n") == 1
    )


def test_input_dash_indexes_what_is_piped_in(cli_home, tmp_path):
    """`jq ... | qa-system index --input - --format jsonl`: what another tool writes, without a file in between."""
    lines = "".join(json.dumps({"text": f"Review {n}: the battery lasts {n} days.", "item_id": f"P{n % 3}"}) + "\n" for n in range(300))

    def index(*flags: str, piped: str | None = lines) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", "import sys; from qa_system.cli import main; sys.exit(main())", "index", "--input", "-"]
        return subprocess.run(
            [*command, "--collection", "piped", "--no-embed", *flags],
            input=piped, env={**os.environ, "QA_HOME": str(cli_home.home)}, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    done = index("--format", "jsonl")
    assert done.returncode == 0 and "300 read from stdin: 300 added" in done.stdout, done.stderr
    assert len(documents(cli_home, "piped")) == 300
    refused = index()  # no name to tell the format by
    assert refused.returncode == 2 and refused.stderr.startswith("error: --input - needs --format") and refused.stderr.count("\n") == 1
    assert "files" not in refused.stderr  # a folder's documents are not piped
    folder = index("--format", "files")
    assert folder.returncode == 2 and folder.stderr.startswith("error: --input - reads one table or JSON file piped in, not a folder's")
    empty = index("--format", "jsonl", piped="")
    assert empty.returncode == 2 and "stdin holds no documents; collection 'piped' was left as it was" in empty.stderr
    assert len(documents(cli_home, "piped")) == 300
    _, terminal = pty.openpty()  # nothing piped: a terminal would wait for typing
    waiting = subprocess.run(
        [sys.executable, "-c", "import sys; from qa_system.cli import main; sys.exit(main())", "index", "--input", "-"]
        + ["--format", "csv", "--collection", "piped"],
        stdin=terminal, env={**os.environ, "QA_HOME": str(cli_home.home)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert waiting.returncode == 2 and waiting.stderr.startswith("error: --input - reads what is piped in, and nothing is.")


def test_a_file_that_vanishes_while_its_folder_is_read_is_left_out_and_named(home, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(300):  # more than a batch: the first batch is staged while the rest are still to be read
        (folder / f"f{n:03d}.txt").write_text(f"Document number {n} about lamps.", encoding="utf-8")
    (folder / "pipe.txt").symlink_to("/dev/null")  # a device: outside the folder, not read
    os.mkfifo(folder / "fifo.txt")  # not a regular file: counted, never opened

    def remove_a_later_file(progress):
        (folder / "f290.txt").unlink(missing_ok=True)

    report = ingest(home, folder, "docs", embed=False, progress=False, on_progress=remove_a_later_file)
    assert report.documents == 299 and report.files_unreadable == ["f290.txt: could not be read (No such file or directory)"]
    assert report.links_skipped == ["pipe.txt"] and report.files_skipped == ["fifo.txt"]


def test_repeated_column_names_are_counted_in_one_pass(home, tmp_path):
    """A header's repeated names were counted with list.count per column: 65 s for 40,000 columns, three times an upload."""
    from qa_system.sources.tables import repeated_names

    names = [f"column{n:05d}" for n in range(40_000)] + ["column00007", "column39999", "column00007"]
    assert repeated_names(names) == ["column00007", "column39999"]
    assert repeated_names([f"column{n:05d}" for n in range(40_000)]) == []
    header = ["review_id", "body", *(f"column{n:03d}" for n in range(997)), "column500"]  # as many columns as are read
    (tmp_path / "r.csv").write_text(",".join(header) + "\n" + ",".join(["r1", "text", *["x"] * 998]) + "\n", encoding="utf-8")
    with pytest.raises(QAError, match=r"r\.csv repeats the column name\(s\) column500\. Fix: give every column a unique name"):
        ingest(home, tmp_path / "r.csv", "repeated", IngestOptions(text_column="body", id_column="review_id"), embed=False, progress=False)


def test_a_column_without_a_name_is_named_by_its_position(home, tmp_path):
    """A header with a trailing delimiter ("id,text,") kept the third column's values under the key ''."""
    (tmp_path / "r.csv").write_text("review_id,body,\nr1,fine,extra\n", encoding="utf-8")
    ingest(home, tmp_path / "r.csv", "named", IngestOptions(text_column="body", id_column="review_id"), embed=False, progress=False)
    assert documents(home, "named")["r1"].meta["column_3"] == "extra" and "" not in documents(home, "named")["r1"].meta


def test_a_column_without_a_name_whose_position_name_is_taken_is_named_in_the_error(home, tmp_path):
    """ "text,,column_2": the second column, named column_2 by its position, was said to repeat a name the user wrote once."""
    (tmp_path / "r.csv").write_text("text,,column_2\nfine,a,b\n", encoding="utf-8")
    with pytest.raises(
        QAError,
        match=r"^The header of .*/r\.csv leaves column 2 without a name, and the name it would get, column_2, is another column's\. "
        r"Fix: name column 2 in the header row\.$",
    ):
        ingest(home, tmp_path / "r.csv", "blank", IngestOptions(), embed=False, progress=False)
    (tmp_path / "r.csv").write_text("text,,,column_9\nfine,a,b,c\n", encoding="utf-8")  # no clash: named by position
    ingest(home, tmp_path / "r.csv", "blank", IngestOptions(), embed=False, progress=False)
    (document,) = documents(home, "blank").values()
    assert (document.meta["column_2"], document.meta["column_3"], document.meta["column_9"]) == ("a", "b", "c")


def test_collections_cc_v2_and_cc_underscore_v2_keep_their_own_bm25_caches(cli_home, tmp_path, capsys):
    """Their cache folders were both 'cc_v2' (characters replaced): deleting one deleted the other's cached index."""
    for name in ("cc.v2", "cc_v2"):
        assert (
            main(["index", "--input", str(write_csv(tmp_path / "r.csv")), "--collection", name, "--text-column", "body", "--no-embed"]) == 0
        )
        assert main(["search", "battery", "--collection", name, "--top-k", "1"]) == 0
    assert cli_home.bm25_cache_of("cc.v2") != cli_home.bm25_cache_of("cc_v2")
    assert main(["collections", "--delete", "cc_v2"]) == 0
    assert list(cli_home.bm25_cache_of("cc.v2").iterdir()) and not cli_home.bm25_cache_of("cc_v2").exists()


HOSTILE_LABELS = {
    "a SQuAD question with half a character": (
        json.dumps(
            {
                "version": "v2.0",
                "data": [
                    {
                        "title": "T",
                        "paragraphs": [
                            {
                                "context": "Apples are red.",
                                "qas": [{"id": "q1", "question": "What \udcff colour?", "answers": [{"text": "red", "answer_start": 11}]}],
                            }
                        ],
                    }
                ],
            }
        ),
        "The question at data[0].paragraphs[0].qas[0] of {path} is not UTF-8 text: character 6 is a lone surrogate",
    ),
    "SQuAD labels nested 100,000 deep": (
        '{"version": "v2.0", "data": ' + deeply_nested() + "}",
        "is neither SQuAD JSON nor MRQA JSON lines (maximum recursion depth",
    ),
    "MRQA labels nested 100,000 deep": (
        '{"header": {"dataset": "x"}}\n{"context": "c", "qas": ' + deeply_nested() + "}\n",
        "line 2 is not valid JSON (maximum recursion depth",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_LABELS))
def test_hostile_label_files_are_one_line(cli_home, tmp_path, capsys, tiny_reader, case):
    """They were tracebacks: a TypeError deep in the tokenizer, or json's RecursionError."""
    text, message = HOSTILE_LABELS[case]
    path = tmp_path / "labels.json"
    path.write_text(text, encoding="utf-8")
    assert main(["eval", "reader", "--labels", str(path), "--reader", str(tiny_reader), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert message.format(path=path) in err and "Fix:" in err and err.count("\n") == 1, err


# ------------------------------------------------------------------ document ids that look like passage ids


LONG_TEXT = " ".join(f"word{n}" if n != 13 else "zeppelin" for n in range(50))  # 5 passages of 10 words; passage 1 says "zeppelin"
FORGED = [
    {"id": "long", "text": LONG_TEXT, "item_id": "P1"},
    {"id": "long#1", "text": "A short review of a teapot that pours well.", "item_id": "P1"},
    {"id": "long%231", "text": "A short review of a kettle that boils fast.", "item_id": "P1"},
]
SHORT_PASSAGES = IngestOptions(id_column="id", item_column="item_id", passage_words=10, passage_overlap=0)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def by_document(settings, name) -> dict[str, list]:
    passages = {}
    for passage in documents(settings, name).values():
        passages.setdefault(passage.meta["document_id"], []).append(passage)
    return passages


def test_a_document_whose_id_is_another_documents_passage_id_replaces_nothing(home, tmp_path):
    """'long#1' was saved as passage 1 of 'long': its word gone from 'long', 5 passages counted and 4 served, and
    deleting 'long' deleted 3 of its 4 passages, the last one staying as 'long#1'."""
    from qa_system.ingestion.changes import delete_documents

    report = ingest(home, write_jsonl(tmp_path / "forged.jsonl", FORGED), "forged", SHORT_PASSAGES, embed=False, progress=False)
    passages = by_document(home, "forged")
    assert report.passages == 7 and len(documents(home, "forged")) == 7
    assert sorted(p.meta["passage"] for p in passages["long"]) == [0, 1, 2, 3, 4]
    assert "zeppelin" in next(p.content for p in passages["long"] if p.meta["passage"] == 1)
    assert [p.content for p in passages["long#1"]] == [FORGED[1]["text"]] and [p.content for p in passages["long%231"]] == [
        FORGED[2]["text"]
    ]
    assert len({p.id for ps in passages.values() for p in ps}) == 7

    again = ingest(home, tmp_path / "forged.jsonl", "forged", SHORT_PASSAGES, embed=False, progress=False)
    assert (again.unchanged, again.staged, again.passages) == (3, 0, 7)
    deleted = delete_documents(home, "forged", ids=["long"])
    assert (deleted.passages_deleted, deleted.passages, deleted.documents) == (5, 2, 2)
    assert sorted(by_document(home, "forged")) == ["long#1", "long%231"]


def test_index_input_keeps_a_forged_passage_id_apart_from_the_passage(cli_home, tmp_path, capsys):
    path = write_jsonl(tmp_path / "forged.jsonl", FORGED)
    flags = ["--no-embed", "--id-column", "id", "--item-column", "item_id", "--passage-words", "10", "--passage-overlap", "0"]
    assert main(["index", "--input", str(path), "--collection", "forged", *flags]) == 0
    assert "3 documents in 7 passages" in capsys.readouterr().out
    assert main(["search", "zeppelin", "--collection", "forged", "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "document long (from character 60)" in out and "zeppelin" in out
    assert main(["search", "teapot", "--collection", "forged", "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "document long#1  (P1)" in out and FORGED[1]["text"] in out
    assert main(["index", "--input", str(path), "--collection", "forged", "--sync", *flags]) == 0
    assert "3 documents in 7 passages" in capsys.readouterr().out and len(by_document(cli_home, "forged")["long"]) == 5


def saved_by_an_older_version(settings, name: str, older: dict[str, str]) -> None:
    """The memory collection ``name`` as a version that wrote document ids into passage ids unescaped saved it."""
    from qa_system.stores import saved_manifest
    from qa_system.stores.memory import memory_documents, write_memory_index

    passages = [json.loads(raw) for raw in memory_documents(settings, name)]
    write_memory_index(settings, name, [{**p, "id": older.get(p["id"], p["id"])} for p in passages], saved_manifest(settings, name))


def test_a_collection_saved_with_unescaped_ids_is_read_and_saved_again_under_its_own_ids(home, tmp_path):
    rows = [
        {"id": "a#b", "text": "The hinge squeaks.", "item_id": "P1"},
        {"id": "x#0", "text": "The lid fits well.", "item_id": "P1"},
        {"id": "p%q", "text": "The paint chips.", "item_id": "P2"},
        {"id": "n", "text": "Plain review.", "item_id": "P2"},
    ]
    source = write_jsonl(tmp_path / "older.jsonl", rows)
    ingest(home, source, "older", SHORT_PASSAGES, embed=False, progress=False)
    saved_by_an_older_version(home, "older", {"a%23b": "a#b", "x%230": "x#0", "p%25q": "p%q"})
    assert sorted(documents(home, "older")) == ["a#b", "n", "p%q", "x#0"]  # still read as it was

    grown = write_jsonl(tmp_path / "grown.jsonl", [*rows[:1], *rows[2:], {"id": "x", "text": LONG_TEXT, "item_id": "P3"}])
    with pytest.raises(
        QAError,
        match=r"Passage 'x#0' of document 'x' has the id under which document 'x#0' was saved by an older version; collection 'older' was left",
    ):
        ingest(home, grown, "older", SHORT_PASSAGES, embed=False, progress=False)
    assert sorted(documents(home, "older")) == ["a#b", "n", "p%q", "x#0"]

    again = ingest(
        home,
        write_jsonl(tmp_path / "all.jsonl", [*rows, {"id": "x", "text": LONG_TEXT, "item_id": "P3"}]),
        "older",
        SHORT_PASSAGES,
        embed=False,
        progress=False,
    )
    assert (again.added, again.unchanged, again.documents, again.passages) == (1, 4, 5, 9)
    assert sorted(documents(home, "older")) == ["a%23b", "n", "p%25q", "x#0", "x#1", "x#2", "x#3", "x#4", "x%230"]
    assert documents(home, "older")["x%230"].content == "The lid fits well." and documents(home, "older")["x#0"].meta["document_id"] == "x"


def test_a_field_only_deleted_documents_held_leaves_the_collection_with_them(home, tmp_path):
    """Its type stayed: a filter on it matched nothing silently, and a new document with text there was refused as a type
    change that needs every document again."""
    from qa_system import delete_documents  # the public API's, as the REST API's DELETE routes use it

    rows = [{"id": "r1", "text": "Fine kettle.", "warranty": 2}, {"id": "r2", "text": "Loud kettle.", "rating": 3}]
    options = IngestOptions(id_column="id")
    ingest(home, write_jsonl(tmp_path / "a.jsonl", rows), "warranties", options, embed=False, progress=False)
    assert collection_manifest(home, "warranties")["meta_types"] == {"warranty": "integer", "rating": "integer"}
    with pytest.raises(QAError, match=r"^'ids' must be a list of 1 to .* document ids \(text\)\. Fix: give a list such as \[\"r1\", "):
        delete_documents(home, "warranties", ids="r1")  # it said: send {"ids": [...]}, to a Python caller
    with pytest.raises(NotFound, match=r"^No memory collection named 'warranty'\. Fix: name one that list_collections\(settings\) lists"):
        delete_documents(home, "warranty", ids=["r1"])  # it said "create it first (POST /collections)" to a Python caller
    delete_documents(home, "warranties", ids=["r1"])
    assert collection_manifest(home, "warranties")["meta_types"] == {"rating": "integer"}
    with pytest.raises(QAError, match=r"^The filter names 'meta\.warranty', a field no document of this collection has\."):
        check_collection_filters({"field": "meta.warranty", "operator": ">", "value": 1}, collection_manifest(home, "warranties"))
    added = [{"id": "r3", "text": "Good kettle.", "warranty": "two years"}]
    assert ingest(home, write_jsonl(tmp_path / "b.jsonl", added), "warranties", options, embed=False, progress=False).added == 1
    assert collection_manifest(home, "warranties")["meta_types"] == {"rating": "integer", "warranty": "text"}
