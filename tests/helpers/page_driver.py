"""Driving the served page in headless Chromium: waiting for it, reading it, filling its upload form."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from qa_system.safe_text import WORD_JOINER

TIMEOUT = 180


def wait(driver, condition, timeout: float = TIMEOUT):
    """``condition(driver)``'s first truthy value; the test fails with what the page shows when it never comes."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:  # an element a Streamlit rerun replaced while the condition read it: look again
        return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: condition(d))
    except TimeoutException:
        pytest.fail(f"the page did not get there in {timeout:.0f} s; it shows:\n{page_text(driver)}")


def page_text(driver) -> str:
    """The main area's text, without the word joiners that keep URLs in it from becoming links."""
    return driver.find_element("css selector", "[data-testid='stMain']").text.replace(WORD_JOINER, "")


def sidebar_text(driver) -> str:
    """The sidebar's text (where the upload form and its progress are), without word joiners."""
    return driver.find_element("css selector", "[data-testid='stSidebar']").text.replace(WORD_JOINER, "")


def selected(driver, label: str) -> str | None:
    """What a select box shows as chosen (None while it is not drawn)."""
    boxes = driver.find_elements("css selector", f"input[aria-label='{label}']")
    return boxes[0].get_attribute("value") if boxes else None


def upload(driver, url: str, path: Path, checked: tuple[str, ...] = (), **fields: str) -> None:
    """Open the page, fill the upload form (``fields``: label -> text; ``checked``: the labels of boxes to tick) with
    ``path`` and submit it."""
    driver.get(url)
    click(driver, "xpath", "//summary[.//p[normalize-space()='Add your own documents']]")
    wait(driver, lambda d: d.find_elements("css selector", "[data-testid='stFileUploader'] input[type='file']"))[0].send_keys(str(path))
    # The file's chip is shown once the upload reached the server.
    wait(
        driver,
        lambda d: (
            d.find_elements("css selector", "[data-testid='stFileChipName']")
            and not d.find_elements("css selector", "[data-testid='stFileChipIconSpinner']")
        ),
    )
    for label, text in fields.items():
        usable(driver, "css selector", f"input[aria-label='{label}']").send_keys(text)
    for label in checked:
        click(driver, "xpath", f"//div[@data-testid='stCheckbox']//label[.//p[normalize-space()='{label}']]")
    click(driver, "xpath", "//button[.//p[normalize-space()='Index the file']]")


def _first_usable(driver, by: str, selector: str):
    return next((e for e in driver.find_elements(by, selector) if e.is_displayed() and e.is_enabled()), None)


def usable(driver, by: str, selector: str):
    """The first element matching ``selector`` once it is shown and enabled (an expander may still be opening)."""
    return wait(driver, lambda d: _first_usable(d, by, selector))


def click(driver, by: str, selector: str) -> None:
    """Click the first usable match of ``selector``; again while a Streamlit rerun replaces or covers it
    (found usable, then redrawn before the click lands: "element not interactable")."""
    from selenium.common.exceptions import ElementClickInterceptedException, ElementNotInteractableException

    def clicked(d) -> bool:
        try:
            usable_now = _first_usable(d, by, selector)
            if usable_now is None:
                return False
            usable_now.click()
            return True
        except (ElementClickInterceptedException, ElementNotInteractableException):
            return False

    wait(driver, clicked)


def ask_on_page(driver, question: str) -> None:
    """Type ``question`` in the page's form and press Ask, once both are drawn (a rerun may still be drawing them)."""
    usable(driver, "css selector", "input[aria-label='Question']").send_keys(question)
    click(driver, "xpath", "//button[.//p[normalize-space()='Ask']]")


@contextmanager
def upload_waiting(home: Path, file_name: str) -> Iterator[str]:
    """Holds the turn that ingestions into the collection an upload of ``file_name`` makes take (its lock under
    ``home``), so that such an upload waits, its progress bar on the page, until the block ends; yields the name."""
    from qa_system.config import Settings
    from qa_system.disk_cache import taking_turns
    from qa_system.ingestion.collections import collection_name_from, ingestion_lock

    collection = collection_name_from(file_name)
    with taking_turns(ingestion_lock(Settings(home=home, store="memory"), collection), "a test holds the turn", remove=True):
        yield collection
