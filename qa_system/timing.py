"""Per-component wall time of Haystack pipeline runs, through Haystack's own tracing hook.

``with component_timings() as timings: pipeline.run(...)`` fills ``timings`` with seconds per
component name. The timer wraps whatever tracer is active (so user tracing keeps working) and
records into a context variable, so concurrent runs (Streamlit sessions) never mix their figures.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from haystack import tracing
from haystack.tracing import Span, Tracer

_ACTIVE: ContextVar[dict[str, float] | None] = ContextVar("qa_system_component_timings", default=None)
COMPONENT_RUN = "haystack.component.run"


class _ComponentTimer(Tracer):
    def __init__(self, inner: Tracer):
        self.inner = inner

    @contextlib.contextmanager
    def trace(self, operation_name: str, tags: dict[str, Any] | None = None, parent_span: Span | None = None) -> Iterator[Span]:
        start = time.perf_counter()
        with self.inner.trace(operation_name, tags=tags, parent_span=parent_span) as span:
            try:
                yield span
            finally:
                timings = _ACTIVE.get()
                if timings is not None and operation_name == COMPONENT_RUN:
                    name = (tags or {}).get("haystack.component.name", "?")
                    timings[name] = timings.get(name, 0.0) + time.perf_counter() - start

    def current_span(self) -> Span | None:
        return self.inner.current_span()


@contextlib.contextmanager
def component_timings() -> Iterator[dict[str, float]]:
    """Seconds per component name of the pipeline runs inside the block, filled in as they finish."""
    if not isinstance(tracing.tracer.actual_tracer, _ComponentTimer):
        tracing.tracer.actual_tracer = _ComponentTimer(tracing.tracer.actual_tracer)
    timings: dict[str, float] = {}
    token = _ACTIVE.set(timings)
    try:
        yield timings
    finally:
        _ACTIVE.reset(token)
