"""First-start indexing belongs to the server process, not to the visitor who started it: closing the browser does not stop it."""

from __future__ import annotations

import threading
import time

import pytest

from helpers.subjqa import COLUMNS, row, write_subjqa
from qa_system.bench.browser import chromium_paths, headless_chromium
from qa_system.serving.background import BackgroundTask, TaskRegistry
from qa_system.serving.webapp import serve


def test_a_task_runs_once_and_every_caller_gets_its_result_and_progress():
    release = threading.Event()
    calls = []

    def work(report):
        calls.append(1)
        report(3, 10)
        release.wait(5)
        report(10, 10)
        return "index"

    registry = TaskRegistry()
    first = registry.get_or_start("electronics", work)
    assert not first.wait(0.05)  # the first caller may leave here: nothing stops the work
    second = registry.get_or_start("electronics", work)
    assert second is first and first.progress == (3, 10)
    release.set()
    assert second.result() == "index" and first.progress == (10, 10) and calls == [1]


def test_a_failed_task_raises_for_its_waiters_and_is_retried_by_the_next_caller():
    attempts = []

    def work(report):
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("disk full")
        return "index"

    registry = TaskRegistry()
    task = registry.get_or_start("k", work)
    with pytest.raises(ValueError, match="disk full"):
        task.result()
    assert registry.get_or_start("k", work).result() == "index" and len(attempts) == 2


def test_new_work_for_a_key_waits_for_its_running_task_then_starts_afresh():
    release = threading.Event()
    runs = []

    def work(report):
        runs.append(1)
        release.wait(5)
        return len(runs)

    registry = TaskRegistry()
    first = registry.start_unless_running("upload-shop", work)
    assert first is not None and registry.start_unless_running("upload-shop", work) is None  # two uploads into one collection
    assert registry.start_unless_running("upload-other", lambda report: "other").result() == "other"  # other keys are free
    release.set()
    assert first.result() == 1
    second = registry.start_unless_running("upload-shop", work)  # a finished upload does not stand for the next one
    assert second is not None and second is not first and second.result() == 2


def test_a_task_is_not_stopped_by_the_thread_that_started_it_ending():
    started = []
    box = {}

    def visitor():
        box["task"] = BackgroundTask(lambda report: (started.append(1), time.sleep(0.3), "done")[-1])

    thread = threading.Thread(target=visitor)
    thread.start()
    thread.join()
    assert box["task"].result() == "done" and started == [1]


@pytest.mark.browser
@pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)")
def test_closing_the_browser_during_first_start_indexing_does_not_lose_the_work(tmp_path):
    # Enough distinct reviews that embedding them takes several seconds on 2 cores.
    words = "screen battery sound bass cord mouse wheel shipping reading case cable charger light button strap".split()
    rows = []
    for number in range(3000):
        review = f"Review {number}: the {words[number % len(words)]} is {words[(number * 7) % len(words)]} and {words[(number * 3) % len(words)]}, number {number}."
        values = dict(
            row("q1", "Is it good?", "r-kindle-1", "ANSWERNOTFOUND"),
            q_review_id=f"q{number}",
            review_id=f"r{number}",
            item_id=f"ITEM{number % 50}",
        )
        values["review"] = review + " ANSWERNOTFOUND"
        values["human_ans_indices"] = f"({len(review) + 1}, {len(review) + 15})"
        rows.append(values)
    data_dir = write_subjqa(tmp_path / "subjqa", {"train": rows[:2800], "dev": rows[2800:2900], "test": rows[2900:]})
    home = tmp_path / "home"
    saved = home / "indexes" / "memory" / "subjqa-electronics.json"
    assert set(COLUMNS) <= set(rows[0])
    # Embedded at start (QA_EMBED_AT_START): a BM25-only first start is over before a browser sees it.
    with serve({"QA_DATA_DIR": str(data_dir), "QA_HOME": str(home), "QA_EMBED_AT_START": "1"}, log=tmp_path / "streamlit.log") as url:
        driver = headless_chromium(tmp_path / "profile-1", 1000, 800)
        try:
            driver.get(url)
            deadline = time.monotonic() + 120
            while "First start: embedding" not in driver.page_source:
                assert time.monotonic() < deadline, "the page never showed the indexing progress"
                time.sleep(0.2)
        finally:
            driver.quit()  # the visitor leaves while the reviews are being embedded
        assert not saved.exists()
        deadline = time.monotonic() + 150
        while not saved.exists():  # nobody is visiting: the server finishes the work on its own
            assert time.monotonic() < deadline, "indexing stopped when its visitor left"
            time.sleep(0.5)
        driver = headless_chromium(tmp_path / "profile-2", 1000, 800)
        try:
            driver.get(url)
            deadline = time.monotonic() + 120
            while not driver.find_elements("css selector", "input[aria-label='Question']"):
                assert time.monotonic() < deadline, "the next visitor did not get the page"
                time.sleep(0.2)
            assert "First start: embedding" not in driver.page_source  # no second build
        finally:
            driver.quit()
    assert (tmp_path / "streamlit.log").read_text().count("Traceback") == 0
