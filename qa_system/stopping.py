"""Whether this process was told to stop while a library held the interrupt.

A native library can catch the interrupt that SIGTERM or Ctrl+C raises and fail with an error of its own
(ONNX Runtime loading a model): a cached export must not be taken for damaged, and rebuilt, for that.
"""

from __future__ import annotations

import threading

_asked = threading.Event()


def ask_to_stop() -> None:
    """Record that the process was told to stop (the command line's SIGTERM handler calls it)."""
    _asked.set()


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` may be a stop in disguise: the process was told to stop, or an interrupt caused it."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return _asked.is_set()
