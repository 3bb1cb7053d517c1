"""Feedback clicks in real browsers: several users clicking fast on a busy server.

Streamlit merges reruns that arrive while a page still runs, and with them the clicks of a plain
button; the page's buttons log clicks in the browser instead, so every click is one row.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import urllib.parse

import pytest

from helpers.subjqa import write_subjqa
from qa_system.bench.browser import ANSWER_CARD, chromium_paths, headless_chromium
from qa_system.safe_text import WORD_JOINER
from qa_system.serving.webapp import serve

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)"),
]
SESSIONS, CLICKS, GAP = 4, 6, 0.3  # with a plain Streamlit button, 20 of these 24 clicks were stored
RIGHT_BUTTON = "(//button[.//*[normalize-space()='Right']])[1]"


def test_every_click_of_concurrent_users_is_one_row(tmp_path, tiny_reader):
    from selenium.webdriver.support.ui import WebDriverWait

    env = {"QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")), "QA_HOME": str(tmp_path / "home"), "QA_READER_MODEL": str(tiny_reader)}
    with serve(env, log=tmp_path / "streamlit.log") as url:
        drivers = [headless_chromium(tmp_path / f"chromium-{i}", 1200, 1000) for i in range(SESSIONS)]
        try:
            for driver in drivers:  # a shared link asks at once
                driver.get(f"{url}/?{urllib.parse.urlencode({'item': 'HEADPHONES', 'q': 'How is the bass?'})}")
            for driver in drivers:  # the first question also builds the reader's int8 export, four browsers beside it
                WebDriverWait(driver, 300).until(lambda d: d.find_elements("css selector", ANSWER_CARD))
            failures = []

            def click(driver):
                try:
                    for _ in range(CLICKS):
                        # On a busy machine the buttons come a moment after the card, and again after each rerun.
                        WebDriverWait(driver, 60).until(lambda d: d.find_elements("xpath", RIGHT_BUTTON))[0].click()
                        time.sleep(GAP)
                except Exception as error:  # a thread's failure must fail the test
                    failures.append(error)

            threads = [threading.Thread(target=click, args=(driver,)) for driver in drivers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not failures

            deadline = time.monotonic() + 30  # the server may still be catching up
            while (rows := stored(tmp_path)) != [("correct", SESSIONS * CLICKS)] and time.monotonic() < deadline:
                time.sleep(0.5)
            assert rows == [("correct", SESSIONS * CLICKS)]

            def saved(driver) -> list[str]:
                return [
                    c.text for c in driver.find_elements("css selector", "[data-testid='stCaptionContainer']") if c.text.startswith("Saved")
                ]

            for driver in drivers:  # each page acknowledges its six clicks, no more
                WebDriverWait(driver, 30).until(lambda d: saved(d) == [f"Saved {CLICKS} clicks, the last: right answer."])
        finally:
            for driver in drivers:
                driver.quit()


def stored(tmp_path) -> list[tuple[str, int]]:
    with sqlite3.connect(tmp_path / "home" / "feedback.sqlite") as connection:
        return connection.execute("SELECT verdict, COUNT(*) FROM feedback GROUP BY verdict").fetchall()


def test_a_feedback_database_that_cannot_be_written_is_one_message_shown_as_text(tmp_path, tiny_reader):
    from selenium.webdriver.support.ui import WebDriverWait

    from qa_system.bench.browser import ask_in_browser

    hostile = "**bold** <img src=x onerror=alert(1)> _it_ [link](http:x)"
    blocker = tmp_path / hostile / "blocker"  # a file where the database's folder should be: it cannot be opened
    blocker.parent.mkdir()
    blocker.write_text("not a folder")
    env = {
        "QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")),
        "QA_HOME": str(tmp_path / "home"),
        "QA_READER_MODEL": str(tiny_reader),
        "QA_FEEDBACK_DB": str(blocker / "feedback.sqlite"),
    }
    with serve(env, log=tmp_path / "streamlit.log") as url:
        driver = headless_chromium(tmp_path / "chromium", 1200, 1000)
        try:
            ask_in_browser(driver, url, "How is the bass?", item="HEADPHONES")  # the page still answers
            WebDriverWait(driver, 120).until(lambda d: d.find_elements("xpath", RIGHT_BUTTON))[0].click()  # the buttons follow the card

            def alerts(d) -> list:
                return [
                    a
                    for a in d.find_elements("css selector", "[data-testid='stMain'] [data-testid='stAlert']")
                    if "cannot be used" in a.text
                ]

            alert = WebDriverWait(driver, 120).until(alerts)[0]
            # Shown as written (markdown_literal keeps "http:" from becoming a link with an invisible word joiner).
            assert (
                hostile in alert.text.replace(WORD_JOINER, "")
                and "Fix: point QA_FEEDBACK_DB at a file this process can write." in alert.text
            )
            assert not alert.find_elements("css selector", "img, strong, em, a")  # the path's Markdown and HTML stayed text
            assert "Traceback" not in driver.find_element("tag name", "body").text
            assert not [c for c in driver.find_elements("css selector", "[data-testid='stCaptionContainer']") if c.text.startswith("Saved")]
        finally:
            driver.quit()
