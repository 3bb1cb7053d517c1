"""The search page: pick a collection and a product, ask a question, see the answers inside the
reviews they came from; upload a CSV / JSON lines file into a new collection and ask about it.

SubjQA's collections are reviews, and open on the showcase product; a collection of your own holds
documents (so the page says), and is asked as a whole unless a product is picked (as ``qa-system ask``
without ``--item``): a folder's files are each their own product, and the largest is rarely the one
that answers.

Presentation only: questions are asked and feedback recorded through the service every door shares
(``QAService.ask``, ``QAService.record_feedback``), with the API's rules and messages; answer views,
highlighting and spot checks are library functions (``qa_system``); this file lays them out. Text from reviews, labels, the URL or
the user is never interpreted: cards are escaped HTML shown with ``st.html``, and every other
string that carries such text (messages included) goes through ``markdown_literal``.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

import cards
import resources
import streamlit as st
import votes
from haystack import Document
from kept import keep_widgets, restore_widgets
from streamlit.delta_generator import DeltaGenerator

from qa_system.config import RETRIEVERS, TOP_K_READER, TOP_K_RETRIEVER, Settings
from qa_system.errors import QAError
from qa_system.evaluation.spot_check import gold_rank, random_question, score_prediction
from qa_system.ingestion import CollectionInfo, IngestOptions, collection_name_from
from qa_system.ingestion.freshness import source_notice
from qa_system.retrieval.filters import parse_filters
from qa_system.safe_text import markdown_literal
from qa_system.serving.answer_views import AnswerCard, AnswerView, answer_cards, answer_views, rank_answers
from qa_system.serving.feedback import VERDICTS, FeedbackStore, unrecorded_clicks
from qa_system.serving.served import PAGE_COLLECTION, PAGE_DOMAIN
from qa_system.serving.service import ANSWER_STAGES, QAService, Question
from qa_system.sources import SPLITS, LabelledQuestion

DEFAULT_ITEM = "B0074BW614"
ALL_DOCUMENTS = ""  # the product picker's "ask every document of the collection"
ALL_DOCUMENTS_LINK = "*"  # ?item=* links to "All documents" (no item: the collection's default product)
UPLOAD_TYPES = ["csv", "tsv", "tab", "jsonl", "ndjson", "json"]
STAGE_LABELS = {"extractive": "Extractive reader", "rag": "Generative (RAG)"}
RETRIEVER_LABELS = {"bm25": "BM25 (keywords)", "dense": "Dense (meaning)", "hybrid": "Hybrid (both)"}
# Material icons ship with Streamlit, so they render without emoji fonts (headless browsers, servers).
FEEDBACK_BUTTONS = {
    "correct": ("Right", "thumb_up"),
    "wrong": ("Wrong", "thumb_down"),
    "wrong_span": ("Right {one}, wrong answer", "rate_review"),
}
WARNING = ":material/warning:"
# The page's session state, by key. Widgets' keys are their own names (KEPT_WIDGETS); those the code reads besides:
COLLECTION, PRODUCT, QUESTION = "collection", "product", "question"
ASKED = "asked"  # the Asked shown
GOLD = "gold"  # the labelled question asked (evaluation mode)
ASK_NOW = "ask_now"  # ask on this run: a linked question, a random labelled one
NOTICE = "notice"  # a warning shown once, on the next run
SOURCE_NOTICES_TOLD = "source_notices_told"  # the notices that a collection's source files changed, each shown once
RUNS = "runs"  # questions asked so far: each answer's feedback buttons are named by its run
PAGE_ID = "page_id"  # names this page's clicks in the database
VOTES = "votes"  # the clicks stored, by answer
PENDING_COLLECTION = "pending_collection"  # picked on the next run: the collection an upload made
COLLECTION_SHOWN = "collection_shown"  # the collection the product and answer belong to
UPLOAD_IN_PROGRESS = "upload_in_progress"  # the upload this visitor follows
UPLOADED = "uploaded"  # the summary of the upload just done
HTML_BOX = "Text is HTML"  # the upload form's box for IngestOptions.html
# The widgets whose values survive a visit to the dashboard (``kept``), and their defaults.
KEPT_WIDGETS = (
    "stage",
    "retriever",
    "top_k",
    "top_k_reader",
    "tuned_threshold",
    "threshold",
    "store",
    "filter",
    "collection",
    "evaluation",
    "split",
    "product",
    "question",
)
# The sliders' ranges of the reviews read and the answers shown.
MAX_TOP_K, MAX_TOP_K_READER = 10, 5
WIDGET_DEFAULTS = {
    "top_k": TOP_K_RETRIEVER,
    "top_k_reader": TOP_K_READER,
    "tuned_threshold": True,
    "threshold": 0.0,
    "filter": "",
    "evaluation": False,
    "split": "test",
}
FILTER_HELP = (
    'Only documents whose metadata pass this filter (JSON, Haystack\'s syntax), e.g. {"field": "meta.rating", "operator": ">=", "value": 4}; '
    'several: {"operator": "AND", "conditions": [...]}. Numbers and ISO dates of an uploaded file are kept as such. Empty: no filter.'
)
# The settings an answer depends on, as the page names them (see stale_settings).
SETTING_NAMES = {
    "answer_stage": "answers",
    "retriever": "retriever",
    "top_k": "{many} to read",
    "top_k_reader": "answers to show",
    "no_answer_threshold": "no-answer threshold",
    "store": "document store",
    "filter_text": "metadata filter",
}


@dataclass(frozen=True)
class Options:
    """The sidebar's choices."""

    answer_stage: str
    retriever: str
    top_k: int
    top_k_reader: int
    no_answer_threshold: float | None  # None: the reader's tuned threshold
    store: str
    filter_text: str = ""  # a metadata filter as JSON (empty: none)
    collection: str = PAGE_COLLECTION
    evaluation: bool = False
    split: str = "test"
    subjqa: bool = True  # a SubjQA collection (reviews, a showcase product), not one of the user's own

    @property
    def nouns(self) -> cards.Nouns:
        """What the page calls the collection's documents."""
        return cards.REVIEWS if self.subjqa else cards.DOCUMENTS


