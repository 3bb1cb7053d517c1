"""A saved index survives bad data, stale sources, foreign files and a writer killed mid-run."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from helpers.subjqa import COLUMNS, SPLIT_ROWS, write_subjqa
from qa_system.cli import main
from qa_system.errors import QAError
from qa_system.stores import open_index, remove_leftovers, temporary_prefix


@pytest.fixture
def indexed(settings, monkeypatch):
    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    assert main(["index", "--no-embed"]) == 0
    return settings


def index_path(settings):
    return settings.home / "indexes" / "memory" / "subjqa-electronics.json"


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def header_only(settings, *splits):
    for split in splits:
        (settings.data_dir / "electronics" / "splits" / f"{split}.csv").write_text(",".join(COLUMNS) + "\n", encoding="utf-8")


def keep_only(settings, questions: set[str]):
    """Rewrite the splits with only these questions' rows (fewer reviews, every file still has rows)."""
    write_subjqa(settings.data_dir, {split: [r for r in rows if r["q_review_id"] in questions] for split, rows in SPLIT_ROWS.items()})


# ------------------------------------------------------------------ a shrunken source


def test_header_only_files_do_not_replace_a_good_index(indexed, capsys):
    before = digest(index_path(indexed))
    header_only(indexed, "train", "dev", "test")
    assert main(["index", "--no-embed"]) == 2
    err = capsys.readouterr().err
    assert "train.csv" in err and err.count("\n") == 1
    assert digest(index_path(indexed)) == before


def test_far_fewer_documents_need_force(indexed, capsys):
    before = digest(index_path(indexed))
    keep_only(indexed, {"q2", "q5", "q9"})  # 2 of the 6 documents left (r-phones-1 in train and test, r-phones-2)
    assert main(["index", "--no-embed"]) == 2
    err = capsys.readouterr().err
    assert "holds 2 documents where the saved index 'subjqa-electronics' holds 6" in err and "--force" in err
    assert err.count("\n") == 1
    assert digest(index_path(indexed)) == before
    assert main(["index", "--no-embed", "--force"]) == 0
    assert open_index(indexed).manifest["documents"] == 2


# ------------------------------------------------------------------ a stale or missing source


def test_an_edited_review_is_re_indexed_before_answering(indexed, capsys, caplog):
    path = indexed.data_dir / "electronics" / "splits" / "test.csv"
    path.write_text(path.read_text(encoding="utf-8").replace("scroll wheel feels solid", "scroll wheel squeaks loudly"), encoding="utf-8")
    assert main(["search", "Does the wheel squeak?", "--item", "MOUSE", "--top-k", "1"]) == 0
    assert "squeaks loudly" in capsys.readouterr().out
    assert "out of date (electronics/test.csv changed): re-indexing" in caplog.text


def test_an_unchanged_source_touched_is_not_re_indexed(indexed, capsys, caplog):
    path = indexed.data_dir / "electronics" / "splits" / "dev.csv"
    before = digest(index_path(indexed))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert main(["search", "How is the sound?", "--item", "KINDLE"]) == 0
    assert "re-indexing" not in caplog.text
    assert digest(index_path(indexed)) == before


