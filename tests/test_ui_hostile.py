"""Hostile input on the served pages, in a real browser: a shared link, reviews, labels
and report files that hold Markdown, HTML and Streamlit directives must be shown as text, and the
dashboard must read reports from its configured root only.

One Streamlit server for the module, on a tiny corpus whose only test-split question is hostile,
and a recorder: a loopback HTTP server standing in for the attacker, which must never be reached.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from helpers.page_driver import ask_on_page, click, page_text, sidebar_text, upload, upload_waiting, wait
from helpers.subjqa import COLUMNS, SPLIT_ROWS, write_subjqa
from qa_system.bench.browser import ANSWER_CARD, chromium_paths
from qa_system.config import REPO_ROOT
from qa_system.evaluation.report import write_report
from qa_system.safe_text import WORD_JOINER
from qa_system.serving.webapp import serve

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)"),
]
# 1x1 transparent PNG: what the attacker's server answers, so that a fetched image would load.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


class Recorder(ThreadingHTTPServer):
    """The attacker's server on a free loopback port: records every request it gets."""

    def __init__(self):
        self.requests: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                recorder.requests.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.end_headers()
                self.wfile.write(PNG)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def hostile_text(origin: str) -> str:
    """Markdown, HTML and Streamlit directives; a blank line first, which ends an HTML block in Markdown."""
    return (
        f'Great for reading. ![p]({origin}/p.png)\n\n# HEADING\n\n**bold** :red[red] <img src="{origin}/img.png"> '
        f"[link]({origin}/phish) {origin}/auto"
    )


def hostile_rows(origin: str) -> list[dict]:
    review = hostile_text(origin) + " ANSWERNOTFOUND"
    rows = []
    for span in (f"![p]({origin}/p.png)", f"[link]({origin}/phish)"):  # two annotators, both hostile
        values = dict.fromkeys(COLUMNS, "")
        start = review.index(span)
        values.update(
            item_id="HOSTILE",
            domain="electronics",
            q_review_id="q-hostile",
            question="Is it good for reading?",
            is_ques_subjective="True",
            review_id="r-hostile",
            review=review,
            human_ans_spans=span,
            human_ans_indices=f"({start}, {start + len(span)})",
        )
        rows.append(values)
    return rows


