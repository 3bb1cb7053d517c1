"""Running the API: ``qa-system api`` in the foreground (uvicorn), or on a free loopback port for
tests and the load test (``serve_api``, a child process stopped at the end of the block)."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.serving.api.app import create_app
from qa_system.serving.service import ServedCollection
from qa_system.serving.webapp import free_port, serve_process

logger = logging.getLogger(__name__)

CLI = [sys.executable, "-c", "import sys; from qa_system.cli import main; sys.exit(main())"]


def run_api(
    settings: Settings, collections: Sequence[ServedCollection], host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> None:
    """Serve until a stop signal (uvicorn finishes the requests in flight, for up to 10 s)."""
    import uvicorn

    with socket.socket() as probe:  # uvicorn would log the clash and exit 1; this says it in one line
        # As uvicorn binds: a server just stopped leaves its connections in TIME_WAIT on the port for up to
        # a minute, which refuses a plain bind but not uvicorn's; a listening server still refuses both.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise QAError(f"Cannot listen on {host}:{port} ({error.strerror}).", "pass another --port, or stop what uses it.") from None
    logger.info(
        "API: http://%s:%s  (OpenAPI docs at /docs; loading the models and indexes: GET /health answers 200 when ready)", host, port
    )
    size_torch_threads(settings)
    uvicorn.run(create_app(settings, collections), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=10)


def size_torch_threads(settings: Settings) -> int:
    """PyTorch's threads per operation in a server that answers ``api_workers`` questions at once: the physical cores
    shared among the workers (each runs its own torch operations: the question encoder, a torch reader), so that
    workers x threads never exceeds the cores. The ONNX reader has its own lane (``reading.batching``)."""
    import torch

    from qa_system.reading.onnx import physical_cores

    threads = max(1, physical_cores() // settings.api_workers)
    torch.set_num_threads(threads)
    return threads


@contextmanager
def serve_api(
    env: Mapping[str, str] | None = None, args: Sequence[str] = (), log: Path | None = None, timeout: float = 300
) -> Iterator[str]:
    """``qa-system api ARGS`` on a free 127.0.0.1 port; yields its URL once /health answers ready."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serve_process(
        [*CLI, "api", "--host", "127.0.0.1", "--port", str(port), *args], f"{url}/health", "qa-system api", env, log, timeout
    ):
        yield url
