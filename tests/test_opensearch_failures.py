"""The OpenSearch store when things go wrong around it: the search server stops answering during an
ingestion's last steps, an ingestion is killed midway, a collection is deleted by another process while
the API serves it. Against the real test server (conftest.py's `opensearch_url`); a lost connection is
a real one: the client talks to the server through a TCP proxy (``CuttingProxy``) that goes down at a
chosen request, before the server sees it or after the server has carried it out.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid

import httpx
import pytest

from helpers.api import api_settings_for, running, wait_ready
from helpers.password_server import asking_for_a_password
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import NoSpace, NotFound
from qa_system.ingestion import list_collections, open_collection
from qa_system.serving.api import create_app
from qa_system.serving.served import ServedCollection
from qa_system.serving.service import QAService
from qa_system.stores import OPENSEARCH_FIX, delete_opensearch_index, opensearch_client, remove_leftover_indices

pytestmark = pytest.mark.opensearch

CLI = [sys.executable, "-c", "import sys; from qa_system.cli import main; sys.exit(main())"]


class CuttingProxy:
    """A TCP proxy to the server at ``target_url`` that goes down (every connection closed, new ones refused) at the
    first request whose request line matches ``cut``: ``before`` the server sees it, or ``after`` the server carried
    it out (its answer never arrives). ``hold`` keeps that request from the server, and the proxy up, until ``down()``."""

    def __init__(self, target_url: str, cut: str, when: str = "before"):
        host, port = target_url.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
        self.target = (host, int(port))
        self.cut, self.when = re.compile(cut.encode()), when
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.matched = threading.Event()
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.is_down = False
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        with self.lock:
            self.is_down = True
            sockets, self.sockets = self.sockets, []
        self.listener.close()
        for end in sockets:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # down
                return
            with self.lock:
                if self.is_down:
                    client.close()
                    continue
                upstream = socket.create_connection(self.target)
                self.sockets += [client, upstream]
            answer_lost = threading.Event()
            threading.Thread(target=self._requests, args=(client, upstream, answer_lost), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, answer_lost), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, answer_lost: threading.Event) -> None:
        tail = b""  # a request line split between two reads is still seen
        try:
            while data := client.recv(65536):
                if not self.matched.is_set() and self.cut.search(tail + data):
                    self.matched.set()
                    if self.when == "before":
                        self.down()
                    if self.when != "after":
                        return
                    answer_lost.set()
                upstream.sendall(data)
                tail = data[-200:]
        except OSError:
            pass

    def _answers(self, upstream: socket.socket, client: socket.socket, answer_lost: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if answer_lost.is_set():  # the server carried the request out: it answers
                    self.down()
                    return
                client.sendall(data)
        except OSError:
            pass


@pytest.fixture
def os_settings(opensearch_url, tmp_path, monkeypatch) -> Settings:
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QA_STORE", raising=False)
    return Settings.from_env(home=tmp_path / "home", store="opensearch", opensearch_url=opensearch_url)


@pytest.fixture
def name(os_settings):
    """A fresh collection name; the alias and every concrete index of that name are deleted afterwards."""
    name = f"qa-system-test-{uuid.uuid4().hex[:8]}"
    yield name
    delete_opensearch_index(os_settings, name)
    opensearch_client(os_settings).indices.delete(index=f"{name}--*", ignore_unavailable=True)


def concrete_indices(settings: Settings, name: str) -> list[str]:
    return sorted(opensearch_client(settings).indices.get(index=f"{name}--*"))


def served_from(settings: Settings, name: str) -> list[str]:
    return sorted(opensearch_client(settings).indices.get_alias(name=name))


def documents(settings: Settings, name: str) -> int:
    return opensearch_client(settings).count(index=name)["count"]


def index_command(source, name: str, url: str) -> list[str]:
    return [
        "index",
        "--input",
        str(source),
        "--collection",
        name,
        "--item-column",
        "item_id",
        "--no-embed",
        "--store",
        "opensearch",
        "--opensearch-url",
        url,
    ]


@pytest.fixture
def reviews(tmp_path):
    """A collection's first version (two reviews) and the file of its second (one review more)."""
    first, second = tmp_path / "first.csv", tmp_path / "reviews.csv"
    first.write_text("id,item_id,text\n1,KETTLE,The kettle boils fast.\n2,LAMP,The lamp is bright.\n", encoding="utf-8")
    second.write_text(first.read_text(encoding="utf-8") + "3,CLOCK,The clock ticks loudly.\n", encoding="utf-8")
    return first, second


