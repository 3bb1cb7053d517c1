"""Progress of long jobs (indexing, embedding, evaluation, training): one helper for all of them.

In a terminal it is a tqdm bar with the total, the rate and the time left. When the output is not a
terminal (a log file, ``docker logs``, a CI job), a bar would be one endless line of carriage returns,
and tqdm's own choice there is silence: instead a plain line every ``LOG_EVERY_S`` seconds, with the
count, the total and share when known, the rate and the time left, and one line when the job ends
(a job done within the first ``LOG_EVERY_S`` seconds says nothing, and one that fails says only its error)::

    embedding: 1,216/5,000 reviews (24%), 40.5 reviews/s, 1m33s left
    embedding: done, 5,000/5,000 reviews in 2m03s, 40.6 reviews/s

A job whose total is unknown (a file read as a stream) may say how far it is by a share
(``fraction``, e.g. of the file's bytes read and of what they hold processed): the time left comes from that.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

T = TypeVar("T")
LOG_EVERY_S = 10.0  # seconds between two log lines when the output is not a terminal


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is an interactive terminal (where a bar can redraw itself)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def duration(seconds: float) -> str:
    """``7s``, ``2m03s``, ``1h05m``: a short human duration."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """How far a job is: ``update(n)`` as work is done, ``set_postfix(**values)`` for figures beside the count, ``close()``
    (or a ``with`` block) at the end. A tqdm bar when ``stream`` (stderr by default) is a terminal, a log line every
    ``every`` seconds otherwise; nothing when ``enabled`` is false. ``clock`` is for tests."""

    def __init__(
        self,
        total: int | None = None,
        desc: str = "",
        unit: str = "items",
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        every: float | None = None,
        fraction: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        initial: int = 0,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.desc, self.unit, self.fraction, self.clock = total, desc, unit, fraction, clock
        self.every = LOG_EVERY_S if every is None else every
        self.n = initial
        self.postfix: dict[str, Any] = {}
        self.terminal = enabled and is_terminal(self.stream)
        self.logging = enabled and not self.terminal
        self.started = self._last = clock()
        self._start_n = initial
        self._closed = False
        self._logged = False  # whether a line was written: the last line comes only after one
        self.bar = None
        if self.terminal:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=f" {unit}", file=self.stream, dynamic_ncols=True, initial=initial)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(failed=exc_type is not None)

    def set_total(self, total: int | None) -> None:
        """The total, once it is known (or changes)."""
        self.total = total
        if self.bar is not None:
            self.bar.total = total
            self.bar.refresh()

    def update(self, n: int = 1) -> None:
        """``n`` more done: the bar moves; a log line when ``every`` seconds went by since the last one."""
        self.n += n
        if self.bar is not None:
            if self.total is None and self.fraction is not None:
                self.bar.set_postfix_str(self._postfix_text(self.clock(), with_share=True), refresh=False)
            self.bar.update(n)
        else:
            self._log_when_due()

    def _log_when_due(self) -> None:
        """A log line when ``every`` seconds went by since the last one (without a terminal)."""
        if self.logging:
            now = self.clock()
            if now - self._last >= self.every:
                self._last = now
                self._logged = True
                self._write(self._line(now))

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        """Figures shown beside the count (e.g. ``embedded=1200``); ``refresh``: shown at once (the bar redrawn, or a log
        line when one is due), for work that moves the figures while the count stands still."""
        self.postfix = values
        if self.bar is not None and self.total is None and self.fraction is not None:
            self.bar.set_postfix_str(self._postfix_text(self.clock(), with_share=True), refresh=refresh)
        elif self.bar is not None:
            self.bar.set_postfix(values, refresh=refresh)
        elif refresh:
            self._log_when_due()

    def close(self, failed: bool = False) -> None:
        """The bar closed, or the last log line (the count, the time taken, the rate) after any other; once.
        ``failed``: the job stopped on an error, whose message is the last word (no "done" line)."""
        if self._closed:
            return
        self._closed = True
        if self.bar is not None:
            self.bar.close()
        elif self.logging and self._logged and not failed:
            now = self.clock()
            rate = self._rate(now)
            count = f"{self.n:,}/{self.total:,}" if self.total is not None else f"{self.n:,}"
            rate_text = f", {rate:,.1f} {self.unit}/s" if rate is not None else ""
            self._write(f"{self.desc}: done, {count} {self.unit} in {duration(now - self.started)}{rate_text}{self._extra()}")

    def _rate(self, now: float) -> float | None:
        elapsed = now - self.started
        return (self.n - self._start_n) / elapsed if elapsed > 0 else None

    def _left(self, now: float) -> float | None:
        """Seconds left: from the rate and the total, or from the share done (``fraction``)."""
        rate = self._rate(now)
        if self.total is not None:
            return (self.total - self.n) / rate if rate else None
        share = self.fraction() if self.fraction is not None else None
        if share and 0 < share <= 1:
            return (now - self.started) * (1 - share) / share
        return None

    def _extra(self) -> str:
        return "".join(
            f", {key.replace('_', ' ')} {value:,}" if isinstance(value, int) else f", {key.replace('_', ' ')} {value}"
            for key, value in self.postfix.items()
        )

    def _postfix_text(self, now: float, with_share: bool) -> str:
        parts = []
        share = self.fraction() if with_share and self.fraction is not None else None
        if share is not None:
            parts.append(f"~{100 * share:.0f}% done")
        left = self._left(now)
        if left is not None:
            parts.append(f"{duration(left)} left")
        return ", ".join(parts) + self._extra()

    def _line(self, now: float) -> str:
        """``desc: count[/total (share)], rate, time left[, postfix]``."""
        if self.total is not None:
            share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
            text = f"{self.desc}: {self.n:,}/{self.total:,} {self.unit}{share}"
        else:
            text = f"{self.desc}: {self.n:,} {self.unit}"
            share = self.fraction() if self.fraction is not None else None
            if share is not None:
                text += f" (~{100 * share:.0f}% done)"
        rate = self._rate(now)
        if rate is not None and self.n > self._start_n:
            text += f", {rate:,.1f} {self.unit}/s"
        left = self._left(now) if self.n > self._start_n else None
        if left is not None:
            text += f", {duration(left)} left"
        return text + self._extra()

    def _write(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: progress is never worth failing the job
            pass


def track(
    iterable: Iterable[T],
    desc: str = "",
    unit: str = "items",
    *,
    total: int | None = None,
    enabled: bool = True,
    stream: IO[str] | None = None,
    every: float | None = None,
) -> Iterator[T]:
    """Each item of ``iterable``, with a ``Progress`` over them (``total``: its length when it has one)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, desc, unit, enabled=enabled, stream=stream, every=every) as progress:
        for item in iterable:
            yield item
            progress.update()


def training_progress(
    desc: str = "training", stream: IO[str] | None = None, every: float | None = None, clock: Callable[[], float] = time.monotonic
):
    """A transformers ``TrainerCallback`` showing the training steps as a ``Progress`` (the trainer's own bar off:
    ``disable_tqdm=True``), with the last logged loss beside the count."""
    from transformers import TrainerCallback

    class StepProgress(TrainerCallback):
        """Training steps done, out of ``max_steps``, with the last loss."""

        progress: Progress | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            """Start counting at the step training starts from (a resumed run's)."""
            self.progress = Progress(state.max_steps, desc, "steps", stream=stream, every=every, clock=clock, initial=state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            """One more step."""
            if self.progress is not None:
                self.progress.update(state.global_step - self.progress.n)

        def on_log(self, args, state, control, logs=None, **kwargs):
            """The loss beside the count (nothing printed of its own)."""
            if self.progress is not None and logs and "loss" in logs:
                self.progress.set_postfix(loss=f"{logs['loss']:.4f}")

        def on_train_end(self, args, state, control, **kwargs):
            """The last line."""
            if self.progress is not None:
                self.progress.close()

    return StepProgress()
