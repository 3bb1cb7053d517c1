"""The API as a front end of the user's own documents sees it: collections and documents changed over
HTTP (indexed in the background, polled by task id), metadata filters on /query, CORS, keep-alive
comments on event streams, and the OpenAPI schema checked against every real response.

A real uvicorn server on a free loopback port and a real HTTP client, as in test_api.py; RAG answers
come from a real OpenAI-compatible server (tests/helpers/openai_stub.py) that takes its time."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import socket
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.api import api_settings_for, running, sse_events, wait_ready
from helpers.openai_stub import OpenAIStub
from helpers.subjqa import write_subjqa
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.serving.api import create_app
from qa_system.serving.api.guards import Guarded
from qa_system.serving.service import QAService

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FRONT_END = "http://front.test:3000"
FIRST_TOKEN_S = 1.5  # how long the generator thinks before its first token


def reply(body: dict) -> str:
    time.sleep(FIRST_TOKEN_S)
    return "The battery lasts two days [1]."


class Recorder:
    """Every response the tests got, by (method, route template): checked against the OpenAPI schema at the end."""

    def __init__(self, url: str):
        self.url, self.seen = url, defaultdict(list)

    def __call__(self, method: str, route: str, path: str | None = None, auth: bool = True, **kwargs) -> httpx.Response:
        headers = {**(AUTH if auth else {}), **kwargs.pop("headers", {})}
        response = httpx.request(method, self.url + (path or route), headers=headers, timeout=120, **kwargs)
        self.seen[(method.lower(), route)].append(response)
        return response


@pytest.fixture(scope="module")
def generator():
    with OpenAIStub(reply, max_requests=20, deadline_s=900) as server:
        yield server


@pytest.fixture(scope="module")
def settings(tmp_path_factory, tiny_reader, generator) -> Settings:
    return api_settings_for(
        tmp_path_factory.mktemp("api-documents"),
        tiny_reader,
        generator.url,
        api_token=TOKEN,
        api_documents=True,
        api_cors_origins=FRONT_END,
    )


@pytest.fixture(scope="module")
def server(settings):
    app = create_app(settings)
    app.state.api.keepalive_s = 0.3
    with running(app) as url:
        assert wait_ready(url).status_code == 200
        yield url


@pytest.fixture(scope="module")
def call(server) -> Recorder:
    return Recorder(server)


def finished(call: Recorder, task: httpx.Response) -> dict:
    """The task's report once it has ended: a task always ends, done or failed, however busy the machine."""
    assert task.status_code == 202, task.text
    assert task.headers["location"] == f"/tasks/{task.json()['task_id']}"
    while (status := call("GET", "/tasks/{task_id}", task.headers["location"]).json())["status"] == "running":
        time.sleep(0.2)
    assert status["status"] == "done", status
    return status["report"]


def review(n: int, text: str | None = None) -> dict:
    return {
        "id": f"r{n:03d}",
        "text": text or f"Review {n}: the battery lasts {n % 9 + 1} days.",
        "item_id": f"P{n % 4}",
        "rating": 1 + n % 5,
        "date": f"2024-01-{1 + n % 28:02d}",
    }


def everything(call: Recorder, collection: str, **body) -> dict[str, dict]:
    """Every document /query retrieves for 'battery', over the four products (25 documents each, top_k 50)."""
    found = {}
    for item in ("P0", "P1", "P2", "P3"):
        response = call(
            "POST",
            "/query",
            json={"query": "How long does the battery last?", "item_id": item, "collection": collection, "top_k": 50, **body},
        )
        assert response.status_code == 200, response.text
        found |= {d["meta"]["document_id"]: d for d in response.json()["documents"]}
    return found


