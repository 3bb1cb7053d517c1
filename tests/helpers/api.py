"""A REST API under test: its settings over the tiny corpus, served by uvicorn on a free loopback port,
and its server-sent events read back."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from helpers.openai_stub import MODEL
from helpers.subjqa import write_subjqa
from qa_system.config import Settings
from qa_system.serving.webapp import free_port


def api_settings_for(root: Path, tiny_reader: Path, generator_url: str, **more) -> Settings:
    """Settings of a REST API under test: the tiny corpus and reader (PyTorch), the OpenAI stub at ``generator_url``
    as the generator, no rate limit; ``more`` settings beside them."""
    return Settings.from_env(
        data_dir=write_subjqa(root / "subjqa"),
        home=root / "home",
        store="memory",
        reader_model=str(tiny_reader),
        reader_backend="torch",
        generator="openai",
        generator_base_url=generator_url,
        generator_model=MODEL,
        api_rate_limit=0,
        **more,
    )


@contextmanager
def running(app) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free loopback port, stopped at the end."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def wait_ready(url: str, timeout: float = 180) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(f"{url}/health")
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        assert response.json()["status"] == "loading", response.text
        time.sleep(0.2)


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        if block.startswith(":"):  # a comment: the keep-alive of a quiet stream
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events
