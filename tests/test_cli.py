"""The command line on the tiny corpus: happy paths, and every bad input as a one-line error
that leaves the saved index intact."""

import hashlib
import itertools
import json

import pandas as pd
import pytest

from qa_system.cli import main
from qa_system.evaluation.retrieval import CHANCE
from qa_system.metrics.ranking import average_precision, retrieval_metrics


@pytest.fixture
def cli_env(settings, monkeypatch):
    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    return settings


@pytest.fixture
def indexed_cli(cli_env):
    assert main(["index", "--no-embed"]) == 0
    return cli_env


def index_digest(settings):
    path = settings.home / "indexes" / "memory" / "subjqa-electronics.json"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_index_then_search(indexed_cli, capsys):
    assert main(["search", "Is it good for reading?", "--item", "KINDLE", "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 review(s) for KINDLE" in out
    assert out.index("r-kindle-1") < out.index("r-kindle-3")  # "for reading" beats a shared "is"


def test_products_lists_review_counts(indexed_cli, capsys):
    assert main(["products"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "KINDLE\t3 reviews"  # r-kindle-3, in dev and test, counts once


def test_products_says_when_the_list_is_cut_and_how_to_see_all(indexed_cli, capsys):
    assert main(["products", "--limit", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["KINDLE\t3 reviews", "HEADPHONES\t2 reviews"]
    assert captured.err.strip() == "showing 2 of 3 (--limit N / --limit 0 for all)"
    assert main(["products", "--limit", "0"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3 and captured.err == ""  # all of them: nothing to say
    with pytest.raises(SystemExit):
        main(["products", "--help"])
    assert "0: all)" in " ".join(capsys.readouterr().out.split())  # --limit has help text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["search", "   ", "--item", "KINDLE"], "The question is empty."),
        (["ask", "\u200b", "--item", "KINDLE"], "The question is empty."),
        (["search", "Is it good?", "--item", "NOPE"], "Product 'NOPE' has no reviews"),
        (["index", "--domain", "garden"], "Unknown domain 'garden'"),
        (["eval", "retriever", "--split", "validation", "--retriever", "bm25"], "Unknown split 'validation'"),
        (["index", "--data-dir", "/nonexistent/subjqa"], "does not exist"),
        (
            ["search", "Is it good?", "--store", "elasticsearch", "--es-url", "http://127.0.0.1:9"],
            "Elasticsearch at http://127.0.0.1:9 is unreachable",
        ),
        (["search", "Is it good?", "--retriever", "dense"], "has no embeddings"),
    ],
)
def test_bad_input_is_one_line_and_keeps_the_index(indexed_cli, capsys, argv, message):
    before = index_digest(indexed_cli)
    if argv[-1] == "dense":
        # open_or_build_index would re-embed; the library call itself must refuse a vector-less index.
        from qa_system.errors import QAError
        from qa_system.pipelines import build_retrieval_pipeline

        with pytest.raises(QAError, match=message):
            build_retrieval_pipeline("dense", indexed_cli)
        return
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Fix:" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert index_digest(indexed_cli) == before


@pytest.mark.parametrize(
    "argv, message",
    [
        # Each was accepted: --top-k 0 answered "no answer, score 1.00" (exit 0), --top-k -1 --retriever hybrid
        # returned 30 reviews, --answers -1 printed 18 answers; a NaN threshold printed "score nan".
        (["ask", "Is it good?", "--top-k", "0"], "--top-k must be a whole number from 1 to 1000, not 0."),
        (["ask", "Is it good?", "--top-k", "-1", "--retriever", "hybrid"], "--top-k must be a whole number from 1 to 1000, not -1."),
        (["ask", "Is it good?", "--answers", "-1"], "--answers must be a whole number of at least 1, not -1."),
        (["ask", "Is it good?", "--no-answer-threshold", "nan"], "--no-answer-threshold must be a finite number, not 'nan'."),
        (["ask", "Is it good?", "--no-answer-threshold", "inf"], "--no-answer-threshold must be a finite number"),
        (["ask", "Is it good?", "--top-k", "three"], "--top-k must be a whole number from 1 to 1000, not 'three'."),
        (["ask", "Is it good?", "--mode", "rag", "--max-new-tokens", "0"], "--max-new-tokens must be a whole number"),
        (["ask", "Is it good?", "--mode", "rag", "--temperature", "-0.5"], "--temperature must be a finite number of at least 0"),
        # Ignored while the reader answered (exit 0): the flags of generation need --mode rag.
        (["ask", "Is it good?", "--generator", "hf", "--model", "m"], "--generator, --model set how an answer is generated."),
        (["ask", "Is it good?", "--stream"], "--stream sets how an answer is generated. Fix: add --mode rag, or leave it out."),
        (["search", "Is it good?", "--top-k", "0"], "--top-k must be a whole number"),
        (["products", "--limit", "-1"], "--limit must be a whole number"),
        (["eval", "retriever", "--k", "1", "0"], "--k must be a whole number"),
        (["eval", "retriever", "--limit", "-1"], "--limit must be a whole number"),  # [:-1] silently dropped the last question
        (["eval", "pipeline", "--top-k-retriever", "0"], "--top-k-retriever must be a whole number"),
        (["eval", "reader", "--top-k", "0"], "--top-k must be a whole number"),
        (["eval", "rag", "--top-k-retriever", "-2"], "--top-k-retriever must be a whole number"),
        (["tune-bm25", "--show", "0"], "--show must be a whole number"),
        (["fit-fusion", "--limit", "0"], "--limit must be a whole number"),
        (["train-reader", "--epochs", "0"], "--epochs must be a whole number"),
        (["train-reader", "--learning-rate", "nan"], "--learning-rate must be a finite number above 0"),
        (["train-reader", "--teacher", "t", "--distill-alpha", "2"], "--distill-alpha must be a finite number from 0 to 1"),
        (["train-reader", "--teacher", "t", "--distill-temperature", "0"], "--distill-temperature must be a finite number above 0"),
        (["train-reader", "--interpolate", "0.5"], "--interpolate mixes the new reader with the reader it was fine-tuned from"),
        (["train-reader", "--base-model", "m", "--interpolate", "0.5", "1.5"], "--interpolate must be a finite number from 0 to 1"),
        (["train-reader", "--no-answer-prior", "1.5"], "--no-answer-prior must be a finite number from 0 to 1"),
        (["train-reader", "--no-answer-prior", "-0.1"], "--no-answer-prior must be a finite number from 0 to 1"),
        (["train-reader", "--checkpoint-steps", "0"], "--checkpoint-steps must be a whole number"),
        (["train-reader", "--resume-from", "last"], "No checkpoint to resume from"),
        (["train-reader", "--resume-from", "."], "is not a training checkpoint"),
        (["train-retriever", "--batch-size", "0"], "--batch-size must be a whole number"),
        (["train-retriever", "--hard-negatives", "-1"], "--hard-negatives must be a whole number of at least 0"),
        (["bench", "--queries", "0"], "--queries must be a whole number"),
        (["bench", "--sizes", "1000", "-5"], "--sizes must be a whole number"),
        (["bench", "--budget", "0"], "--budget must be a finite number above 0"),
        (["ui", "--port", "70000"], "--port must be a whole number from 1 to 65535"),
        # The second domain was silently left out: a report said nothing of restaurants.
        (["eval", "reader", "--domain", "electronics", "--domain", "restaurants"], "An evaluation reads one domain; got 2"),
        (["eval", "pipeline", "--domain", "electronics", "--domain", "restaurants"], "An evaluation reads one domain; got 2"),
    ],
)
def test_bad_counts_and_thresholds_are_one_line_exit_2(cli_env, capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and message in captured.err and "Fix:" in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and not captured.out  # refused before any work


@pytest.mark.parametrize(
    "bounds, value, message, example",
    [
        ({"minimum": 0}, -1, "w must be a finite number of at least 0, not -1.", "e.g. w=0."),
        ({"minimum": 0, "maximum": 1}, 1.5, "w must be a finite number from 0 to 1, not 1.5.", "e.g. w=0.5."),
        ({"minimum": 0, "above": True, "maximum": 1}, 0, "w must be a finite number above 0 and at most 1, not 0.", "e.g. w=1."),
        ({"maximum": 2}, 3, "w must be a finite number at most 2, not 3.", "e.g. w=2."),
        ({}, float("inf"), "w must be a finite number, not inf.", "e.g. w=0."),
    ],
)
def test_check_number_names_its_bounds_and_a_valid_example(bounds, value, message, example):
    from qa_system.errors import QAError, check_number

    with pytest.raises(QAError) as refused:
        check_number(value, "w", **bounds)
    assert str(refused.value).startswith(message) and str(refused.value).endswith(example)
    suggested = float(example.removeprefix("e.g. w=").rstrip("."))
    assert check_number(suggested, "w", **bounds) == suggested  # the example it gives is accepted


def test_an_unreachable_hub_model_id_fails_fast_with_one_line(indexed_cli):
    """A hub that does not answer (here a local endpoint that hangs up on every request): one probe, then the
    local cache only. Before, huggingface_hub retried each file of the model with backoff (~50 s).
    What the code did is counted (the requests the hub received), not how long the machine took."""
    import os
    import socket
    import subprocess
    import sys
    import threading

    requests = []
    server = socket.create_server(("127.0.0.1", 0))

    def hang_up():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            with connection:
                requests.append(connection.recv(4096).split(b"\r\n", 1)[0].decode())

    threading.Thread(target=hang_up, daemon=True).start()
    command = [
        sys.executable,
        "-c",
        "import sys; from qa_system.cli import main; sys.exit(main())",
        "ask",
        "x",
        "--item",
        "KINDLE",
        "--reader-model",
        "someone/no-such-model",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(
        QA_DATA_DIR=str(indexed_cli.data_dir), QA_HOME=str(indexed_cli.home), HF_ENDPOINT=f"http://127.0.0.1:{server.getsockname()[1]}"
    )
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    finally:
        server.close()
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: Could not load the reader model 'someone/no-such-model': the model hub") and "Fix:" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert requests.count("HEAD / HTTP/1.1") == 1  # the reachability probe, once
    assert not [r for r in requests if "no-such-model" in r]  # and not one request for a file of the model


@pytest.mark.parametrize(
    "append, message",
    [
        (None, "missing the SubjQA column"),
        ("X,electronics,cut off\r\n", "dev.csv line 4: the row has fewer fields (3) than the header (19)."),  # was a traceback, exit 1
    ],
    ids=["missing-column", "short-row"],
)
def test_malformed_csv_keeps_the_index(indexed_cli, capsys, append, message):
    before = index_digest(indexed_cli)
    path = indexed_cli.data_dir / "electronics" / "splits" / "dev.csv"
    if append is None:
        path.write_text("item_id,question\nX,broken\n")
    else:
        path.write_text(path.read_text(encoding="utf-8") + append, encoding="utf-8")
    assert main(["index", "--no-embed"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and str(path) in err and "Fix:" in err
    assert len(err.strip().splitlines()) == 1
    assert index_digest(indexed_cli) == before


def test_a_crash_while_saving_keeps_the_old_index(indexed_cli, monkeypatch, capsys):
    from qa_system.stores import memory

    before = index_digest(indexed_cli)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(memory.json, "dumps", crash)  # the index is written a document at a time
    capsys.readouterr()
    assert main(["index", "--no-embed"]) == 2  # one line naming the error, exit 2
    error = capsys.readouterr().err
    assert "disk full" in error and len(error.strip().splitlines()) == 1
    assert index_digest(indexed_cli) == before
    leftovers = [p.name for p in (indexed_cli.home / "indexes" / "memory").iterdir()]
    assert leftovers == ["subjqa-electronics.json"]


def test_memory_index_round_trip(indexed_cli):
    from qa_system.stores import open_index

    index = open_index(indexed_cli, "electronics")
    saved = json.loads((indexed_cli.home / "indexes" / "memory" / "subjqa-electronics.json").read_text())
    assert index.store.count_documents() == len(saved["documents"]) == 6
    assert {d.id: d.content for d in index.store.filter_documents()} == {d["id"]: d["content"] for d in saved["documents"]}
    assert index.manifest["item_counts"] == {"KINDLE": 3, "HEADPHONES": 2, "MOUSE": 1}


def test_eval_retriever_writes_the_report(indexed_cli, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["eval", "retriever", "--split", "test", "--retriever", "bm25", "--k", "1", "3", "--out", str(out)]) == 0
    for name in ("report.json", "report.csv", "report.md", "recall_at_k.png", "records.csv"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "report.json").read_text())
    assert report["questions"] == 4
    strict_all = next(m for m in report["metrics"] if m["definition"] == "strict" and m["group"] == "all")
    # Every test product has its gold review among at most 3 reviews: recall@3 is 1.
    assert strict_all["recall@3"] == 1.0
    assert "| recall@3 |" in (out / "report.md").read_text()
    # MRR and MAP count what the largest k retrieved: the same words said what they were changed with --k
    depth = "MRR and MAP are over each retriever's top 3 documents (the largest k)"
    assert depth in capsys.readouterr().out and depth in (out / "report.md").read_text()
    chance = [m for m in report["metrics"] if m["retriever"] == CHANCE and m["definition"] == "strict"]
    # Each test product has one test review: any order finds it first, and no question has 2+ candidates.
    assert [(m["group"], m["recall@1"]) for m in chance if m["group"] in ("all", "2+ candidates")] == [("all", 1.0)]


def test_chance_metrics_are_the_average_over_every_order_of_the_candidates():
    # Questions with n candidates of which the relevant ones are given (strict: one; chapter: several).
    cases = [(1, [0], [0]), (3, [2], [0, 2]), (4, [1], [1, 2, 3]), (5, [4], []), (4, [0], [0, 3])]
    base = pd.DataFrame(
        [{"retrieved": n, "strict_ranks": [i + 1 for i in s], "chapter_ranks": [i + 1 for i in c]} for n, s, c in cases]
    ).assign(answerable=True, subjective=False, chapter_unanswerable=False)
    chance = retrieval_metrics(base, ks=(1, 2, 3), chance=True).set_index(["definition", "group"])
    # Brute force: every permutation of each question's candidates, scored as an observed ranking, averaged.
    orders = []
    for question, (n, strict, chapter) in enumerate(cases):
        permutations = list(itertools.permutations(range(n)))
        for order in permutations:
            position = {candidate: rank for rank, candidate in enumerate(order, 1)}
            orders.append(
                {
                    "question": question,
                    "retrieved": n,
                    "strict_ranks": sorted(position[i] for i in strict),
                    "chapter_ranks": sorted(position[i] for i in chapter),
                }
            )
    observed = pd.DataFrame(orders).assign(answerable=True, subjective=False, chapter_unanswerable=False)
    for definition in ("strict", "chapter"):
        for column in ("recall@1", "recall@2", "recall@3", "mrr", "map"):
            by_question = [
                retrieval_metrics(group, ks=(1, 2, 3)).set_index(["definition", "group"]).loc[(definition, "all"), column]
                for _, group in observed.groupby("question")
            ]
            assert chance.loc[(definition, "all"), column] == pytest.approx(sum(by_question) / len(cases)), (definition, column)
    assert chance.loc[("strict", "all"), "recall@1"] == pytest.approx((1 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 4) / 5)
    assert chance.loc[("strict", "2+ candidates"), "n"] == 4
    # An unanswerable question is always a chapter hit, under chance too.
    unanswerable = retrieval_metrics(base.assign(chapter_unanswerable=True), ks=(1,), chance=True).set_index(["definition", "group"])
    assert unanswerable.loc[("chapter", "all"), "recall@1"] == 1.0


def test_retrieval_metrics_by_hand():
    records = pd.DataFrame(
        [
            # answerable, gold at rank 2; answer text in ranks 2 and 3
            {"answerable": True, "subjective": True, "strict_ranks": [2], "chapter_ranks": [2, 3]},
            # answerable, gold not retrieved; answer text at rank 1
            {"answerable": True, "subjective": False, "strict_ranks": [], "chapter_ranks": [1]},
            # unanswerable, gold at rank 1; no answer text (always a chapter hit)
            {"answerable": False, "subjective": False, "strict_ranks": [1], "chapter_ranks": []},
        ]
    )
    records["chapter_unanswerable"] = ~records["answerable"]
    table = retrieval_metrics(records, ks=(1, 3)).set_index(["definition", "group"])
    strict = table.loc[("strict", "all")]
    assert strict["recall@1"] == pytest.approx(1 / 3) and strict["recall@3"] == pytest.approx(2 / 3)
    assert strict["mrr"] == pytest.approx((1 / 2 + 0 + 1) / 3)
    chapter = table.loc[("chapter", "all")]
    assert chapter["recall@1"] == pytest.approx(2 / 3) and chapter["recall@3"] == pytest.approx(1.0)
    assert chapter["map"] == pytest.approx((average_precision([2, 3]) + 1 + 1) / 3)
    assert average_precision([2, 3]) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert table.loc[("strict", "subjective"), "n"] == 1
    # The chapter's data labels the second question unanswerable too (its first annotation was ANSWERNOTFOUND).
    records.at[1, "chapter_ranks"], records.at[1, "chapter_unanswerable"] = [], True
    chapter = retrieval_metrics(records, ks=(1, 3)).set_index(["definition", "group"]).loc[("chapter", "all")]
    assert chapter["recall@1"] == pytest.approx(2 / 3) and chapter["mrr"] == pytest.approx((1 / 2 + 1 + 1) / 3)


def test_library_log_records_are_the_commands_lines_on_stdout_and_stderr(capsys):
    """While a command runs: the library's warnings are lines on stderr, the servers' address lines on
    stdout (where they were printed), other INFO records stay quiet; nothing stays configured after."""
    import logging

    from qa_system.cli.main import console_logging

    with console_logging():
        logging.getLogger("qa_system.serving.api.server").info("API: http://%s:%s", "127.0.0.1", 8000)
        logging.getLogger("qa_system.reading.onnx_cache").info("a diagnostic")
        logging.getLogger("qa_system.ingestion.indexing").warning("The index is out of date: %s.", "re-indexing")
        logging.getLogger("haystack").warning("not the library's")
    captured = capsys.readouterr()
    assert captured.out == "API: http://127.0.0.1:8000\n"
    assert captured.err == "The index is out of date: re-indexing.\n"
    assert not logging.getLogger("qa_system").handlers and logging.getLogger("qa_system.serving.api.server").level == logging.NOTSET


def test_a_path_that_cannot_be_written_and_an_over_long_question_are_one_line_each(indexed_cli, tmp_path, capsys):
    taken = tmp_path / "taken.json"
    taken.write_text("mine", encoding="utf-8")
    capsys.readouterr()
    assert main(["export-squad", "--split", "test", "--out", str(taken)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: Cannot use {taken}") and "Fix:" in error and len(error.strip().splitlines()) == 1
    assert taken.read_text(encoding="utf-8") == "mine"
    assert main(["ask", "a" * 1000 + "?", "--item", "KINDLE"]) == 2  # the API's, the shell's and the page's limit
    assert capsys.readouterr().err.strip() == "error: The question is 1001 characters long. Fix: ask in at most 1000 characters."


def test_the_shell_lists_its_commands_names_an_unknown_one_and_an_unknown_item_at_once(cli_env, tiny_reader, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(":help\n:foo\n:item NOPE\nIs it good for reading?\n:item HEADPHONES\n:quit\n"))
    assert main(["shell", "--item", "KINDLE", "--reader-model", str(tiny_reader), "--reader-backend", "torch"]) == 0
    captured = capsys.readouterr()
    asked = [line for line in captured.out.splitlines() if line.startswith("Q: ")]
    assert len(asked) == 1 and asked[0].startswith("Q: Is it good for reading?  (KINDLE;")  # no command asked; NOPE not taken
    assert ":item ID" in captured.err and ":quit" in captured.err  # :help's list
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert errors[0].startswith("error: Unknown command ':foo'. Fix: use one of: :item ID, :item, :help, :quit")
    assert errors[1].startswith("error: Product 'NOPE' has no reviews in index 'subjqa-electronics'.") and len(errors) == 2
    assert "Asking about HEADPHONES." in captured.err


def test_output_into_a_pipe_its_reader_closed_ends_quietly_as_unix_tools_do(tmp_path):
    import os
    import subprocess
    import sys

    program = "import sys; from qa_system.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", program, "collections", "--home", str(tmp_path / "home")]
    env = {**os.environ, "HAYSTACK_TELEMETRY_ENABLED": "False"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    process.stdout.close()  # `qa-system collections | head -0`: nothing reads what it prints
    error = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and error == ""  # not "error: Cannot use: Broken pipe" with exit 2


def test_a_full_disk_or_a_folder_without_write_permission_names_what_to_change():
    import errno

    from qa_system.cli.main import _os_error_line

    full = _os_error_line(OSError(errno.ENOSPC, "No space left on device"))
    assert (
        full
        == "error: Cannot use: No space left on device. Fix: free disk space there, or point QA_HOME (the indexes), --out or --output at another disk."
    )
    denied = _os_error_line(PermissionError(errno.EACCES, "Permission denied", "/srv/qa/locks/ingest-memory-x.lock"))
    assert denied.startswith("error: Cannot use /srv/qa/locks/ingest-memory-x.lock: Permission denied. Fix: ")
    assert "QA_HOME for the indexes" in denied


def test_the_cli_names_a_collections_documents_documents_and_subjqas_reviews(capsys):
    """`ask --collection handbook` printed "(said in 2 reviews)" and "No answer in these reviews" over Markdown files."""
    import argparse

    from haystack import Document, ExtractedAnswer

    from qa_system.cli.ask import _print_spans

    def answers(meta: dict) -> list:
        pages = [Document(id=f"p{n}", content="The monthly wellness stipend is $75.", meta={**meta(n)}) for n in (1, 2)]
        spans = [{"document_id": page.id, "start": 32, "end": 35} for page in pages]
        said = {"probability": 0.8, "chosen": True, "close_call": False, "support": 2, "spans": spans}
        span = ExtractedAnswer(query="q", score=0.8, data="$75", document=pages[0], document_offset=ExtractedAnswer.Span(32, 35), meta=said)
        return [span, ExtractedAnswer(query="q", score=0.1, data=None, meta={"probability": 0.1, "chosen": False, "close_call": False})]

    _print_spans(answers(lambda n: {"document_id": f"wellness-{n}.md"}), argparse.Namespace(context=40, collection="handbook"))
    out = capsys.readouterr().out
    assert "(said in 2 documents)" in out and "No answer in these documents" in out and "review" not in out
    _print_spans(answers(lambda n: {"review_id": f"r{n}", "item_id": "B1"}), argparse.Namespace(context=40, collection=None))
    out = capsys.readouterr().out
    assert "(said in 2 reviews)" in out and "No answer in these reviews" in out
    # Nothing read: the collection asked says what it holds.
    nothing = [ExtractedAnswer(query="q", score=1.0, data=None, meta={"probability": 1.0, "chosen": True, "no_documents": True})]
    _print_spans(nothing, argparse.Namespace(context=40, collection="handbook"))
    assert "no document passes" in capsys.readouterr().out
    _print_spans(nothing, argparse.Namespace(context=40, collection=None, domain=["electronics"]))
    assert "no review passes" in capsys.readouterr().out


def test_search_over_a_collection_of_your_own_counts_documents(cli_env, tmp_path, capsys):
    pages = tmp_path / "handbook"
    pages.mkdir()
    (pages / "wellness.md").write_text("# Wellness\n\nA monthly wellness stipend of $75 covers gym memberships.\n", encoding="utf-8")
    assert main(["index", "--input", str(pages), "--collection", "handbook", "--no-embed"]) == 0
    capsys.readouterr()
    assert main(["search", "wellness stipend", "--collection", "handbook"]) == 0
    assert capsys.readouterr().out.startswith("1 document(s) for all documents")
