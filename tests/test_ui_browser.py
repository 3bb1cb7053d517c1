"""The search page in a real browser: `streamlit run ui/app.py` on a free loopback port, driven by
headless Chromium (Debian's chromium + chromium-driver, never a downloaded browser)."""

import time

import pytest

from helpers.subjqa import write_subjqa
from qa_system.bench.browser import ANSWER_CARD, ask_in_browser, chromium_paths, headless_chromium
from qa_system.serving.webapp import serve

pytestmark = pytest.mark.browser


@pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)")
def test_a_question_asked_in_chromium_gets_a_highlighted_answer_card(tmp_path, tiny_reader):
    env = {"QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")), "QA_HOME": str(tmp_path / "home"), "QA_READER_MODEL": str(tiny_reader)}
    with serve(env, log=tmp_path / "streamlit.log") as url:
        driver = headless_chromium(tmp_path / "chromium-profile", 1280, 1100)
        try:
            card = ask_in_browser(driver, url, "How is the bass?", item="HEADPHONES")
            marked = card.find_element("css selector", "mark").text
            assert marked and marked in card.text and "HEADPHONES" in card.text  # a span of one of the product's reviews
            driver.save_screenshot(str(tmp_path / "search-page.png"))
        finally:
            driver.quit()
    assert (tmp_path / "search-page.png").stat().st_size > 10_000


@pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)")
def test_the_dashboard_and_back_keeps_the_settings_and_a_changed_setting_is_flagged(tmp_path, tiny_reader):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    env = {"QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")), "QA_HOME": str(tmp_path / "home"), "QA_READER_MODEL": str(tiny_reader)}
    env["QA_REPORTS_DIR"] = str(tmp_path / "reports")
    with serve(env, log=tmp_path / "streamlit.log") as url:
        driver = headless_chromium(tmp_path / "chromium-profile", 1280, 1100)
        wait = WebDriverWait(driver, 120)

        def option(label: str):
            return driver.find_element("xpath", f"//label[.//p[normalize-space()='{label}']]")

        def page_link(title: str):
            return driver.find_element("xpath", f"//a[.//span[normalize-space()='{title}']]")

        def alerts() -> list[str]:
            for _ in range(10):  # a rerun may replace an alert between finding it and reading it
                try:
                    return [a.text for a in driver.find_elements("css selector", "[data-testid='stAlert']")]
                except StaleElementReferenceException:
                    time.sleep(0.1)
            raise AssertionError("the alerts kept changing")

        try:
            ask_in_browser(driver, url, "How is the bass?", item="HEADPHONES")
            option("Dense (meaning)").click()
            wait.until(lambda d: alerts())  # the answer shown came from BM25: said, until asked again
            assert alerts() == ["info\nThe answers below come from other settings (retriever: BM25 (keywords)). Press Ask to update them."]
            driver.find_element("xpath", "//button[.//p[normalize-space()='Ask']]").click()
            wait.until(lambda d: not alerts())
            for page in ("Evaluation dashboard", "Ask a question"):
                page_link(page).click()
                wait.until(
                    lambda d: d.find_elements(
                        "css selector", ANSWER_CARD if page == "Ask a question" else "input[aria-label='Reports folder']"
                    )
                )
            assert option("Dense (meaning)").find_element("css selector", "input").is_selected()
            assert driver.find_element("css selector", "input[aria-label='Question']").get_attribute("value") == "How is the bass?"
            assert driver.current_url.endswith("/?item=HEADPHONES&q=How+is+the+bass%3F") and alerts() == []
            option("BM25 (keywords)").click()
            wait.until(lambda d: alerts())
            assert alerts() == ["info\nThe answers below come from other settings (retriever: Dense (meaning)). Press Ask to update them."]

            def folder_box():
                return driver.find_element("css selector", "input[aria-label='Reports folder']")

            page_link("Evaluation dashboard").click()  # the dashboard keeps its folder too, and links to it
            wait.until(lambda d: d.find_elements("css selector", "input[aria-label='Reports folder']"))
            folder_box().send_keys("retriever", Keys.ENTER)
            wait.until(lambda d: d.current_url.endswith("/dashboard?folder=retriever"))
            page_link("Ask a question").click()
            wait.until(lambda d: d.find_elements("css selector", ANSWER_CARD))
            assert driver.current_url.endswith("/?item=HEADPHONES&q=How+is+the+bass%3F")  # the search page's link only
            page_link("Evaluation dashboard").click()
            wait.until(lambda d: d.find_elements("css selector", "input[aria-label='Reports folder']"))
            assert folder_box().get_attribute("value") == "retriever" and driver.current_url.endswith("/dashboard?folder=retriever")
        finally:
            driver.quit()


@pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)")
def test_the_collection_stays_chosen_when_the_page_lists_its_collections_again(tmp_path, tiny_reader):
    """A first start: the page's own collection is listed before it is built, and listed again (its list
    is cached for 10 s) once built, now with its count of reviews. Streamlit names a select box's choice
    by the option's label, and the browser kept the first label: the run after the second listing read
    it as a collection of that name, warned that there was none and, when that run was the one pressing
    Ask, left the warning on screen (the dashboard-and-back test above waited for it to clear).
    Here the page is rerun until it has shown the new count twice: never a warning."""
    from helpers.page_driver import wait

    env = {"QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")), "QA_HOME": str(tmp_path / "home"), "QA_READER_MODEL": str(tiny_reader)}
    with serve(env, log=tmp_path / "streamlit.log") as url:
        driver = headless_chromium(tmp_path / "chromium-profile", 1280, 1100)
        try:
            driver.get(url)
            wait(driver, lambda d: d.find_elements("css selector", "input[aria-label='Question']"))  # built
            warnings, listed_again = [], 0
            for rerun in range(600):  # a bound, far above the ~10 s of reruns it takes
                label = ("Dense (meaning)", "BM25 (keywords)")[rerun % 2]
                driver.find_element("xpath", f"//label[.//p[normalize-space()='{label}']]").click()
                wait(
                    driver,
                    lambda d: (
                        d.find_element("xpath", f"//label[.//p[normalize-space()='{label}']]//input").is_selected()
                        and not d.find_elements("css selector", "[data-testid='stStatusWidget']")
                    ),
                )
                sidebar = driver.find_element("css selector", "[data-testid='stSidebar']").text
                warnings += [a.text for a in driver.find_elements("css selector", "[data-testid='stAlert']") if "no collection" in a.text]
                listed_again += "6 reviews" in sidebar
                if warnings or listed_again >= 2:
                    break
            assert warnings == [] and listed_again >= 2, (warnings, listed_again)
        finally:
            driver.quit()
