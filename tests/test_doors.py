"""One question through every door: the page (Streamlit's AppTest), `qa-system ask`, `ask --url` against a
real uvicorn server, `shell`, the API's /query and the Python API show the same cards: the same texts,
labels and notes (``answer_cards``). The tiny random reader answers through an answer selector trained
for it whose calibrations make every answer a close call, so that notes and headings show up."""

from __future__ import annotations

import io
from html import unescape
from pathlib import Path

import httpx
import pytest
from haystack import Document, ExtractedAnswer
from streamlit.testing.v1 import AppTest

from helpers.api import running, wait_ready
from helpers.selector import close_call_selector
from helpers.subjqa import SPLIT_ROWS, row, write_subjqa
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.ingestion import IngestOptions, ingest
from qa_system.serving.answer_views import AnswerCard, answer_cards, answer_views
from qa_system.serving.api import create_app
from qa_system.serving.api.schemas import AnswerOut
from qa_system.serving.question import Question
from qa_system.serving.service import QAService, ServedCollection
from qa_system.serving.webapp import APP

QUESTION = "Is the screen sharp?"
BATTERY = "How long does the battery last?"  # its reviews are of several products
# A review as SubjQA stores some: with HTML entities, which a card shows decoded.
ENTITY_REVIEW = "The &quot;Paperwhite&quot; screen is sharp &amp; bright&#8230; reading at night is easy &amp; fun &quot;really&quot;."


def corpus(root: Path) -> Path:
    entity = row("q10", QUESTION, "r-kindle-1", "The screen is sharp")
    span = "The &quot;Paperwhite&quot; screen is sharp"
    entity.update(
        review_id="r-kindle-4", review=f"{ENTITY_REVIEW} ANSWERNOTFOUND", human_ans_spans=span, human_ans_indices=f"(0, {len(span)})"
    )
    return write_subjqa(root / "subjqa", {**SPLIT_ROWS, "test": [*SPLIT_ROWS["test"], entity]})


@pytest.fixture(scope="module")
def doors(tmp_path_factory, tiny_reader):
    """The environment every door reads (one corpus, the tiny reader in PyTorch, the selector), and an API serving
    'shop' (a collection of your own, the default) and the SubjQA domain 'electronics'."""
    root = tmp_path_factory.mktemp("doors")
    env = {
        "QA_DATA_DIR": str(corpus(root)),
        "QA_HOME": str(root / "home"),
        "QA_READER_MODEL": str(tiny_reader),
        "QA_READER_BACKEND": "torch",
        "QA_SELECTOR_MODEL": str(close_call_selector(root / "selector", tiny_reader)),
        "QA_API_RATE_LIMIT": "0",
    }
    patch = pytest.MonkeyPatch()
    for name in ("QA_ES_URL", "QA_OPENSEARCH_URL", "QA_STORE", "QA_EMBEDDING_MODEL", "QA_QUERY_EMBEDDING_MODEL", "QA_API_TOKEN"):
        patch.delenv(name, raising=False)
    for name, value in env.items():
        patch.setenv(name, value)
    settings = Settings.from_env()
    shop = root / "shop.csv"
    shop.write_text(
        "review_id,product,body\ns1,LAMP,The lamp is bright enough for reading.\ns2,KETTLE,The kettle boils fast.\n", encoding="utf-8"
    )
    ingest(
        settings, shop, "shop", IngestOptions(text_column="body", id_column="review_id", item_column="product"), embed=False, progress=False
    )
    served = [ServedCollection("shop"), ServedCollection("electronics", subjqa_domain=True)]
    try:
        with running(create_app(settings, served)) as url:
            assert wait_ready(url).status_code == 200
            yield settings, url
    finally:
        patch.undo()