@dataclass(frozen=True)
class Asked:
    """The last question and what it gave; kept in the session so that feedback clicks keep it on screen."""

    run: int
    question: str
    item_id: str | None  # None: every document of the collection
    documents: list[Document]
    answers: list[AnswerView]
    timings: dict[str, float]
    pipeline: str
    gold: LabelledQuestion | None = None
    warning: str | None = None
    options: Options | None = None  # the settings it was computed with


# ------------------------------------------------------------------------------------ sidebar


def sidebar() -> tuple[DeltaGenerator, str, str]:
    """The sidebar's settings: (the place of the answer settings, the store, the metadata filter). The answer settings
    are drawn there once the collection is known (``answer_settings``): their labels say reviews or documents."""
    with st.sidebar:
        st.subheader("Settings")
        answering = st.container()
        store = st.selectbox(
            "Document store",
            resources.store_choices(),
            key="store",
            help="Elasticsearch is offered when QA_ES_URL is set, OpenSearch when QA_OPENSEARCH_URL is.",
        )
        filter_text = st.text_area(
            "Metadata filter (JSON)",
            key="filter",
            height=80,
            placeholder='{"field": "meta.rating", "operator": ">=", "value": 4}',
            help=FILTER_HELP,
        )
    return answering, store, filter_text.strip()


def answer_settings(place: DeltaGenerator, nouns: cards.Nouns) -> dict:
    """The answer stage, retriever and depths, drawn in ``place``: Options' fields."""
    with place:
        stages = [stage for stage in STAGE_LABELS if stage in ANSWER_STAGES]
        stage = st.radio(
            "Answers",
            stages,
            format_func=STAGE_LABELS.get,
            key="stage",
            help=f"Extractive: a span copied from a {nouns.one}. RAG: a generated sentence citing the {nouns.many}.",
        )
        retriever = st.radio(
            "Retriever", RETRIEVERS, format_func=RETRIEVER_LABELS.get, key="retriever", help=f"How the {nouns.many} to read are found."
        )
        top_k = st.slider(f"{nouns.many.capitalize()} to read (retriever top-k)", 1, MAX_TOP_K, key="top_k")
        top_k_reader, threshold = 1, None
        if stage == "extractive":
            top_k_reader = st.slider("Answers to show (reader top-k)", 1, MAX_TOP_K_READER, key="top_k_reader")
            if not st.toggle("Reader's tuned no-answer threshold", key="tuned_threshold"):
                threshold = st.slider(
                    "No-answer threshold",
                    -10.0,
                    10.0,
                    step=0.5,
                    key="threshold",
                    help="How far (in logits) an answer must beat 'no answer'. Higher: more 'no answer'; lower: more answers.",
                )
    return {"answer_stage": stage, "retriever": retriever, "top_k": top_k, "top_k_reader": top_k_reader, "no_answer_threshold": threshold}


