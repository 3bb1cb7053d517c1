"""The model server: one process that runs the models of every process of an API server on its GPU.

A GPU runs one process's kernels at a time. Twelve API processes with their own models on one H200 took turns
on it (the GPU always busy, each process spinning a core on its waits) and answered 147 questions a second.
With a model server, the API processes hold no GPU memory: their PyTorch reader and encoders send their
windows and texts here (``model_client``), and one lane per model batches the questions of all the processes:
the reader's (``reading.batching``) and an encoder's (``EncoderLane``).

``run_api`` starts it (``ModelServer``) for a server of several processes on a GPU, unless
``QA_API_MODEL_SERVER=0``, starts it again when it ends on its own, and stops it as the API stops; a model server
whose API was killed ends by itself. Each connection, one per calling thread, gets a thread here; models load on
first use (after a restart too), and run as graphs traced from them (``torchscript``): one thread launches each
lane's calls for every process, and a module's Python would cost it milliseconds a call. Every ``LOAD_EVERY_S``
the log says what each lane did meanwhile: a lane busy nearly all the time sets the pace.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Client, Listener
from pathlib import Path

import numpy as np

from qa_system.errors import QAError
from qa_system.model_client import ADDRESS_VARIABLE, KEY_VARIABLE

logger = logging.getLogger(__name__)

LOAD_EVERY_S = 30.0
ENCODER_MIX_TOLERANCE = 1e-5  # the most a unit vector's component may move beside other questions' texts


class ModelServer:
    """The model server, started on ``device`` for the block, its address in this process's environment (which the
    API's processes inherit); started again when it ends on its own (a GPU's fatal error ends a process), its
    models loaded anew as they are asked for; stopped, and its socket removed, at the end of the block."""

    def __init__(self, device: str, start_timeout: float = 120, retry_s: float = 10):
        self.device, self.start_timeout, self.retry_s = device, start_timeout, retry_s
        self._process: subprocess.Popen | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> ModelServer:
        self._folder = tempfile.mkdtemp(prefix="qa-models-")  # the user's alone (0700), as is the socket in it
        self._address, self._key = str(Path(self._folder) / "socket"), secrets.token_bytes(32)
        try:
            self._start()
        except QAError:
            self.__exit__(None, None, None)
            raise
        os.environ[ADDRESS_VARIABLE], os.environ[KEY_VARIABLE] = self._address, self._key.hex()
        logger.info("Models on %s: one model server (process %d) for every server process.", self.device, self._process.pid)
        self._watcher = threading.Thread(target=self._watch, name="model-server-watch", daemon=True)
        self._watcher.start()
        return self

    def _start(self) -> None:
        # A program of its own (not a fork, which CUDA does not survive, nor multiprocessing's spawn, which runs this
        # process's __main__ again), handed its address and key in its environment; its log is this process's.
        Path(self._address).unlink(missing_ok=True)  # the socket of one that ended
        env = {**os.environ, ADDRESS_VARIABLE: self._address, KEY_VARIABLE: self._key.hex()}
        self._process = subprocess.Popen([*PROGRAM, self.device], env=env)
        deadline = time.monotonic() + self.start_timeout
        while not _answers(self._address, self._key):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise QAError(
                    f"The model server did not start (it ended, or took over {self.start_timeout:.0f} s).",
                    "see the log above; or serve with QA_API_MODEL_SERVER=0.",
                )
            time.sleep(0.05)

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            if (code := self._process.poll()) is None:
                continue
            logger.error("The model server (process %d) ended with exit code %s; starting it again.", self._process.pid, code)
            try:
                self._start()
                logger.info("The model server runs again (process %d).", self._process.pid)
            except QAError as error:
                logger.error("%s Trying again in %.0f s.", error.problem, self.retry_s)
                self._stopping.wait(self.retry_s)

    def __exit__(self, *exc) -> None:
        for name in (ADDRESS_VARIABLE, KEY_VARIABLE):
            os.environ.pop(name, None)
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        shutil.rmtree(self._folder, ignore_errors=True)


PROGRAM = [sys.executable, "-c", "import sys; from qa_system.serving.model_server import main; main(sys.argv[1])"]


def _answers(address: str, key: bytes) -> bool:
    """Whether the model server at ``address`` accepts a connection with ``key``."""
    try:
        Client(address, family="AF_UNIX", authkey=key).close()
    except OSError:  # not listening yet
        return False
    return True


def main(device: str) -> None:
    """The model server's program: serves on the socket its environment names until it is stopped."""
    address, key = os.environ.pop(ADDRESS_VARIABLE), bytes.fromhex(os.environ.pop(KEY_VARIABLE))  # its models are its own
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("model server: %(message)s"))
    package = logging.getLogger("qa_system")
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    # Ctrl-C reaches the whole process group; the API stops this server as it stops itself, and if the API is
    # killed instead, this server ends with it rather than hold the GPU's memory.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with, args=(os.getppid(), address), name="model-server-parent", daemon=True).start()
    models = Models(device)
    threading.Thread(target=_log_load, args=(models,), name="model-server-load", daemon=True).start()
    with Listener(address, family="AF_UNIX", authkey=key) as listener:
        while True:
            try:
                connection = listener.accept()
            except Exception as error:  # a caller without the key, or one gone at once: its handshake alone fails
                logger.warning("A connection was refused: %s", error)
                continue
            threading.Thread(target=answer, args=(connection, models), name="model-server-caller", daemon=True).start()