def query(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/query", json={"query": QUESTION, "collection": "electronics", **body}, timeout=120)


def printed(argv: list[str], capsys, stdin: str | None = None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def assert_printed(cards: list[dict], out: str, door: str) -> None:
    """Every card's line (heading, text, label) and note, as the CLI prints them."""
    for card in map(lambda c: AnswerCard(**c), cards):
        assert f"\n{card.line}" in out, f"{door}: {card.line!r} not in\n{out}"
        assert not card.note or f"\n   {card.note}\n" in out, f"{door}: {card.note!r} not in\n{out}"


def test_every_door_shows_the_same_cards_labels_and_notes(doors, capsys, monkeypatch):
    settings, url = doors
    response = query(url, item_id="KINDLE")
    assert response.status_code == 200, response.text
    cards = [answer["card"] for answer in response.json()["answers"]]
    # The selector says "no answer" (55%) over every answer (50%): a close call, said on the first card.
    assert (
        cards[0]["kind"] == "no_answer"
        and cards[0]["text"] == "No answer in these reviews"
        and cards[0]["label"] == "55% chance there is no answer here"
    )
    # The "no answer" card first: the answer it names is the best one below it. The two chances add up to a few points
    # past 100%, which is not said.
    assert cards[0]["note"] == (
        "A close call: the best answer below has a 50% chance of being right, and \u201cno answer\u201d a 55% chance. "
        "Read the review before you rely on it."
    )
    assert [c["label"][:3] for c in cards[:2]] == ["55%", "50%"]  # ordered by the chances they state
    assert (
        cards[1]["heading"] == "Best span, rated below \u201cno answer\u201d:"
        and cards[1]["label"] == "50% chance right"
        and cards[1]["product"] == "KINDLE"
    )
    assert all("&quot;" not in c["text"] and "&amp;" not in c["text"] and "&#" not in c["text"] for c in cards)

    python = QAService(settings).ask(Question(QUESTION, "KINDLE", top_k_reader=3))
    assert [c.as_dict() for c in answer_cards(answer_views(python["answers"]))] == cards

    flags = ["--item", "KINDLE"]
    assert_printed(cards, printed(["ask", QUESTION, *flags], capsys), "ask")
    assert_printed(cards, printed(["ask", QUESTION, *flags, "--url", url, "--domain", "electronics"], capsys), "ask --url")
    assert_printed(cards, printed(["shell", *flags], capsys, f"{QUESTION}\n:quit\n", monkeypatch), "shell")
    assert_printed(
        cards,
        printed(["shell", *flags, "--url", url, "--domain", "electronics"], capsys, f"{QUESTION}\n:quit\n", monkeypatch),
        "shell --url",
    )

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params.update(item="KINDLE", q=QUESTION)
    at.run()
    assert not at.exception and not at.error
    assert [c.as_dict() for c in answer_cards(at.session_state["asked"].answers)] == cards
    shown = [unescape(h.value) for h in at.html if 'class="qa-answer' in h.value]  # the folded ones too (in the expander)
    assert len(shown) == len(cards)
    for card, html in zip(cards, shown):
        assert card["text"] in html and card["label"] in html and card["note"] in html and card["heading"] in html


def test_a_card_shows_html_entities_decoded_and_its_offsets_point_into_the_stored_text():
    review = Document(id="d1", content=ENTITY_REVIEW, meta={"review_id": "r1", "item_id": "B1"})
    start, end = 4, ENTITY_REVIEW.index(" bright")
    answer = ExtractedAnswer(
        query="q", score=0.7, data=ENTITY_REVIEW[start:end], document=review, document_offset=ExtractedAnswer.Span(start, end)
    )
    views = answer_views([answer])
    [card] = answer_cards(views)
    assert card.text == '"Paperwhite" screen is sharp &' and card.line == '1. "Paperwhite" screen is sharp &  reader score 0.70'
    body = AnswerOut.of(views[0], card)
    assert body.text == ENTITY_REVIEW[body.start : body.end] and body.card.text == card.text  # the offsets: the stored text's
    from qa_system.cli.ask import highlight

    assert highlight(views[0].segments(), tty=False).startswith('The **"Paperwhite" screen is sharp &** bright… reading')


def test_a_snippet_is_cut_at_whole_words_by_the_cli_and_the_api():
    content = "Resolution on the screen is amazing. " * 4 + "It is great for reading books. " + "The sound is loud enough. " * 5
    review = Document(id="d1", content=content, meta={"review_id": "r1", "item_id": "B1"})
    start = content.index("It is great")
    end = start + len("It is great for reading books")
    answer = ExtractedAnswer(
        query="q", score=0.7, data=content[start:end], document=review, document_offset=ExtractedAnswer.Span(start, end)
    )
    [view] = answer_views([answer])
    from qa_system.cli.ask import highlight

    shown = highlight(view.segments(40), tty=False)
    assert shown.startswith("…") and shown.endswith("…") and "**It is great for reading books**" in shown
    words = set(content.replace(".", " ").split())
    assert all(word.strip(".") in words for word in shown.strip("…").replace("**", "").split())  # no word cut in two
    body = AnswerOut.of(view)
    begin, finish = body.context_start, body.context_start + len(body.context)
    assert body.context == content[begin:finish] and begin < start and finish > end
    assert content[begin - 1] == " " and content[finish] == " "  # the API's context: whole words too
    unspaced = "电池" * 5000 + "很好" + "屏幕" * 5000  # no word to keep whole: the context stays about 100 characters each side
    review = Document(id="d2", content=unspaced, meta={"review_id": "r2", "item_id": "B1"})
    start = unspaced.index("很好")
    answer = ExtractedAnswer(query="q", score=0.7, data="很好", document=review, document_offset=ExtractedAnswer.Span(start, start + 2))
    assert len(AnswerOut.of(answer_views([answer])[0]).context) <= 2 + 2 * 100


def test_every_door_asks_over_all_products_and_names_each_answers_product(doors, capsys, monkeypatch):
    settings, url = doors
    refused = query(url, query=BATTERY)
    assert refused.status_code == 422 and "all_products: true" in refused.json()["detail"]  # a forgotten item_id still says so
    both = query(url, query=BATTERY, item_id="KINDLE", all_products=True)
    assert both.status_code == 422 and "not both" in both.json()["detail"]
    body = query(url, query=BATTERY, all_products=True).json()
    spans = [a["card"] for a in body["answers"] if a["kind"] == "span"]
    assert body["item_id"] is None and spans and all(c["product"] for c in spans)
    assert len({d["meta"]["item_id"] for d in body["documents"]}) > 1  # read across products

    for argv, door in ((["ask", BATTERY], "ask"), (["ask", BATTERY, "--url", url, "--domain", "electronics"], "ask --url")):
        out = printed(argv, capsys)
        assert "(all products" in out.splitlines()[0]
        assert all(f"  {card['source']} ({card['product']})" in out for card in spans), door
    for argv in (["shell"], ["shell", "--url", url, "--domain", "electronics"]):
        out = printed(argv, capsys, f"{BATTERY}\n:quit\n", monkeypatch)
        assert "(all products" in out and "error" not in out and all(f"({card['product']})" in out for card in spans)
    answers = QAService(settings).ask(Question(BATTERY, None, all_products=True, top_k_reader=3))["answers"]
    assert [c.as_dict() for c in answer_cards(answer_views(answers))] == [a["card"] for a in body["answers"]]


def test_ask_url_asks_the_domain_it_names_and_the_servers_default_when_it_names_none(doors, capsys):
    _, url = doors
    named = printed(["ask", QUESTION, "--item", "KINDLE", "--url", url, "--domain", "electronics"], capsys)
    assert named.startswith("Q: Is the screen sharp?  (KINDLE in electronics;")
    default = printed(["ask", "Is it bright?", "--item", "LAMP", "--url", url], capsys)
    assert default.startswith("Q: Is it bright?  (LAMP in shop;")
    assert main(["ask", QUESTION, "--item", "KINDLE", "--url", url, "--domain", "electronics", "--domain", "restaurants"]) == 2
    assert "a server answers from one collection" in capsys.readouterr().err


def test_the_url_shell_checks_an_item_with_the_server_and_keeps_the_one_before_on_refusal(doors, capsys, monkeypatch):
    """`shell --url` took `:item nope` without a word, and every question after it failed until `:item` changed."""
    _, url = doors
    monkeypatch.setattr("qa_system.serving.client.PRODUCTS_PAGE", 1, raising=False)  # the product list read page by page
    lines = f":item NOPE\n{QUESTION}\n:item HEADPHONES\n{QUESTION}\n:quit\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert main(["shell", "--item", "KINDLE", "--url", url, "--domain", "electronics"]) == 0
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: Product 'NOPE' is not one of the ") and "collection 'electronics'" in errors[0]
    assert f"Fix: pick an item id that {url.rstrip('/')}/products?collection=electronics lists" in errors[0]  # not "GET /products"
    asked = [line for line in captured.out.splitlines() if line.startswith("Q: ")]
    assert [line.split(";")[0] for line in asked] == [
        f"Q: {QUESTION}  (KINDLE in electronics",
        f"Q: {QUESTION}  (HEADPHONES in electronics",
    ]
    # The server's default collection (a collection of your own) is checked too.
    monkeypatch.setattr("sys.stdin", io.StringIO(":item KINDLE\n:item LAMP\nIs it bright?\n:quit\n"))
    assert main(["shell", "--url", url]) == 0
    captured = capsys.readouterr()
    assert "error: Product 'KINDLE' is not one of the 2 products of collection 'shop'" in captured.err
    assert "Asking about LAMP." in captured.err and "Q: Is it bright?  (LAMP in shop;" in captured.out


def test_every_door_reads_the_configured_depths(doors, capsys, monkeypatch):
    # QA_TOP_K_RETRIEVER and QA_TOP_K_READER were read by the evaluations only: every door read 8 reviews and showed 3 answers
    settings, _ = doors
    monkeypatch.setenv("QA_TOP_K_RETRIEVER", "2")
    monkeypatch.setenv("QA_TOP_K_READER", "1")
    configured = Settings.from_env()

    def depths(documents, answers) -> tuple[int, int]:
        return len(documents), len([a for a in answers if a is not None])

    from qa_system import build_qa_pipeline, open_index

    result = build_qa_pipeline("bm25", configured, index=open_index(configured, "electronics")).run(QUESTION, item_id="KINDLE")
    assert depths(result["documents"], [a.data for a in result["answers"]]) == (2, 1)
    result = QAService(configured).ask(Question(QUESTION, "KINDLE"))
    assert depths(result["documents"], [a.data for a in result["answers"]]) == (2, 1)
    with running(create_app(configured, [ServedCollection("electronics", subjqa_domain=True)])) as url:
        assert wait_ready(url).status_code == 200
        body = query(url, item_id="KINDLE").json()
        assert depths(body["documents"], [a["text"] if a["kind"] == "span" else None for a in body["answers"]]) == (2, 1)
        assert query(url, item_id="KINDLE", top_k=3).json()["documents"][2]  # a request's own depth still wins
    assert printed(["search", QUESTION, "--item", "KINDLE"], capsys).startswith("2 review(s) for KINDLE")
    out = printed(["ask", QUESTION, "--item", "KINDLE"], capsys)
    assert out.count("chance right") == 1  # one span, after the "no answer" card

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception and (at.session_state["top_k"], at.session_state["top_k_reader"]) == (2, 1)