# Select box labels depend on the option alone. Streamlit names the choice by its label and the browser
# keeps the label it was shown: a label that changed (a count once the collection was built or updated)
# came back as a value no option had, and the page would say the collection did not exist.


def collection_label(name: str) -> str:
    return f"{name} · SubjQA {PAGE_DOMAIN}" if name == PAGE_COLLECTION else name


def collection_caption(info: CollectionInfo | None) -> str:
    if info is None:  # the page's own, before its first start built it
        return "Built from SubjQA on the first start."
    vectors = "" if info.encoder else " · BM25 only"
    return f"{info.documents:,} {'reviews' if info.kind == 'subjqa' else 'documents'}{vectors}"


def pick_collection(available: dict[str, CollectionInfo | None]) -> None:
    """The collection to show before the picker is drawn: one just uploaded, else the one chosen
    (or linked with ``?collection=``) while it exists, else the page's default (the first)."""
    default = next(iter(available))
    if pending := st.session_state.pop(PENDING_COLLECTION, None):
        st.session_state[COLLECTION] = pending
    chosen = st.session_state.setdefault(COLLECTION, st.query_params.get("collection") or default)
    if chosen not in available:
        st.session_state[NOTICE] = f"There is no collection '{chosen}' in this document store: showing {default}."
        st.session_state[COLLECTION] = default
    if st.session_state.get(COLLECTION_SHOWN, st.session_state[COLLECTION]) != st.session_state[COLLECTION]:
        for key in (PRODUCT, QUESTION, ASKED, GOLD):  # they belong to the other collection
            st.session_state.pop(key, None)
        for param in ("item", "q"):
            st.query_params.pop(param, None)


def is_subjqa(collection: str, info: CollectionInfo | None) -> bool:
    """Whether ``collection`` holds SubjQA reviews (the page's own before it is built), not documents of the user's own."""
    return info.kind == "subjqa" if info is not None else collection == PAGE_COLLECTION


def collection_panel(settings: Settings) -> dict:
    """The collection picker, the upload form and (on the SubjQA collection) evaluation mode: Options' fields."""
    available = resources.collections(settings)
    pick_collection(available)
    with st.sidebar:
        st.divider()
        collection = st.selectbox(
            "Collection",
            list(available),
            key=COLLECTION,
            format_func=collection_label,
            help="A named index of documents: the SubjQA reviews the page starts with, or what `qa-system index --input` or an upload below added.",
        )
        st.caption(collection_caption(available[collection]))
        st.session_state[COLLECTION_SHOWN] = collection
        if collection != next(iter(available)):  # the URL names it, so that a reload or a link keeps it
            st.query_params["collection"] = collection
        else:
            st.query_params.pop("collection", None)
        upload_form(settings)
        evaluation, split = False, "test"
        if collection == PAGE_COLLECTION:  # the labelled questions are SubjQA's
            st.divider()
            evaluation = st.toggle(
                "Evaluation mode", key="evaluation", help="Ask labelled SubjQA questions and compare with the annotators' answers."
            )
            split = st.selectbox("Labelled split", SPLITS, key="split") if evaluation else "test"
    return {"collection": collection, "evaluation": evaluation, "split": split, "subjqa": is_subjqa(collection, available[collection])}


