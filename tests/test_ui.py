"""The Streamlit search page through Streamlit's AppTest, on the tiny corpus and a tiny random reader.

The reader's answers are noise, but their offsets are real: the tests check that cards highlight
exactly the reader's span, that every setting reaches the pipeline, that feedback lands in SQLite
and exports, and that bad input is a message on a page that keeps working.
"""

import sqlite3
from dataclasses import replace
from html import escape, unescape
from pathlib import Path

import pytest
from haystack import GeneratedAnswer
from streamlit.testing.v1 import AppTest

import qa_system.serving.pipeline_cache as service_module  # the page's pipelines are the service's: a RAG generator stands in there
from helpers.text import shown
from helpers.ui import TIMEOUT, answer_cards, ask, button, cards_html, messages
from qa_system.cli import main as cli
from qa_system.config import TOP_K_RETRIEVER
from qa_system.pipelines import ANSWER_STAGES
from qa_system.serving.answer_views import rank_answers
from qa_system.serving.webapp import APP
from qa_system.sources.squad import read_squad


def test_ask_shows_answer_cards_highlighted_at_the_readers_offsets(page, app_env):
    at = page()
    assert not at.exception
    assert (Path(app_env["QA_HOME"]) / "indexes" / "memory" / "subjqa-electronics.json").is_file()  # built and saved on first start
    products = at.selectbox(key="product").options
    assert products[:2] == ["All documents", "KINDLE"]  # then the most reviewed first (3 reviews: r-kindle-3, in dev and test, once)
    ask(at, "How is the bass?", "HEADPHONES")
    assert (
        at.sidebar.caption[0].value == "6 reviews · BM25 only"
    )  # the collection's size beside its picker; embedded when a dense question needs it
    assert not at.exception and not at.error
    spans = [v for v in at.session_state["asked"].answers if v.kind == "span"]
    cards = answer_cards(at)
    assert spans and len([c for c in cards if "qa-span" in c]) == len(spans)
    for view, card in zip(spans, [c for c in cards if "qa-span" in c]):
        content = view.document.content
        assert f"<mark>{escape(content[view.start : view.end])}</mark>" in card
        before = unescape(card.split("<mark>")[0].rsplit('<div class="qa-review">', 1)[1]).lstrip("…")
        assert content[: view.start].endswith(before)  # the mark sits at the reader's offset, not at a text match
        assert f"reader score {view.score_text}</span>" in card and view.document.meta["item_id"] == "HEADPHONES"
        assert "confident" not in card and "not a calibrated chance that the answer is right" in card  # a score, explained on hover
    timings = " ".join(h for h in cards_html(at) if "qa-timings" in h)
    assert "Answered in" in timings and "onnx int8" in timings and not at.warning  # the fast reader, exported on first use
    assert any((Path(app_env["QA_HOME"]) / "models" / "reader-onnx").glob("*/model-int8.onnx"))
    # HEADPHONES has 2 reviews; r-phones-1, in train and test, is shown once and takes one top-k slot.
    assert sorted(d.meta["review_id"] for d in at.session_state["asked"].documents) == ["r-phones-1", "r-phones-2"]
    assert any(e.label.startswith("Retrieved reviews (2)") for e in at.expander)
    assert at.query_params["item"] == "HEADPHONES" and at.query_params["q"] == "How is the bass?"  # a link to this answer