def test_a_missing_source_is_an_error_not_old_answers(indexed, capsys, tmp_path):
    assert main(["search", "Is it good?", "--item", "KINDLE", "--data-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "--data-dir" in err and err.count("\n") == 1


def test_a_wrong_data_dir_names_where_the_index_was_built_from(indexed, capsys):
    """An index asked for with another `--data-dir` (`/nonexistent`) names the directory it was built from, not the one asked for."""
    built_from = indexed.data_dir.resolve()
    assert main(["search", "Is it good?", "--item", "KINDLE", "--data-dir", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "was built from /nonexistent" not in err and err.count("\n") == 1
    assert (
        f"/nonexistent/electronics/splits/train.csv does not exist: the index 'subjqa-electronics' was built from the data in {built_from}, not /nonexistent."
        in err
    )
    assert f"Fix: pass --data-dir {built_from} (or set QA_DATA_DIR)" in err
    gone = indexed.data_dir / "electronics" / "splits" / "dev.csv"
    gone.unlink()  # the same directory, one of its files deleted: that file is where it was built from
    assert main(["search", "Is it good?", "--item", "KINDLE"]) == 2
    err = capsys.readouterr().err
    assert f"The index 'subjqa-electronics' was built from {gone.resolve()}, which no longer exists." in err and err.count("\n") == 1


def test_another_data_directory_rebuilds_the_index(indexed, capsys, tmp_path):
    rows = {split: [dict(r, review=r["review"].replace("sharp", "dim")) for r in SPLIT_ROWS[split]] for split in SPLIT_ROWS}
    other = write_subjqa(tmp_path / "other", rows)
    assert main(["search", "Is the screen dim?", "--item", "KINDLE", "--top-k", "1", "--data-dir", str(other)]) == 0
    assert "The screen is dim" in capsys.readouterr().out


# ------------------------------------------------------------------ an index of the wrong shape


@pytest.mark.parametrize(
    "saved",
    [
        {"documents": [{"id": 1}]},
        {"documents": [{"id": "a", "content": "x"}]},
        {"documents": "x"},
        [],
        {"documents": [], "qa_system": {"documents": 5}},
    ],
)
def test_a_foreign_index_file_is_refused(indexed, capsys, saved):
    index_path(indexed).write_text(json.dumps(saved), encoding="utf-8")
    assert main(["search", "Is it good?", "--item", "KINDLE"]) == 2
    err = capsys.readouterr().err
    assert "is unreadable" in err and "Fix: delete it (`qa-system collections --delete subjqa-electronics`)" in err and err.count("\n") == 1
    # The fix works: deleted, it is indexed again (`index` refused the damaged file with this very message).
    assert main(["collections", "--delete", "subjqa-electronics"]) == 0
    assert main(["search", "Is it good?", "--item", "KINDLE"]) == 0


# ------------------------------------------------------------------ leftovers of killed writers


def test_leftovers_of_dead_writers_go_and_live_ones_stay(tmp_path):
    name = "subjqa-electronics.json"
    dead = tmp_path / f".{name}~999999999~abcdefgh.tmp"
    live = tmp_path / f"{temporary_prefix(name)}abcdefgh.tmp"
    staging = tmp_path / f".{name}~999999998~abcdefgh"
    dotted = tmp_path / f".{name}.999999997.abcdefgh.tmp"  # as releases before named them
    # Files of other names, whose writers are dead too: the collection 'subjqa-electronics.json', another index.
    others = [
        tmp_path / f".{name}.json~999999999~abcdefgh.tmp",
        tmp_path / f".{name}.json.999999999.abcdefgh.tmp",
        tmp_path / ".another-index.json~999999999~abcdefgh.tmp",
    ]
    for path in (dead, live, dotted, *others):
        path.write_text("{}")
    staging.mkdir()
    removed = remove_leftovers(tmp_path, name)
    assert sorted(removed) == sorted([dead, staging, dotted])
    assert live.exists() and all(path.exists() for path in others)


def run_killed(settings, patch: str, argv: list[str]) -> subprocess.CompletedProcess:
    """``qa-system ARGV`` in a child process that sends itself SIGKILL where ``patch`` says."""
    script = textwrap.dedent(
        """
        import os, signal, sys
        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        {patch}
        from qa_system.cli import main
        sys.exit(main({argv!r}))
        """
    ).format(patch=patch, argv=argv)
    env = {**os.environ, "QA_DATA_DIR": str(settings.data_dir), "QA_HOME": str(settings.home)}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "where, patch, argv",
    [
        # The temporary file is written and about to be synced and renamed over the index.
        ("during the save", "os.fsync = die", ["index", "--no-embed"]),
        # The encoder has embedded the first chunk of reviews.
        (
            "during embedding",
            "from qa_system.ingestion.embedding import DocumentEmbedder as E\n"
            "real = E.run\nE.run = lambda self, documents: (real(self, documents=documents), die())",
            ["index"],
        ),
    ],
)
def test_kill_9_keeps_the_previous_index_and_the_next_run_cleans_up(indexed, where, patch, argv):
    path = index_path(indexed)
    before = digest(path)
    keep_only(indexed, {"q1", "q2", "q3", "q4", "q6", "q7", "q8", "q9"})  # 5 documents (r-phones-2 gone): a torn write would show
    killed = run_killed(indexed, patch, argv)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert digest(path) == before, f"killed {where}: the saved index changed"
    if where == "during the save":
        assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")], "the kill left no temporary file to clean"
    assert open_index(indexed).manifest["documents"] == 6
    assert main(["index", "--no-embed"]) == 0
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert open_index(indexed).manifest["documents"] == 5


def test_an_interrupted_faiss_swap_restores_the_retired_index(settings):
    from qa_system.stores.faiss import _faiss_dir, _restore_interrupted_swap

    directory = _faiss_dir(settings, "subjqa-electronics")
    retired = directory.with_name(".subjqa-electronics~999999999~abcdefgh.old")
    retired.mkdir(parents=True)
    (retired / "manifest.json").write_text("{}")
    _restore_interrupted_swap(directory)
    assert (directory / "manifest.json").is_file() and not retired.exists()


def test_build_index_refuses_in_the_python_api_too(indexed):
    from qa_system.ingestion.indexing import build_index

    keep_only(indexed, {"q2", "q5", "q9"})
    with pytest.raises(QAError, match="--force"):
        build_index(indexed, "electronics", embed=False, progress=False)


def test_a_saved_vector_reads_back_as_the_float32_values_the_encoder_made():
    import json

    import numpy as np

    from qa_system.stores.memory import document_line

    vector = np.random.default_rng(0).standard_normal(384).astype(np.float32)
    document = {
        "id": "p1",
        "content": 'A "quoted" review',
        "meta": {"item_id": "B1", "split": ["train", "dev"]},
        "embedding": vector.tolist(),
    }
    read = json.loads(document_line(document))
    assert np.array_equal(np.asarray(read.pop("embedding"), dtype=np.float32), vector)
    assert read == {k: v for k, v in document.items() if k != "embedding"}
    # No vector, or one JSON cannot hold as numbers, is written as json.dumps writes it.
    for other in ({"id": "p2", "embedding": None}, {"id": "p3", "embedding": [float("nan"), 1.0]}, {"id": "p4"}):
        assert document_line(other) == json.dumps(other)
