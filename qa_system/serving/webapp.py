"""Serving the Streamlit search page (``ui/app.py``): ``qa-system ui``, and the page or any server on a free loopback port.

``qa-system ui`` runs ``streamlit_command``. ``serve`` starts the page on a free loopback port and
stops it again (``serve_process`` does that for any server with a health URL, the API too).
Driving the page from a headless browser (the browser tests, ``qa-system bench page`` and the
README screenshot) is ``qa_system.bench.browser``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qa_system.config import REPO_ROOT, Settings
from qa_system.errors import QAError

logger = logging.getLogger(__name__)

APP = REPO_ROOT / "ui" / "app.py"


def streamlit_command(port: int = 8501, address: str = "localhost", headless: bool = True, watch: bool = False) -> list[str]:
    """``streamlit run ui/app.py`` with the flags of a served page (no telemetry, no file watcher, no forced garbage
    collection: Streamlit's full ``gc.collect()`` after every script run walks the loaded models' and documents'
    objects, and under eight sessions took about 40% of the page server's CPU, profiled; Python's own GC still runs)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--server.headless",
        str(headless).lower(),
        "--server.fileWatcherType",
        "auto" if watch else "none",
        "--runner.postScriptGC",
        "false",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
        "--theme.base",
        "light",
        "--theme.primaryColor",
        "#c2410c",
    ]


def settings_environment(overrides: Mapping[str, Any]) -> dict[str, str]:
    """The ``QA_*`` variables that hand settings (e.g. the CLI's flags) to the page's process."""
    return {env: str(overrides[name]) for name, env in Settings.environment_variables().items() if overrides.get(name) is not None}


# Signals that mean "stop serving": kill's default, Ctrl-C, a closed terminal.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
# How long Streamlit may take to stop after a stop signal before it is killed.
STOP_GRACE_S = 10.0


def run_app(port: int, address: str, overrides: Mapping[str, Any], watch: bool = False) -> int | None:
    """Run the page in the foreground; returns Streamlit's exit code, or None once a stop signal stopped it.

    Stop signals sent to this process are passed on to Streamlit, and this process waits for it to
    exit (killing it after ``STOP_GRACE_S``): before, ``kill -TERM`` ended only this process and left
    the page serving on its port, with no parent.
    """
    logger.info("Search page: http://%s:%s  (Ctrl-C stops it)", address, port)
    env = {**os.environ, **settings_environment(overrides)}
    stops: list[tuple[float, int]] = []  # (when, signal) of each stop signal
    started: list[subprocess.Popen] = []

    def forward(signum: int, frame) -> None:
        stops.append((time.monotonic(), signum))
        for process in started:
            if process.poll() is None:
                process.send_signal(signum)

    # Handlers first, so that no signal can end this process alone once Streamlit runs. Python lets
    # only the main thread set them; called from another thread, the caller handles signals.
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS} if in_main_thread else {}
    try:
        process = subprocess.Popen(streamlit_command(port, address, headless=True, watch=watch), env=env)
        started.append(process)
        if stops:  # it came while Streamlit was starting
            process.send_signal(stops[0][1])
        while True:
            try:
                code = process.wait(timeout=0.2)
                return None if stops else code
            except subprocess.TimeoutExpired:
                if stops and time.monotonic() - stops[0][0] > STOP_GRACE_S:
                    process.kill()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for process in started:
            if process.poll() is None:  # whatever went wrong here, never leave the page serving without us
                process.kill()
                process.wait()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 at the time of asking."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serve_process(
    command: list[str], health_url: str, name: str, env: Mapping[str, str] | None = None, log: Path | None = None, timeout: float = 120
) -> Iterator[subprocess.Popen]:
    """``command`` running until the block ends (terminated, killed after 15 s); yields once ``health_url`` answers 200."""
    output = open(log, "w", encoding="utf-8") if log else subprocess.DEVNULL
    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=output, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + timeout
        while not healthy(health_url):
            if process.poll() is not None:
                raise QAError(f"{name} exited with code {process.returncode} before serving.", f"see its log{f' in {log}' if log else ''}.")
            if time.monotonic() > deadline:
                raise QAError(
                    f"{name} did not answer on {health_url} within {timeout:.0f} s.", "see its log, or raise the timeout on a slow machine."
                )
            time.sleep(0.3)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            output.close()


@contextmanager
def serve(env: Mapping[str, str] | None = None, log: Path | None = None, timeout: float = 120) -> Iterator[str]:
    """The page served on a free loopback port; yields its URL once Streamlit reports healthy."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serve_process(streamlit_command(port, "127.0.0.1"), f"{url}/_stcore/health", "Streamlit", env, log, timeout):
        yield url


def healthy(url: str) -> bool:
    """Whether ``url`` answers 200 (a health endpoint: Streamlit's /_stcore/health, the API's /health)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False
