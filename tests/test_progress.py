"""Progress of long jobs: a tqdm bar with total and time left in a terminal, a log line every few seconds with
counts and rate when the output is not a terminal (a log file), from the one helper every long command uses."""

from __future__ import annotations

import io
import re
import sys
from types import SimpleNamespace

from helpers.models import tiny_model_dir
from helpers.training import REVIEW, labelled
from qa_system.cli import main
from qa_system.progress import Progress, duration, track, training_progress


class Clock:
    """A clock the test moves by hand: lines come from elapsed time, which the test sets."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_logs_a_line_every_few_seconds_with_count_total_rate_and_time_left():
    stream, clock = io.StringIO(), Clock()
    with Progress(1000, "embedding", "reviews", stream=stream, every=10, clock=clock) as progress:
        clock.now += 4
        progress.update(200)  # 4 s after the start: too soon for a line
        clock.now += 6
        progress.update(200)
        progress.set_postfix(batches=13)
        clock.now += 5
        progress.update(100)  # 5 s after the last line: none
        clock.now += 5
        progress.update(100)
        clock.now += 10
    lines = stream.getvalue().splitlines()
    assert lines == [  # nothing in the first 10 s: a short job says nothing
        "embedding: 400/1,000 reviews (40%), 40.0 reviews/s, 15s left",
        "embedding: 600/1,000 reviews (60%), 30.0 reviews/s, 13s left, batches 13",
        "embedding: done, 600/1,000 reviews in 30s, 20.0 reviews/s, batches 13",
    ]
    assert "\r" not in stream.getvalue()  # no bar redrawn into a log


def test_a_job_of_unknown_total_says_how_far_it_is_by_the_share_done():
    stream, clock, share = io.StringIO(), Clock(), [0.0]
    progress = Progress(None, "indexing mine", "documents", stream=stream, every=5, clock=clock, fraction=lambda: share[0])
    clock.now += 20
    share[0] = 0.25
    progress.update(5000)
    progress.close()
    progress.close()  # once
    assert stream.getvalue().splitlines() == [
        "indexing mine: 5,000 documents (~25% done), 250.0 documents/s, 1m00s left",
        "indexing mine: done, 5,000 documents in 20s, 250.0 documents/s",
    ]


def test_in_a_terminal_it_is_a_tqdm_bar_with_total_and_time_left():
    stream = Terminal()
    for _ in track(range(50), "retrieving", "questions", stream=stream):
        pass
    shown = stream.getvalue()
    assert "retrieving" in shown and "50/50" in shown and "questions/s" in shown
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", shown)  # tqdm's elapsed<left
    assert "done," not in shown  # no log lines in a terminal


def test_disabled_progress_says_nothing_and_still_counts():
    stream = io.StringIO()
    assert list(track([1, 2, 3], "reading", stream=stream, enabled=False)) == [1, 2, 3]
    assert stream.getvalue() == ""


def test_training_steps_are_logged_with_the_loss():
    stream, clock = io.StringIO(), Clock()
    callback = training_progress("training the reader", stream=stream, every=0, clock=clock)
    state = SimpleNamespace(max_steps=4, global_step=1)  # resumed from step 1
    callback.on_train_begin(None, state, None)
    for step in (2, 3, 4):
        clock.now += 2
        state.global_step = step
        callback.on_log(None, state, None, logs={"loss": 1.0 / step})
        callback.on_step_end(None, state, None)
    callback.on_train_end(None, state, None)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "training the reader: 2/4 steps (50%), 0.5 steps/s, 4s left, loss 0.5000"
    assert lines[-2] == "training the reader: 4/4 steps (100%), 0.5 steps/s, 0s left, loss 0.2500"
    assert lines[-1] == "training the reader: done, 4/4 steps in 6s, 0.5 steps/s, loss 0.2500"


def test_a_job_that_fails_leaves_its_error_as_the_last_word():
    stream, clock = io.StringIO(), Clock()
    try:
        with Progress(10, "embedding", "reviews", stream=stream, every=1, clock=clock) as progress:
            clock.now += 2
            progress.update(3)
            raise RuntimeError("the disk is full")
    except RuntimeError:
        pass
    assert stream.getvalue() == "embedding: 3/10 reviews (30%), 1.5 reviews/s, 5s left\n"  # no "done" line


def test_durations_read_short():
    assert [duration(s) for s in (0, 7.4, 63, 3900)] == ["0s", "7s", "1m03s", "1h05m"]


def test_index_input_into_a_log_prints_progress_lines_not_silence(tmp_path, capsys, monkeypatch):
    """`qa-system index --input` with stderr not a terminal (as in a log file): lines with the count and the rate."""
    import qa_system.progress

    monkeypatch.setattr(qa_system.progress, "LOG_EVERY_S", 0)  # a line for every document: a long job, in short
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    source = tmp_path / "reviews.csv"
    source.write_text(
        "id,text,product\n" + "".join(f"r{i},review number {i} says the battery lasts {i} days,P{i % 3}\n" for i in range(40))
    )
    assert (
        main(["index", "--input", str(source), "--collection", "mine", "--id-column", "id", "--item-column", "product", "--no-embed"]) == 0
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("indexing mine: ")]
    assert len(lines) == 42, err  # a line a document, one when its batch was staged, and the last
    assert all(
        re.fullmatch(r"indexing mine: [\d,]+ documents \(~\d+% done\), [\d,.]+ documents/s(, \S+ left)?(, embedded \d+)?", line)
        for line in lines[:-1]
    ), lines
    assert [int(re.search(r"(\d+) documents", line)[1]) for line in lines[:-1]] == [*range(1, 41), 40]
    assert re.fullmatch(r"indexing mine: done, 40 documents in \d+s, [\d,.]+ documents/s, embedded 0", lines[-1]), lines[-1]


def test_reader_training_into_a_log_prints_its_steps_with_rate_and_loss(tmp_path, capsys, monkeypatch):
    """A real (tiny) train_reader run with stderr not a terminal: a line per step here, the trainer's own printing gone."""
    import qa_system.progress
    from qa_system.sources.squad import write_squad
    from qa_system.sources.subjqa import GoldAnswer
    from qa_system.training.reader import TrainingConfig, train_reader

    monkeypatch.setattr(qa_system.progress, "LOG_EVERY_S", 0)
    start = REVIEW.index("battery lasts")
    write_squad([labelled(f"t{i}", [GoldAnswer("battery lasts", start)]) for i in range(3)], tmp_path / "train.json")
    write_squad([labelled("d1", [GoldAnswer("battery lasts", start)]), labelled("d2", [])], tmp_path / "dev.json")
    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=2, max_seq_length=48, doc_stride=16)
    train_reader([tmp_path / "train.json"], [tmp_path / "dev.json"], str(base), tmp_path / "reader", config=config, progress=True)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("training the reader: ")]
    assert [re.match(r"training the reader: (\d+)/2 steps", line)[1] for line in lines[:-1]] == ["1", "2"], captured.err
    assert all(re.search(r", [\d.,]+ steps/s, \S+ left(, loss \d+\.\d{4})?$", line) for line in lines[:-1]), lines
    assert lines[-2].endswith(tuple("0123456789")) and ", loss " in lines[-2]  # the last loss logged so far (logs follow their step)
    assert re.fullmatch(r"training the reader: done, 2/2 steps in \d+s, [\d.,]+ steps/s, loss \d+\.\d{4}", lines[-1]), lines
    assert "{'loss'" not in captured.out + captured.err  # no printed dict per logged step