def _end_with(parent: int, address: str) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    shutil.rmtree(Path(address).parent, ignore_errors=True)  # the folder the API would have removed
    os._exit(0)


def answer(connection, models: Models) -> None:
    """Replies to one caller's requests, in order, until it goes away."""
    with connection:
        while True:
            try:
                kind, *args = connection.recv()
            except (OSError, EOFError):
                return
            try:
                reply = ("ok", models.handle(kind, *args))
            except QAError as error:
                reply = ("error", error.problem, error.fix)
            except Exception as error:  # the caller hears of it; the server keeps serving
                logger.exception("The model server's %s request failed.", kind)
                reply = ("error", f"The model server's {kind} request failed: {type(error).__name__}: {error}", None)
            connection.send(reply)


def _log_load(models: Models, every_s: float = LOAD_EVERY_S) -> None:
    before: dict[str, tuple] = {}
    while True:
        time.sleep(every_s)
        now = models.load()
        for line in load_lines(before, now, every_s):
            logger.info(line)
        before = now


def load_lines(before: dict[str, tuple], now: dict[str, tuple], seconds: float) -> list[str]:
    """What each lane did between two ``Models.load`` snapshots ``seconds`` apart, a line for each that served."""
    lines = []
    for name, (served, calls, busy_s) in now.items():
        served_before, calls_before, busy_before = before.get(name, (0, 0, 0.0))
        if served > served_before:
            lines.append(
                f"{name}: {served - served_before} requests in {calls - calls_before} calls in the last {seconds:.0f} s, "
                f"busy {100 * (busy_s - busy_before) / seconds:.0f}% of it."
            )
    return lines


