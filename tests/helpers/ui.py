"""Driving the search page through Streamlit's AppTest: asking, and reading its cards and messages."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from helpers.text import shown

TIMEOUT = 120


def button(at: AppTest, label: str, nth: int = 0):
    return [b for b in at.button if b.label == label][nth]


def ask(at: AppTest, question: str, product: str | None = None) -> AppTest:
    if product:
        at.selectbox(key="product").select(product)
    at.text_input(key="question").input(question)
    return button(at, "Ask").click().run()


def answer_cards(at: AppTest) -> list[str]:
    return [h.value for h in at.html if 'class="qa-answer' in h.value]


def cards_html(at: AppTest) -> list[str]:
    """Every card (answers, reviews, timings): escaped HTML shown with st.html, never Markdown."""
    return [h.value for h in at.html if 'class="qa-' in h.value]


def messages(at: AppTest) -> str:
    return " ".join(shown(e.value) for e in [*at.error, *at.warning])
