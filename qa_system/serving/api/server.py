"""Running the API: ``qa-system api`` in the foreground (uvicorn), or on a free loopback port for
tests and the load test (``serve_api``, a child process stopped at the end of the block).

With ``api_processes`` above 1, uvicorn's worker processes share the port (the kernel hands each new
connection to one of them), each with its own service and worker threads: Python runs one
thread at a time per process, so a GPU that answers in a few milliseconds is kept busy only by
several processes. On a GPU their models run in one model server (``serving.model_server``), on a CPU
in each process. They share the store as the page and the CLI do (a collection changed on disk is
opened again); each counts its own rate limit and holds its own background tasks, so the document
routes, whose uploads are followed by later requests, need a server of one process.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.serving.api.app import create_app
from qa_system.serving.model_server import ModelServer
from qa_system.serving.service import QAService, ServedCollection
from qa_system.serving.webapp import free_port, serve_process, settings_environment

logger = logging.getLogger(__name__)

CLI = [sys.executable, "-c", "import sys; from qa_system.cli import main; sys.exit(main())"]
SERVED_VARIABLE = "QA_API_SERVED"  # the served collections, handed to the worker processes


def run_api(settings: Settings, collections: Sequence[ServedCollection], host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until a stop signal (uvicorn finishes the requests in flight, for up to 10 s), logging as ``server_logging``."""
    with socket.socket() as probe:  # uvicorn would log the clash and exit 1; this says it in one line
        # As uvicorn binds: a server just stopped leaves its connections in TIME_WAIT on the port for up to
        # a minute, which refuses a plain bind but not uvicorn's; a listening server still refuses both.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise QAError(f"Cannot listen on {host}:{port} ({error.strerror}).", "pass another --port, or stop what uses it.") from None
    with server_logging(settings.log_level):
        _serve(settings, collections, {"host": host, "port": port, "log_level": settings.log_level, "timeout_graceful_shutdown": 10})


def _serve(settings: Settings, collections: Sequence[ServedCollection], served: dict) -> None:
    import uvicorn

    if settings.api_processes > 1:  # refused, or prepared, before the address is announced
        check_processes(settings)
        prepare_for_processes(settings, collections)
    logger.info(
        "API: http://%s:%s  (OpenAPI docs at /docs; loading the models and indexes: GET /health answers 200 when ready)",
        served["host"],
        served["port"],
    )
    if settings.api_processes == 1:
        size_thread_pools(settings)
        uvicorn.run(create_app(settings, collections), **served)
        return
    os.environ.update(settings_environment(settings.model_dump()))
    os.environ[SERVED_VARIABLE] = json.dumps([[c.name, c.subjqa_domain] for c in collections])
    logger.info("Serving from %d processes, each with %d worker threads.", settings.api_processes, settings.api_workers)
    with ModelServer(settings.device) if uses_model_server(settings) else nullcontext():
        uvicorn.run(f"{__name__}:app_from_environment", factory=True, workers=settings.api_processes, **served)


def log_like_uvicorn(level: str) -> Callable[[], None]:
    """The package's records from ``level`` up (``Settings.log_level``) on stderr as uvicorn writes its own, "INFO:     ...";
    returns what puts the package's logging back as it was. Its other handlers (the CLI's console lines) are set aside
    meanwhile, and nothing goes on to the root logger: no record twice. uvicorn's records stay with uvicorn's handlers."""
    from uvicorn.logging import DefaultFormatter

    package = logging.getLogger("qa_system")
    handlers, level_before, propagate = package.handlers[:], package.level, package.propagate
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s", use_colors=None))
    handler.setLevel(level.upper())  # below the package: a module the CLI keeps at INFO is quieted too
    package.handlers, package.propagate = [handler], False
    package.setLevel(level.upper())

    def restore() -> None:
        package.handlers, package.propagate = handlers, propagate
        package.setLevel(level_before)

    return restore


@contextmanager
def server_logging(level: str) -> Iterator[None]:
    """For the length of the block, the package logs as ``log_like_uvicorn``: a server's changes (each with its client),
    its startup and its failures, beside uvicorn's lines."""
    restore = log_like_uvicorn(level)
    try:
        yield
    finally:
        restore()


def uses_model_server(settings: Settings) -> bool:
    """Whether a server of several processes runs their models in one model server: on a GPU, unless turned off."""
    from qa_system.devices import is_cuda, resolve_device

    return settings.api_processes > 1 and settings.api_model_server and is_cuda(resolve_device(settings.device))


def prepare_for_processes(settings: Settings, collections: Sequence[ServedCollection]) -> None:
    """What each process would build at once, built first: missing indexes, model exports, vectors asked for at start.
    In a process of its own, on the configured device, that ends before the servers start: the supervising process
    holds no models and no GPU memory."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as preparing:
        preparing.submit(_load_service, settings, list(collections)).result()  # its QAError is raised here


def _load_service(settings: Settings, collections: list[ServedCollection]) -> None:
    QAService(settings, collections).load()


def app_from_environment():
    """A worker process's app: the settings and served collections ``run_api`` handed down in the environment."""
    from qa_system.devices import share_cores

    settings = Settings.from_env()
    log_like_uvicorn(settings.log_level)  # a process of its own (spawned by uvicorn): nothing logged the package's records yet
    share_cores(settings.api_processes)  # every thread pool of the process (ONNX Runtime's, PyTorch's) sized to its part
    size_thread_pools(settings)
    return create_app(settings, [ServedCollection(name, domain) for name, domain in json.loads(os.environ[SERVED_VARIABLE])])


def check_processes(settings: Settings) -> None:
    """Several processes serve questions only: an upload is followed by requests that another process would answer."""
    if settings.api_processes > 1 and settings.api_documents:
        raise QAError(
            f"The document routes (QA_API_DOCUMENTS=1) need a server of one process; {settings.api_processes} were asked for.",
            "serve questions from several processes and documents from a second server with --processes 1 (they share the store).",
        )


def size_thread_pools(settings: Settings) -> int:
    """Threads per operation in a server that answers ``api_workers`` questions at once: the process's physical cores
    (``devices.share_cores``) shared among the workers, so that workers x threads never exceeds the cores. For PyTorch
    (the question encoder, a torch reader) and FAISS's OpenMP team (a dense search, which by default takes every core
    for one question's vector: on 2 cores 1.2-1.5x the time of one thread, at twice its CPU). The ONNX reader has its
    own lane (``reading.batching``)."""
    import torch

    from qa_system.reading.onnx import physical_cores

    threads = max(1, physical_cores() // settings.api_workers)
    torch.set_num_threads(threads)
    try:
        import faiss
    except ImportError:  # an environment of its own packages without FAISS (a GPU image): no FAISS store to search
        return threads
    faiss.omp_set_num_threads(threads)
    return threads


@dataclass(frozen=True)
class RunningAPI:
    """A ``qa-system api`` that ``serve_api`` started: its URL, and its process (the server processes and the model
    server, when it has them, are its descendants)."""

    url: str
    pid: int


@contextmanager
def serve_api(
    env: Mapping[str, str] | None = None, args: Sequence[str] = (), log: Path | None = None, timeout: float = 300
) -> Iterator[RunningAPI]:
    """``qa-system api ARGS`` on a free 127.0.0.1 port; yields it once /health answers ready."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serve_process(
        [*CLI, "api", "--host", "127.0.0.1", "--port", str(port), *args], f"{url}/health", "qa-system api", env, log, timeout
    ) as process:
        yield RunningAPI(url, process.pid)
