"""`qa-system ui` as a real process tree: a stop signal reaches the Streamlit server it starts,
both exit, and the port is free again."""

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from helpers.subjqa import write_subjqa
from qa_system.config import REPO_ROOT
from qa_system.serving.webapp import free_port, healthy

CLI = [sys.executable, "-c", "import sys; from qa_system.cli import main; sys.exit(main())"]


def port_is_free(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False  # something still accepts connections
    except OSError:
        pass
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # our own closed health checks may sit in TIME_WAIT
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.mark.parametrize(
    "signum, to_group",
    [
        (signal.SIGTERM, False),  # `kill PID`: ended the CLI alone and left Streamlit serving on the port
        (signal.SIGINT, False),  # `kill -INT PID`
        (signal.SIGINT, True),  # Ctrl-C in a terminal: the whole process group gets it
        (signal.SIGHUP, False),  # the terminal closed: also left Streamlit serving
    ],
    ids=["SIGTERM", "SIGINT", "SIGINT-to-group", "SIGHUP"],
)
def test_a_stop_signal_stops_the_page_server_and_frees_its_port(tmp_path, signum, to_group):
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")),
        "QA_HOME": str(tmp_path / "home"),
    }
    log_path = tmp_path / "ui.log"
    with open(log_path, "w", encoding="utf-8") as log:
        # Its own session: a group signal reaches the CLI and Streamlit, never pytest.
        cli = subprocess.Popen(
            [*CLI, "ui", "--port", str(port), "--address", "127.0.0.1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    servers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not healthy(f"http://127.0.0.1:{port}/_stcore/health"):
            assert cli.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the page never answered: " + log_path.read_text()
            time.sleep(0.3)
        servers = psutil.Process(cli.pid).children(recursive=True)
        assert servers, "Streamlit runs as a child of qa-system ui"

        if to_group:
            os.killpg(cli.pid, signum)
        else:
            cli.send_signal(signum)
        # Limits for a busy machine, not a speed check: the CLI kills Streamlit itself 10 s after the signal.
        assert cli.wait(timeout=120) == 0, log_path.read_text()
        _, alive = psutil.wait_procs(servers, timeout=5)
        assert not alive, f"still running after the CLI exited: {alive}"
        assert port_is_free(port)
        assert "Search page stopped." in log_path.read_text()
    finally:  # never leave a server behind, whatever failed
        for process in [*servers, psutil.Process(cli.pid) if cli.poll() is None else None]:
            if process is not None and process.is_running():
                process.kill()
        cli.wait()
