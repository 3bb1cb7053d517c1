"""Driving the search page from a headless Chromium, the way a user does: ``headless_chromium``, ``ask_in_browser``.

The browser tests, ``qa-system bench page`` (``page_load.py``) and the README screenshot
(``scripts/ui_screenshot.py``) all use them, so that what is tested is what is shown; the page
itself is served by ``qa_system.serving.webapp.serve``. Selenium and Chromium are needed only here
(``pip install 'qa_system[browser]'``; Debian: ``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import importlib.util
import shutil
import urllib.parse
from pathlib import Path

from qa_system.errors import QAError

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
# What the page shows once an answer (or "no answer") has been rendered.
ANSWER_CARD = ".qa-answer"


def chromium_paths() -> tuple[str, str] | None:
    """(browser, driver) of the system Chromium, or None when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def require_selenium() -> None:
    """A QAError naming the ``browser`` extra when selenium is not installed."""
    try:
        found = importlib.util.find_spec("selenium") is not None
    except (ImportError, ValueError):  # a finder that refuses it
        found = False
    if not found:
        raise QAError("Driving the page in a browser needs selenium, which is not installed.", "pip install 'qa_system[browser]'.")


def headless_chromium(user_data_dir: Path, width: int = 1400, height: int = 1400):
    """A Selenium driver on the system's headless Chromium (never a downloaded browser)."""
    require_selenium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = chromium_paths()
    if paths is None:
        raise QAError("Chromium or its driver is not installed.", "apt-get install chromium chromium-driver.")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)


def ask_in_browser(driver, url: str, question: str, item: str | None = None, timeout: float = 180):
    """Open the page (on ``item``), type the question, press Ask; returns the first answer card."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as conditions
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + ("?" + urllib.parse.urlencode({"item": item}) if item else ""))
    wait = WebDriverWait(driver, timeout)
    box = wait.until(conditions.element_to_be_clickable((By.CSS_SELECTOR, "input[aria-label='Question']")))
    box.clear()
    box.send_keys(question)
    driver.find_element(By.XPATH, "//button[.//p[normalize-space()='Ask']]").click()
    return wait.until(conditions.visibility_of_element_located((By.CSS_SELECTOR, ANSWER_CARD)))