def test_a_collection_created_filled_updated_and_pruned_over_http(call):
    created = call("POST", "/collections", json={"name": "mine"})
    assert created.status_code == 201 and created.json() == {"name": "mine", "documents": 0}
    assert call("POST", "/collections", json={"name": "mine"}).status_code == 409
    empty = call("POST", "/query", json={"query": "Is it good?", "collection": "mine", "item_id": "P1"})
    assert empty.status_code == 404 and empty.json()["detail"].startswith("Collection 'mine' holds no documents. Fix: add documents")

    report = finished(
        call,
        call("POST", "/collections/{name}/documents", "/collections/mine/documents", json={"documents": [review(n) for n in range(100)]}),
    )
    assert (report["added"], report["documents"], report["source"]) == (100, 100, "documents.jsonl")
    report = finished(
        call,
        call(
            "POST",
            "/collections/{name}/documents",
            "/collections/mine/documents",
            json={"documents": [review(7, "Review 7: the battery died after an hour.")]},
        ),
    )
    assert (report["changed"], report["added"], report["documents"]) == (1, 0, 100)  # an upsert: the other 99 stay
    # A rating given as a word would turn the column to text, which needs every document again: refused at once (it
    # was a 202 whose task failed later, which a client that does not poll took for done), the 100 kept.
    refused = call(
        "POST", "/collections/{name}/documents", "/collections/mine/documents", json={"documents": [{**review(300), "rating": "four"}]}
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == (
        "Every document of collection 'mine' must be processed again (the types of metadata columns changed (rating: integer -> text)), "
        "but documents.jsonl holds 1 of its 100 documents; it was left as it was. Fix: index a source that holds all of them, or pass "
        "sync=true to keep only this source's documents (or give the columns named values of the types they had)."
    )
    deleted = call("DELETE", "/collections/{name}/documents/{document_id}", "/collections/mine/documents/r003")
    assert deleted.status_code == 200 and deleted.json()["deleted"] == ["r003"] and deleted.json()["documents"] == 99
    # An id with "/" in it (a file's path in its folder), escaped or not.
    finished(
        call,
        call(
            "POST",
            "/collections/{name}/documents",
            "/collections/mine/documents",
            json={"documents": [{**review(200), "id": "manuals/a b.pdf"}]},
        ),
    )
    deleted = call("DELETE", "/collections/{name}/documents/{document_id}", "/collections/mine/documents/manuals%2Fa%20b.pdf")
    assert deleted.status_code == 200 and deleted.json()["deleted"] == ["manuals/a b.pdf"], deleted.text
    again = call("DELETE", "/collections/{name}/documents/{document_id}", "/collections/mine/documents/manuals/a%20b.pdf")
    assert again.status_code == 404 and again.json()["detail"] == (
        "No document 'manuals/a b.pdf' in collection 'mine'. Fix: send an id the collection holds (the documents of POST /query's answers show them)."
    ), again.text
    assert "manuals/a b.pdf" not in everything(call, "mine")

    found = everything(call, "mine")
    assert sorted(found) == sorted(f"r{n:03d}" for n in range(100) if n != 3)
    assert found["r007"]["content"] == "Review 7: the battery died after an hour." and found["r008"]["meta"]["rating"] == 4
    (listed,) = [c for c in call("GET", "/collections").json() if c["name"] == "mine"]
    assert (listed["documents"], listed["products"], listed["kind"]) == (99, 4, "ingested")

    pruned = call(
        "POST",
        "/collections/{name}/documents/delete",
        "/collections/mine/documents/delete",
        json={"filters": {"field": "meta.rating", "operator": "<", "value": 2}},
    )
    assert pruned.status_code == 200 and len(pruned.json()["deleted"]) == 20 and pruned.json()["documents"] == 79
    assert sorted(everything(call, "mine")) == sorted(f"r{n:03d}" for n in range(100) if n != 3 and n % 5 != 0)
    missing = call("POST", "/collections/{name}/documents/delete", "/collections/mine/documents/delete", json={"ids": ["r001", "nope"]})
    assert missing.json()["deleted"] == ["r001"] and missing.json()["not_found"] == ["nope"]
    elsewhere = call("POST", "/collections/{name}/documents/delete", "/collections/yours/documents/delete", json={"ids": ["r001"]})
    assert (
        elsewhere.status_code == 404
        and elsewhere.json()["detail"] == "No collection named 'yours'. Fix: pick one that GET /collections lists."
    )
    many = call(
        "POST", "/collections/{name}/documents/delete", "/collections/mine/documents/delete", json={"ids": [f"id-{n}" for n in range(9000)]}
    )
    assert many.status_code == 413 and many.json()["detail"].endswith(
        "Fix: send the ids in several requests, or a filter that matches them (QA_API_MAX_BODY_BYTES sets the limit)."
    )


def test_a_delete_by_a_filter_that_leaves_fewer_than_half_the_documents_needs_force(call):
    """{"field": "meta.item_id", "operator": "!=", "value": "nothing"} emptied a collection; a sync that would is refused."""
    assert call("POST", "/collections", json={"name": "wide"}).status_code == 201
    finished(
        call,
        call("POST", "/collections/{name}/documents", "/collections/wide/documents", json={"documents": [review(n) for n in range(10)]}),
    )
    route = ("POST", "/collections/{name}/documents/delete", "/collections/wide/documents/delete")
    refused = call(*route, json={"filters": {"field": "meta.item_id", "operator": "!=", "value": "nothing"}})
    assert refused.status_code == 422 and refused.json()["detail"] == (
        "The filter matches 10 of the 10 documents of collection 'wide': deleting them would leave 0; nothing was deleted. "
        'Fix: check the filter, or delete them anyway with force (force=True in Python, "force": true over HTTP).'
    )
    said_yes = call(*route, json={"filters": {"field": "meta.rating", "operator": "<", "value": 5}, "force": "yes"})
    assert said_yes.status_code == 422 and said_yes.json()["detail"].startswith("Invalid 'force'")  # true or false, not "yes"
    assert call(*route, json={"filters": {"field": "meta.rating", "operator": "<", "value": 3}}).json()["documents"] == 6  # 4 of 10
    forced = call(*route, json={"filters": {"field": "meta.rating", "operator": "<", "value": 5}, "force": True})
    assert forced.status_code == 200 and forced.json()["documents"] == 2


def test_a_rating_filter_on_query_returns_only_matching_documents(call):
    call("POST", "/collections", json={"name": "rated"})
    finished(
        call,
        call("POST", "/collections/{name}/documents", "/collections/rated/documents", json={"documents": [review(n) for n in range(100)]}),
    )
    at_least_4 = {"field": "meta.rating", "operator": ">=", "value": 4}
    found = everything(call, "rated", filters=at_least_4)
    assert sorted(found) == sorted(f"r{n:03d}" for n in range(100) if 1 + n % 5 >= 4)
    both = {"operator": "AND", "conditions": [at_least_4, {"field": "meta.date", "operator": "<", "value": "2024-01-05"}]}
    assert sorted(everything(call, "rated", filters=both)) == sorted(f"r{n:03d}" for n in range(100) if 1 + n % 5 >= 4 and 1 + n % 28 < 5)
    answer = call(
        "POST", "/query", json={"query": "How long does the battery last?", "item_id": "P1", "collection": "rated", "filters": at_least_4}
    ).json()
    assert {a["review_id"] for a in answer["answers"] if a["kind"] == "span"} <= {
        d["meta"]["document_id"] for d in answer["documents"]
    }  # ids of ingested documents
    assert all(a["review_id"] for a in answer["answers"] if a["kind"] == "span")
    for bad, message in (
        ({"field": "rating", "operator": ">=", "value": 4}, "filters apply to 'meta.<name>'"),
        ({"field": "meta.rating", "operator": ">=", "value": "four"}, "'meta.rating', a number, with the text 'four'"),
        ({"field": "meta.date", "operator": ">=", "value": 4}, "'meta.date', a date, with the number 4"),
        ([at_least_4], "The filter is an array, not an object."),
    ):
        refused = call("POST", "/query", json={"query": "battery?", "item_id": "P1", "collection": "rated", "filters": bad})
        assert refused.status_code == 422 and message in refused.json()["detail"] and "\n" not in refused.json()["detail"], refused.text


def test_collections_made_over_http_are_listed_and_served_after_a_restart(call, settings):
    assert call("POST", "/collections", json={"name": "kept"}).status_code == 201
    finished(
        call,
        call("POST", "/collections/{name}/documents", "/collections/kept/documents", json={"documents": [review(n) for n in range(8)]}),
    )
    with running(create_app(settings, service=QAService(settings))) as url:  # a new process's service on the same home
        assert wait_ready(url).status_code == 200
        listed = httpx.get(f"{url}/collections", headers=AUTH).json()
        assert [(c["documents"], c["kind"]) for c in listed if c["name"] == "kept"] == [(8, "ingested")]
        asked = {"query": "How long does the battery last?", "item_id": "P1", "collection": "kept", "top_k": 10}
        answered = httpx.post(f"{url}/query", json=asked, headers=AUTH, timeout=120)
        assert answered.status_code == 200 and sorted(d["meta"]["document_id"] for d in answered.json()["documents"]) == ["r001", "r005"]


def test_documents_from_a_file_with_the_ingestions_rules(call):
    call("POST", "/collections", json={"name": "from-csv"})
    csv_text = "review_id,body,stars\nA1,Great sound and the battery lasts.,5\nA2,The battery is weak.,2\n"
    upload = "/collections/{name}/documents"
    report = finished(
        call,
        call(
            "POST",
            upload,
            "/collections/from-csv/documents?text_column=body&id_column=review_id",
            content=csv_text,
            headers={"Content-Type": "text/csv"},
        ),
    )
    assert report["added"] == 2 and report["source"] == "from-csv.csv"
    named = "/collections/from-csv/documents?text_column=body&id_column=review_id&filename=../../etc/passwd.csv"
    report = finished(call, call("POST", upload, named, content=csv_text, headers={"Content-Type": "text/csv"}))
    assert report["source"] == "passwd.csv"  # a client's name for its file, without its folders (listed as ../../etc/passwd.csv)
    refused = call(
        "POST", upload, "/collections/from-csv/documents?text_column=text", content=csv_text, headers={"Content-Type": "text/csv"}
    )
    assert refused.status_code == 422 and refused.json()["detail"] == (
        "from-csv.csv has no column 'text' (text_column); its columns are: review_id, body, stars. Fix: pass text_column with one of those columns."
    )
    utf16 = call(
        "POST",
        upload,
        "/collections/from-csv/documents?text_column=body&encoding=utf-16",
        content=csv_text,
        headers={"Content-Type": "text/csv"},
    )  # UTF-8 bytes said to be UTF-16: the codec's own refusal was a 500
    assert utf16.status_code == 422 and utf16.json()["detail"].endswith(
        "is not utf-16 text (UTF-16 stream does not start with BOM). "
        "Fix: pass the file's real encoding to encoding (utf-16-le or utf-16-be for UTF-16 without a byte-order mark)."
    )  # the route's parameter named, not the CLI's flag
    unknown = call("POST", upload, "/collections/nowhere/documents", json={"documents": [review(1)]})
    assert unknown.status_code == 404 and "POST /collections" in unknown.json()["detail"]
    assert call("POST", upload, "/collections/from-csv/documents", json={"documents": []}).status_code == 422
    lost = call("GET", "/tasks/{task_id}", "/tasks/no-such-task")  # as a task the server ran before a restart
    assert lost.status_code == 404 and "a change still running then was saved whole or not at all" in lost.json()["detail"]
    assert lost.json()["detail"].endswith("see what the collection holds (GET /collections) and add the documents again.")
    assert call("POST", upload, "/collections/from-csv/documents", auth=False, json={"documents": [review(1)]}).status_code == 401

    gone = call("DELETE", "/collections/{name}", "/collections/from-csv")
    assert gone.status_code == 200 and gone.json() == {"name": "from-csv", "documents": 2}
    assert call("POST", "/query", json={"query": "battery?", "collection": "from-csv"}).status_code == 404
    # The name the server serves its SubjQA domain under names no collection of your own: one made so would be hidden behind it.
    for method, route, path, body in (
        ("DELETE", "/collections/{name}", "/collections/electronics", None),
        ("POST", "/collections", "/collections", {"name": "electronics"}),
        ("POST", upload, "/collections/electronics/documents", {"documents": [review(1)]}),
    ):
        refused = call(method, route, path, json=body)
        assert refused.status_code == 422 and refused.json()["detail"].startswith(
            "'electronics' is the SubjQA domain this server serves (the collection subjqa-electronics). Fix: "
        ), refused.text
    assert call("DELETE", "/collections/{name}", "/collections/subjqa-electronics").status_code == 422


def test_a_collection_of_ones_own_hidden_behind_a_served_domain_says_how_to_reach_it(call, settings, tmp_path):
    from qa_system.ingestion import delete_collection, ingest

    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(review(1)), encoding="utf-8")
    # made before such names were refused, or where the data directory has no such domain
    ingest(settings.model_copy(update={"data_dir": tmp_path}), path, "electronics", embed=False, progress=False)
    try:
        refused = call("DELETE", "/collections/{name}", "/collections/electronics")
        assert refused.status_code == 422 and refused.json()["detail"] == (  # it said to name it otherwise: it exists
            "'electronics' is the SubjQA domain this server serves (the collection subjqa-electronics); your own collection "
            "'electronics' is hidden behind it here. Fix: change or delete your own with `qa-system index --collection electronics` "
            "/ `qa-system collections --delete electronics`, or from a server that does not serve that domain."
        )
    finally:
        delete_collection(settings, "electronics")


