"""`qa-system api` as a command: what its log says (each change with its client, startup, failures, in uvicorn's
style beside uvicorn's own lines, as loud as --log-level says), and a full disk under QA_HOME, met by an upload
and by `qa-system index`, as one line naming the disk and the fix.

The full disk is real: a tmpfs of 64 KiB mounted on QA_HOME's staging folder, in a mount namespace of the
server's own (``unshare``); where the machine allows none, those tests are skipped."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from helpers.subjqa import write_subjqa
from qa_system.serving.api.server import CLI
from qa_system.serving.webapp import REPO_ROOT, free_port, serve_process

TOKEN = "log-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FULL_DISK = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0" && exec "$@"']


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return write_subjqa(tmp_path_factory.mktemp("subjqa"))


def environment(data_dir: Path, home: Path, tiny_reader: Path, **more: str) -> dict[str, str]:
    return {
        "QA_DATA_DIR": str(data_dir),
        "QA_HOME": str(home),
        "QA_READER_MODEL": str(tiny_reader),
        "QA_READER_BACKEND": "torch",
        "QA_API_DOCUMENTS": "1",
        "QA_API_TOKEN": TOKEN,
        "QA_API_RATE_LIMIT": "0",
        **more,
    }


@contextmanager
def api_command(env: dict[str, str], log: Path, args: tuple[str, ...] = (), before: tuple[str, ...] = ()) -> Iterator[str]:
    """`qa-system api ARGS` (run by ``before``, a command that execs it) on a free port; its stdout and stderr in ``log``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [*before, *CLI, "api", "--host", "127.0.0.1", "--port", str(port), *args]
    with serve_process(command, f"{url}/health", "qa-system api", env, log, timeout=240):
        yield url


def ended(url: str, task: httpx.Response) -> dict:
    assert task.status_code == 202, task.text
    while (status := httpx.get(f"{url}/tasks/{task.json()['task_id']}", headers=AUTH).json())["status"] == "running":
        time.sleep(0.2)
    return status


def documents(n: int, start: int = 0) -> dict:
    return {
        "documents": [{"id": f"r{i}", "text": f"Review {i}: the battery lasts {i % 9 + 1} days.", "item_id": "P1"} for i in range(start, n)]
    }


def test_changes_and_startup_are_logged_as_uvicorn_logs_as_loud_as_asked(data_dir, tiny_reader, tmp_path):
    """Nothing configured the package's loggers in `qa-system api`: the documented change log never appeared."""
    env = environment(data_dir, tmp_path / "home", tiny_reader)
    with api_command(env, tmp_path / "api.log") as url:
        assert httpx.post(f"{url}/collections", json={"name": "logged"}, headers=AUTH).status_code == 201
        assert ended(url, httpx.post(f"{url}/collections/logged/documents", json=documents(2), headers=AUTH))["status"] == "done"
        assert httpx.delete(f"{url}/collections/logged/documents/r0", headers=AUTH).status_code == 200
        assert httpx.delete(f"{url}/collections/logged/documents/nope", headers=AUTH).status_code == 404  # was logged as a deletion
        assert httpx.delete(f"{url}/collections/logged", headers=AUTH).status_code == 200
    log = (tmp_path / "api.log").read_text(encoding="utf-8")
    assert re.search(r"^INFO:     API: http://127\.0\.0\.1:\d+  \(OpenAPI docs at /docs", log, re.M), log
    assert re.search(r"^INFO:     Collection 'logged' created \(client 127\.0\.0\.1\)\.$", log, re.M), log
    assert re.search(
        r"^INFO:     Adding 2 documents to collection 'logged' \(task logged-1-\d+-[0-9a-f]{6}\) \(client 127\.0\.0\.1\)\.$", log, re.M
    )
    assert re.search(r"^INFO:     Document 'r0' deleted from collection 'logged' \(client 127\.0\.0\.1\)\.$", log, re.M), log
    assert "'nope' deleted" not in log and "0 documents deleted" not in log
    assert re.search(r"^INFO:     Collection 'logged' deleted \(1 document\) \(client 127\.0\.0\.1\)\.$", log, re.M), log
    assert log.count("Application startup complete.") == 1 and log.count('"POST /collections HTTP/1.1" 201') == 1  # uvicorn's, once

    with api_command(env, tmp_path / "quiet.log", args=("--log-level", "WARNING")) as url:
        assert httpx.post(f"{url}/collections", json={"name": "quiet"}, headers=AUTH).status_code == 201
    quiet = (tmp_path / "quiet.log").read_text(encoding="utf-8")
    assert "Collection 'quiet' created" not in quiet and "API: http" not in quiet and "POST /collections" not in quiet, quiet