def write_hostile_report(directory: Path, origin: str, outside_png: Path) -> None:
    """A report in the reports root whose title, notes, cells and report.md images are hostile."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.plot([1, 2], [1, 2])
    # A cell of one unbroken 600-character word: the table is wider than any page.
    wide = {"group": "all", f"![c]({origin}/cell.png)": 0.5, "retriever": f"**bm25** [x]({origin}/cell-link)", "model": "m" * 600}
    metrics = pd.DataFrame([wide])
    write_report(
        directory,
        f"Report ![t]({origin}/title.png) **T** :red[r]",
        metrics,
        summary={"split": f"![s]({origin}/summary.png)"},
        figures={"plot.png": figure},
        notes=[f"note ![x](/etc/hostname) ![r]({origin}/note.png) [n]({origin}/note-link)"],
    )
    markdown = directory / "report.md"
    # Image references outside the report: an absolute path, a relative escape, a symlink inside it.
    (directory / "escape.png").symlink_to(outside_png)
    references = [f"![x]({outside_png})", f"![y](../../outside/{outside_png.name})", "![z](escape.png)", "![h](/etc/hostname)"]
    markdown.write_text(markdown.read_text(encoding="utf-8") + "\n" + "\n".join(references) + "\n", encoding="utf-8")


def write_broken_report(directory: Path) -> None:
    """A report whose figures are not images: a text file named .png, a decompression bomb, its CSV."""
    from helpers.reports import png, write

    write(directory, "Broken figures")
    (directory / "fake.png").write_text("not an image at all")
    (directory / "bomb.png").write_bytes(png(20_000, 20_000))
    with (directory / "report.md").open("a", encoding="utf-8") as markdown:
        markdown.write("![x](report.csv)\n")
    os.utime(directory / "report.json", (1, 1))  # the oldest: the dashboard shows the hostile report first


@pytest.fixture(scope="module")
def recorder():
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def long_reader(tmp_path_factory) -> Path:
    """The tiny random reader with room for a whole window: the hostile review is long in (character) tokens."""
    from helpers.models import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("long-reader"), max_positions=512)


@pytest.fixture(scope="module")
def site(tmp_path_factory, long_reader, recorder):
    """(page URL, tmp folder): the page on the hostile corpus, with a reports root holding a hostile report."""
    root = tmp_path_factory.mktemp("hostile")
    data = write_subjqa(root / "subjqa", {"train": SPLIT_ROWS["train"], "dev": SPLIT_ROWS["dev"], "test": hostile_rows(recorder.origin)})
    outside = root / "outside"  # beside the reports root: another user's reports, a private image
    outside.mkdir()
    secret = outside / "secret.png"
    secret.write_bytes(PNG)
    write_report(outside / "other-user", "Other user's report", pd.DataFrame([{"group": "all", "x": 1}]), summary={})
    write_hostile_report(root / "reports" / "hostile", recorder.origin, secret)
    write_broken_report(root / "reports" / "broken")
    env = {
        "QA_DATA_DIR": str(data),
        "QA_HOME": str(root / "home"),
        "QA_READER_MODEL": str(long_reader),
        "QA_REPORTS_DIR": str(root / "reports"),
    }
    with serve(env, log=root / "streamlit.log") as url:
        yield url, root


def idle(driver) -> None:
    """Waits until Streamlit has finished its run, then a moment for images to be requested."""
    time.sleep(0.5)
    wait(driver, lambda d: not d.find_elements("css selector", "[data-testid='stStatusWidget']"))
    time.sleep(1.0)


def assert_nothing_interpreted(driver, recorder: Recorder) -> None:
    """No request reached the attacker; no link, image, heading or bold made of the hostile text."""
    port = recorder.server_address[1]
    assert recorder.requests == []
    assert driver.find_elements("css selector", f"a[href*=':{port}'], img[src*=':{port}']") == []
    assert not [h.text for h in driver.find_elements("css selector", "h1, h2, h3, h4, h5, h6") if "HEADING" in h.text]
    assert not [b.text for b in driver.find_elements("css selector", "strong, b") if b.text in ("bold", "T", "bm25")]


def test_a_shared_link_shows_its_hostile_product_as_text(site, browser, recorder):
    url, _ = site
    item = f"X'. [Your session expired: click here]({recorder.origin}/phish) ![p]({recorder.origin}/p.png)"
    browser.get(f"{url}/?{urllib.parse.urlencode({'item': item, 'q': 'hi'})}")
    alert = wait(
        browser, lambda d: [a for a in d.find_elements("css selector", "[data-testid='stAlert']") if "There is no product" in a.text]
    )
    idle(browser)
    assert item in alert[0].text.replace(WORD_JOINER, "")  # the product id exactly as linked, as text
    assert_nothing_interpreted(browser, recorder)


def test_hostile_reviews_and_labels_are_shown_as_text(site, browser, recorder):
    url, _ = site
    browser.get(url)
    wait(browser, lambda d: d.find_elements("xpath", "//label[.//p[normalize-space()='Evaluation mode']]"))[0].click()
    wait(browser, lambda d: d.find_elements("xpath", "//button[.//p[normalize-space()='Random labelled question']]"))[0].click()
    wait(browser, lambda d: d.find_elements("css selector", ANSWER_CARD) and "Annotators' answer" in page_text(d))
    browser.find_element("xpath", "//summary[.//p[contains(., 'Retrieved reviews')]]").click()
    idle(browser)
    text = page_text(browser)
    for literal in (
        "# HEADING",
        "**bold** :red[red]",
        f'<img src="{recorder.origin}/img.png">',
        f"[link]({recorder.origin}/phish)",
        f"![p]({recorder.origin}/p.png)",
    ):
        assert text.count(literal) >= 2, literal  # the annotators' review and the retrieved one, each in full
    assert f"“[link]({recorder.origin}/phish)”" in text and f"“![p]({recorder.origin}/p.png)”" in text  # the annotators' answers
    assert_nothing_interpreted(browser, recorder)


def type_folder(driver, folder: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = wait(driver, lambda d: d.find_elements("css selector", "input[aria-label='Reports folder']"))[0]
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE, folder, Keys.ENTER)
    idle(driver)


def test_the_dashboard_lists_only_the_reports_root(site, browser, recorder):
    url, root = site
    browser.get(f"{url}/dashboard")
    for folder in (str(root / "outside"), "../outside", "/", "hostile/../.."):
        type_folder(browser, folder)
        text = page_text(browser)
        assert "outside the reports folder" in text, folder  # refused with a message
        assert "Other user's report" not in text and not browser.find_elements("css selector", "[data-testid='stSelectbox']")


def test_hostile_reports_are_shown_as_text_and_serve_only_their_own_plots(site, browser, recorder):
    url, _ = site
    browser.get(f"{url}/dashboard")
    type_folder(browser, "")
    wait(browser, lambda d: d.find_elements("css selector", "[data-testid='stImage'] img"))
    idle(browser)
    text = page_text(browser)
    assert f"Report ![t]({recorder.origin}/title.png) **T** :red[r]" in text
    assert f"note ![x](/etc/hostname) ![r]({recorder.origin}/note.png) [n]({recorder.origin}/note-link)" in text
    assert f"![c]({recorder.origin}/cell.png)" in text and f"**bm25** [x]({recorder.origin}/cell-link)" in text
    assert_nothing_interpreted(browser, recorder)
    images = browser.find_elements("css selector", "[data-testid='stMain'] img")
    assert len(images) == 1 and "/media/" in images[0].get_attribute("src")  # plot.png only: no outside file is served
    # The wide table scrolls inside its own box; the main column does not scroll sideways.
    widths = browser.execute_script(
        "const t = document.querySelector('[data-testid=stMain] table');"
        "const main = document.querySelector('[data-testid=stMain]');"
        "return [t.clientWidth, t.scrollWidth, main.clientWidth, main.scrollWidth];"
    )
    assert widths[1] > widths[0] and widths[3] <= widths[2], widths


def test_a_hostile_dashboard_link_is_refused_as_text(site, browser, recorder):
    url, _ = site
    folder = f"../[Your session expired: click here]({recorder.origin}/phish) ![p]({recorder.origin}/p.png) # HEADING"
    report = f"hostile/../../![r]({recorder.origin}/report.png)"
    browser.get(f"{url}/dashboard?{urllib.parse.urlencode({'folder': folder, 'report': report})}")
    alert = wait(
        browser, lambda d: [a for a in d.find_elements("css selector", "[data-testid='stAlert']") if "outside the reports folder" in a.text]
    )
    idle(browser)
    assert not browser.find_elements("css selector", "[data-testid='stSelectbox']")  # nothing listed from a linked folder outside the root
    assert f"[Your session expired: click here]({recorder.origin}/phish)" in alert[0].text.replace(WORD_JOINER, "")  # quoted, as text
    assert_nothing_interpreted(browser, recorder)


def test_a_hostile_upload_is_shown_as_text(site, browser, recorder, tmp_path):
    """A file whose name, product ids and texts hold Markdown and HTML: uploaded, asked about, all shown as text."""
    url, _ = site
    item = f"EVIL [Your session expired]({recorder.origin}/phish)"
    path = tmp_path / "evil [link](javascript:alert(1)) **bold** <img src=x onerror=alert(1)>.csv"
    pd.DataFrame(
        [{"product": item, "text": hostile_text(recorder.origin)}, {"product": item, "text": "Great for reading at night."}]
    ).to_csv(path, index=False)
    upload(browser, url, path, **{"Product column": "product"})
    wait(browser, lambda d: "2 added" in page_text(d))
    assert path.name in page_text(browser)  # the file's name in the report, as text
    ask_on_page(browser, "Is it good for reading?")
    wait(browser, lambda d: d.find_elements("css selector", ANSWER_CARD))
    click(browser, "xpath", "//summary[.//p[contains(., 'Retrieved documents')]]")  # an upload holds documents
    idle(browser)
    text = page_text(browser)
    assert "# HEADING" in text and f'<img src="{recorder.origin}/img.png">' in text and item in text
    assert_nothing_interpreted(browser, recorder)


def test_the_notice_that_a_hostile_folder_changed_is_text(site, browser, recorder, tmp_path):
    """The page's warning that a collection's files changed names their folder and the command to run: as text."""
    from qa_system.config import Settings
    from qa_system.ingestion import ingest

    url, root = site
    folder = tmp_path / "evil **bold** # HEADING :red[red] <img src=x onerror=alert(1)> [link](javascript:alert(1)) `code`"
    folder.mkdir()
    (folder / "kettle.txt").write_text("The kettle boils a litre in three minutes.", encoding="utf-8")
    ingest(Settings.from_env(home=root / "home", store="memory"), folder, "changed-later", embed=False, progress=False)
    (folder / "lamp.txt").write_text("The lamp is warm.", encoding="utf-8")  # a file added since
    browser.get(f"{url}/?collection=changed-later")
    alert = wait(
        browser, lambda d: [a for a in d.find_elements("css selector", "[data-testid='stAlert']") if "answered as last indexed" in a.text]
    )
    idle(browser)
    text = alert[0].text.replace(WORD_JOINER, "")
    assert f"files of {folder} were added, removed or edited since (2 files now, 1 then)" in text  # the folder's name as text
    assert "qa-system index --input" in text
    assert alert[0].find_elements("css selector", "img, a, strong, code, h1") == []
    assert_nothing_interpreted(browser, recorder)


def test_a_hostile_file_name_in_the_upload_progress_is_text(site, browser, recorder, tmp_path):
    """The progress bar names the file while the upload waits for its turn (the test holds the collection's
    ingestion lock until it has read the bar): a name holding Markdown and HTML is shown as it is, nothing interpreted."""
    url, root = site
    path = tmp_path / "slow [link](javascript:alert(1)) **bold** <b>B # HEADING.csv"
    pd.DataFrame([{"text": f"Review {n}: the lamp number {n} is bright."} for n in range(300)]).to_csv(path, index=False)

    with upload_waiting(root / "home", path.name):
        upload(browser, url, path)
        wait(browser, lambda d: f"Reading {path.name}" in sidebar_text(d), timeout=60)
        assert_nothing_interpreted(browser, recorder)
        assert browser.find_elements("css selector", "[data-testid='stSidebar'] a[href^='javascript']") == []
        assert not [
            b.text
            for b in browser.find_elements("css selector", "[data-testid='stSidebar'] strong, [data-testid='stSidebar'] b")
            if b.text.startswith(("bold", "B"))
        ]
    wait(browser, lambda d: "300 added" in page_text(d), timeout=240)  # done before the next test


def assert_no_traceback(driver) -> None:
    """No exception element, and no trace of one (a stack, the server's code paths) in the page's text."""
    text = driver.find_element("css selector", "body").text
    assert not driver.find_elements("css selector", "[data-testid='stException']")
    assert not [clue for clue in ("Traceback", "site-packages", str(REPO_ROOT), 'File "') if clue in text], text


@pytest.mark.parametrize(
    "query, message",
    [
        ("folder=" + "a" * 300, "is not a folder name this system accepts (File name too long)"),
        ("folder=a%00b", "is not a folder name this system accepts (embedded null byte)"),
        ("folder=" + "x/" * 2 + "y" * 10_000, "is not a folder name this system accepts (File name too long)"),
        ("folder=%ED%A0%80&report=%ED%A0%80", "No reports under"),  # a lone surrogate arrives as U+FFFD: a folder that does not exist
    ],
    ids=["300-characters", "NUL", "10000-characters", "surrogate"],
)
def test_a_dashboard_link_the_system_refuses_is_a_message_not_a_traceback(site, browser, query, message):
    url, _ = site
    browser.get(f"{url}/dashboard?{query}")
    wait(browser, lambda d: [a for a in d.find_elements("css selector", "[data-testid='stAlert']") if message in a.text])
    idle(browser)
    assert_no_traceback(browser)


def test_figures_that_are_not_images_are_messages_and_the_rest_of_the_report_is_shown(site, browser):
    url, _ = site
    browser.get(f"{url}/dashboard?folder=broken")
    wait(browser, lambda d: "All metrics" in page_text(d))
    idle(browser)
    assert_no_traceback(browser)
    alerts = [a.text for a in browser.find_elements("css selector", "[data-testid='stAlert']")]
    for name, problem in (("report.csv", "not an image"), ("fake.png", "not an image"), ("bomb.png", "too large")):
        assert [a for a in alerts if f"The figure {name} is {problem}" in a], (name, alerts)
    assert len(browser.find_elements("css selector", "[data-testid='stMain'] img")) == 1  # the real plot
    assert "Latency" in page_text(browser)  # the last section, after the figures


def test_what_a_chance_was_calibrated_on_is_text_in_its_tooltip(browser, recorder, long_reader, tmp_path):
    """A card's chance names the labels file it was recalibrated on (``qa-system fit-confidence``): a hostile file name is
    shown as text in the tooltip, never run or rendered."""
    from selenium.common.exceptions import NoAlertPresentException

    from helpers.confidence import labels_csv, notes_collection, own_answering_env
    from qa_system.config import Settings
    from qa_system.ingestion import open_collection
    from qa_system.ingestion.labels import load_labels
    from qa_system.tuning.confidence import fit_confidence

    env = own_answering_env(tmp_path, long_reader)
    settings = Settings(
        home=env["QA_HOME"], data_dir=env["QA_DATA_DIR"], reader_model=env["QA_READER_MODEL"], reader_backend="torch",
        selector_model=env["QA_SELECTOR_MODEL"], store="memory",
    )  # fmt: skip
    notes_collection(settings, tmp_path)
    name = 'evil" onmouseover="alert(1)" <img src=x onerror=alert(1)> **bold** [link](javascript:alert(1)) # HEADING.csv'
    labels = load_labels(labels_csv(tmp_path / name), settings, "notes")
    fit_confidence(settings, open_collection(settings, "notes"), labels)
    with serve(env, log=tmp_path / "streamlit.log") as url:
        browser.get(f"{url}/?{urllib.parse.urlencode({'collection': 'notes', 'item': 'LAMP', 'q': 'Is it bright enough for reading?'})}")
        cards = wait(browser, lambda d: d.find_elements("css selector", ANSWER_CARD))
        idle(browser)
        chips = [c for c in cards[0].find_elements("css selector", ".qa-chip") if "chance there is no answer here" in c.text]
        assert chips, cards[0].text
        assert f"calibrated on 24 labelled questions of 'notes' ({name})" in chips[0].get_attribute("title")
        assert browser.find_elements("css selector", f"{ANSWER_CARD} img, {ANSWER_CARD} a, {ANSWER_CARD} strong, {ANSWER_CARD} h1") == []
        with pytest.raises(NoAlertPresentException):  # the onerror= never ran
            _ = browser.switch_to.alert.text
        assert_nothing_interpreted(browser, recorder)