def upload_form(settings: Settings) -> None:
    """A CSV / JSON lines file into a collection (a new one, or an update of one uploaded before), with progress."""
    with st.expander("Add your own documents", icon=":material/upload_file:"):
        with st.form("upload", border=False):
            file = st.file_uploader(
                "CSV, TSV or JSON lines file", type=UPLOAD_TYPES, help="One document (e.g. a review) per row; other columns are kept."
            )
            name = st.text_input(
                "Collection name",
                placeholder="from the file's name",
                help="Lowercase letters, digits, '-', '_' and '.'. An existing name is updated.",
            )
            text_column = st.text_input("Text column", placeholder="text, or review", help="The column holding the document's text.")
            item_column = st.text_input(
                "Product column", placeholder="none: ask about all documents", help="Optional: the column naming what a document is about."
            )
            id_column = st.text_input(
                "Id column", placeholder="none: a hash of the text", help="Optional: the column of unique document ids."
            )
            encoding = st.selectbox(
                "Encoding",
                resources.UPLOAD_ENCODINGS,
                help="How the file's text is encoded (UTF-8 with or without BOM is read as UTF-8).",
            )
            html = st.checkbox(
                HTML_BOX,
                help="The text column holds web markup (`<p>`, `<br/>`, `&amp;`): index the text a browser shows, without the tags.",
            )
            embed = st.checkbox(
                "Embed for dense and hybrid search",
                value=True,
                help="Slower: the encoder reads every document (tens per second on a laptop's CPU).",
            )
            submitted = st.form_submit_button("Index the file", icon=":material/upload:")
        if submitted:
            if file is None:
                st.warning("Choose a file first.", icon=WARNING)
                return
            collection = name.strip() or collection_name_from(file.name)
            options = IngestOptions(
                text_column=text_column.strip() or None,
                item_column=item_column.strip() or None,
                id_column=id_column.strip() or None,
                encoding=encoding,
                html=html,
            )
            started = resources.start_upload(settings, file, collection, options, embed)
            if started is None:
                st.warning(
                    markdown_literal(
                        f"Another upload into '{collection}' is being indexed. Fix: wait until it is done, then upload again."
                    ),
                    icon=WARNING,
                )
                return
            st.session_state[UPLOAD_IN_PROGRESS] = started
        if (upload := st.session_state.get(UPLOAD_IN_PROGRESS)) is None:
            return
        try:
            report = resources.follow_upload(upload)  # a rerun or leaving stops following, not the work
        except QAError as error:
            st.error(markdown_literal(resources.upload_message(error)), icon=WARNING)  # quotes the file's name and columns
            return
        finally:
            if upload.task.wait(0):
                del st.session_state[UPLOAD_IN_PROGRESS]
    # The report names the command line's flag; here it is a box of the form.
    summary = [line.replace("--html", f"the box “{HTML_BOX}”") for line in report.summary()]
    st.session_state.update({PENDING_COLLECTION: upload.collection, UPLOADED: summary})
    st.rerun()


def feedback_panel(store: FeedbackStore, settings: Settings) -> None:
    with st.sidebar.expander("Feedback → training data"):
        try:
            counts = store.counts()
        except QAError as error:  # the database cannot be opened: said here, the page still answers
            st.warning(markdown_literal(error), icon=WARNING)
            return
        st.caption(f"{sum(counts.values())} judgements saved: " + ", ".join(f"{counts.get(v, 0)} {VERDICTS[v].lower()}" for v in VERDICTS))
        if st.button("Export as SQuAD v2", key="export"):
            try:
                export = store.export_squad(settings.feedback_export)
            except QAError as error:
                st.warning(markdown_literal(error))
                return
            st.success(markdown_literal(export.summary()))
            st.code(f"qa-system train-reader --train-file {export.path}", language="bash")
            st.download_button("Download the file", export.path.read_bytes(), file_name=export.path.name, mime="application/json")


# ------------------------------------------------------------------------------------ asking


def default_product(counts: dict[str, int], subjqa: bool) -> str:
    """The product a collection opens on: SubjQA's showcase product (else its most reviewed one); every document
    of a collection of your own, as ``qa-system ask`` without ``--item`` asks."""
    if not subjqa or not counts:
        return ALL_DOCUMENTS
    return DEFAULT_ITEM if DEFAULT_ITEM in counts else max(counts, key=counts.get)