def test_an_upload_to_a_subjqa_domain_the_server_does_not_serve_says_to_name_it_otherwise(call, settings):
    """It said "create it first: POST /collections" with that name, which POST /collections then refused."""
    write_subjqa(settings.data_dir, domain="restaurants")  # in the data directory, not served here
    try:
        for method, route, path, body in (
            ("POST", "/collections/{name}/documents", "/collections/restaurants/documents", {"documents": [review(1)]}),
            ("POST", "/collections", "/collections", {"name": "restaurants"}),
        ):
            refused = call(method, route, path, json=body)
            assert (
                refused.status_code == 422
                and refused.json()["detail"].startswith("'restaurants' is the name of the SubjQA domain in ")
                and refused.json()["detail"].endswith("Fix: name your own collection otherwise, e.g. my-restaurants.")
            ), refused.text
        assert call("GET", "/collections", "/collections").json()  # the server goes on
    finally:
        shutil.rmtree(settings.data_dir / "restaurants")


def test_an_upload_into_a_collection_indexed_without_vectors_keeps_it_so(call, settings, tmp_path):
    from qa_system.ingestion import ingest

    path = tmp_path / "bm25.jsonl"
    path.write_text("\n".join(json.dumps(review(n)) for n in range(6)), encoding="utf-8")
    ingest(settings, path, "bm25-only", embed=False, progress=False)  # `qa-system index --no-embed`: BM25 only, faster
    task = call("POST", "/collections/{name}/documents", "/collections/bm25-only/documents", json={"documents": [review(7)]})
    report = finished(call, task)  # it failed: every document would have been embedded, and the request held one
    assert (report["added"], report["kept_missing"], report["documents"], report["embedded"]) == (1, 6, 7, 0)


def test_a_sync_that_would_delete_most_documents_is_a_422_at_once_and_force_applies_it(call):
    call("POST", "/collections", json={"name": "shrinks"})
    upload = "/collections/{name}/documents"
    finished(call, call("POST", upload, "/collections/shrinks/documents", json={"documents": [review(n) for n in range(6)]}))
    refused = call("POST", upload, "/collections/shrinks/documents?sync=true", json={"documents": [review(0)]})
    assert refused.status_code == 422 and refused.json()["detail"] == (  # it was a 202, a failed task naming --force, and no force
        "The new data would leave 1 documents where collection 'shrinks' holds 6; it was left as it was. "
        "Fix: check the source (a truncated file?), or pass force=true to apply it anyway."
    )
    forced = call("POST", upload, "/collections/shrinks/documents?sync=true&force=true", json={"documents": [review(0)]})
    assert finished(call, forced)["documents"] == 1


