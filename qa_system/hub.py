"""Is the Hugging Face hub reachable? Asked with a short timeout, and remembered for a minute.

Offline, huggingface_hub retries every file of a model id with backoff (1 + 2 + 4 + 8 + 8 s for
each of them, about 50 s for a reader) before it gives up. Loading a hub id with
``local_files_only=True`` when the hub does not answer fails in well under a second instead, and
still loads a model that is already in the local cache. With a network, the loading code is
unchanged: ``from_pretrained(id)`` downloads as before.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qa_system.errors import QAError

PROBE_TIMEOUT_S = 2.0
# A long-running page server notices the network coming back (or going away).
RECHECK_S = 60.0
_probes: dict[str, tuple[float, bool]] = {}
_lock = threading.Lock()


def hub_endpoint() -> str:
    """The hub's url: https://huggingface.co, or the mirror HF_ENDPOINT names."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def _offline_mode() -> bool:
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return constants.HF_HUB_OFFLINE or any(str(flag).upper() in ("1", "ON", "YES", "TRUE") for flag in flags if flag)


def _answers(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except urllib.error.HTTPError:  # any HTTP status: something answered
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the hub answers an HTTP request within ``timeout`` seconds (False in HF offline mode).

    The request runs in a thread so that a hanging DNS look-up (which no socket timeout covers)
    cannot stall it either. Proxies come from the usual *_PROXY variables.
    """
    if _offline_mode():
        return False
    endpoint = hub_endpoint()
    with _lock:  # the page's sessions load models concurrently: one probe for all of them
        probed = _probes.get(endpoint)
        if probed is not None and time.monotonic() - probed[0] < RECHECK_S:
            return probed[1]
        result: list[bool] = []
        probe = threading.Thread(target=lambda: result.append(_answers(endpoint, timeout)), daemon=True)
        probe.start()
        probe.join(timeout + 0.5)
        reachable = bool(result and result[0])
        _probes[endpoint] = (time.monotonic(), reachable)
        return reachable


def is_hub_id(name: str) -> bool:
    """A model id for the hub rather than a path on this machine."""
    return not (Path(name).exists() or name.startswith((".", "/", "~")))


@contextmanager
def quiet_local_load(name: str | Path) -> Iterator[None]:
    """Loading from a folder on this machine: no transformers progress bar ("Loading weights 0/103" amid a command's
    own output, for a load that takes milliseconds). A hub id keeps its bars: they show a download's progress."""
    from transformers.utils import logging

    if is_hub_id(str(name)) or not logging.is_progress_bar_enabled():
        yield
        return
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.enable_progress_bar()


def load_options(name: str) -> dict[str, Any]:
    """Extra ``from_pretrained`` arguments: only the local cache when ``name`` is a hub id and the hub does not answer."""
    return {"local_files_only": True} if is_hub_id(name) and not hub_reachable() else {}


def unreachable(what: str, name: str) -> QAError:
    """The one-line error for a hub id that is neither reachable nor in the local cache."""
    return QAError(
        f"Could not load the {what} '{name}': the model hub ({hub_endpoint()}) cannot be reached and the model is not in the local cache.",
        "pass a local model directory, or download the model once with a network (HF_ENDPOINT may name a mirror).",
    )