def test_switching_retriever_and_pipeline(page, monkeypatch):
    at = page()
    assert at.radio(key="retriever").options == ["BM25 (keywords)", "Dense (meaning)", "Hybrid (both)"]
    at.radio(key="retriever").set_value("dense")
    ask(at, "Is the cord durable?", "HEADPHONES")
    assert not at.error and at.session_state["asked"].pipeline.startswith("dense + extractive")
    at.radio(key="retriever").set_value("hybrid").run()
    button(at, "Ask").click().run()
    retrieved = [h for h in cards_html(at) if "#1 · score" in h]
    assert "BM25 " in retrieved[0] and "dense " in retrieved[0]  # the fused rankings' own scores are shown
    at.slider(key="top_k").set_value(1)
    at.slider(key="top_k_reader").set_value(1)
    button(at, "Ask").click().run()
    assert len(at.session_state["asked"].documents) == 1 and len([v for v in at.session_state["asked"].answers if v.kind == "span"]) == 1

    assert "rag" in ANSWER_STAGES  # the page offers the generative stage too
    real_build = service_module.build_qa_pipeline

    class CitingGenerator:  # stands in for the LLM: a generated answer citing the first review
        def __init__(self, retrieval):
            self.retrieval = retrieval

        def run(self, question, **kwargs):
            output = self.retrieval.run(question, **kwargs)
            given = [replace(d, meta={**d.meta, "source_index": i, "referenced": i == 1}) for i, d in enumerate(output["documents"], 1)]
            answer = GeneratedAnswer(
                data="The cord breaks [1].", query=question, documents=given, meta={"cited_document_ids": [given[0].id]}
            )
            return {**output, "answers": [answer]}

    def build(retriever, settings, index=None, answer_stage="extractive", **options):
        if answer_stage == "rag":
            return CitingGenerator(real_build(retriever, settings, index=index, answer_stage=None, **options))
        return real_build(retriever, settings, index=index, answer_stage=answer_stage, **options)

    monkeypatch.setattr(service_module, "build_qa_pipeline", build)
    at.radio(key="stage").set_value("rag").run()
    assert not [s for s in at.slider if s.key == "top_k_reader"]  # reader settings leave with the reader
    button(at, "Ask").click().run()
    card = answer_cards(at)[0]
    assert "The cord breaks [1]." in card and "qa-generated" in card and "cites:" in card


def test_random_labelled_question_shows_the_gold_answer(page):
    at = page()
    at.toggle(key="evaluation").set_value(True).run()
    at.selectbox(key="split").select("dev").run()
    button(at, "Random labelled question").click().run()
    assert not at.exception and not at.error
    gold = at.session_state["gold"]
    assert gold.split == "dev" and at.text_input(key="question").value == gold.question
    assert at.selectbox(key="product").value == gold.item_id
    assert any("Annotators' answer" in m.value for m in at.markdown)
    assert all("dev" in d.meta["split"] for d in at.session_state["asked"].documents)  # asked as the evaluation does
    assert all("EM " in card and "F1 " in card for card in answer_cards(at))
    assert any("labelled review" in h for h in cards_html(at)) or any("was not retrieved" in c.value for c in at.caption)


def vote(at: AppTest, rank: int, *verdicts: str) -> AppTest:
    """Clicks on an answer's feedback buttons: the click log its component sends (see ui/votes.py)."""
    key = f"feedback-{at.session_state['asked'].run}-{rank}"
    logged = at.session_state[key]["clicks"] if key in at.session_state else []
    at.session_state[key] = {"clicks": [*logged, *verdicts]}
    return at.run()


def test_a_click_that_cannot_be_stored_is_said_in_its_card_and_not_acknowledged(page, monkeypatch):
    from qa_system.errors import QAError
    from qa_system.serving.feedback import FeedbackStore

    def refuse(self, feedback):
        raise QAError("The feedback database is read-only.", "point QA_FEEDBACK_DB at a writable file.")

    at = page()
    ask(at, "How is the bass?", "HEADPHONES")
    monkeypatch.setattr(FeedbackStore, "record_click", refuse)
    vote(at, 1, "correct")
    # Shown as text: the message's Markdown characters are escaped.
    assert not at.exception and any("The feedback database is read-only" in w.value.replace("\\", "") for w in at.warning)
    assert not [c.value for c in at.caption if c.value.startswith("Saved")]  # nothing acknowledged that was not stored


def test_feedback_is_stored_in_sqlite_and_exported_as_squad(page, app_env):
    at = page()
    ask(at, "How is the bass?", "HEADPHONES")
    views = at.session_state["asked"].answers
    vote(at, 1, "correct")
    vote(at, 2, "wrong_span")
    assert [c.value for c in at.caption if c.value.startswith("Saved")] == ["Saved: right answer.", "Saved: right review, wrong answer."]
    vote(at, 2, "correct", "wrong").run()  # two clicks in one rerun, and a rerun repeating them: two rows
    assert "Saved 3 clicks, the last: wrong answer." in [c.value for c in at.caption]
    with sqlite3.connect(f"{app_env['QA_HOME']}/feedback.sqlite") as connection:
        rows = connection.execute(
            'SELECT question, answer, document_id, start, "end", verdict, created FROM feedback ORDER BY id'
        ).fetchall()
    spans = [v for v in views if v.kind == "span"]
    first = spans[0]
    assert rows[0][:6] == ("How is the bass?", first.text, first.document.id, first.start, first.end, "correct") and rows[0][6]
    assert [row[5] for row in rows] == ["correct", "wrong_span", "correct", "wrong"]

    # A confirmed "no answer" becomes an impossible question for the closest review.
    at.toggle(key="tuned_threshold").set_value(False).run()
    at.slider(key="threshold").set_value(10.0)
    ask(at, "Is it waterproof?", "MOUSE")
    assert "No answer in these reviews" in answer_cards(at)[0]
    assert any("Closest reviews" in m.value for m in at.markdown)
    vote(at, 0, "correct")

    button(at, "Export as SQuAD v2").click().run()
    assert not at.exception and at.success and "labelled questions" in at.success[0].value
    examples, _ = read_squad(f"{app_env['QA_HOME']}/feedback/feedback-squad.json")
    by_question = {e.question: e for e in examples}
    assert by_question["How is the bass?"].answers == [(first.text, first.start)]
    assert by_question["Is it waterproof?"].is_impossible
    assert any("qa-system train-reader --train-file" in c.value for c in at.code)