def init_from_url(service: QAService, collection: str, counts: dict[str, int], subjqa: bool) -> None:
    """``?collection=...&item=...&q=...`` pre-fills the form (and asks), so that answers can be linked to;
    ``item=*`` is "All documents". A product the collection does not hold is said at once, as an unknown collection
    is: the collection's default product is shown, and the linked question waits in the box (not asked of another)."""
    if PRODUCT in st.session_state:
        return
    params = st.query_params
    item = params.get("item")
    if item not in (None, "", ALL_DOCUMENTS_LINK) and counts and (item := service.stored_item(collection, item)) is None:
        default = default_product(counts, subjqa)
        st.session_state[NOTICE] = f"There is no product '{params['item']}' in this collection: showing {default or 'all documents'}."
        st.session_state.update({PRODUCT: default, QUESTION: params.get("q", "")})
        return
    st.session_state[PRODUCT] = ALL_DOCUMENTS if item == ALL_DOCUMENTS_LINK else item or default_product(counts, subjqa)
    if params.get("q"):
        st.session_state[QUESTION] = params["q"]
        st.session_state[ASK_NOW] = True


def pick_random_question(settings: Settings, split: str, products: list[str]) -> None:
    try:
        question = random_question(resources.service(settings).labelled_questions(), split, products)
    except QAError as error:
        st.session_state[NOTICE] = str(error)
        return
    st.session_state.update({PRODUCT: question.item_id, QUESTION: question.question, GOLD: question, ASK_NOW: True})


def product_label(item: str, counts: dict[str, int]) -> str:
    if item == ALL_DOCUMENTS:
        return "All documents" if counts else "All documents (no products in this collection)"
    return item  # the most reviewed first; no count here (see collection_label)


def search_form(counts: dict[str, int], nouns: cards.Nouns) -> bool:
    products = [ALL_DOCUMENTS, *sorted(counts, key=lambda item: (-counts[item], item))]
    if st.session_state[PRODUCT] not in products:  # a linked product without reviews: asking explains
        products.insert(0, st.session_state[PRODUCT])
    with st.form("ask", border=False):
        product, question, button = st.columns([3, 6, 1], vertical_alignment="bottom")
        product.selectbox(
            "Product", products, key=PRODUCT, help="Type to search by item id.", format_func=lambda item: product_label(item, counts)
        )
        placeholder = "e.g. Is it good for reading?" if nouns == cards.REVIEWS else "Ask anything these documents may answer"
        question.text_input("Question", key=QUESTION, placeholder=placeholder)
        return button.form_submit_button("Ask", type="primary", width="stretch")


def ask(settings: Settings, options: Options, has_products: bool) -> None:
    """Ask the service the question of the form (``QAService.ask``: the API's rules and messages), keep what it gave."""
    question, item = st.session_state.get(QUESTION, ""), st.session_state[PRODUCT] or None
    gold = st.session_state.get(GOLD)
    if gold is not None and not (options.evaluation and gold.question == question.strip() and gold.item_id == item):
        gold = None  # the labelled question was edited or left: no gold to compare with
    st.session_state[GOLD] = gold
    service = resources.service(settings)
    try:
        asked = Question(
            question,
            item,
            collection=options.collection,
            retriever=options.retriever,
            mode=options.answer_stage,
            top_k=options.top_k,
            split=gold.split if gold else None,
            top_k_reader=options.top_k_reader,
            no_answer_threshold=options.no_answer_threshold,
            filters=parse_filters(options.filter_text),
            all_products=item is None,
        )
        service.check(asked)  # a refused question is said before the reader's first export
        if options.answer_stage == "extractive":
            with contextlib.suppress(QAError):  # a reader that does not load: ask says so, with the reviews still shown
                resources.prepare_fast_reader(settings)
        with st.spinner(f"Reading the {options.nouns.many}…"):
            output = service.ask(asked, retrieval_fallback=True)  # a reader that does not load: the reviews are still shown
    except QAError as error:
        st.session_state[ASKED] = None
        if "q" in st.query_params:  # the link named the answer shown before: a reload would ask that question again
            del st.query_params["q"]
        st.error(markdown_literal(error), icon=WARNING)  # messages quote the question and the (linked) product
        return
    warning = None
    if unanswered := output.get("answer_stage_error"):
        warning = f"{unanswered} Showing the closest {options.nouns.many} without answers."
    elif options.answer_stage == "extractive" and settings.reader_backend == "onnx" and output.get("reader_backend") == "torch":
        warning = (
            "The fast int8 ONNX reader could not be built here (the server's log says why): these answers come from the PyTorch reader."
        )
    link_to(options.collection, item, question.strip(), resources.default_collection(settings), has_products)
    run = st.session_state[RUNS] = st.session_state.get(RUNS, 0) + 1
    views = answer_views(output.get("answers", []))
    st.session_state[ASKED] = Asked(
        run, question.strip(), item, output["documents"], views, output["timings"], output["pipeline"], gold, warning, options
    )