STOPPED = (
    "error: The search server at {url} stopped answering while collection '{name}' was being saved; nothing already indexed "
    "was lost. Fix: once it answers, run the same command (or request) again.\n"
)

# ------------------------------------------------------------------------------------ the server stops answering


@pytest.mark.parametrize(
    "request_line, when, swapped",
    [
        (r"POST /{name}/_search\?scroll", "before", False),  # the scan of the documents kept
        (r"POST /_bulk", "before", False),  # their copy into the new index
        (r"POST /{name}--\S+/_refresh", "before", False),
        (r"POST /{name}--\S+/_count", "before", False),
        (r"PUT /{name}--\S+/_mapping", "before", False),  # the manifest
        (r"POST /_aliases", "before", False),  # the swap
        (r"POST /_aliases", "after", True),  # the swap carried out, its answer lost
    ],
    ids=["scan", "copy", "refresh", "count", "manifest", "swap", "swap-answer"],
)
def test_a_server_that_stops_answering_during_the_last_steps_is_one_line_and_the_collection_stays(
    os_settings, name, reviews, capsys, request_line, when, swapped
):
    first, second = reviews
    url = os_settings.opensearch_url
    assert main(index_command(first, name, url)) == 0
    [old] = served_from(os_settings, name)
    capsys.readouterr()
    proxy = CuttingProxy(url, request_line.format(name=re.escape(name)), when)
    assert main(index_command(second, name, proxy.url)) == 2
    assert proxy.matched.is_set()
    # One line naming the problem and the fix; it was a traceback, after a warning to delete by hand the index
    # that, when only the swap's answer was lost, the alias serves.
    assert capsys.readouterr().err == STOPPED.format(url=proxy.url, name=name)
    if swapped:
        assert served_from(os_settings, name) != [old] and documents(os_settings, name) == 3
    else:
        assert served_from(os_settings, name) == [old] and documents(os_settings, name) == 2
    assert [(c.name, c.documents) for c in list_collections(os_settings) if c.name.startswith(name)] == [(name, 3 if swapped else 2)]
    # Run again as the message says: done, and nothing of the cut-off run is left on the server.
    assert main(index_command(second, name, url)) == 0
    assert documents(os_settings, name) == 3 and concrete_indices(os_settings, name) == served_from(os_settings, name)


@pytest.mark.parametrize(
    "request_line, when",
    [
        (r"GET /{name}--\*", "before"),  # the listing of what killed runs left
        (r"HEAD /{name} ", "before"),  # whether the collection exists
        (r"GET /{name}/_mapping", "before"),  # its manifest
        (r"PUT /{name}--", "before"),  # the new index's creation
        (r"PUT /{name}--", "after"),  # created, its answer lost
    ],
    ids=["leftovers", "exists", "manifest", "create", "create-answer"],
)
def test_a_server_that_stops_answering_during_the_first_steps_is_one_line_and_the_collection_stays(
    os_settings, name, reviews, capsys, request_line, when
):
    first, second = reviews
    url = os_settings.opensearch_url
    assert main(index_command(first, name, url)) == 0
    [old] = served_from(os_settings, name)
    capsys.readouterr()
    proxy = CuttingProxy(url, request_line.format(name=re.escape(name)), when)
    # A process of its own, as a user's run is: an index it created is a dead run's leftover once it has ended.
    env = {**os.environ, "QA_HOME": str(os_settings.home), "HAYSTACK_TELEMETRY_ENABLED": "False"}
    cut = subprocess.run([*CLI, *index_command(second, name, proxy.url)], env=env, capture_output=True, text=True, timeout=300)
    assert proxy.matched.is_set()
    # It was a traceback of the client's ConnectionError.
    assert (cut.returncode, cut.stderr) == (2, STOPPED.format(url=proxy.url, name=name))
    assert served_from(os_settings, name) == [old] and documents(os_settings, name) == 2
    assert main(index_command(second, name, url)) == 0
    assert documents(os_settings, name) == 3 and concrete_indices(os_settings, name) == served_from(os_settings, name)