def test_indexing_a_few_long_documents_says_how_much_is_left_to_embed(home, tmp_path, capsys, monkeypatch):
    """Three long documents are read at once (the whole source) and then embedded for a while: the lines said "~100% of
    the source, 0s left" all that time, and a job whose last batch ended it said nothing at all."""
    from qa_system.ingestion import ingest
    from qa_system.ingestion.ingest import IngestOptions

    monkeypatch.setattr("qa_system.progress.LOG_EVERY_S", 0.0)  # a line at each step
    monkeypatch.setattr(sys.modules["qa_system.ingestion.ingest"], "EMBED_CHUNK", 4)
    text = " ".join(f"Sentence {n} of the manual says the kettle boils water." for n in range(12))
    source = tmp_path / "manuals.csv"
    source.write_text("id,text\n" + "".join(f'm{n},"{text}"\n' for n in range(3)), encoding="utf-8")
    report = ingest(home, source, "manuals", IngestOptions(id_column="id", passage_words=20, passage_overlap=0), progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("indexing manuals")]
    shares = [int(line.split("(~")[1].split("%")[0]) for line in lines if "% done)" in line]
    assert report.embedded > 8 and len(shares) >= 2
    assert shares[0] < 50 and shares == sorted(shares) and shares[-1] == 100  # read at once, then as the embedding goes
    assert lines[-1].startswith("indexing manuals: done, 3 documents in ") and lines[-1].endswith(f"embedded {report.embedded}")