def test_a_collection_the_cli_indexes_while_the_server_runs_is_served_at_once(call, settings, tmp_path):
    from qa_system.ingestion import ingest

    path = tmp_path / "later.jsonl"
    path.write_text("\n".join(json.dumps(review(n)) for n in range(4)), encoding="utf-8")
    ingest(settings, path, "indexed-later", embed=False, progress=False)  # `qa-system index` in another shell
    asked = {"query": "How long does the battery last?", "collection": "indexed-later", "item_id": "P1"}  # the file's item_id
    answered = call("POST", "/query", json=asked)  # "Unknown collection" until the server was restarted
    assert answered.status_code == 200 and answered.json()["answers"], answered.text
    assert "indexed-later" in [listed["name"] for listed in call("GET", "/collections").json()]


def test_the_list_says_which_collections_files_changed_since_they_were_indexed(call, settings, tmp_path):
    from qa_system.ingestion import ingest

    path = tmp_path / "edited.jsonl"
    path.write_text("\n".join(json.dumps(review(n)) for n in range(3)), encoding="utf-8")
    ingest(settings, path, "edited-later", embed=False, progress=False)

    def listed() -> dict:
        [entry] = [c for c in call("GET", "/collections").json() if c["name"] == "edited-later"]
        return entry

    assert listed()["source_changed"] is False
    path.write_text(path.read_text(encoding="utf-8") + "\n" + json.dumps(review(3)), encoding="utf-8")
    entry = listed()  # answered from the three reviews it holds, and it says the file has more now
    assert entry["source_changed"] is True and entry["documents"] == 3
    assert str(tmp_path) not in json.dumps(call("GET", "/collections").json())  # no server path in the body


@pytest.mark.parametrize(
    "route, path, detail",
    [
        (
            "/products",
            "/products?limt=5",  # it was ignored: 100 products, the default
            "Unknown query parameter 'limt'. Fix: use limit (GET /products takes collection, limit, offset).",
        ),
        ("/products", "/products?limit=5&limit=6", "The query parameter 'limit' is given 2 times. Fix: give it once."),
        (
            "/collections",
            "/collections?verbose=1",
            "Unknown query parameter 'verbose'. Fix: leave it out (GET /collections takes no query parameter).",
        ),
    ],
    ids=["misspelt", "repeated", "none-taken"],
)
def test_a_query_parameter_a_route_does_not_take_or_given_twice_is_a_422_naming_it(call, route, path, detail):
    answered = call("GET", route, path)
    assert (answered.status_code, answered.json()["detail"]) == (422, detail)


def test_a_misspelt_query_parameter_of_an_upload_adds_nothing(call):
    call("POST", "/collections", json={"name": "spelt"})
    upload = "/collections/{name}/documents"
    sent = call("POST", upload, "/collections/spelt/documents?text_colum=body", json=[{"id": "r1", "body": "Great battery."}])
    assert sent.status_code == 422 and sent.json()["detail"].startswith("Unknown query parameter 'text_colum'. Fix: use text_column (")
    assert call("GET", "/collections").json() and [c["documents"] for c in call("GET", "/collections").json() if c["name"] == "spelt"] == [
        0
    ]


def test_collections_deleted_or_damaged_elsewhere_are_left_out_of_the_list_and_new_ones_are_in(call, settings, tmp_path):
    from qa_system.ingestion import delete_collection, ingest

    path = tmp_path / "three.jsonl"
    path.write_text("\n".join(json.dumps(review(n)) for n in range(3)), encoding="utf-8")
    for name in ("goes-away", "gets-damaged"):
        ingest(settings, path, name, embed=False, progress=False)
        assert call("POST", "/query", json={"query": "battery?", "collection": name, "item_id": "P1"}).status_code == 200
    delete_collection(settings, "goes-away")  # `qa-system collections --delete` in another shell
    (settings.index_dir / "memory" / "gets-damaged.json").write_text('{"documents": [', encoding="utf-8")
    ingest(settings, path, "saved-since", embed=False, progress=False)
    listed = call("GET", "/collections")  # one gone collection made the whole list a 422 until a restart
    assert listed.status_code == 200, listed.text
    names = [c["name"] for c in listed.json()]
    assert "saved-since" in names and "goes-away" not in names and "gets-damaged" not in names
    # Nor does the server name the deleted one anywhere else: /health listed it, and so did an unknown name's 404; and it
    # names one made since at once (/health lacked it until it was asked for)
    ingest(settings, path, "made-meanwhile", embed=False, progress=False)
    health = call("GET", "/health").json()["collections"]
    assert "goes-away" not in health and "made-meanwhile" in health
    unknown = call("POST", "/query", json={"query": "battery?", "collection": "no-such-one", "item_id": "P1"})
    assert unknown.status_code == 404 and "saved-since" in unknown.json()["detail"] and "goes-away" not in unknown.json()["detail"]
    (settings.index_dir / "memory" / "gets-damaged.json").unlink()


def test_a_damaged_collection_says_so_and_can_be_deleted_over_http_as_its_message_says(call, settings):
    damaged = settings.index_dir / "memory" / "damaged-one.json"
    damaged.parent.mkdir(parents=True, exist_ok=True)
    damaged.write_text('{"documents": [', encoding="utf-8")  # a file cut short
    asked = call("POST", "/query", json={"query": "battery?", "collection": "damaged-one"})
    assert asked.status_code == 422 and asked.json()["detail"] == (  # it was "Unknown collection 'damaged-one'"
        "The saved collection 'damaged-one' is damaged: its files cannot be read. "
        "Fix: delete it (DELETE /collections/damaged-one) and add its documents again."
    )
    gone = call("DELETE", "/collections/{name}", "/collections/damaged-one")
    assert gone.status_code == 200 and gone.json() == {"name": "damaged-one", "documents": 0}  # a 422 that named the CLI
    assert not damaged.exists()


