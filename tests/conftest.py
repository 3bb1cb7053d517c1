"""Shared fixtures: a tiny SubjQA-shaped data directory the tests write themselves, and a real
search server for the OpenSearch tests (started once per session)."""

from __future__ import annotations

import csv
import os
import re
import string
from html import unescape
from pathlib import Path

import pytest

from qa_system.config import Settings
from qa_system.safe_text import WORD_JOINER

COLUMNS = [
    "item_id", "domain", "nn_mod", "nn_asp", "query_mod", "query_asp", "q_review_id", "q_reviews_id", "question",
    "question_subj_level", "ques_subj_score", "is_ques_subjective", "review_id", "review", "human_ans_spans",
    "human_ans_indices", "answer_subj_level", "ans_subj_score", "is_ans_subjective",
]

REVIEWS = {
    # review_id: (item_id, text)
    "r-kindle-1": ("KINDLE", "The screen is sharp and great for reading books at night. Battery lasts a week."),
    "r-kindle-2": ("KINDLE", "Shipping was slow and the box was damaged, but the seller refunded me quickly."),
    "r-kindle-3": ("KINDLE", "I don't like the speakers: the sound is tinny and quiet. Apps crash sometimes."),
    "r-phones-1": ("HEADPHONES", "These headphones have deep bass and a comfortable fit for long flights."),
    "r-phones-2": ("HEADPHONES", "The cord broke after two months. Customer service never answered my emails."),
    "r-mouse-1": ("MOUSE", "A precise wireless mouse; the scroll wheel feels solid and the battery lasts months."),
}


def review_text(review_id: str) -> str:
    return REVIEWS[review_id][1] + " ANSWERNOTFOUND"


def row(split_qid: str, question: str, review_id: str, span: str, start: int | None = None, subjective: bool = True) -> dict:
    item_id, _ = REVIEWS[review_id]
    text = review_text(review_id)
    if span == "ANSWERNOTFOUND":
        start = len(text) - len("ANSWERNOTFOUND")
    elif start is None:
        start = text.index(span)
    values = dict.fromkeys(COLUMNS, "")
    values.update(
        item_id=item_id, domain="electronics", q_review_id=split_qid, question=question,
        is_ques_subjective=str(subjective), review_id=review_id, review=text, human_ans_spans=span,
        human_ans_indices=f"({start}, {start + len(span)})",
    )
    return values


SPLIT_ROWS = {
    "train": [
        row("q1", "Is it good for reading?", "r-kindle-1", "great for reading books at night"),
        row("q1", "Is it good for reading?", "r-kindle-1", "The screen is sharp"),
        row("q2", "How is the bass?", "r-phones-1", "deep bass"),
        row("q3", "How is the delivery?", "r-kindle-2", "ANSWERNOTFOUND", subjective=False),
    ],
    "dev": [
        row("q4", "How is the sound?", "r-kindle-3", "the sound is tinny and quiet"),
        row("q5", "Is the cord durable?", "r-phones-2", "The cord broke after two months"),
    ],
    "test": [
        # PTB-tokenised span ("do n't") whose offset must be repaired against the raw review.
        row("q6", "Do you like the speakers?", "r-kindle-3", "I do n't like the speakers", start=0),
        row("q7", "How is the scroll wheel?", "r-mouse-1", "the scroll wheel feels solid", subjective=False),
        row("q7", "How is the scroll wheel?", "r-mouse-1", "ANSWERNOTFOUND", subjective=False),
        # Annotators dropped words from the middle: cannot be located, must be counted.
        row("q8", "How is the battery?", "r-mouse-1", "battery months", start=70),
        row("q9", "Is it comfortable?", "r-phones-1", "ANSWERNOTFOUND"),
    ],
}


