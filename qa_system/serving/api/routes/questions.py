"""`/query`: a question answered, as one JSON body or as server-sent events."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from qa_system.serving.api.error_mapping import GUARDED, errors
from qa_system.serving.api.schemas import EVENT_STREAM_SCHEMA, QueryRequest, QueryResponse
from qa_system.serving.api.served_api import PROTECTED, Served
from qa_system.serving.api.streaming import EVENT_STREAM
from qa_system.serving.api.strict_json import StrictJSONRoute
from qa_system.serving.question import Question

router = APIRouter(route_class=StrictJSONRoute)


@router.post(
    "/query",
    response_model=QueryResponse,
    dependencies=PROTECTED,
    tags=["answers"],
    summary="answer a question about a product",
    responses={200: {"content": {EVENT_STREAM: {"schema": EVENT_STREAM_SCHEMA}}}, **errors(*GUARDED, 404, 413, 422, 503)},
)
async def query(body: QueryRequest, request: Request, api: Served) -> Any:
    """The retrieved reviews and the answers read from them (or generated, citing them), with each stage's time.

    With `stream` (or `Accept: text/event-stream`) the answer comes as server-sent events.
    """
    question = api.loaded().check(Question(**body.model_dump(exclude={"stream"})))
    if body.stream or EVENT_STREAM in request.headers.get("accept", ""):
        return StreamingResponse(api.stream_answer(question), media_type=EVENT_STREAM, headers={"Cache-Control": "no-store"})
    return await api.answer(question, request)
