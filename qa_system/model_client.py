"""The models of a server's processes, run by one model server (``serving.model_server``) that they call.

A GPU runs one process's work at a time: server processes that each hold their own models on one GPU take
turns on it and spin on every wait. A server of several processes on a GPU starts one model server
instead, and hands its address to its processes in the environment (``ADDRESS_VARIABLE``, ``KEY_VARIABLE``).
Their PyTorch reader and PyTorch encoders then send windows and texts there (``RemoteReader``,
``RemoteEncoder``), where one lane per model batches the questions of every process.

Each calling thread keeps one connection (a Unix socket, authenticated by the key: what comes over it is
unpickled).
"""

from __future__ import annotations

import os
import threading
from multiprocessing.connection import Client
from typing import Any

import numpy as np

from qa_system.errors import QAError, Unavailable

ADDRESS_VARIABLE = "QA_MODEL_SERVER"  # the model server's socket
KEY_VARIABLE = "QA_MODEL_SERVER_KEY"  # its key, in hex
_STOPPED = Unavailable(
    "The model server of this API does not answer (it stopped, and is started again unless the API is stopping).",
    "ask again shortly; the API's log says why it stopped.",
)


class ModelClient:
    """Calls to the model server at ``address``: ``request`` sends one and returns its reply."""

    def __init__(self, address: str, key: bytes):
        self.address, self._key = address, key
        self._local = threading.local()

    def request(self, kind: str, *args: Any) -> Any:
        """The model server's reply to ``kind`` with ``args``; its errors are raised here."""
        try:
            connection = self._connection()
            connection.send((kind, *args))
            status, *reply = connection.recv()
        except (OSError, EOFError) as error:
            self._local.__dict__.pop("connection", None)
            raise _STOPPED from error
        if status == "error":  # the model server's QAError, or its failure (the API answers 503)
            problem, fix = reply
            raise QAError(problem, fix) if fix else Unavailable(problem)
        return reply[0]

    def _connection(self):
        if getattr(self._local, "connection", None) is None:
            self._local.connection = Client(self.address, family="AF_UNIX", authkey=self._key)
        return self._local.connection

    def reader(self, model: str, wait_s: float, max_windows: int) -> RemoteReader:
        """The span model ``model`` (loaded there once), read through its lane."""
        return RemoteReader(self, model, wait_s, max_windows, self.request("load_reader", model, wait_s, max_windows))

    def encoder(self, model: str) -> RemoteEncoder:
        """The sentence encoder ``model`` in PyTorch (loaded there once)."""
        return RemoteEncoder(self, model, **self.request("load_encoder", model))


class RemoteReader:
    """A reader's inference lane (``reading.batching.ReaderScheduler``) in the model server."""

    def __init__(self, client: ModelClient, model: str, wait_s: float, max_windows: int, precision: str):
        self._client, self._key = client, (model, wait_s, max_windows)
        self.precision = precision  # what the lane reads in: "float32" where questions share its calls
        self._waited = threading.local()

    def logits(self, encoding, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) logits of every window, -inf on padding, as the lane computes them."""
        arrays = {name: np.asarray(encoding[name]) for name in ("input_ids", "attention_mask", "token_type_ids") if name in encoding}
        start, end, self._waited.seconds = self._client.request("logits", self._key, arrays, batch_size)
        return start, end

    @property
    def waited_s(self) -> float:
        """How long the calling thread's last question waited for the lane, in seconds."""
        return getattr(self._waited, "seconds", 0.0)


class RemoteEncoder:
    """A sentence encoder in the model server, as ``ingestion.embedding.TorchSentenceEncoder``."""

    backend = "torch"

    def __init__(self, client: ModelClient, model: str, device: str, precision: str, dimension: int):
        self._client, self._model = client, model
        self.device, self.precision, self.dimension = device, precision, dimension

    def encode(self, texts, batch_size: int = 32) -> np.ndarray:
        """One unit-length float32 row per text."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._client.request("encode", self._model, texts)


_client: ModelClient | None = None
_client_lock = threading.Lock()


def model_server() -> ModelClient | None:
    """This process's model server, when the server it belongs to started one (its environment says so)."""
    global _client
    address = os.environ.get(ADDRESS_VARIABLE)
    if not address:
        return None
    with _client_lock:
        if _client is None or _client.address != address:
            _client = ModelClient(address, bytes.fromhex(os.environ.get(KEY_VARIABLE, "")))
        return _client