def write_subjqa(root: Path, splits: dict[str, list[dict]] = SPLIT_ROWS, domain: str = "electronics") -> Path:
    folder = root / domain / "splits"
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        with (folder / f"{split}.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return root


def api_settings_for(root: Path, tiny_reader: Path, generator_url: str, **more) -> Settings:
    """Settings of a REST API under test: the tiny corpus and reader (PyTorch), the OpenAI stub at ``generator_url``
    as the generator, no rate limit; ``more`` settings beside them."""
    from helpers.openai_stub import MODEL

    return Settings.from_env(
        data_dir=write_subjqa(root / "subjqa"), home=root / "home", store="memory", reader_model=str(tiny_reader), reader_backend="torch",
        generator="openai", generator_base_url=generator_url, generator_model=MODEL, api_rate_limit=0, **more,
    )  # fmt: skip


def shown(markdown: str) -> str:
    """What a reader sees of a ``markdown_literal`` string: its escapes and word joiners removed."""
    return unescape(re.sub(rf"\\([{re.escape(string.punctuation)}])", r"\1", markdown)).replace(WORD_JOINER, "")


@pytest.fixture(autouse=True, scope="session")
def session_home(tmp_path_factory):
    """QA_HOME for the session: readers built without settings cache their ONNX exports there, never in ~/.cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("QA_HOME", str(tmp_path_factory.mktemp("qa-home")))
    # The encoder's int8 export is built once per home (about 10 s) and tests make a home each: they embed with
    # sentence-transformers unless they ask for the onnx backend (test_embedding.py checks it).
    patch.setenv("QA_EMBEDDING_BACKEND", "torch")
    yield
    patch.undo()


@pytest.fixture
def tiny_subjqa(tmp_path: Path) -> Path:
    return write_subjqa(tmp_path / "subjqa")


@pytest.fixture
def settings(tmp_path: Path, tiny_subjqa: Path) -> Settings:
    return Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="memory")


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    path = Settings().data_dir
    if not (path / "electronics" / "splits" / "test.csv").exists():
        pytest.skip(f"the real SubjQA files are not at {path} (they live in ../shared/data/subjqa)")
    return path


@pytest.fixture(scope="session")
def tiny_reader(tmp_path_factory) -> Path:
    """A tiny random extractive reader saved to disk (no download): its answers are noise, its offsets real."""
    from test_reading import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny-reader"))


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless Chromium for a module of page tests."""
    from qa_system.bench.browser import headless_chromium

    driver = headless_chromium(tmp_path_factory.mktemp("chromium-profile"), 1400, 1400)
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def opensearch_url(request) -> str:
    """A real search server for the `opensearch` tests, started once per session and stopped at its end.

    QA_OPENSEARCH_TEST_URL names a running server (e.g. OpenSearch with k-NN, for the dense tests);
    otherwise the bundled Elasticsearch 7.9.2 OSS of tests/helpers/search_server.py starts on a free
    127.0.0.1 port (fetched first when missing). The tests skip when it cannot run here, unless
    QA_REQUIRE_TEST_SERVER is set (CI), where that is a failure.
    """
    external = os.environ.get("QA_OPENSEARCH_TEST_URL")
    if external:
        yield external
        return
    from helpers import search_server

    try:
        server = search_server.start()
    except search_server.Unavailable as error:
        if os.environ.get("QA_REQUIRE_TEST_SERVER"):
            pytest.fail(f"no test search server ({error}); QA_REQUIRE_TEST_SERVER is set")
        pytest.skip(f"no test search server: {error} (bash scripts/test_search_server.sh fetches it)")
    request.config.stash[SEARCH_SERVER_START] = server.start_s
    try:
        yield server.url
    finally:
        server.stop()


SEARCH_SERVER_START = pytest.StashKey[float]()


def pytest_terminal_summary(terminalreporter, config):
    if SEARCH_SERVER_START in config.stash:
        terminalreporter.write_line(f"test search server (Elasticsearch 7.9.2 OSS) started in {config.stash[SEARCH_SERVER_START]:.1f} s")