def link_to(collection: str, item: str | None, question: str, default: str, has_products: bool) -> None:
    """The page's URL names the answer shown, so that it can be shared: all documents of a collection with products
    as ``item=*`` (without it, a link opens on the collection's default product)."""
    params = {"collection": collection} if collection != default else {}
    params |= {"item": item or ALL_DOCUMENTS_LINK} if item or has_products else {}
    st.query_params.from_dict({**params, "q": question})


# ------------------------------------------------------------------------------------ results


def record_feedback(service: QAService, asked: Asked, view: AnswerView, verdict: str, click_id: str) -> bool:
    """One row for one click, recorded by the service as the API records it (once, however often a rerun repeats
    it); False and a notice when it cannot be stored."""
    # A "no answer" (or a generated answer) is judged against the closest review it was shown with.
    document = view.document or next(iter(view.sources or asked.documents), None)
    try:
        service.record_feedback(
            asked.options.collection,
            document.id if document is not None else None,
            verdict=verdict,
            question=asked.question,
            answer=view.text,
            start=view.start,
            end=view.end,
            score=view.score,
            pipeline=asked.pipeline,
            labelled_question_id=asked.gold.id if asked.gold else None,
            click_id=click_id,
        )
    except QAError as error:  # said in the card: a click reruns only its buttons (a fragment)
        st.warning(markdown_literal(error), icon=WARNING)
        return False
    return True


@st.fragment  # a click reruns this card's buttons only, not the whole page (under eight users that halved the server's work)
def feedback_buttons(service: QAService, asked: Asked, view: AnswerView, rank: int, nouns: cards.Nouns) -> None:
    key = f"feedback-{asked.run}-{rank}"
    verdicts = ["correct", "wrong", *(["wrong_span"] if view.kind == "span" else [])]
    page = st.session_state.setdefault(PAGE_ID, uuid.uuid4().hex)
    recorded = st.session_state.setdefault(VOTES, {}).setdefault(key, {})  # click number -> verdict, stored
    with st.container(horizontal=True, vertical_alignment="center"):
        buttons = [(v, FEEDBACK_BUTTONS[v][0].format(one=nouns.one), FEEDBACK_BUTTONS[v][1]) for v in verdicts]
        clicked = votes.vote_buttons(key, buttons, [recorded[i] for i in sorted(recorded)])
        saved = 0
        for number, verdict in enumerate(unrecorded_clicks(clicked, len(recorded), verdicts), len(recorded)):
            if not record_feedback(service, asked, view, verdict, f"{page}/{key}/{number}"):
                break
            recorded[number] = verdict
            saved += 1
        if recorded:  # acknowledges the rows stored, never more
            last = VERDICTS[recorded[max(recorded)]].lower()
            st.caption(f"Saved: {last}." if len(recorded) == 1 else f"Saved {len(recorded)} clicks, the last: {last}.")
    if saved:
        st.toast("Thanks! Your feedback is saved.", icon="✅")


def gold_chips(asked: Asked, view: AnswerView) -> list[str]:
    if asked.gold is None:
        return []
    score = score_prediction(asked.gold, view.text)
    return [cards.chip(f"EM {score.em:.0f} · F1 {score.f1:.2f}", "em")]


def answer_card(service: QAService, asked: Asked, view: AnswerView, card: AnswerCard, nouns: cards.Nouns) -> None:
    with st.container(border=True):
        st.html(cards.answer_card(view, card, extra_chips=gold_chips(asked, view), nouns=nouns))
        feedback_buttons(service, asked, view, card.number, nouns)  # numbers name the answers; 0 is the no-answer card


def show_closest(asked: Asked, nouns: cards.Nouns) -> None:
    st.markdown(f"##### Closest {nouns.many}")
    for document in asked.documents[:3]:
        st.html(cards.review_card(document, nouns=nouns))


