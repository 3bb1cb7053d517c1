"""Your own documents in the page: upload a CSV in a real browser, then ask about it.

One Streamlit server on a tiny SubjQA corpus (the page's own collection) with the shipped reader,
so that the answer to a plain question is a real span, highlighted inside the uploaded review.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from helpers.page_driver import ask_on_page, page_text, selected, sidebar_text, upload, upload_waiting, wait
from helpers.subjqa import write_subjqa
from qa_system.bench.browser import ANSWER_CARD, chromium_paths, headless_chromium
from qa_system.config import Settings
from qa_system.ingestion import list_collections
from qa_system.serving.webapp import serve

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium_paths() is None, reason="Chromium and chromedriver are not installed (.ci/run installs them with apt-get)"),
]
SHIPPED_READER = Path(__file__).resolve().parents[1] / "models" / "reader-minilm-subjqa"
# Column names of the shop's own, not the defaults: the page's form names them.
ROWS = [
    ("LAMP-1", "The screen is sharp and it is great for reading books in bed.", "5"),
    ("LAMP-1", "Battery lasts two days. The case feels cheap.", "3"),
    ("LAMP-1", "Shipping was slow but the seller answered quickly.", "4"),
    ("KETTLE-9", "It boils water fast and the handle stays cool.", "5"),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(page URL, tmp folder, settings of the server's QA_HOME)."""
    root = tmp_path_factory.mktemp("upload")
    env = {
        "QA_DATA_DIR": str(write_subjqa(root / "subjqa")),
        "QA_HOME": str(root / "home"),
        "QA_READER_MODEL": str(SHIPPED_READER),
        "QA_READER_BACKEND": "torch",
    }
    with serve(env, log=root / "streamlit.log") as url:
        yield url, root, Settings.from_env(home=root / "home", data_dir=root / "subjqa")


def test_a_file_that_is_not_a_table_is_refused_in_one_line(site, browser):
    url, root, settings = site
    broken = root / "broken.csv"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8)
    upload(browser, url, broken)
    # Read in the same look as found: a rerun may redraw the alert between two reads (its text then reads empty).
    message = wait(
        browser,
        lambda d: next(
            (
                m.text
                for m in d.find_elements("css selector", "[data-testid='stAlert'] [data-testid='stMarkdownContainer']")
                if "broken.csv" in m.text
            ),
            None,
        ),
    )
    assert len(message.strip().splitlines()) == 1 and "Fix:" in message  # one line naming the problem and the fix
    assert "broken" not in [info.name for info in list_collections(settings)]  # nothing was created


def test_an_uploaded_csv_is_indexed_and_answers_with_a_highlighted_span(site, browser):
    url, root, settings = site
    path = root / "Lamp Reviews.csv"
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["sku", "comment", "stars"])
        writer.writerows(ROWS)
    upload(browser, url, path, **{"Text column": "comment", "Product column": "sku"})
    wait(browser, lambda d: "Collection 'lamp-reviews'" in page_text(d) and "4 added" in page_text(d))
    infos = {info.name: info for info in list_collections(settings)}
    assert infos["lamp-reviews"].documents == 4 and infos["lamp-reviews"].encoder is not None
    assert "collection=lamp-reviews" in browser.current_url  # a reload or a link keeps the collection
    # The new collection is picked, all its documents asked (as `qa-system ask` without --item): ask about it.
    wait(
        browser,
        lambda d: (
            selected(d, "Collection") == "lamp-reviews"
            and "4 documents" in d.find_element("css selector", "[data-testid='stSidebar']").text
            and selected(d, "Product") == "All documents"
        ),
    )
    ask_on_page(browser, "Is it good for reading?")
    first = wait(browser, lambda d: d.find_elements("css selector", f"{ANSWER_CARD}.qa-span"))[0]
    # The first answer is a span of the review that says so, highlighted inside that review's text.
    assert first.find_element("css selector", ".qa-review").text == ROWS[0][1]
    assert first.find_element("css selector", "mark").text in ROWS[0][1]
    assert first.find_element("css selector", ".qa-source").text.startswith("from document ") and "LAMP-1" in first.text
    link = parse_qs(urlparse(browser.current_url).query)
    assert link["q"] == ["Is it good for reading?"] and link["item"] == ["*"]  # "All documents", linked


def test_a_windows_1252_file_says_which_encoding_to_pick_and_reads_once_picked(site, browser):
    url, root, settings = site
    path = root / "tickets.csv"  # Excel's "CSV" on Windows: Windows-1252, with its curly quotes
    path.write_bytes("product,text\nROUTER-7,\u201cReset\u201d holds the button for 10 s \u2013 caf\u00e9 Wi-Fi.\n".encode("cp1252"))
    upload(browser, url, path)  # the form's default encoding, UTF-8
    message = wait(
        browser,
        lambda d: next((m.text for m in d.find_elements("css selector", "[data-testid='stAlert']") if "tickets.csv" in m.text), None),
    )
    # It said "Fix: pass --encoding cp1252": a flag of the command line, on a page that has an Encoding picker.
    assert "is not UTF-8 text" in message and "Fix: choose Encoding cp1252 above" in message and "--encoding" not in message
    upload(browser, url, path, Encoding="cp1252\n")  # the fix, as said
    wait(browser, lambda d: "Collection 'tickets'" in page_text(d) and "1 added" in page_text(d))
    assert {info.name: info.documents for info in list_collections(settings)}["tickets"] == 1


def test_html_text_is_counted_and_with_the_box_ticked_indexed_as_its_text(site, browser):
    from helpers.ingestion import documents

    url, root, settings = site
    path = root / "pages.csv"
    path.write_text('id,product,text\np1,LAMP-1,"<p>The lamp is <b>bright</b> &amp; warm.</p>"\n', encoding="utf-8")
    upload(browser, url, path, **{"Id column": "id"})
    # The report names the form's box, not the command line's --html.
    wait(browser, lambda d: "Collection 'pages'" in page_text(d) and "1 text holds HTML tags" in page_text(d))
    assert "the box “Text is HTML”" in page_text(browser) and "--html" not in page_text(browser)
    upload(browser, url, path, checked=("Text is HTML",), **{"Id column": "id"})
    wait(browser, lambda d: "Collection 'pages'" in page_text(d) and "1 changed" in page_text(d))
    assert [d.content for d in documents(settings, "pages").values()] == ["The lamp is bright & warm."]


def test_leaving_the_page_during_an_upload_does_not_lose_it(site, tmp_path):
    """The upload is indexed by the server, not by the visitor's script: closing the browser while its
    upload waits for its turn (the test holds the collection's ingestion lock until the visitor has left) still
    leaves a complete collection, read and embedded after the visitor left."""
    url, root, settings = site
    path = root / "big shop.csv"
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["text", "item"])
        writer.writerows((f"Review {n}: the {n % 13}th lamp is bright, number {n}.", f"LAMP-{n % 40}") for n in range(3000))
    driver = headless_chromium(tmp_path / "profile", 1000, 800)
    with upload_waiting(root / "home", path.name):
        try:
            upload(driver, url, path, **{"Product column": "item"})
            wait(driver, lambda d: f"Reading {path.name}" in sidebar_text(d), timeout=60)
        finally:
            driver.quit()  # the visitor leaves while the upload waits
        assert "big-shop" not in {info.name for info in list_collections(settings)}
    deadline = time.monotonic() + 180
    while (info := {i.name: i for i in list_collections(settings)}.get("big-shop")) is None:
        assert time.monotonic() < deadline, "the upload stopped when its visitor left"
        time.sleep(0.5)
    assert info.documents == 3000 and info.encoder is not None