class Models:
    """The models asked for, each loaded once (by the first caller; the others wait), with its lane."""

    def __init__(self, device: str):
        from qa_system.devices import resolve_device

        self.device = resolve_device(device)
        self._readers: dict[tuple, object] = {}
        self._encoders: dict[str, EncoderLane] = {}
        self._lock = threading.Lock()

    def handle(self, kind: str, *args):
        """The reply to one request (``model_client`` sends them)."""
        if kind == "logits":  # a model server started again loads the model anew for its first question
            key, arrays, batch_size = args
            lane = self._readers.get(key) or self._reader(*key)
            start, end = lane.logits(arrays, batch_size)
            return start, end, lane.waited_s
        if kind == "encode":
            model, texts = args
            return (self._encoders.get(model) or self._encoder(model)).encode(texts)
        if kind == "load":
            return self.load()
        if kind == "load_reader":
            return self._reader(*args).model.precision
        if kind == "load_encoder":
            lane = self._encoder(*args)
            return {"device": self.device, "precision": lane.encoder.precision, "dimension": lane.dimension}
        raise QAError(f"The model server has no request '{kind}'.", "use the same qa_system version in the API and its model server.")

    def load(self) -> dict[str, tuple[int, int, float]]:
        """Each lane's requests served, model calls made and seconds spent in them, so far."""
        with self._lock:
            lanes = [(f"reader {key[0]}", lane) for key, lane in self._readers.items()]
            lanes += [(f"encoder {model}", lane) for model, lane in self._encoders.items()]
        return {name: (lane.served, lane.calls, lane.busy_s) for name, lane in lanes}

    def _reader(self, model: str, wait_s: float, max_windows: int):
        from qa_system.reading.model import load_qa_model
        from qa_system.reading.reader import on_device, torch_lane

        key = (model, wait_s, max_windows)
        with self._lock:
            if key not in self._readers:
                self._readers[key] = torch_lane(on_device(load_qa_model(model)[1].eval(), self.device), model, wait_s, max_windows)
                logger.info("The reader %s reads on %s.", model, self.device)
            return self._readers[key]

    def _encoder(self, model: str) -> EncoderLane:
        from qa_system.ingestion.embedding import load_encoder

        with self._lock:
            if model not in self._encoders:
                self._encoders[model] = EncoderLane(load_encoder(model, "torch", self.device))
                logger.info("The encoder %s runs on %s.", model, self.device)
            return self._encoders[model]


class EncoderLane:
    """Runs ``encoder`` for every caller of ``encode`` from one thread: texts of the callers that arrive within
    ``wait_s`` of the first share its calls, where that moves no vector by more than ``ENCODER_MIX_TOLERANCE``
    (measured at start: float32 padding to other lengths moves them by rounding alone); else each runs alone."""

    def __init__(self, encoder, wait_s: float = 0.002, max_texts: int = 512):
        from qa_system.ingestion.embedding import TRACE_CHECKS

        self.encoder, self.wait_s, self.max_texts = encoder, wait_s, max_texts
        if hasattr(encoder, "trace"):  # PyTorch (on a GPU, traced as it loads; here on a CPU too)
            encoder.trace()
        checks = TRACE_CHECKS[:2]  # two questions' texts of other lengths, encoded alone and together
        alone = [encoder.encode(texts) for texts in checks]
        together = encoder.encode([text for texts in checks for text in texts])
        self.dimension = int(together.shape[1])
        deviation = float(np.abs(np.concatenate(alone) - together).max())
        self.mix = deviation <= ENCODER_MIX_TOLERANCE
        logger.info(
            "Vectors encoded beside others moved by up to %.2g; %s.",
            deviation,
            "callers share calls" if self.mix else "each caller runs alone",
        )
        self._jobs: queue.Queue[tuple[list[str], Future, float]] = queue.Queue()
        self.calls = 0  # encoder calls made, for tests
        self.served, self.busy_s = 0, 0.0  # callers served, and seconds spent encoding for them
        threading.Thread(target=self._serve, name="encoder-lane", daemon=True).start()

    def encode(self, texts: list[str]) -> np.ndarray:
        """One unit-length float32 row per text, computed in the lane's thread; blocks until done."""
        done: Future = Future()
        self._jobs.put((texts, done, time.perf_counter()))
        return done.result()

    def _serve(self) -> None:
        while True:
            jobs = self._gather(self._jobs.get())
            began = time.perf_counter()
            try:
                vectors = self.encoder.encode([text for texts, _, _ in jobs for text in texts])
                self.calls += 1
                begin = 0
                for texts, done, _ in jobs:
                    done.set_result(vectors[begin : begin + len(texts)])
                    begin += len(texts)
            except BaseException as error:  # every waiting caller hears of it; the lane keeps serving
                logger.exception("The encoder's call failed.")
                for _, done, _ in jobs:
                    if not done.done():
                        done.set_exception(error)
            self.served, self.busy_s = self.served + len(jobs), self.busy_s + time.perf_counter() - began

    def _gather(self, first: tuple) -> list[tuple]:
        jobs, texts = [first], len(first[0])
        deadline = first[2] + self.wait_s
        while self.mix and texts < self.max_texts:
            try:
                job = self._jobs.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                break
            jobs.append(job)
            texts += len(job[0])
        return jobs