def show_answers(service: QAService, asked: Asked, nouns: cards.Nouns) -> None:
    views = asked.answers
    if not views:
        show_closest(asked, nouns)
        return
    ranked = rank_answers(views)
    withheld = next((v.withheld for v in views if v.withheld), None)
    if withheld:  # the generated answer was not grounded in the reviews it cited: say so above the extractive answers
        st.html(cards.withheld_card(withheld, nouns))
    # The cards every door shows, in their order; those rated below "no answer" folded away (the best one
    # beside an abstention stays: it may answer the question).
    shown = list(zip(views, answer_cards(views)))
    for view, card in shown:
        if not card.folded:
            answer_card(service, asked, view, card, nouns)
    if ranked.abstains:
        show_closest(asked, nouns)
    folded = [(view, card) for view, card in shown if card.folded]
    if folded:
        spans = sum(card.kind != "no_answer" for _, card in folded)
        chance = f" ({ranked.no_answer.score_label})" if ranked.no_answer.score_label else ""
        # Only the "no answer" card folded: the fold names it, not "0 more candidate(s)".
        with st.expander(f"{spans} more candidate(s) rated below “no answer”{chance}" if spans else f"“No answer”{chance}"):
            for view, card in folded:
                answer_card(service, asked, view, card, nouns)


def show_gold(asked: Asked) -> None:
    gold = asked.gold
    st.markdown("##### Annotators' answer")
    kind = "subjective" if gold.is_subjective else "factual"
    with st.container(border=True):
        if gold.no_answer:
            st.markdown(f"**No answer** (unanswerable in its review) · {kind} question · {markdown_literal(gold.id)}")
        else:
            texts = " · ".join(f"“{a.text}”" for a in gold.answers)
            st.markdown(f"**{markdown_literal(texts)}** · {kind} question · {markdown_literal(gold.id)}")
        rank = gold_rank(gold, asked.documents)
        st.caption(
            f"Its review was retrieved at rank {rank} of {len(asked.documents)}."
            if rank
            else "Its review was not retrieved, so the reader never saw it."
        )
        review = Document(
            id=gold.document_id, content=gold.context, meta={"review_id": gold.review_id, "item_id": gold.item_id, "split": [gold.split]}
        )
        st.html(cards.review_card(review, [(a.start, a.end) for a in gold.located_answers]))


def show_retrieved(asked: Asked, nouns: cards.Nouns) -> None:
    with st.expander(f"Retrieved {nouns.many} ({len(asked.documents)}), with their retriever scores"):
        if not asked.documents:
            st.caption(f"No {nouns.one} of this product matched." if asked.item_id else f"No {nouns.one} matched.")
        for rank, document in enumerate(asked.documents, 1):
            spans = [(v.start, v.end) for v in asked.answers if v.kind == "span" and v.document.id == document.id]
            chips = [cards.chip(f"#{rank} · score {document.score:.3f}", "unknown")]
            if "retriever_scores" in document.meta:  # hybrid: the fused rankings' own scores
                sparse, dense = document.meta["retriever_scores"]
                chips.append(cards.chip(f"BM25 {sparse:.2f}" if sparse is not None else "BM25 –", "unknown"))
                chips.append(cards.chip(f"dense {dense:.2f}" if dense is not None else "dense –", "unknown"))
            if asked.gold is not None and document.id == asked.gold.document_id:
                chips.append(cards.chip("labelled review", "gold-chip"))
            st.html(cards.review_card(document, spans, chips, nouns))


def stale_settings(asked: Asked, options: Options) -> list[str]:
    """The settings that changed since the answer shown was computed, as 'name: the value it used'."""
    if asked.options is None:
        return []
    labels = {
        "answer_stage": STAGE_LABELS,
        "retriever": RETRIEVER_LABELS,
        "no_answer_threshold": {None: "the reader's tuned one"},
        "filter_text": {"": "none"},
    }
    used = {name: getattr(asked.options, name) for name in SETTING_NAMES}
    changed = [name for name, value in used.items() if getattr(options, name) != value]
    names = {name: text.format(many=options.nouns.many) for name, text in SETTING_NAMES.items()}
    return [f"{names[name]}: {labels.get(name, {}).get(used[name], used[name])}" for name in changed]


def show_timings(asked: Asked) -> None:
    st.html(cards.timings_line(asked.timings, asked.pipeline))


