"""The search page's metadata filter and the metadata on its cards, through Streamlit's AppTest, on a
collection of the user's own with a rating column (typed at ingestion)."""

from pathlib import Path

import pytest

from helpers.filters import OPTIONS, write_reviews
from helpers.ui import answer_cards, ask, cards_html, messages


@pytest.fixture(scope="module")
def rated_collection(app_env, tmp_path_factory) -> str:
    from qa_system.config import Settings
    from qa_system.ingestion import ingest

    source = write_reviews(tmp_path_factory.mktemp("rated") / "reviews.csv")
    settings = Settings.from_env(home=Path(app_env["QA_HOME"]), data_dir=Path(app_env["QA_DATA_DIR"]))
    ingest(settings, source, "rated", OPTIONS, embed=False, progress=False)
    return "rated"


def test_a_rating_filter_on_the_page_and_the_rating_on_its_cards(page, rated_collection):
    at = page(collection=rated_collection)
    at.sidebar.text_area(key="filter").input('{"field": "meta.overall", "operator": ">=", "value": 4}')
    at.sidebar.slider(key="top_k").set_value(10)
    ask(at, "How long does the battery last?", "P1")
    assert not at.exception and not at.error
    documents = at.session_state["asked"].documents
    assert documents and all(d.meta["overall"] >= 4 and d.meta["item_id"] == "P1" for d in documents)
    reviews = [h for h in cards_html(at) if 'class="qa-review"' in h and "qa-answer" not in h]
    assert len(reviews) == len(documents)
    for document, card in zip(documents, reviews):
        assert f"overall <b>{document.meta['overall']}</b>" in card and f"reviewTime <b>{document.meta['reviewTime']}</b>" in card
    spans = [c for c in answer_cards(at) if "qa-span" in c]
    assert spans and all("overall <b>" in card for card in spans)


def test_metadata_is_shown_as_text_and_a_bad_filter_is_a_message(page, rated_collection, app_env, tmp_path):
    from qa_system.config import Settings
    from qa_system.ingestion import IngestOptions, ingest

    source = tmp_path / "hostile.csv"
    source.write_text(
        'text,note\nThe kettle boils water fast.,"<img src=x onerror=alert(1)> **bold** [x](http://a.test)"\n', encoding="utf-8"
    )
    settings = Settings.from_env(home=Path(app_env["QA_HOME"]), data_dir=Path(app_env["QA_DATA_DIR"]))
    ingest(settings, source, "hostile-meta", IngestOptions(), embed=False, progress=False)
    at = ask(page(collection="hostile-meta"), "Does it boil water?")
    assert not at.exception and not at.error
    shown = " ".join(cards_html(at))
    assert "note <b>&lt;img src=x onerror=alert(1)&gt; **bold** [x](http://a.test)</b>" in shown and "<img" not in shown

    at = page(collection=rated_collection)
    at.sidebar.text_area(key="filter").input("rating >= 4")
    ask(at, "How long does the battery last?", "P1")
    assert not at.exception and "The filter is not JSON" in messages(at)
    at.sidebar.text_area(key="filter").input('{"field": "meta.zip", "operator": ">", "value": 3}')
    ask(at, "How long does the battery last?", "P1")
    assert "holds text there" in messages(at)


def test_a_filter_on_a_field_the_collection_lacks_is_a_message_naming_the_fields(page):
    at = page()  # the SubjQA collection: its reviews have no rating, whatever the filter box's example says
    at.sidebar.text_area(key="filter").input('{"field": "meta.rating", "operator": ">=", "value": 4}')
    ask(at, "How is the bass?", "HEADPHONES")
    assert not at.exception and at.session_state["asked"] is None  # no "no answer" over reviews it never read
    assert "The filter names 'meta.rating', a field no document of this collection has" in messages(at)
    assert "meta.item_id" in messages(at)
