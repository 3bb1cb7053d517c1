"""The search page in a real browser: `streamlit run ui/app.py` on a free loopback port, driven by
headless Chromium (Debian's chromium + chromium-driver, never a downloaded browser)."""

import pytest
from conftest import write_subjqa

from qa_system.serving.webapp import ask_in_browser, chromium_paths, headless_chromium, serve

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