def test_half_a_character_in_a_document_is_a_422_naming_where(call):
    """JSON's "\\ud800" escape in a document's id, text or key was a 500 (UnicodeEncodeError): nothing is added."""
    call("POST", "/collections", json={"name": "halves"})
    upload = "/collections/{name}/documents"
    for document, where, character in (
        ({**review(1), "id": "r\ud800"}, 'the value documents[1]["id"]', "character 2 is a lone surrogate (\\ud800)"),
        (
            {**review(1), "text": "lone \udcff"},
            'the value documents[1]["text"]',
            "character 6 is a lone surrogate (\\udcff: the byte 0xff of another encoding)",
        ),
        ({**review(1), "\ud800": "x"}, "a key of documents[1]", "character 1 is a lone surrogate (\\ud800)"),
    ):
        body = json.dumps({"documents": [review(0), document]}).encode()  # ASCII, the surrogate as its escape
        refused = call("POST", upload, "/collections/halves/documents", content=body, headers={"Content-Type": "application/json"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == f"{where[0].upper()}{where[1:]} is not UTF-8 text: {character}. Fix: send {where} as UTF-8 text."
    as_file = call(
        "POST",
        upload,
        "/collections/halves/documents",
        content=b'{"id": "r1", "text": "lone \\ud800"}\n',
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert as_file.status_code == 422 and "is not UTF-8 text: character 6 is a lone surrogate" in as_file.json()["detail"]
    (listed,) = [c for c in call("GET", "/collections").json() if c["name"] == "halves"]
    assert listed["documents"] == 0


def test_an_upload_being_read_and_checked_holds_no_question_worker(settings, monkeypatch):
    """Uploads were read and checked in the questions' worker threads: four at once made a /query wait 9.2 s for one."""
    app = create_app(settings.model_copy(update={"api_workers": 1}))
    checking, release, threads = threading.Event(), threading.Event(), []
    add = app.state.documents.add

    def held_add(*args, **kwargs):  # the check of a large upload, held until the question is answered
        threads.append(threading.current_thread().name)
        checking.set()
        release.wait(120)
        return add(*args, **kwargs)

    monkeypatch.setattr(app.state.documents, "add", held_add)
    with running(app) as url:
        assert wait_ready(url).status_code == 200
        record = Recorder(url)
        record("POST", "/collections", json={"name": "held"})
        with ThreadPoolExecutor(1) as pool:
            upload = pool.submit(
                record,
                "POST",
                "/collections/{name}/documents",
                "/collections/held/documents",
                json={"documents": [review(n) for n in range(8)]},
            )
            try:
                assert checking.wait(60)
                # The server's one question worker is free: answered while the upload is still being checked.
                answered = httpx.post(
                    f"{url}/query", json={"query": "Is it good for reading?", "item_id": "KINDLE"}, headers=AUTH, timeout=60
                )
                assert answered.status_code == 200 and not release.is_set()
            finally:
                release.set()
            assert finished(record, upload.result(timeout=120))["added"] == 8
    assert threads == ["qa-api-changes_0"]


@pytest.mark.parametrize("finishes", [True, False], ids=["finishes-in-time", "stopped-at-its-next-batch"])
def test_a_server_stopping_during_a_change_waits_for_it_and_logs_what_it_became(settings, monkeypatch, caplog, finishes):
    """A stop signal killed a running upload without a word in the log (nobody polls its task any more), and a process
    ending while it embedded aborted (exit 134)."""
    from qa_system.ingestion import IngestProgress
    from qa_system.serving import documents as documents_module
    from qa_system.stores import saved_manifest

    started, release = threading.Event(), threading.Event()
    real_ingest = documents_module.ingest

    def long_ingest(*args, **kwargs):  # a long change: it reports its progress batch after batch until released
        started.set()
        while not release.wait(0.05):
            kwargs["on_progress"](IngestProgress(0, 0, None))
        return real_ingest(*args, **kwargs)

    monkeypatch.setattr(documents_module, "ingest", long_ingest)
    monkeypatch.setattr(documents_module, "STOP_GRACE_S", 30.0 if finishes else 0.5)
    name = f"stopping-{finishes}".lower()
    with caplog.at_level(logging.INFO, logger="qa_system.serving.documents"):
        with running(create_app(settings)) as url:
            assert wait_ready(url).status_code == 200
            record = Recorder(url)
            record("POST", "/collections", json={"name": name})
            task = record(
                "POST", "/collections/{name}/documents", f"/collections/{name}/documents", json={"documents": [review(n) for n in range(8)]}
            )
            assert task.status_code == 202 and started.wait(60)
            if finishes:
                threading.Timer(1.0, release.set).start()  # released while the server waits for it
    release.set()
    task_line = f"Task {task.json()['task_id']} (8 documents into collection '{name}')"
    assert "Stopping: waiting up to" in caplog.text
    if finishes:
        assert f"{task_line} finished before the server stopped." in caplog.text
        assert saved_manifest(settings, name)["source_documents"] == 8
    else:
        assert f"{task_line} was stopped with the server" in caplog.text and "send the documents again" in caplog.text
        assert saved_manifest(settings, name).get("source_documents", 0) == 0


def test_an_upload_that_failed_before_its_202_names_no_path_of_the_server(settings, monkeypatch):
    """A full disk failed an upload before its 202 was written: the 202 said "No space left on the disk of /srv/...",
    where GET /tasks/{id} says $QA_HOME."""
    import errno

    from qa_system.serving import documents as documents_module

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(documents_module, "ingest", full_disk)
    app = create_app(settings)
    add = app.state.documents.add

    def add_and_wait(*args, **kwargs):  # the task fails before the route writes its reply
        change = add(*args, **kwargs)
        change.task.wait(60)
        return change

    monkeypatch.setattr(app.state.documents, "add", add_and_wait)
    with running(app) as url:
        assert wait_ready(url).status_code == 200
        record = Recorder(url)
        record("POST", "/collections", json={"name": "full-disk"})
        accepted = record("POST", "/collections/{name}/documents", "/collections/full-disk/documents", json={"documents": [review(1)]})
        assert accepted.status_code == 202, accepted.text
        polled = record("GET", "/tasks/{task_id}", accepted.headers["location"]).json()
    assert accepted.json()["status"] == "failed" and accepted.json()["error_status"] == 507
    assert accepted.json()["error"] == polled["error"] and "No space left on the disk of $QA_HOME" in polled["error"]
    assert str(settings.home) not in accepted.text


def through_guards(messages: list[dict], headers: dict[str, str] | None = None) -> tuple[list[bytes], int, dict]:
    """``messages`` sent as a POST's body to an app behind ``Guarded``: the bodies the app was handed, and the answer's status and body."""
    handed, answer = [], {}

    async def app(scope, receive, send) -> None:
        handed.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        answer.setdefault("status", message.get("status"))
        answer["body"] = message.get("body", b"")

    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "method": "POST", "path": "/collections/mine/documents", "headers": raw, "client": ("127.0.0.1", 1)}
    asyncio.run(Guarded(app, token=None, rate_limit=0, max_body_bytes=1000)(scope, receive, send))
    return handed, answer["status"], json.loads(answer["body"])


def test_a_body_cut_short_is_refused_before_any_endpoint_runs():
    cut = [{"type": "http.request", "body": b'{"id": "r1", "text": "The battery"}\n', "more_body": True}, {"type": "http.disconnect"}]
    handed, status, body = through_guards(cut, {"Content-Length": "500"})
    assert handed == [] and status == 400
    assert (
        body["detail"]
        == "The request body ended after 36 of its 500 bytes: the client disconnected before its end. Fix: send the whole body again; nothing was changed."
    )
    chunked = [{"type": "http.request", "body": b"A1,Great", "more_body": True}, {"type": "http.disconnect"}]
    handed, status, body = through_guards(chunked)
    assert handed == [] and status == 400 and body["detail"].startswith("The request body ended after 8 bytes: the client disconnected")
    short = [{"type": "http.request", "body": b"A1,Great", "more_body": False}]
    handed, status, body = through_guards(short, {"Content-Length": "20"})
    assert handed == [] and status == 400 and body["detail"].startswith("The request body has 8 bytes, fewer than its Content-Length (20).")
    whole = [{"type": "http.request", "body": b"A1,", "more_body": True}, {"type": "http.request", "body": b"Great", "more_body": False}]
    assert through_guards(whole, {"Content-Length": "8"})[:2] == ([b"A1,Great"], 202)


def posts_counted(call: Recorder) -> dict[str, float]:
    """The POST requests the server's metrics have counted, by status."""
    counted = defaultdict(float)
    for family in text_string_to_metric_families(call("GET", "/metrics").text):
        for sample in family.samples:
            if sample.name == "qa_api_requests_total" and sample.labels["method"] == "POST":
                counted[sample.labels["status"]] += sample.value
    return counted


def test_an_upload_whose_client_disconnects_midway_changes_nothing(call, server):
    """A sync upload cut after its first two lines used to be stored as the whole file: the other documents deleted."""
    call("POST", "/collections", json={"name": "cut-short"})
    finished(
        call,
        call(
            "POST", "/collections/{name}/documents", "/collections/cut-short/documents", json={"documents": [review(n) for n in range(10)]}
        ),
    )
    lines = [json.dumps(review(n, f"Review {n}: changed.")).encode() + b"\n" for n in range(10)]
    before = posts_counted(call)
    url = urlsplit(server)
    head = (
        f"POST /collections/cut-short/documents?sync=true HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/x-ndjson\r\nContent-Length: {len(b''.join(lines))}\r\n\r\n"
    )
    with socket.create_connection((url.hostname, url.port), timeout=30) as client:
        client.sendall(head.encode() + b"".join(lines[:2]))
        time.sleep(0.5)  # the first lines reach the server, then the client leaves
    deadline = time.monotonic() + 30
    while sum(posts_counted(call).values()) == sum(before.values()):
        assert time.monotonic() < deadline, "the server never answered the cut upload"
        time.sleep(0.1)
    assert posts_counted(call)["400"] == before["400"] + 1
    (listed,) = [c for c in call("GET", "/collections").json() if c["name"] == "cut-short"]
    assert listed["documents"] == 10
    found = everything(call, "cut-short")
    assert sorted(found) == [f"r{n:03d}" for n in range(10)] and found["r001"]["content"] == review(1)["text"]


def test_subjqa_names_are_refused_on_the_document_routes(call):
    """subjqa-books was never built here (as subjqa-electronics in the Docker image): created over HTTP, the page and the CLI would present it as SubjQA."""
    reserved = "is reserved for the SubjQA collections that `qa-system index --domain` builds. Fix: name your own collection otherwise, e.g. my-reviews"
    for name in ("subjqa-books", "subjqa-electronics"):
        refused = call("POST", "/collections", json={"name": name})
        assert refused.status_code == 422 and refused.json()["detail"].startswith(f"'{name}' {reserved}"), refused.text
    for method, route, path, body in (
        ("POST", "/collections/{name}/documents", "/collections/subjqa-books/documents", {"documents": [review(1)]}),
        ("POST", "/collections/{name}/documents/delete", "/collections/subjqa-electronics/documents/delete", {"ids": ["r-kindle-1"]}),
    ):
        refused = call(method, route, path, json=body)
        assert refused.status_code == 422 and reserved in refused.json()["detail"] and "\n" not in refused.json()["detail"], refused.text
    assert [c["name"] for c in call("GET", "/collections").json() if c["name"].startswith("subjqa-")] == []
    assert call("POST", "/query", json={"query": "Is it good for reading?", "item_id": "KINDLE"}).json()[
        "documents"
    ]  # electronics untouched


def test_document_changes_are_off_by_default(settings, tmp_path):
    off = settings.model_copy(update={"api_documents": False, "api_cors_origins": None})
    with running(create_app(off)) as url:
        assert wait_ready(url).status_code == 200
        refused = httpx.post(f"{url}/collections", json={"name": "x"}, headers=AUTH)
        assert refused.status_code == 403 and "QA_API_DOCUMENTS=1" in refused.json()["detail"]
        preflight = httpx.options(f"{url}/query", headers={"Origin": FRONT_END, "Access-Control-Request-Method": "POST"})
        assert (
            preflight.status_code == 401 and "access-control-allow-origin" not in preflight.headers
        )  # CORS closed by default: refused like any request


def test_document_routes_without_a_token_refuse_to_start_unless_explicitly_open(settings, caplog, capsys, monkeypatch):
    tokenless = settings.model_copy(update={"api_token": None})
    refusal = "Document changes over HTTP are on (QA_API_DOCUMENTS=1) but the server has no bearer token"
    with pytest.raises(QAError, match=re.escape(refusal) + r".* Fix: set QA_API_TOKEN, or QA_API_DOCUMENTS_OPEN=1"):
        create_app(tokenless)
    monkeypatch.setenv("QA_API_DOCUMENTS", "1")
    monkeypatch.delenv("QA_API_TOKEN", raising=False)
    monkeypatch.delenv("QA_API_DOCUMENTS_OPEN", raising=False)
    assert main(["api", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {refusal}") and len(err.strip().splitlines()) == 1
    with caplog.at_level(logging.WARNING, logger="qa_system.serving.api.documents"):
        create_app(tokenless.model_copy(update={"api_documents_open": True}))
    assert "open to anyone who reaches this server (QA_API_DOCUMENTS_OPEN=1, no QA_API_TOKEN)" in caplog.text


def test_cors_preflight_from_a_configured_origin_only(call):
    asked = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
    allowed = call("OPTIONS", "/query", auth=False, headers={"Origin": FRONT_END, **asked})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == FRONT_END
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    other = call("OPTIONS", "/query", auth=False, headers={"Origin": "http://elsewhere.test", **asked})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    answered = call("GET", "/collections", headers={"Origin": FRONT_END})
    assert answered.headers["access-control-allow-origin"] == FRONT_END
    call.seen.pop(("options", "/query"))  # preflights are CORS's, not routes of the schema


def test_a_slow_stream_sends_keep_alive_comments_before_its_first_token(call):
    streamed = call("POST", "/query", json={"query": "How long does the battery last?", "item_id": "KINDLE", "mode": "rag", "stream": True})
    assert streamed.status_code == 200
    blocks = streamed.text.strip().split("\n\n")
    assert blocks[0] == ": keep-alive" and blocks.index(": keep-alive") < next(
        i for i, b in enumerate(blocks) if b.startswith("event: token")
    )
    events = sse_events(streamed.text)
    assert [e for e, _ in events][-1] == "result" and "".join(
        d["text"] for e, d in events if e == "token"
    ) == "The battery lasts two days [1]."


def test_feedback_and_the_other_routes_answer(call):
    body = call("POST", "/query", json={"query": "Is it good for reading?", "item_id": "KINDLE"}).json()
    span = next(a for a in body["answers"] if a["kind"] == "span")
    assert span["review_id"].startswith("r-kindle")
    assert call("GET", "/feedback/export").status_code == 404  # nothing confirmed yet
    click = {
        "verdict": "correct",
        "question": body["query"],
        "answer": span["text"],
        "start": span["start"],
        "end": span["end"],
        "document_id": span["document_id"],
        "click_id": "c/1",
    }
    assert [call("POST", "/feedback", json=click).status_code for _ in range(2)] == [201, 200]
    assert call("POST", "/feedback", json={**click, "document_id": "electronics/nope", "click_id": None}).status_code == 404
    assert call("POST", "/feedback", json={**click, "verdict": "maybe"}).status_code == 422
    assert call("GET", "/feedback/export").status_code == 200
    assert call("GET", "/products", params={"collection": "electronics"}).status_code == 200
    assert call("GET", "/products", params={"collection": "nope"}).status_code == 404
    assert call("GET", "/products", params={"limit": 0}).status_code == 422
    assert call("POST", "/query", json={"query": "?" * 70_000, "item_id": "KINDLE"}).status_code == 413
    assert call("POST", "/query", json={"query": "", "item_id": "KINDLE"}).status_code == 422
    assert call("POST", "/query", json={"query": "x?", "item_id": "NOPE"}).status_code == 404
    assert call("GET", "/collections", auth=False).status_code == 401
    assert call("GET", "/health").status_code == 200
    metrics = call("GET", "/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")


def test_health_answers_503_with_its_own_body_and_loading_routes_503(settings, tmp_path):
    broken = settings.model_copy(update={"data_dir": tmp_path / "missing", "home": tmp_path / "home", "api_rate_limit": 3})
    app = create_app(broken)
    with running(app) as url:
        record = Recorder(url)
        while (health := record("GET", "/health")).json()["status"] == "loading":  # loading ends, ready or failed
            time.sleep(0.1)
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert [record("GET", "/collections").status_code for _ in range(4)] == [503, 503, 503, 429]
        check_against_schema(record, app.openapi())  # (the server's /openapi.json is rate limited too)


def resolve(schema: dict, openapi: dict) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator({**schema, "components": openapi["components"]})


def check_response(method: str, route: str, response: httpx.Response, openapi: dict) -> None:
    operation = openapi["paths"][route][method]
    declared = operation["responses"]
    assert str(response.status_code) in declared, (
        f"{method.upper()} {route} answered {response.status_code}, which its schema does not declare ({sorted(declared)})"
    )
    kind = response.headers["content-type"].split(";")[0]
    content = declared[str(response.status_code)].get("content", {})
    assert kind in content, f"{method.upper()} {route} {response.status_code} sent {kind}; the schema declares {sorted(content)}"
    schema = content[kind].get("schema", {})
    if kind == "application/json":
        resolve(schema, openapi).validate(response.json())
    elif kind == "text/event-stream":
        for event, data in sse_events(response.text):
            resolve(schema["x-events"][event], openapi).validate(data)
    else:
        assert schema.get("type") == "string"


def check_against_schema(record: Recorder, openapi: dict) -> None:
    for (method, route), responses in record.seen.items():
        for response in responses:
            check_response(method, route, response, openapi)


def test_the_openapi_schema_matches_every_real_response(call):
    """Last: every response the tests above got, each checked against its route's declared statuses and bodies."""
    openapi = call("GET", "/openapi.json", auth=False).json()
    call.seen.pop(("get", "/openapi.json"))
    check_against_schema(call, openapi)
    routes = {(method, path) for path, item in openapi["paths"].items() for method in item}
    assert routes - set(call.seen) == set(), "routes no test called"
    statuses = {route: sorted({r.status_code for r in responses}) for route, responses in call.seen.items()}
    assert statuses[("post", "/query")] == [200, 404, 413, 422] and statuses[("post", "/feedback")] == [200, 201, 404, 422]
    assert not re.search(r'"/(tmp|home|work|usr)/', json.dumps([r.text for rs in call.seen.values() for r in rs])), (
        "a server path in a response"
    )


def test_an_upload_the_ingestion_would_refuse_is_a_422_at_once(call):
    """A collection whose ids come from a column, sent a file that has it without id_column: it was 202, then a failed task."""
    upload = "/collections/{name}/documents"
    csv_text = "review_id,body\nB1,The battery lasts two days.\nB2,The screen is dim.\n"
    call("POST", "/collections", json={"name": "by-review-id"})
    path = "/collections/by-review-id/documents?text_column=body"
    finished(call, call("POST", upload, f"{path}&id_column=review_id", content=csv_text, headers={"Content-Type": "text/csv"}))
    refused = call("POST", upload, path, content=csv_text, headers={"Content-Type": "text/csv"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == (
        "Collection 'by-review-id' takes its document ids from the column 'review_id', which by-review-id.csv has: read without "
        "id_column, each of its rows would be added again as a new document; it was left as it was. "
        "Fix: pass id_column=review_id, or another column of unique ids."
    )
    # A body of a content type that names no format was "Cannot tell the format of by-review-id from its name".
    for content_type in ("image/png", "application/xml", None):
        headers = {"Content-Type": content_type} if content_type else {}
        refused = call("POST", upload, path, content=csv_text.encode(), headers=headers)
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert detail.startswith(
            f"Cannot tell the format of the body from its content type ({content_type or 'none'}). Fix: send it as text/csv, "
        )
        assert "format=csv|tsv|jsonl|json|squad" in detail and "filename=" in detail
    named = call("POST", upload, f"{path}&id_column=review_id&format=csv", content=csv_text, headers={"Content-Type": "application/xml"})
    assert finished(call, named)["unchanged"] == 2  # the format named: read whatever the content type
    assert call("DELETE", "/collections/{name}", "/collections/by-review-id").status_code == 200


def test_task_ids_differ_between_servers_on_one_home_and_an_unknown_one_says_why(call, settings):
    """Two servers on one QA_HOME both numbered their first task 1 in the same second: the same id for two uploads."""
    call("POST", "/collections", json={"name": "two-servers"})
    route, path = "/collections/{name}/documents", "/collections/two-servers/documents"
    with (
        running(create_app(settings, service=QAService(settings))) as one_url,
        running(create_app(settings, service=QAService(settings))) as other_url,
    ):
        assert wait_ready(one_url).status_code == 200 and wait_ready(other_url).status_code == 200
        one, other = Recorder(one_url), Recorder(other_url)
        with ThreadPoolExecutor(2) as both:
            sent = [both.submit(server, "POST", route, path, json={"documents": [review(n)]}) for n, server in enumerate((one, other))]
            tasks = [task.result() for task in sent]
        assert [task.status_code for task in tasks] == [202, 202], [task.text for task in tasks]
        ids = [task.json()["task_id"] for task in tasks]
        assert ids[0] != ids[1] and all(re.fullmatch(r"two-servers-1-\d+-[0-9a-f]{6}", task_id) for task_id in ids), ids
        finished(one, tasks[0]), finished(other, tasks[1])
        unknown = other("GET", "/tasks/{task_id}", f"/tasks/{ids[0]}")  # the first server's: never this one's
    assert unknown.status_code == 404
    assert unknown.json()["detail"].startswith(
        f"No task '{ids[0]}' on this server: it started none of that id, or it has restarted since (a server keeps its last 1000 tasks"
    )
    assert "from the server that returned it" in unknown.json()["detail"]


def test_a_background_upload_that_fails_is_logged_with_its_task_and_collection(call, settings, caplog):
    """A task that failed (a file where the ingestion makes its staging folder) ended 'Internal error (OSError)', and the log had nothing."""
    call("POST", "/collections", json={"name": "failing"})
    staging = settings.index_dir / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.write_text("a file where a folder must be", encoding="utf-8")
    try:
        with caplog.at_level(logging.INFO, logger="qa_system"):
            task = call("POST", "/collections/{name}/documents", "/collections/failing/documents", json={"documents": [review(1)]})
            assert task.status_code == 202, task.text
            while (status := call("GET", "/tasks/{task_id}", task.headers["location"]).json())["status"] == "running":
                time.sleep(0.1)
    finally:
        staging.unlink()
    task_id = task.json()["task_id"]
    assert (status["status"], status["error_status"]) == ("failed", 500)
    assert status["error"] == "Internal error (FileExistsError). Fix: see the server's log."
    (failure,) = [r for r in caplog.records if r.levelno == logging.ERROR and task_id in r.getMessage()]
    assert failure.getMessage() == f"Adding documents to collection 'failing' failed (task {task_id}): internal error."
    assert failure.exc_info and failure.exc_info[0] is FileExistsError  # the traceback
    assert any(f"Adding 1 document to collection 'failing' (task {task_id}) (client 127.0.0.1)." in r.getMessage() for r in caplog.records)
    done = call("POST", "/collections/{name}/documents", "/collections/failing/documents", json={"documents": [review(1)]})
    assert finished(call, done)["added"] == 1  # the disk mended, the same upload goes through


def test_no_response_names_a_path_of_the_server(call, settings, caplog):
    """A damaged saved index and a feedback database that cannot be opened were answered with their absolute paths."""
    home = str(settings.home)
    damaged = settings.index_dir / "memory" / "cut-short.json"
    damaged.write_text('{"documents": [\nnot json\n', encoding="utf-8")
    try:
        with caplog.at_level(logging.WARNING, logger="qa_system"):
            answers = [
                call("GET", "/collections"),
                call("POST", "/collections/{name}/documents", "/collections/cut-short/documents", json={"documents": [review(1)]}),
            ]
    finally:
        assert call("DELETE", "/collections/{name}", "/collections/cut-short").status_code == 200
    listed, upload = answers
    assert upload.status_code == 422, upload.text
    assert upload.json()["detail"].startswith("The saved index $QA_HOME/indexes/memory/cut-short.json is unreadable (")
    assert home not in upload.text and home not in listed.text
    assert f"The saved index {damaged} is unreadable" in caplog.text  # the server's log keeps the whole message

    body = call("POST", "/query", json={"query": "Is it good for reading?", "item_id": "KINDLE"}).json()
    span = next(a for a in body["answers"] if a["kind"] == "span")
    click = {"verdict": "correct", "question": body["query"], "answer": span["text"], "start": span["start"], "end": span["end"]}
    click |= {"document_id": span["document_id"], "click_id": "no-path/1"}
    database, aside = settings.feedback_db, settings.feedback_db.with_name("feedback.sqlite.aside")
    if database.exists():
        database.rename(aside)
    database.mkdir()  # a folder where the database must be: SQLite cannot open it
    try:
        answers = [call("POST", "/feedback", json=click), call("GET", "/feedback/export")]
    finally:
        database.rmdir()
        if aside.exists():
            aside.rename(database)
    for answer in answers:  # the export's was a 404, as if nothing had been confirmed
        assert answer.status_code == 503, answer.text
        assert answer.json()["detail"].startswith("The feedback database $QA_HOME/feedback.sqlite cannot be used (")
        assert home not in answer.text


def test_server_paths_are_said_by_the_settings_that_name_them(settings, tmp_path):
    from qa_system.serving.api.error_mapping import public

    configured = settings.model_copy(update={"feedback_file": tmp_path / "fb.sqlite", "reports_dir": tmp_path / "reports"})
    home = configured.home
    assert public(f"The saved index {home}/indexes/memory/a.json is unreadable.", configured) == (
        "The saved index $QA_HOME/indexes/memory/a.json is unreadable."
    )
    assert public(f"{tmp_path}/fb.sqlite cannot be used; {tmp_path}/reports/r1 and {home}.", configured) == (
        "$QA_FEEDBACK_DB cannot be used; $QA_REPORTS_DIR/r1 and $QA_HOME."
    )
    # Not $QA_HOME either: a path that goes on after the root is not the root. One in a folder of the server is said by
    # its name (a collection's source file); one in no folder of it (a route, a client's own path) is left as it is.
    assert public(f"Not {home}2/x nor {home}.bak, but {configured.reader_model}.", configured) == (
        f"Not {home}2/x nor {home.name}.bak, but {Path(configured.reader_model).name}."
    )
    assert public("Fix: run `qa-system index --input /no-such-folder/data/reviews.csv`, POST /collections/NAME/documents", configured) == (
        "Fix: run `qa-system index --input /no-such-folder/data/reviews.csv`, POST /collections/NAME/documents"
    )


def test_an_upload_of_html_text_is_counted_and_with_html_indexed_as_its_text(call):
    call("POST", "/collections", json={"name": "web"})
    upload = "/collections/{name}/documents"
    page = {"id": "w1", "item_id": "P1", "text": "<p>The battery lasts <b>two days</b> &amp; charges fast.</p>"}
    report = finished(call, call("POST", upload, "/collections/web/documents", json={"documents": [page]}))
    assert report["html_texts"] == 1  # counted: the tags were indexed as written
    report = finished(call, call("POST", upload, "/collections/web/documents?html=true", json={"documents": [page]}))
    assert (report["html_texts"], report["changed"]) == (0, 1)
    asked = call("POST", "/query", json={"query": "How long does the battery last?", "item_id": "P1", "collection": "web"}).json()
    assert [d["content"] for d in asked["documents"]] == ["The battery lasts two days & charges fast."]
