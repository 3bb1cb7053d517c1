"""What the endpoints share (``ServedAPI``): the service, its settings, the metrics and the pools of worker
threads; the answer to a question, streamed or not, stopped when its client leaves."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Security
from fastapi.responses import Response
from fastapi.security import HTTPBearer

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.serving.answer_views import answer_cards, answer_views, rank_answers
from qa_system.serving.api.error_mapping import public, status_of
from qa_system.serving.api.guards import Metrics
from qa_system.serving.api.schemas import AnswerOut, QueryResponse, ReviewOut
from qa_system.serving.api.streaming import CLIENT_CLOSED_REQUEST, DISCONNECT_POLL_S, KEEPALIVE, KEEPALIVE_S, sse, stopping_when
from qa_system.serving.service import QAService, Question

logger = logging.getLogger(__name__)


class ServedAPI:
    """What the endpoints share: the service, its settings, the metrics and the pool of worker threads.

    One per app, kept in ``app.state.api``; the routes get it through ``Depends(served_api)``.
    """

    def __init__(self, settings: Settings, service: QAService, metrics: Metrics):
        self.settings, self.service, self.metrics = settings, service, metrics
        self.workers: ThreadPoolExecutor | None = None  # from the server's start to its stop
        self.generating: ThreadPoolExecutor | None = None  # RAG answers' own threads: a slow generation never holds a worker
        # Document changes' own thread: reading and checking an upload (seconds for a large file) never holds a
        # question's worker, and uploads sent at once are checked one after another, not all against the questions.
        self.changing: ThreadPoolExecutor | None = None
        self.keepalive_s = KEEPALIVE_S  # seconds of silence before an event stream sends a keep-alive comment

    def start(self) -> None:
        """Open the pool of ``api_workers`` threads and start loading the service (in the background)."""
        self.workers = ThreadPoolExecutor(self.settings.api_workers, thread_name_prefix="qa-api-worker")
        self.generating = ThreadPoolExecutor(self.settings.api_workers, thread_name_prefix="qa-api-generator")
        self.changing = ThreadPoolExecutor(1, thread_name_prefix="qa-api-changes")
        self.service.start()

    def stop(self) -> None:
        """Stop the service, and the worker threads without waiting for the questions they are reading."""
        self.service.stop()
        self.workers.shutdown(wait=False, cancel_futures=True)
        self.generating.shutdown(wait=False, cancel_futures=True)
        self.changing.shutdown(wait=False, cancel_futures=True)

    def status(self, health: bool = False) -> dict[str, Any]:
        """The service's status (``QAService.status``; with ``health``, ``QAService.health``: whether its search server
        answers too), with the readiness gauge brought up to date; its errors name no path of the server."""
        status = self.service.health() if health else self.service.status()
        self.metrics.ready.set(status["status"] == "ready")
        if status.get("error"):
            status = {**status, "error": public(status["error"], self.settings)}
        if (status.get("waiting") or {}).get("error"):
            status = {**status, "waiting": {**status["waiting"], "error": public(status["waiting"]["error"], self.settings)}}
        return status

    def loaded(self) -> QAService:
        """The service once its models and indexes are loaded; a 503 naming what it waits for before that."""
        status = self.status()
        if status["status"] != "ready":
            if status["status"] == "failed":
                detail = f"The server failed to load: {status['error']}"
            elif waiting := status.get("waiting"):
                detail = f"The server is waiting for its search server: {waiting['error']}"
            else:
                detail = "The server is still loading its models and indexes. Fix: retry when GET /health answers 200."
            raise HTTPException(503, detail)
        return self.service

    async def blocking(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """``function`` run in a worker thread (a RAG question's in a generator thread: extractive questions
        never wait behind a generation), and the seconds it waited for one."""
        submitted = time.perf_counter()
        started: list[float] = []

        def run() -> Any:
            started.append(time.perf_counter())
            return function(*args, **kwargs)

        rag = isinstance(args[0] if args else None, Question) and args[0].mode == "rag"
        result = await asyncio.get_running_loop().run_in_executor(self.generating if rag else self.workers, run)
        return result, started[0] - submitted

    async def changing_documents(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function`` (a change to documents: reading and checking an upload, a deletion) run in the thread of document changes."""
        return await asyncio.get_running_loop().run_in_executor(self.changing, functools.partial(function, *args))

    def respond(self, question: Question, result: dict[str, Any], queued: float) -> QueryResponse:
        """The response body of an answered question; its stage times go to the metrics."""
        timings = {**result["timings"], "queue_s": queued}
        for stage in ("retrieval_s", "answer_s", "queue_s"):
            self.metrics.stages.labels(stage.removesuffix("_s")).observe(timings[stage])
        views = answer_views(result.get("answers", []))
        return QueryResponse(
            query=question.query,
            collection=question.collection or self.service.names[0],
            item_id=question.item_id,
            retriever=question.retriever or self.settings.retriever,
            mode=question.mode,
            pipeline=result["pipeline"],
            no_answer=rank_answers(views).abstains,
            answers=[AnswerOut.of(v, c) for v, c in zip(views, answer_cards(views))],
            documents=[ReviewOut.of(d) for d in result["documents"]],
            timings=timings,
            device=result.get("device"),
        )

    async def answer(self, question: Question, request: Request) -> QueryResponse | Response:
        """The answer to ``question``; a generated (RAG) one stops when the client leaves before its end."""
        if question.mode != "rag":  # only a generator can be stopped part-way: nothing to watch for
            result, queued = await self.blocking(self.service.ask, question)
            return self.respond(question, result, queued)
        client_gone = threading.Event()
        run = asyncio.ensure_future(self.blocking(self.service.ask, question, stopping_when(client_gone)))
        watching = asyncio.ensure_future(self.stop_when_disconnected(request, run, client_gone))
        try:
            result, queued = await run
        except Exception:
            if client_gone.is_set():  # the generator stopped on purpose (ClientGone, wrapped by the pipeline)
                return Response(status_code=CLIENT_CLOSED_REQUEST)
            raise
        finally:
            watching.cancel()
        return self.respond(question, result, queued)

    async def stop_when_disconnected(self, request: Request, run: asyncio.Future, client_gone: threading.Event) -> None:
        """Sets ``client_gone`` if the client disconnects before ``run`` is done (a RAG answer then stops)."""
        while not run.done():
            if await request.is_disconnected():
                self.stop_generating(client_gone)
                return
            await asyncio.sleep(DISCONNECT_POLL_S)

    def stop_generating(self, client_gone: threading.Event) -> None:
        """Tell the generator of an answer whose client left to stop at its next piece of text."""
        client_gone.set()
        self.metrics.generations_stopped.inc()
        logger.info("A client left before its answer: it is stopped at the generator's next piece of text.")

    async def stream_answer(self, question: Question) -> AsyncIterator[str]:
        """``token`` events while the generator writes (RAG), then the whole response as ``result``.

        A client that leaves stops the generator at its next piece of text: the worker thread is free
        for other questions instead of writing an answer nobody reads.
        """
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str] = asyncio.Queue()
        client_gone = threading.Event()
        forward = stopping_when(client_gone, lambda chunk: loop.call_soon_threadsafe(pieces.put_nowait, chunk.content))
        run = asyncio.ensure_future(self.blocking(self.service.ask, question, forward))
        waiting: asyncio.Future | None = None
        try:
            while not run.done() or not pieces.empty():
                waiting = waiting or asyncio.ensure_future(pieces.get())
                done, _ = await asyncio.wait({run, waiting}, timeout=self.keepalive_s, return_when=asyncio.FIRST_COMPLETED)
                if not done:  # nothing to send for a while (the first token can take minutes): a comment keeps the connection open
                    yield KEEPALIVE
                elif waiting.done():
                    piece, waiting = waiting.result(), None
                    if piece:
                        yield sse("token", {"text": piece})
        finally:  # also when the server cancels the stream because its client disconnected
            if waiting is not None:
                waiting.cancel()
            if not run.done():
                self.stop_generating(client_gone)
                run.add_done_callback(
                    lambda done: done.cancelled() or done.exception()
                )  # the ClientGone is expected: not "never retrieved"
        try:
            result, queued = run.result()
        except QAError as error:
            yield sse("error", {"detail": public(str(error), self.settings), "status": status_of(error)})
            return
        yield sse("result", self.respond(question, result, queued).model_dump(mode="json"))


def served_api(request: Request) -> ServedAPI:
    """The ``ServedAPI`` of the app that received ``request`` (a route dependency)."""
    return request.app.state.api


Served = Annotated[ServedAPI, Depends(served_api)]
# Documents the token on the routes that need it (the docs' Authorize button); Guarded checks it.
PROTECTED = [Security(HTTPBearer(auto_error=False))]