# ------------------------------------------------------------------------------------ page


def page_caption(options: Options) -> str:
    if options.collection == PAGE_COLLECTION:
        return "Pick a product and ask a question: the answer comes straight out of what its buyers wrote (SubjQA electronics reviews)."
    if options.subjqa:
        what = "Pick a product (or all documents) and ask a question"
    else:
        what = "Ask a question of all the documents (or pick a product)"
    return markdown_literal(f"{what}: the answer comes straight out of the documents of collection {options.collection}.")


def widget_defaults(settings: Settings) -> dict:
    """``WIDGET_DEFAULTS`` with the depths the settings name (``QA_TOP_K_RETRIEVER``, ``QA_TOP_K_READER``), as the
    other doors read them, within the sliders' ranges."""
    depths = {"top_k": min(settings.top_k_retriever, MAX_TOP_K), "top_k_reader": min(settings.top_k_reader, MAX_TOP_K_READER)}
    return {**WIDGET_DEFAULTS, **depths}


def main() -> None:
    try:
        defaults = widget_defaults(Settings.from_env())
    except QAError:  # said below, where the page reads the settings
        defaults = WIDGET_DEFAULTS
    restore_widgets("search", defaults)
    answering, store, filter_text = sidebar()
    heading = st.container()  # the title, once the collection (reviews or documents) is known
    try:
        settings = Settings.from_env(store=store)
        chosen = collection_panel(settings)
    except QAError as error:  # the sidebar still works (another store)
        answer_settings(answering, cards.REVIEWS)
        keep_widgets("search", KEPT_WIDGETS)
        heading.title(cards.REVIEWS.title)
        st.error(markdown_literal(error), icon=WARNING)
        return
    options = Options(
        **answer_settings(answering, cards.DOCUMENTS if not chosen["subjqa"] else cards.REVIEWS),
        store=store,
        filter_text=filter_text,
        **chosen,
    )
    keep_widgets("search", KEPT_WIDGETS)
    heading.title(options.nouns.title)
    try:
        heading.caption(page_caption(options))
        if uploaded := st.session_state.pop(UPLOADED, None):
            st.success("  \n".join(markdown_literal(line.strip()) for line in uploaded), icon=":material/task_alt:")
        index = resources.open_index(settings, options.collection, options.nouns)
    except QAError as error:
        st.error(markdown_literal(error), icon=WARNING)
        return
    service = resources.service(settings)
    feedback_panel(service.feedback, settings)
    counts = index.item_counts()
    init_from_url(service, options.collection, counts, options.subjqa)
    if options.evaluation:
        st.button(
            "Random labelled question",
            icon=":material/casino:",
            on_click=pick_random_question,
            args=(settings, options.split, list(counts)),
        )
    if notice := st.session_state.pop(NOTICE, None):
        st.warning(markdown_literal(notice), icon=WARNING)
    told = st.session_state.setdefault(SOURCE_NOTICES_TOLD, set())
    if (
        changed := source_notice(index.name, index.backend, index.manifest)
    ) and changed not in told:  # once: every question would repeat it
        told.add(changed)
        st.warning(markdown_literal(changed), icon=WARNING)
    asked_now = search_form(counts, options.nouns) | st.session_state.pop(ASK_NOW, False)
    keep_widgets("search", KEPT_WIDGETS)
    if asked_now:
        ask(settings, options, bool(counts))
    asked = st.session_state.get(ASKED)
    if asked is None:
        return
    if st.query_params.get("q") != asked.question:  # the link names the answer shown (a page switch drops it)
        link_to(options.collection, asked.item_id, asked.question, resources.default_collection(settings), bool(counts))
    if stale := stale_settings(asked, options):
        st.info(
            markdown_literal(f"The answers below come from other settings ({', '.join(stale)}). Press Ask to update them."),
            icon=":material/info:",
        )
    if asked.warning:
        st.warning(markdown_literal(asked.warning), icon=WARNING)
    show_timings(asked)
    if asked.gold is not None:
        answers, gold = st.columns([3, 2], gap="large")
        with answers:
            show_answers(service, asked, options.nouns)
        with gold:
            show_gold(asked)
    else:
        show_answers(service, asked, options.nouns)
    show_retrieved(asked, options.nouns)


main()