def test_indexing_subjqa_when_the_answer_to_the_swap_is_lost_is_one_line_and_keeps_the_new_index(
    os_settings, name, tiny_subjqa, monkeypatch, capsys
):
    monkeypatch.setenv("QA_DATA_DIR", str(tiny_subjqa))
    url = os_settings.opensearch_url
    command = ["index", "--domain", "electronics", "--collection", name, "--store", "opensearch", "--opensearch-url"]
    assert main([*command, url]) == 0
    [old] = served_from(os_settings, name)
    capsys.readouterr()
    proxy = CuttingProxy(url, r"POST /_aliases", "after")
    assert main([*command, proxy.url, "--force"]) == 2
    assert capsys.readouterr().err == STOPPED.format(url=proxy.url, name=name)
    [new] = served_from(os_settings, name)  # the swap took effect: the new index serves, it was not deleted
    assert new != old and documents(os_settings, name) == 6
    assert main([*command, url, "--force"]) == 0
    assert concrete_indices(os_settings, name) == served_from(os_settings, name) and documents(os_settings, name) == 6


# ------------------------------------------------------------------------------------ a killed ingestion


def killed_midway(settings: Settings, name: str, source, request_line: str) -> str:
    """Run `qa-system index` into ``name`` in a process of its own and SIGKILL it when it sends ``request_line``;
    returns the concrete index it left behind."""
    before = set(concrete_indices(settings, name))
    proxy = CuttingProxy(settings.opensearch_url, request_line, "hold")
    env = {**os.environ, "QA_HOME": str(settings.home), "HAYSTACK_TELEMETRY_ENABLED": "False"}
    process = subprocess.Popen([*CLI, *index_command(source, name, proxy.url)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        held = proxy.matched.wait(180)
        assert held, process.communicate(timeout=5)[0].decode() if process.poll() is not None else "the run never got there"
        # Still running: its index is no leftover yet, whoever looks.
        assert remove_leftover_indices(settings, name) == []
        [left] = set(concrete_indices(settings, name)) - before
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
        proxy.down()
    return left


def test_a_killed_ingestion_leaves_no_collection_and_the_next_ingestion_removes_what_it_left(
    os_settings, name, reviews, tiny_reader, tmp_path, capsys
):
    first, second = reviews
    url = os_settings.opensearch_url
    assert main(index_command(first, name, url)) == 0
    [old] = served_from(os_settings, name)
    left = killed_midway(os_settings, name, second, r"POST /_aliases")  # its manifest saved, the swap not yet
    assert concrete_indices(os_settings, name) == sorted([old, left])
    # Listed as one collection, as it was: the leftover was listed under its own name, and the API's
    # GET /collections answered 422 for it.
    listed = [(c.name, c.documents) for c in list_collections(os_settings) if c.name.startswith(name)]
    assert listed == [(name, 2)]
    capsys.readouterr()
    assert main(["collections", "--json", "--store", "opensearch", "--opensearch-url", url]) == 0
    assert [c["name"] for c in json.loads(capsys.readouterr().out) if c["name"].startswith(name)] == [name]
    settings = api_settings_for(tmp_path / "api", tiny_reader, "http://127.0.0.1:9", api_documents=True, api_token="t0ken")
    settings = settings.model_copy(update={"store": "opensearch", "opensearch_url": url})
    service = QAService(settings, [ServedCollection(name)])
    with running(create_app(settings, service=service)) as api:
        assert wait_ready(api).status_code == 200
        response = httpx.get(f"{api}/collections", headers={"Authorization": "Bearer t0ken"}, timeout=60)
        assert response.status_code == 200, response.text
        assert [(c["name"], c["documents"]) for c in response.json() if c["name"].startswith(name)] == [(name, 2)]
    # The next ingestion into the collection removes what the killed one left, and says so.
    assert main(index_command(second, name, url)) == 0
    assert f"removed the search server index {left}, which an unfinished ingestion left." in capsys.readouterr().out
    [new] = served_from(os_settings, name)
    assert concrete_indices(os_settings, name) == [new] and new not in (old, left) and documents(os_settings, name) == 3


def test_deleting_a_collection_removes_what_a_killed_ingestion_into_it_left(os_settings, name, reviews, capsys):
    first, second = reviews
    url = os_settings.opensearch_url
    assert main(index_command(first, name, url)) == 0
    left = killed_midway(os_settings, name, second, rf"POST /{re.escape(name)}--\S+/_bulk")  # half written
    assert left in concrete_indices(os_settings, name)
    assert main(["collections", "--delete", name, "--store", "opensearch", "--opensearch-url", url]) == 0
    assert concrete_indices(os_settings, name) == []  # the leftover stayed, and the CLI could not name it


def test_a_live_index_and_a_young_one_of_another_machine_are_never_leftovers(os_settings, name, reviews):
    first, _ = reviews
    url = os_settings.opensearch_url
    assert main(index_command(first, name, url)) == 0
    client = opensearch_client(os_settings)
    elsewhere = f"{name}--20240101000000-abcdef"  # made a moment ago by a run on another machine
    client.indices.create(index=elsewhere, body={"mappings": {"_meta": {"qa_system_owner": {"machine": "elsewhere", "pid": 1}}}})
    assert remove_leftover_indices(os_settings, name) == []
    assert elsewhere in concrete_indices(os_settings, name) and len(served_from(os_settings, name)) == 1


# ------------------------------------------------------------------------------------ deleted while served


def test_a_collection_deleted_while_the_api_serves_it_answers_as_an_unknown_one_at_once(
    os_settings, name, reviews, tiny_reader, tmp_path, monkeypatch
):
    first, _ = reviews
    url = os_settings.opensearch_url
    assert main(index_command(first, name, url)) == 0
    # However long the service waits before it lists the search server's collections again (10 s).
    monkeypatch.setattr("qa_system.serving.service.LIST_AGAIN_S", 3600.0)
    settings = api_settings_for(tmp_path / "api", tiny_reader, "http://127.0.0.1:9")
    settings = settings.model_copy(update={"store": "opensearch", "opensearch_url": url})
    question = {"query": "Does the kettle boil fast?", "item_id": "KETTLE", "collection": name}
    with running(create_app(settings, service=QAService(settings, [ServedCollection(name)]))) as api:
        assert wait_ready(api).status_code == 200
        assert httpx.post(f"{api}/query", json=question, timeout=120).status_code == 200
        env = {**os.environ, "QA_HOME": str(os_settings.home), "HAYSTACK_TELEMETRY_ENABLED": "False"}
        deleted = subprocess.run(
            [*CLI, "collections", "--delete", name, "--store", "opensearch", "--opensearch-url", url], env=env, capture_output=True
        )
        assert deleted.returncode == 0, deleted.stderr.decode()
        asked = httpx.post(f"{api}/query", json=question, timeout=120)  # a 500 (index_not_found_exception) until the next listing
        assert asked.status_code == 404, asked.text
        with pytest.raises(NotFound) as unknown:  # what a service that never served it answers
            QAService(settings, [ServedCollection(name)]).index(name)
        assert asked.json()["detail"] == str(unknown.value)
        assert str(unknown.value).startswith(f"No opensearch collection named '{name}'")
        # the commands it names run on this server (they named the memory store's)
        assert f"`qa-system index --input FILE --collection {name} --store opensearch --opensearch-url {url}`" in str(unknown.value)
        assert f"`qa-system collections --store opensearch --opensearch-url {url}` lists" in str(unknown.value)


def test_the_elasticsearch_store_pointed_at_elasticsearch_7_names_the_store_that_serves_it(opensearch_url, tmp_path, capsys, monkeypatch):
    """The bundled Elasticsearch 7.9.2 (or an OpenSearch) answers, but the elasticsearch store's client (8.x) refuses
    it: that was "Elasticsearch ... is unreachable" while the server answered."""
    source = tmp_path / "notes.csv"
    source.write_text("id,text\nn1,The lamp is bright.\n", encoding="utf-8")
    monkeypatch.setenv("QA_ES_URL", opensearch_url)
    argv = ["index", "--input", str(source), "--collection", "notes", "--store", "elasticsearch", "--no-embed", "--home", str(tmp_path)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and re.search(
        rf"The server at {re.escape(opensearch_url)} is (Elasticsearch 7|OpenSearch )[\d.]+, ", error
    )
    assert "which the elasticsearch store cannot use (it needs Elasticsearch 8). Fix: use --store opensearch" in error


def test_the_elasticsearch_store_says_when_a_server_wants_a_password_or_plain_http(opensearch_url, tmp_path, capsys, monkeypatch):
    """Both were "Elasticsearch at ... is unreachable. Fix: start it with docker compose ...", while the server answered."""
    monkeypatch.setenv("QA_HOME", str(tmp_path))
    with asking_for_a_password() as (protected, sent):
        for url, shown, who in (
            (protected, protected, "a request without a user name and password"),
            (
                protected.replace("http://", "http://reader:s3cret@"),
                protected.replace("http://", "http://reader:***@"),
                "the user in the URL",
            ),
        ):
            assert main(["collections", "--store", "elasticsearch", "--es-url", url]) == 2
            assert capsys.readouterr().err == (
                f"error: {shown} refused {who} (401). Fix: give a user of that server in the URL (http://USER:PASSWORD@host:9200, "
                "QA_ES_URL or --es-url), or, if it is not your Elasticsearch server, set QA_ES_URL to that server's URL.\n"
            )
        assert sent[-1] == "Basic cmVhZGVyOnMzY3JldA=="  # the user in the URL is sent
    https = opensearch_url.replace("http://", "https://")
    assert main(["collections", "--store", "elasticsearch", "--es-url", https]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {https} answers plain HTTP, not https. Fix: write the URL with http:// (QA_ES_URL or --es-url).\n"
    )


def test_health_says_unavailable_while_the_search_server_does_not_answer(
    os_settings, name, reviews, tiny_reader, tmp_path, monkeypatch, caplog
):
    """The search server goes away under a ready API: every question then fails (503), and /health said "ready" (200),
    so a load balancer kept sending questions there. It says "unavailable" (503) with the reason now."""
    first, _ = reviews
    assert main(index_command(first, name, os_settings.opensearch_url)) == 0
    monkeypatch.setattr("qa_system.serving.service.STORE_CHECK_EVERY_S", 0.0)
    proxy = CuttingProxy(os_settings.opensearch_url, cut="(?!)")  # matches no request: it goes down when told
    settings = api_settings_for(tmp_path / "api", tiny_reader, "http://127.0.0.1:9")
    # with a password in the URL: /health answers anyone, and showed it
    with_password = proxy.url.replace("http://", "http://admin:s3cretPW@")
    settings = settings.model_copy(update={"store": "opensearch", "opensearch_url": with_password})
    with running(create_app(settings, service=QAService(settings, [ServedCollection(name)]))) as api:
        assert wait_ready(api).status_code == 200
        proxy.down()
        health = httpx.get(f"{api}/health", timeout=30)
        assert health.status_code == 503 and health.json()["status"] == "unavailable", health.text
        shown = proxy.url.replace("http://", "http://admin:***@")
        assert health.json()["error"] == f"OpenSearch at {shown} is unreachable. Fix: {OPENSEARCH_FIX}"
        asked = httpx.post(f"{api}/query", json={"query": "Does it boil fast?", "item_id": "KETTLE", "collection": name}, timeout=60)
        assert asked.status_code == 503 and "s3cretPW" not in asked.text and "admin:***@" in asked.text, asked.text
        again = httpx.post(f"{api}/query", json={"query": "Does it boil fast?", "item_id": "KETTLE", "collection": name}, timeout=60)
        assert again.status_code == 503
        # the log says why, once a minute (its access lines said 503 alone)
        logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("POST /query answered 503: ")]
        assert len(logged) == 1 and "does not answer" in logged[0] and "s3cretPW" not in logged[0], logged


def test_a_search_server_that_refuses_writes_for_a_full_disk_is_one_line_and_the_collection_stays(os_settings, name, reviews, capsys):
    """A full disk makes the server block writes (read_only_allow_delete): `index` printed a traceback, exit 1, and the
    API's document routes answered 500 (a NoSpace is their 507)."""
    from haystack import Document
    from haystack.document_stores.types import DuplicatePolicy

    first, second = reviews
    assert main(index_command(first, name, os_settings.opensearch_url)) == 0
    client = opensearch_client(os_settings)
    client.indices.put_settings(index=f"{name}--*", body={"index.blocks.read_only_allow_delete": True})
    try:
        capsys.readouterr()
        assert main(index_command(second, name, os_settings.opensearch_url)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: The search server refuses to write") and err.count("\n") == 1, err
        store = open_collection(os_settings, name).store  # the document routes' writes
        with pytest.raises(NoSpace, match=r"^The search server refuses to write"):
            store.write_documents([Document(id="x", content="A new review.")], policy=DuplicatePolicy.OVERWRITE)
    finally:
        client.indices.put_settings(index=f"{name}--*", body={"index.blocks.read_only_allow_delete": None})
    assert sorted(d.content for d in open_collection(os_settings, name).store.filter_documents()) == [
        "The kettle boils fast.",
        "The lamp is bright.",
    ]


def test_a_served_collection_gives_a_hung_search_server_seconds_not_a_minute(os_settings, name, reviews):
    """A search server that hangs (a full garbage collection, a stopped container) held each question 75 s, and the API's
    worker with it: a served collection's requests give up sooner than a build's bulk writes."""
    from qa_system.stores.opensearch import BUILD_TIMEOUT_S, SERVE_TIMEOUT_S, new_opensearch_index

    assert main(index_command(reviews[0], name, os_settings.opensearch_url)) == 0
    assert open_collection(os_settings, name).store._timeout == SERVE_TIMEOUT_S < BUILD_TIMEOUT_S
    assert new_opensearch_index(os_settings, name, None)._timeout == BUILD_TIMEOUT_S  # left over: the fixture removes it


def test_the_note_on_an_edited_source_names_the_search_server_it_runs_on(os_settings, name, reviews, capsys):
    """The note's command left out --opensearch-url: run as printed, it asked the default server, which was not there."""
    import shlex

    first, _ = reviews
    url = os_settings.opensearch_url
    assert main(index_command(first, name, url)) == 0
    first.write_text(first.read_text(encoding="utf-8") + "3,CLOCK,The clock ticks loudly.\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["search", "clock", "--collection", name, "--store", "opensearch", "--opensearch-url", url]) == 0
    note = capsys.readouterr().err
    command = note[note.index("run `") + 5 : note.index("` to update")]
    assert f"--store opensearch --opensearch-url {url}" in command
    assert main(["collections", "--store", "opensearch", "--opensearch-url", url]) == 0  # the listing's note says so too
    assert f"--store opensearch --opensearch-url {url}" in capsys.readouterr().err
    assert main(shlex.split(command)[1:]) == 0 and "1 added" in capsys.readouterr().out  # as printed
