"""The page load test (`qa-system bench page`), short: a few browser sessions on the tiny corpus
ask and click feedback at once, and every click the page acknowledges is a row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from qa_system.bench.browser import chromium_paths
from qa_system.bench.page_load import BrowserPriority, acknowledged_clicks, run_page_load
from qa_system.cli import main as cli


def test_the_page_acknowledgement_is_read_as_a_count():
    assert [acknowledged_clicks(c) for c in ("Saved: right answer.", "Saved 12 clicks, the last: wrong answer.", "", "Thanks")] == [
        1,
        12,
        0,
        0,
    ]


@contextmanager
def driver_with_child() -> Iterator[tuple]:
    """A driver with a child, as chromedriver starts Chromium; the child is running once the driver prints its pid."""
    import psutil

    spawn = "import subprocess; child = subprocess.Popen(['sleep', '60']); print(child.pid, flush=True); child.wait()"
    driver = subprocess.Popen([sys.executable, "-c", spawn], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = psutil.Process(int(driver.stdout.readline()))
        yield driver, child
    finally:
        driver.kill()
        if child is not None:
            child.kill()


def test_the_browsers_processes_are_kept_below_the_page_server():
    import psutil

    with driver_with_child() as (driver, child):
        priority = BrowserPriority([driver.pid], 7)
        priority.lower_once()
        assert psutil.Process(driver.pid).nice() == 7 and child.nice() == 7


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority back needs root, as Chromium has")
def test_the_browsers_processes_are_kept_below_the_page_server_even_when_they_raise_themselves():
    import psutil

    with driver_with_child() as (driver, child):
        priority = BrowserPriority([driver.pid], 7)
        priority.lower_once()
        assert psutil.Process(driver.pid).nice() == 7 and child.nice() == 7
        os.setpriority(os.PRIO_PROCESS, child.pid, 0)
        priority.lower_once()  # the next round lowers it again
        assert child.nice() == 7


@pytest.mark.parametrize(
    "flags, message",
    [(["--sessions", "0"], "--sessions must be"), (["--sessions", "17"], "sessions must be"), (["--seconds", "-1"], "--seconds")],
)
def test_bad_load_test_settings_are_one_line(flags, message, capsys, tmp_path):
    assert cli(["bench", "page", *flags, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)")
def test_sessions_asking_and_clicking_at_once_lose_no_acknowledged_click(tmp_path, settings, tiny_reader):
    result = run_page_load(settings.with_(reader_model=str(tiny_reader)), sessions=2, seconds=5, clicks=3, out_dir=tmp_path / "out", seed=1)
    assert {r.session: r.item_id for r in result.rounds} == {0: "MOUSE", 1: "HEADPHONES"}  # the products with the most questions, one each
    assert len(result.answered) >= 2 and all(not r.error for r in result.rounds)
    assert result.total("clicks") == 3 * len(result.answered)
    assert result.lost == 0 and result.total("acknowledged") == result.total("clicks") == sum(result.stored.values())
    assert result.percentile_ms("answer_s", 95) >= result.percentile_ms("pipeline_s", 50) > 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = {row["measurement"]: row["value"] for row in report["metrics"]}
    assert rows["acknowledged clicks not stored"] == 0 and rows["feedback rows stored"] == result.total("clicks")
    assert not (settings.home / "feedback.sqlite").exists()  # the user's own feedback is left alone
    # The page server's memory over the run, and answer times over time: tables and a plot.
    assert 0 < rows["page server memory at start (MB)"] <= rows["page server memory max (MB)"]
    assert report["over time"] and {"from_s", "answered", "answer_p50_ms", "memory_mb"} <= set(report["over time"][0])
    assert (tmp_path / "out" / "over_time.png").stat().st_size > 0