def test_a_no_answer_shows_the_best_span_and_both_scores(page):
    at = page()
    at.toggle(key="tuned_threshold").set_value(False).run()
    at.slider(key="threshold").set_value(10.0)  # every span falls below "no answer"
    ask(at, "Is it good for reading?", "KINDLE")
    ranked = rank_answers(at.session_state["asked"].answers)
    best = ranked.best_below
    assert ranked.abstains and best is not None and ranked.below
    folded = [h.value for e in at.expander for h in e.html if 'class="qa-answer' in h.value]
    shown = [card for card in answer_cards(at) if card not in folded]
    verdict, first = shown[:2]  # the verdict, then the best span beside it: not folded away
    assert "No answer in these reviews" in verdict and f"no-answer score {ranked.no_answer.score_text}</span>" in verdict
    assert "not a calibrated chance that the reviews hold no answer" in verdict  # the chip's tooltip
    assert f"best span scores {best.score_text}" in verdict and "confident" not in verdict  # scores, named as such
    assert "Best span, rated below “no answer”:" in first and f"<mark>{escape(best.text)}</mark>" in first
    assert f"reader score {best.score_text}</span>" in first and "confident" not in first
    assert len(folded) == len(ranked.below) - 1  # the other candidates stay folded


def test_the_dashboard_and_back_keeps_the_sidebar_the_question_and_the_link(page, app_env):
    at = page()
    at.radio(key="retriever").set_value("dense")
    at.slider(key="top_k").set_value(5)
    at.toggle(key="tuned_threshold").set_value(False).run()
    at.slider(key="threshold").set_value(2.5)
    at.toggle(key="evaluation").set_value(True).run()
    at.selectbox(key="split").select("dev")
    ask(at, "How is the bass?", "HEADPHONES")
    at.switch_page("dashboard.py").run()
    at.switch_page("search.py").run()
    assert not at.exception and not at.warning
    assert (at.radio(key="retriever").value, at.slider(key="top_k").value, at.slider(key="threshold").value) == ("dense", 5, 2.5)
    assert at.toggle(key="evaluation").value and at.selectbox(key="split").value == "dev"
    assert (at.selectbox(key="product").value, at.text_input(key="question").value) == ("HEADPHONES", "How is the bass?")
    assert (at.query_params["item"], at.query_params["q"]) == ("HEADPHONES", "How is the bass?")  # the answer shown, linkable
    assert answer_cards(at) and not at.info  # the answer shown is the one these settings give


def test_an_answer_from_other_settings_says_so(page):
    at = page()
    ask(at, "How is the bass?", "HEADPHONES")
    assert not at.info
    at.radio(key="retriever").set_value("dense")
    at.slider(key="top_k").set_value(2).run()
    notes = [shown(i.value) for i in at.info]
    assert notes == [
        f"The answers below come from other settings (retriever: BM25 (keywords), reviews to read: {TOP_K_RETRIEVER}). Press Ask to update them."
    ]
    button(at, "Ask").click().run()
    assert not at.info and at.session_state["asked"].pipeline.startswith("dense")


def test_bad_questions_are_messages_and_the_page_keeps_working(page):
    at = page(item="HEADPHONES")
    ask(at, "   ")
    assert not at.exception and "The question is empty." in messages(at)
    ask(at, "How is the bass?", "HEADPHONES")
    assert not at.error and answer_cards(at)


