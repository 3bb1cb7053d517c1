"""`/feedback`: users' verdicts on answers, and the confirmed ones exported as SQuAD v2."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from qa_system.errors import NotFound, QAError, Unavailable
from qa_system.serving.api.error_mapping import GUARDED, errors
from qa_system.serving.api.schemas import SQUAD_SCHEMA, FeedbackOut, FeedbackRequest
from qa_system.serving.api.served_api import PROTECTED, Served
from qa_system.serving.api.strict_json import StrictJSONRoute
from qa_system.serving.feedback import Feedback

router = APIRouter(route_class=StrictJSONRoute)


@router.post(
    "/feedback",
    response_model=FeedbackOut,
    status_code=201,
    dependencies=PROTECTED,
    tags=["feedback"],
    summary="record a verdict on an answer",
    responses={
        200: {"model": FeedbackOut, "description": "a repeated `click_id`: nothing new stored, the first click returned"},
        **errors(*GUARDED, 404, 413, 422, 503),
    },
)
async def feedback(body: FeedbackRequest, api: Served) -> JSONResponse:
    """Store a user's verdict on one answer (the verdicts: see `verdict`): 201, or 200 for a `click_id` stored before."""
    values = body.model_dump(exclude={"collection", "document_id"})
    service = api.loaded()

    def record() -> tuple[Feedback, bool]:  # in the worker: the event loop never waits on SQLite
        return service.record_feedback(body.collection, body.document_id, **values)

    (saved, new), _ = await api.blocking(record)
    return JSONResponse(FeedbackOut.of(saved).model_dump(mode="json"), status_code=201 if new else 200)


@router.get(
    "/feedback/export",
    dependencies=PROTECTED,
    tags=["feedback"],
    summary="the confirmed answers as SQuAD v2 (train-reader's --train-file)",
    responses={200: {"content": {"application/json": {"schema": SQUAD_SCHEMA}}}, **errors(*GUARDED, 404, 503)},
)
async def export_feedback(api: Served) -> JSONResponse:
    """The answers users confirmed, as a SQuAD v2 file; its summary in the `X-Feedback-Summary` header."""
    try:
        export, _ = await api.blocking(api.loaded().export_feedback)
    except Unavailable:  # a database that cannot be used: 503, as POST /feedback's
        raise
    except QAError as error:  # nothing exportable yet
        raise NotFound(error.problem, error.fix) from None
    return JSONResponse(export.squad, headers={"X-Feedback-Summary": export.summary()})
