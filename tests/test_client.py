"""`qa-system ask --url` / `shell --url` against servers that misbehave: a real tiny HTTP server on 127.0.0.1
answers what each test tells it to (not JSON, the wrong shape, a byte at a time, a gzip bomb, terminal escape
codes), and the untrusted text of a collection (`products`, `search`) reaches the terminal as text."""

from __future__ import annotations

import gzip
import io
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from qa_system.cli import main
from qa_system.errors import QAError, Unavailable
from qa_system.serving.client import ask_server
from qa_system.serving.question import Question

QUESTION = Question("Is it good?", "KINDLE", None)
ESCAPES = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 \x1b[2J\x1b[31m \x9b1A \r"


@contextmanager
def misbehaving(reply: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A server on a free 127.0.0.1 port whose every connection gets ``reply(connection, stop)``, after its request is read."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                request = b""
                while b"\r\n\r\n" not in request:  # the headers; the body is small and comes with them or right after
                    request += connection.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += connection.recv(65536)
                try:
                    reply(connection, stop)
                except OSError:  # the client left
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=10)
        listener.close()


def answering(body: bytes, status: str = "200 OK", headers: str = "Content-Type: application/json\r\n") -> Callable:
    def reply(connection: socket.socket, stop: threading.Event) -> None:
        connection.sendall(f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)

    return reply


def trickling(head_too: bool) -> Callable:
    """A byte every 0.1 s, for at most 60 s: the headers too (``head_too``), or a body that never ends."""

    def reply(connection: socket.socket, stop: threading.Event) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        if not head_too:
            connection.sendall(head)
        for byte in (head if head_too else b"") + b'{"detail": "' + b"x" * 600:
            if stop.is_set():
                return
            connection.sendall(bytes([byte]))
            time.sleep(0.1)

    return reply


def card(kind: str, number: int, text: str, label: str, source: str = "") -> dict:
    """An answer's card as the API sends it (``AnswerCard.as_dict``)."""
    return {
        "kind": kind,
        "number": number,
        "heading": f"{number}." if number else "",
        "text": text,
        "label": label,
        "help": "",
        "note": "",
        "folded": False,
        "source": source,
        "product": None,
    }


def a_reply(**changes) -> dict:
    """A /query reply of the right shape (one span answer and its document), with ``changes``."""
    document = {"id": "electronics/r1", "content": "The screen is sharp.", "meta": {"review_id": "r1", "item_id": "KINDLE"}}
    answer = {
        "kind": "span",
        "text": "sharp",
        "probability": 0.8,
        "score": 0.8,
        "document_id": "electronics/r1",
        "context": "The screen is sharp.",
        "start": 14,
        "end": 19,
        "context_start": 0,
        "supporting_document_ids": ["electronics/r1"],
        "card": card("span", 1, "sharp", "80% chance right", "review r1"),
    }
    return {
        "query": "Is it good?",
        "collection": "electronics",
        "item_id": "KINDLE",
        "pipeline": "bm25 + reader",
        "timings": {"retrieval_s": 0.01, "answer_s": 0.02},
        "answers": [answer],
        "documents": [document],
        **changes,
    }


@pytest.mark.parametrize(
    "body, message",
    [
        (b"<html>Welcome to nginx</html>", "answered with something that is not JSON"),
        (b"{}", "answered without its timings (retrieval_s, answer_s)"),
        (b"[1, 2]", "answered without a JSON object"),
        (
            json.dumps(a_reply(answers=[{"kind": "span", "text": 5, "card": card("span", 1, "5", "")}])).encode(),
            "answered without each span's text, context and offsets",
        ),
        (json.dumps(a_reply(answers=[{"kind": "no_answer", "probability": 0.6}])).encode(), "answered without each answer's card"),
        (json.dumps(a_reply(documents="none")).encode(), "answered without a list of documents"),
    ],
    ids=["html", "empty-object", "list", "span-without-offsets", "answer-without-card", "documents-not-a-list"],
)
def test_a_reply_not_of_the_query_shape_is_one_line(body, message, capsys, monkeypatch):
    with misbehaving(answering(body)) as url:
        with pytest.raises(QAError) as raised:
            ask_server(url, QUESTION)
        assert message in str(raised.value) and "Fix: is --url a qa-system API" in str(raised.value)
        assert main(["ask", "Is it good?", "--item", "KINDLE", "--url", url]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: The server at {url} answered") and len(err.strip().splitlines()) == 1


def test_the_shell_survives_replies_it_cannot_read(capsys, monkeypatch):
    """A reply without its keys killed the shell with a traceback (KeyError)."""
    with misbehaving(answering(b"{}")) as url:
        monkeypatch.setattr("sys.stdin", io.StringIO("Is it good?\nAnd the battery?\n"))
        assert main(["shell", "--url", url, "--item", "KINDLE"]) == 0
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and all("answered without its timings" in line for line in errors)


def test_an_error_status_without_a_detail_names_the_url():
    with misbehaving(answering(b"Bad Gateway", status="502 Bad Gateway", headers="")) as url:
        with pytest.raises(QAError, match=r"answered 502 without a message\. Fix: is --url a qa-system API"):
            ask_server(url, QUESTION)


@pytest.mark.parametrize("head_too", [False, True], ids=["body", "headers"])
def test_a_server_that_sends_a_byte_at_a_time_is_left_at_the_deadline(head_too):
    """httpx's timeouts are per read: a byte a second held `ask --url` past 700 s."""
    with misbehaving(trickling(head_too)) as url:
        with pytest.raises(Unavailable) as raised:
            ask_server(url, QUESTION, timeout=1.5)
    assert str(raised.value).startswith(f"The API at {url} did not answer within 1.5 s. Fix: ")


def test_a_reply_is_read_up_to_its_bound_decompressed():
    """A gzip bomb took 6 GB of memory, a 150 MB reply 637 MB: the reply is read up to a bound, counted decompressed."""
    bomb = gzip.compress(b" " * 20_000_000)  # 20 MB of spaces, 20 kB on the wire
    assert len(bomb) < 100_000
    with misbehaving(answering(bomb, headers="Content-Type: application/json\r\nContent-Encoding: gzip\r\n")) as url:
        with pytest.raises(QAError, match=r"sent a reply of more than 1,000,000 bytes"):
            ask_server(url, QUESTION, max_bytes=1_000_000)
    with misbehaving(answering(b" " * 1_500_000 + json.dumps(a_reply()).encode())) as url:
        with pytest.raises(QAError, match=r"sent a reply of more than 1,000,000 bytes"):
            ask_server(url, QUESTION, max_bytes=1_000_000)
    packed = gzip.compress(json.dumps(a_reply()).encode())  # a real reply, compressed: read as it is
    with misbehaving(answering(packed, headers="Content-Type: application/json\r\nContent-Encoding: gzip\r\n")) as url:
        assert ask_server(url, QUESTION, max_bytes=1_000_000) == a_reply()


def test_escape_codes_in_a_reply_are_printed_as_text(capsys):
    answer = {
        "kind": "span",
        "text": f"sharp{ESCAPES}",
        "probability": 0.8,
        "document_id": "electronics/r1",
        "context": f"The screen is sharp{ESCAPES}.",
        "start": 14,
        "end": 14 + len(f"sharp{ESCAPES}"),
        "context_start": 0,
        "card": card("span", 1, f"sharp{ESCAPES}", "80% chance right"),
    }
    generated = {
        "kind": "generated",
        "text": f"Yes{ESCAPES}",
        "cited_document_ids": [],
        "probability": None,
        "card": card("generated", 2, f"Yes{ESCAPES}", ""),
    }
    reply = a_reply(collection=f"electronics{ESCAPES}", answers=[answer, generated])
    with misbehaving(answering(json.dumps(reply).encode())) as url:
        assert main(["ask", "Is it good?", "--item", "KINDLE", "--url", url]) == 0
    with misbehaving(answering(json.dumps({"detail": f"No such product{ESCAPES}."}).encode(), status="404 Not Found")) as url:
        assert main(["ask", "Is it good?", "--item", "KINDLE", "--url", url]) == 2
    captured = capsys.readouterr()
    for stream in (captured.out, captured.err):
        assert not any(0x00 <= ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in stream), repr(stream)
    assert "electronics\\x1b]8;;http://evil.example/\\x07click\\x1b]8;;\\x07 \\x1b[2J\\x1b[31m \\x9b1A \\r;" in captured.out
    assert "1. sharp\\x1b]8;;http://evil.example/\\x07click" in captured.out and "The screen is **sharp\\x1b]8;;" in captured.out
    assert "Yes\\x1b]8;;" in captured.out and captured.err.startswith("error: No such product\\x1b]8;;")


def test_escape_codes_in_stored_documents_are_printed_as_text(tmp_path, capsys, monkeypatch):
    """`products` and `search` printed a collection's item ids and texts raw: a review could retitle, clear or link the terminal."""
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    source = tmp_path / "reviews.jsonl"
    rows = [
        {"id": f"r{n}", "text": f"The battery lasts {n} days.{ESCAPES}", "item_id": f"P{n}{ESCAPES}", "colour": f"red{ESCAPES}"}
        for n in range(3)
    ]
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert (
        main(["index", "--input", str(source), "--collection", "hostile", "--id-column", "id", "--item-column", "item_id", "--no-embed"])
        == 0
    )
    capsys.readouterr()
    assert main(["products", "--collection", "hostile"]) == 0
    assert main(["search", "battery", "--collection", "hostile", "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    assert not any(0x00 <= ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in out), repr(out)
    assert "P1\\x1b]8;;http://evil.example/\\x07click" in out and "days.\\x1b]8;;" in out and "red\\x1b]8;;" in out


def test_line_breaks_in_stored_ids_and_metadata_cannot_print_result_lines_of_their_own(tmp_path, capsys, monkeypatch):
    from qa_system.cli.ask import print_card
    from qa_system.serving.answer_views import AnswerCard

    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    forged = "real\n\n2. score 9.999  document FAKE  (P1)\n   The battery lasts forever"
    source = tmp_path / "forged.jsonl"
    source.write_text(json.dumps({"id": forged, "text": "battery doc", "item_id": "P1\nX", "tag": "a\r\nb"}) + "\n", encoding="utf-8")
    assert main(["index", "--input", str(source), "--collection", "forged", "--id-column", "id", "--no-embed"]) == 0
    capsys.readouterr()
    assert main(["search", "battery", "--collection", "forged"]) == 0
    print_card(AnswerCard("span", 1, "1.", "battery doc", "60% chance right", "", "", source=f"document {forged}", product="P1\nX"))
    print_card(
        AnswerCard(
            "span",
            1,
            "1.",
            "11 cm",
            "90% chance right",
            "",
            "",
            source="document manual.md (answer at character 4407)",
            product="manual.md",
        )
    )
    lines = capsys.readouterr().out.splitlines()
    assert "1. 11 cm  90% chance right  document manual.md (answer at character 4407)" in lines  # not "(manual.md)" again
    assert not any(line.startswith("2. score") or line.startswith("   The battery lasts forever") for line in lines), lines
    assert sum("\\n\\n2. score 9.999  document FAKE" in line for line in lines) == 2  # shown, escaped, in its own line


@pytest.mark.parametrize("token", ["zq\nxw", "zqéxw", "zq xw"], ids=["line break", "non-ASCII", "space"])
def test_a_token_no_http_header_can_carry_is_one_line_that_never_shows_it(token, capsys, monkeypatch):
    """It was a traceback (UnicodeEncodeError) for a non-ASCII token; the token itself is never printed."""
    monkeypatch.setenv("QA_API_TOKEN", token)
    with misbehaving(answering(b"{}")) as url:
        assert main(["ask", "Is it good?", "--url", url, "--item", "KINDLE"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: QA_API_TOKEN holds a space, a line break or a character outside printable ASCII")
    assert len(captured.err.strip().splitlines()) == 1 and token.split()[0] not in captured.err + captured.out
    monkeypatch.setenv("QA_API_TOKEN", " secret\n")  # the line break a token file ends with is no part of the token
    from qa_system.config import Settings

    assert Settings.from_env().api_token == "secret"


def test_a_password_in_the_url_is_never_printed(capsys, monkeypatch):
    with misbehaving(answering(b"Bad Gateway", status="502 Bad Gateway", headers="")) as url:
        with_password = url.replace("http://", "http://reader:pa55word@")
        assert main(["ask", "Is it good?", "--url", with_password, "--item", "KINDLE"]) == 2
        monkeypatch.setattr("sys.stdin", io.StringIO("Is it good?\n"))
        assert main(["shell", "--url", with_password]) == 0
    closed = url.replace("http://", "http://reader:pa55word@")  # nothing listens there any more
    assert main(["ask", "Is it good?", "--url", closed, "--item", "KINDLE"]) == 2
    captured = capsys.readouterr()
    shown = url.replace("http://", "http://reader:***@")
    assert "pa55word" not in captured.out + captured.err
    assert captured.err.count(f"The server at {shown} answered 502") == 2 and f"Cannot reach the API at {shown}" in captured.err


@pytest.mark.parametrize("url", ["http://127.0.0.1:abc", "http://[::1", "http://reader:pa55word@host:xx/"])
def test_a_url_that_is_none_is_one_line_in_ask_and_the_shell(url, capsys, monkeypatch):
    """A port that is not a number printed httpx's traceback."""
    assert main(["ask", "Is it good?", "--url", url, "--item", "KINDLE"]) == 2
    monkeypatch.setattr("sys.stdin", io.StringIO("Is it good?\n"))
    assert main(["shell", "--url", url]) == 2  # said before the first question: it was said at every question
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and all(
        "is not one (Invalid port" in line and "Fix: pass --url as the API serves on" in line for line in errors
    )
    assert "Traceback" not in captured.err and "pa55word" not in captured.out + captured.err


def test_a_shell_command_given_what_it_does_not_take_says_so_and_the_shell_goes_on(capsys, monkeypatch):
    """':quit now' ended the shell without a word."""
    with misbehaving(answering(b"{}")) as url:
        monkeypatch.setattr("sys.stdin", io.StringIO(":quit now\n:help me\nIs it good?\n:q\nnever asked\n"))
        assert main(["shell", "--url", url]) == 0
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: ':quit' takes nothing after it (it was given 'now'). Fix: type ':quit' alone.",
        "error: ':help' takes nothing after it (it was given 'me'). Fix: type ':help' alone.",
        f"error: The server at {url} answered without its timings (retrieval_s, answer_s). Fix: is --url a qa-system API (`qa-system api`)?",
    ]