def test_a_linked_product_the_collection_does_not_hold_is_said_at_once_and_its_question_waits(page):
    """?item=NOPE&q=...: the picker showed "NOPE" without a word until the question was asked; an unknown collection is
    said at once."""
    at = page(item="NOPE", q="How is the bass?")
    assert not at.exception and "There is no product 'NOPE' in this collection: showing " in messages(at)
    assert at.selectbox(key="product").value != "NOPE" and not answer_cards(at)  # not asked of another product
    assert at.text_input(key="question").value == "How is the bass?"
    ask(at, "How is the bass?", "HEADPHONES")
    assert not at.error and answer_cards(at)


def test_a_question_over_the_limit_is_refused_on_the_page_with_the_apis_message(page):
    from qa_system.errors import QAError
    from qa_system.serving.question import MAX_QUESTION_CHARS, check_length

    too_long = "a" * (MAX_QUESTION_CHARS + 1)
    with pytest.raises(QAError) as refused:  # the check /query and /feedback answer 422 with
        check_length(too_long)
    at = ask(page(), "How is the bass?", "HEADPHONES")
    assert at.query_params["q"] == "How is the bass?"
    at = ask(at, too_long, "HEADPHONES")
    assert (
        not at.exception
        and messages(at) == str(refused.value) == "The question is 1001 characters long. Fix: ask in at most 1000 characters."
    )
    assert at.session_state["asked"] is None and not answer_cards(at)
    assert "q" not in at.query_params  # the link named the question before, which a reload would ask again


def test_no_page_module_runs_a_pipeline_itself():
    """The page asks through the service (``QAService.ask``), as the API does: no module of ui/ imports the pipelines."""
    import ast

    found = []
    for path in sorted(APP.parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):  # `from qa_system import pipelines` too
                names = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            found += [f"{path.name}: {name}" for name in names if name == "qa_system.pipelines" or name.startswith("qa_system.pipelines.")]
    assert found == []


def test_a_reader_that_fails_to_load_still_shows_the_reviews(page, tmp_path):
    at = page({"QA_READER_MODEL": str(tmp_path / "no-such-reader")})
    ask(at, "How is the bass?", "HEADPHONES")
    assert not at.exception and "has no config.json" in messages(at) and "Showing the closest reviews" in messages(at)
    assert any("Closest reviews" in m.value for m in at.markdown) and any("r-phones-1" in h for h in cards_html(at))


def test_unreachable_elasticsearch_is_a_message_and_memory_still_works(page):
    at = page({"QA_ES_URL": "http://127.0.0.1:9"})
    assert at.selectbox(key="store").options == ["memory", "elasticsearch"]
    at.selectbox(key="store").select("elasticsearch").run()
    assert not at.exception and "Elasticsearch at http://127.0.0.1:9 is unreachable" in messages(at)
    assert at.radio(key="retriever")  # the sidebar still works
    at.selectbox(key="store").select("memory").run()
    ask(at, "How is the bass?", "HEADPHONES")
    assert not at.error and answer_cards(at)


def test_unreachable_opensearch_is_a_message(page):
    at = page({"QA_OPENSEARCH_URL": "http://127.0.0.1:9"})
    assert at.selectbox(key="store").options == ["memory", "opensearch"]
    at.selectbox(key="store").select("opensearch").run()
    assert not at.exception and "OpenSearch at http://127.0.0.1:9 is unreachable" in messages(at)
    assert at.radio(key="retriever")  # the sidebar still works


def test_dashboard_shows_the_reports_eval_writes(page, app_env, tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    at = page({"QA_REPORTS_DIR": str(reports)}).switch_page("dashboard.py").run()
    assert "No reports under" in at.info[0].value
    at.text_input(key="reports_dir").input("..").run()
    assert "'..' is outside the reports folder." in messages(at) and not at.selectbox
    at.text_input(key="reports_dir").input("").run()
    monkeypatch.setenv("QA_DATA_DIR", app_env["QA_DATA_DIR"])
    assert cli(["eval", "retriever", "--split", "test", "--retriever", "bm25", "--k", "1", "3", "--out", str(reports / "retriever")]) == 0
    at.run()
    assert not at.exception and not at.error
    assert shown(at.subheader[0].value) == "Retriever evaluation: SubjQA electronics test"
    tables = [shown(m.value) for m in at.markdown if m.value.startswith("| ")]
    assert "| recall@3 |" in tables[0] and any("| p50_ms |" in t for t in tables[2:])  # headline, all metrics, then sections
    assert {shown(caption) for image in at.image for caption in image.captions} == {"recall_at_k.png", "recall_at_k_chapter.png"}


def test_qa_system_ui_serves_the_page_with_the_given_settings():
    from qa_system.cli import build_parser
    from qa_system.serving.webapp import settings_environment, streamlit_command

    args = build_parser().parse_args(["ui", "--port", "9999", "--reader-model", "/models/r", "--home", "/h"])
    assert settings_environment(vars(args)) == {"QA_HOME": "/h", "QA_READER_MODEL": "/models/r"}  # only the flags given
    command = streamlit_command(args.port, args.address)
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4] == str(APP)
    flags = dict(zip(command[5::2], command[6::2]))
    assert flags["--server.port"] == "9999" and flags["--server.headless"] == "true" and flags["--browser.gatherUsageStats"] == "false"