def test_the_api_waits_for_a_search_server_that_does_not_answer_yet(data_dir, tiny_reader, tmp_path):
    """`qa-system api --store opensearch` exited 2 at start while its search server (a container still starting) did not
    answer yet: the API starts, says why in its log, and /health says what it waits for."""
    port, closed = free_port(), free_port()
    env = environment(data_dir, tmp_path / "home", tiny_reader, QA_STORE="opensearch", QA_OPENSEARCH_URL=f"http://127.0.0.1:{closed}")
    command = [*CLI, "api", "--host", "127.0.0.1", "--port", str(port), "--collection", "shop"]
    with (tmp_path / "api.log").open("w") as log:
        process = subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline, health = time.monotonic() + 120, None
            while health is None and process.poll() is None and time.monotonic() < deadline:
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
                except httpx.TransportError:
                    time.sleep(0.2)
            assert process.poll() is None, (tmp_path / "api.log").read_text()
            assert health is not None and health.status_code == 503 and health.json()["status"] == "loading"
            assert health.json()["waiting"]["error"].startswith(f"OpenSearch at http://127.0.0.1:{closed} is unreachable.")
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert "The API starts, and loads the collections once it answers." in (tmp_path / "api.log").read_text()


def test_an_unknown_log_level_is_one_line(capsys, monkeypatch):
    from qa_system.cli import main

    assert main(["api", "--log-level", "loud", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: Unknown log level 'loud' (QA_LOG_LEVEL). Fix: use one of: critical, error, warning, info, debug."


@pytest.fixture(scope="module")
def can_fill_a_disk(tmp_path_factory) -> None:
    folder = tmp_path_factory.mktemp("tmpfs-probe")
    try:
        probe = subprocess.run([*FULL_DISK, str(folder), "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"no mount namespace for a tiny disk here: {error}")
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace for a tiny disk here: {probe.stderr.decode(errors='replace').strip()}")


def test_an_upload_that_fills_the_disk_is_a_507_naming_it_in_the_task_and_the_log(can_fill_a_disk, data_dir, tiny_reader, tmp_path):
    """The task ended 'Internal error (OSError)', a 500, and the log had nothing."""
    home = tmp_path / "home"
    staging = home / "indexes" / "staging"
    staging.mkdir(parents=True)
    env = environment(data_dir, home, tiny_reader)
    with api_command(env, tmp_path / "api.log", before=(*FULL_DISK, str(staging))) as url:
        assert httpx.post(f"{url}/collections", json={"name": "full"}, headers=AUTH).status_code == 201
        assert ended(url, httpx.post(f"{url}/collections/full/documents", json=documents(2), headers=AUTH))["status"] == "done"
        failed = ended(url, httpx.post(f"{url}/collections/full/documents", json=documents(200, 2), headers=AUTH))
        listed = {c["name"]: c for c in httpx.get(f"{url}/collections", headers=AUTH).json()}
    assert (failed["status"], failed["error_status"]) == ("failed", 507), failed
    assert failed["error"] == (
        "No space left on the disk of $QA_HOME. Fix: free space there, then send the documents again; nothing already indexed was lost."
    )
    assert listed["full"]["documents"] == 2  # as it was
    log = (tmp_path / "api.log").read_text(encoding="utf-8")
    line = f"ERROR:    Adding documents to collection 'full' failed (task {failed['task_id']}): No space left on the disk of {home}. Fix: "
    assert line in log, log[-3000:]
    assert "Traceback" not in log


def test_index_on_a_full_disk_names_what_it_could_not_write(can_fill_a_disk, data_dir, tmp_path):
    """`qa-system index` said 'error: Cannot use: No space left on device.', naming no path."""
    home = tmp_path / "home"
    staging = home / "indexes" / "staging"
    staging.mkdir(parents=True)
    source = tmp_path / "reviews.jsonl"
    source.write_text("\n".join(json.dumps(d) for d in documents(200)["documents"]), encoding="utf-8")
    ran = subprocess.run(
        [*FULL_DISK, str(staging), *CLI, "index", "--input", str(source), "--collection", "full"],
        env={**os.environ, **environment(data_dir, home, tmp_path)},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert ran.returncode == 2, ran.stderr[-2000:]
    assert ran.stderr.strip().splitlines()[-1] == (
        f"error: Cannot use QA_HOME ({home}): No space left on device. "
        "Fix: free disk space there, or point QA_HOME (the indexes), --out or --output at another disk."
    )