def test_the_dashboard_keeps_its_folder_and_report_across_a_visit_to_the_search_page(page, app_env, tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    monkeypatch.setenv("QA_DATA_DIR", app_env["QA_DATA_DIR"])
    for name in ("bm25", "dense"):
        assert (
            cli(["eval", "retriever", "--split", "test", "--retriever", name, "--k", "1", "--out", str(reports / "retriever" / name)]) == 0
        )
    assert cli(["eval", "retriever", "--split", "dev", "--retriever", "bm25", "--k", "1", "--out", str(reports / "other")]) == 0
    at = page({"QA_REPORTS_DIR": str(reports)}).switch_page("dashboard.py").run()
    at.text_input(key="reports_dir").input("retriever").run()
    assert len(at.selectbox(key="report").options) == 2
    at.selectbox(key="report").select_index(1).run()  # not the newest, which is shown by default
    chosen = at.selectbox(key="report").value
    link = {"folder": "retriever", "report": chosen.relative_to(reports.resolve()).as_posix()}
    assert chosen.parent == (reports / "retriever").resolve() and dict(at.query_params) == link  # a link to the report shown
    at.switch_page("search.py").run()
    assert at.radio(key="retriever")  # the search page is shown
    at.switch_page("dashboard.py").run()
    assert not at.exception and not at.error
    assert at.text_input(key="reports_dir").value == "retriever" and at.selectbox(key="report").value == chosen
    assert dict(at.query_params) == link


def test_a_dashboard_link_opens_its_report_and_a_link_outside_the_reports_folder_is_refused(page, app_env, tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    monkeypatch.setenv("QA_DATA_DIR", app_env["QA_DATA_DIR"])
    for name in ("bm25", "dense"):
        assert cli(["eval", "retriever", "--split", "test", "--retriever", name, "--k", "1", "--out", str(reports / name)]) == 0
    monkeypatch.setenv("QA_REPORTS_DIR", str(reports))
    at = AppTest.from_file(str(APP.parent / "dashboard.py"), default_timeout=TIMEOUT)
    at.query_params.update(report="bm25")  # the older one: not what the dashboard shows first
    at.run()
    assert not at.exception and at.selectbox(key="report").value == (reports / "bm25").resolve()
    for link in ({"folder": "/"}, {"folder": ".."}, {"report": "../../etc"}):
        at = AppTest.from_file(str(APP.parent / "dashboard.py"), default_timeout=TIMEOUT)
        at.query_params.update(link)
        at.run()
        assert not at.exception
        if "folder" in link:
            assert "outside the reports folder" in messages(at) and not at.selectbox
        else:  # not one of the reports: the newest is shown, nothing else is read
            assert at.selectbox(key="report").value in ((reports / "bm25").resolve(), (reports / "dense").resolve())


def test_a_review_card_names_every_split_its_review_is_in():
    import cards
    from haystack import Document

    both = unescape(
        cards.review_source(Document(id="electronics/r1", content="x", meta={"review_id": "r1", "item_id": "B1", "split": ["dev", "test"]}))
    )
    assert both.endswith("B1 · dev + test splits")
    one = unescape(
        cards.review_source(Document(id="electronics/r2", content="x", meta={"review_id": "r2", "item_id": "B1", "split": ["train"]}))
    )
    assert one.endswith("B1 · train split")


def test_a_review_card_shows_the_whole_id_and_a_very_long_one_keeps_its_end_and_the_full_id_on_hover():
    import cards
    from haystack import Document

    source = unescape(
        cards.review_source(Document(id="d", content="x", meta={"document_id": "drugscom-train-161290", "item_id": "Valsartan"}))
    )
    assert source.startswith('review <span title="drugscom-train-161290">drugscom-train-161290</span>')
    digest = "4a6aa9c7" * 8  # an id made from the text's hash
    source = unescape(cards.review_source(Document(id="d", content="x", meta={"document_id": digest})))
    shown = source.split(">", 1)[1].split("<", 1)[0]
    assert (
        f'title="{digest}"' in source and "…" in shown and digest.startswith(shown.split("…")[0]) and digest.endswith(shown.split("…")[1])
    )


def test_an_answer_card_shows_the_selectors_chance_the_reviews_saying_it_and_a_close_call():
    import cards
    from haystack import Document, ExtractedAnswer

    from qa_system.serving.answer_views import answer_cards, answer_views

    review = Document(
        id="d1", content="It is great for reading books. Great for reading at night.", meta={"review_id": "r1", "item_id": "B1"}
    )
    spans = [{"document_id": "d1", "start": 6, "end": 29}, {"document_id": "d2", "start": 0, "end": 10}]
    meta = {"probability": 0.52, "chosen": True, "close_call": True, "support": 2, "spans": spans}
    answer = ExtractedAnswer(
        query="q", score=0.52, data="great for reading books", document=review, document_offset=ExtractedAnswer.Span(6, 29), meta=meta
    )
    null = ExtractedAnswer(query="q", score=0.48, data=None, meta={"probability": 0.48, "chosen": False, "close_call": True})
    views = answer_views([answer, null])
    html = unescape(cards.answer_card(views[0], answer_cards(views)[0]))
    assert "52% chance right" in html and "said in 2 reviews" in html
    assert "A close call" in html and "48%" in html  # on the card itself, not in an expander


def test_a_withheld_generated_answer_is_shown_as_text_with_why():
    import cards

    hostile = {
        "text": "<script>alert(1)</script> **bold** [x](javascript:alert(1))",
        "reason": "only 20% of its content words occur <b>there</b>",
    }
    html = cards.withheld_card(hostile)
    assert "<script>" not in html and "<b>there</b>" not in html
    assert escape(hostile["text"]) in html and "generated, withheld" in html


# ------------------------------------------------------------------------------------ collections


@pytest.fixture(scope="module")
def shop_collection(app_env, tmp_path_factory) -> str:
    """A collection of the user's own: a CSV without products, ingested by the library as `qa-system index --input` does."""
    from qa_system.config import Settings
    from qa_system.ingestion import IngestOptions, ingest

    source = tmp_path_factory.mktemp("shop") / "notes.csv"
    source.write_text("body\nThe kettle boils water in two minutes.\nThe lamp is bright enough for reading.\n", encoding="utf-8")
    settings = Settings.from_env(home=Path(app_env["QA_HOME"]), data_dir=Path(app_env["QA_DATA_DIR"]))
    ingest(settings, source, "shop-notes", IngestOptions(text_column="body"), embed=False, progress=False)
    return "shop-notes"


def test_a_collection_without_products_is_asked_as_a_whole(page, shop_collection):
    at = page(collection=shop_collection)
    assert not at.exception
    assert at.selectbox(key="collection").value == shop_collection
    assert at.selectbox(key="collection").options[0].startswith("subjqa-electronics")  # the page's own first, then the others
    assert at.selectbox(key="product").options == ["All documents (no products in this collection)"]
    assert not [t for t in at.toggle if t.label == "Evaluation mode"]  # labelled questions are the SubjQA collection's
    ask(at, "How fast does it boil water?")
    assert not at.exception and not at.error
    asked = at.session_state["asked"]
    assert asked.item_id is None and {d.content for d in asked.documents} >= {"The kettle boils water in two minutes."}
    assert dict(at.query_params) == {"collection": shop_collection, "q": "How fast does it boil water?"}  # a link to this answer


def test_switching_collection_forgets_the_other_ones_product_and_answer(page, shop_collection):
    at = ask(page(), "How is the bass?", "HEADPHONES")
    assert at.session_state["asked"] is not None
    at.selectbox(key="collection").select(shop_collection).run()
    assert not at.exception and not at.error
    assert "asked" not in at.session_state and at.selectbox(key="product").value == ""
    assert "item" not in at.query_params and at.query_params["collection"] == shop_collection


def test_a_link_to_an_unknown_collection_shows_the_pages_own(page):
    at = page(collection="../[x](http://attacker.test) no-such")
    assert not at.exception
    assert at.selectbox(key="collection").value == "subjqa-electronics"
    assert "There is no collection '../[x](http://attacker.test) no-such'" in messages(at)


# ------------------------------------------------------------------------------------ collections of your own


def own_collection(app_env, source: Path, name: str, **options) -> str:
    """``source`` indexed into ``name`` as `qa-system index --input` does (BM25 only)."""
    from qa_system.config import Settings
    from qa_system.ingestion import IngestOptions, ingest

    settings = Settings.from_env(home=Path(app_env["QA_HOME"]), data_dir=Path(app_env["QA_DATA_DIR"]))
    ingest(settings, source, name, IngestOptions(**options), embed=False, progress=False)
    return name


FAQ = [  # the answer is in the smaller category
    ("billing", "Invoices are sent by email on the first day of every month."),
    ("billing", "You can pay by card, bank transfer or PayPal."),
    ("billing", "A refund reaches your account within five working days."),
    ("account", "The password reset link is valid for 24 hours after we send it."),
    ("account", "Two-factor authentication is turned on under Settings, then Security."),
]


@pytest.fixture(scope="module")
def faq_collection(app_env, tmp_path_factory) -> str:
    """An FAQ as JSON lines with a `category` column: the products are its categories."""
    import json

    source = tmp_path_factory.mktemp("faq") / "faq.jsonl"
    source.write_text("".join(json.dumps({"category": c, "answer": a}) + "\n" for c, a in FAQ), encoding="utf-8")
    return own_collection(app_env, source, "faq", text_column="answer", item_column="category")


@pytest.fixture(scope="module")
def handbook_collection(app_env, tmp_path_factory) -> str:
    """An employee handbook: a folder of Markdown files without sidecars, so that each file is its own product."""
    folder = tmp_path_factory.mktemp("handbook") / "handbook"
    folder.mkdir()
    pages = {  # short: the tiny reader reads 128 characters at most
        "vacation.md": "# Vacation\n\nYou get 25 vacation days a year.",
        "expenses.md": "# Expenses\n\nExpenses are paid in two weeks.",
        "security.md": "# Security\n\nLock your screen.",
    }
    for name, text in pages.items():
        (folder / name).write_text(text, encoding="utf-8")
    return own_collection(app_env, folder, "handbook")


def test_a_collection_of_your_own_is_asked_as_a_whole_not_its_largest_product(page, faq_collection):
    # The tester asked an uploaded FAQ; the page asked only 'billing', its largest category, and found no answer.
    at = page(collection=faq_collection)
    assert not at.exception
    product = at.selectbox(key="product")
    assert product.value == "" and product.options == ["All documents", "billing", "account"]  # every document, by default
    ask(at, "How long is the password reset link valid?")
    assert not at.exception and not at.error
    asked = at.session_state["asked"]
    assert asked.item_id is None and FAQ[3][1] in {d.content for d in asked.documents}  # asked as `qa-system ask` without --item
    assert {d.meta["item_id"] for d in asked.documents} == {"billing", "account"}
    assert at.query_params["item"] == "*"  # the link asks all documents again, whatever the default
    ask(at, "How long is the password reset link valid?", "billing")  # a product is still one pick away
    assert {d.meta["item_id"] for d in at.session_state["asked"].documents} == {"billing"}
    assert at.query_params["item"] == "billing"


def test_a_handbook_folder_is_asked_as_a_whole_in_documents_wording(page, handbook_collection):
    # Each file of a folder without sidecars is its own product: asking the largest one asked one file.
    at = page(collection=handbook_collection)
    assert not at.exception and at.selectbox(key="product").value == ""
    assert [t.value for t in at.title] == ["Ask the documents"]
    assert at.text_input(key="question").placeholder == "Ask anything these documents may answer"
    assert at.slider(key="top_k").label == "Documents to read (retriever top-k)"
    assert "review" not in at.radio(key="retriever").help and "review" not in at.radio(key="stage").help
    at.toggle(key="tuned_threshold").set_value(False).run()
    at.slider(key="threshold").set_value(10.0)  # every span below "no answer": the closest documents are shown
    ask(at, "Vacation days or expenses?")
    assert not at.exception and not at.error
    asked = at.session_state["asked"]
    assert asked.item_id is None and {d.meta["item_id"] for d in asked.documents} == {"vacation.md", "expenses.md"}
    assert [m.value for m in at.markdown if m.value.startswith("#####")] == ["##### Closest documents"]
    assert [e.label for e in at.expander if e.label.startswith("Retrieved")] == ["Retrieved documents (2), with their retriever scores"]
    spans = [card for card in answer_cards(at) if "qa-span" in card]
    assert spans and all("from document <span" in card for card in spans)
    documents = [h for h in cards_html(at) if h.startswith('<div class="qa-source">')]  # the closest and the retrieved
    assert len(documents) == 4 and all(h.startswith('<div class="qa-source">document <span') for h in documents)
    at.slider(key="top_k").set_value(2).run()
    assert [shown(i.value) for i in at.info] == [
        "The answers below come from other settings (documents to read: 8). Press Ask to update them."
    ]


def test_a_collection_whose_folder_changed_since_indexing_says_so_once_with_the_command(page, app_env, tmp_path):
    folder = tmp_path / "care"
    folder.mkdir()
    (folder / "descale.md").write_text("# Descaling\n\nDescale the kettle every month.", encoding="utf-8")
    name = own_collection(app_env, folder, "care-notes")
    at = page(collection=name)
    assert not at.exception and not at.warning
    (folder / "filter.md").write_text("# Filter\n\nRinse the filter weekly.", encoding="utf-8")
    # It answered from the old files without a word.
    at = page(collection=name)
    assert not at.exception
    assert [shown(w.value) for w in at.warning] == [
        f"Collection 'care-notes' is answered as last indexed, and files of {folder} were added, removed or edited since "
        f"(2 files now, 1 then). Fix: run `qa-system index --input {folder} --collection care-notes --store memory --no-embed` "
        "to update it (only what changed is processed again)."
    ]
    ask(at, "How often should I descale?")
    assert not at.exception and "answered as last indexed" not in messages(at)  # told once, not with every answer


def test_the_subjqa_collection_keeps_its_showcase_product_and_reviews_wording(page):
    at = page()
    assert at.selectbox(key="product").value == "KINDLE"  # the most reviewed, B0074BW614 not being in the tiny corpus
    assert [t.value for t in at.title] == ["Ask the reviews"]
    assert at.text_input(key="question").placeholder == "e.g. Is it good for reading?"
    assert at.slider(key="top_k").label == "Reviews to read (retriever top-k)"
    ask(at, "How is the bass?", "HEADPHONES")
    assert all("from review <span" in card for card in answer_cards(at) if "qa-span" in card)


def test_a_link_with_item_star_asks_all_documents(page, faq_collection):
    at = page(item="*", q="How is the bass?")  # SubjQA's page opens on a product; the link asks all of them
    assert not at.exception and not at.error
    assert at.selectbox(key="product").value == "" and at.session_state["asked"].item_id is None
    assert len({d.meta["item_id"] for d in at.session_state["asked"].documents}) > 1
    assert at.query_params["item"] == "*"
    at = page(collection=faq_collection, item="account")  # a product of your own collection, linked
    assert at.selectbox(key="product").value == "account"


@pytest.mark.parametrize(
    "data, fix",
    [
        ("text\nbattery\n".encode("utf-16-le"), "Fix: choose Encoding utf-16-le above, or re-save the file as UTF-8."),
        (b"text\n\x93Smart\x94\n", "Fix: choose Encoding cp1252 above, or re-save the file as UTF-8."),
    ],
    ids=["utf-16 without a mark", "windows-1252"],
)
def test_an_upload_that_does_not_decode_names_an_encoding_the_pages_picker_offers(home, tmp_path, monkeypatch, data, fix):
    monkeypatch.syspath_prepend(str(APP.parent))  # as app.py puts it
    import resources

    from qa_system.ingestion import IngestOptions, ingest
    from qa_system.sources.decoding import EncodingError

    (tmp_path / "t.csv").write_bytes(data)
    with pytest.raises(EncodingError) as refused:
        ingest(home, tmp_path / "t.csv", "t", IngestOptions(), embed=False, progress=False)
    assert refused.value.encoding in resources.UPLOAD_ENCODINGS  # the form's Encoding picker offers it
    assert resources.upload_message(refused.value) == f"{refused.value.problem} {fix}"
    assert "--encoding" in str(refused.value)  # the command line's message is its own
