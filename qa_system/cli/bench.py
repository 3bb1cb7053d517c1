"""`qa-system bench`: speed of every stage beside Haystack's stock components; `bench page`: many users on the search page;
`bench api`: a load test of the REST API; `bench ingest`: `index --input` on a large CSV."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from qa_system.cli.options import Options, count, depth, number, settings_from_args
from qa_system.config import READER_BACKENDS, RETRIEVERS, TOP_K_RETRIEVER
from qa_system.errors import QAError


def cmd_bench(args: argparse.Namespace) -> None:
    """`qa-system bench`: every speed measurement beside its baseline; prints the acceptance checks and writes the report."""
    # Sleeping rather than spinning OpenMP threads (read when torch loads): on a busy small machine
    # spinning makes the PyTorch baselines several times slower, which would flatter the ONNX reader.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from qa_system.bench import run_bench

    out = run_bench(
        settings_from_args(args),
        args.out,
        args.sizes,
        args.queries,
        args.reader_questions,
        args.budget,
        0 if args.skip_rag else args.rag_questions,
        args.embed_sample,
        args.seed,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    for check in json.loads((out / "report.json").read_text(encoding="utf-8"))["metrics"]:
        print(f"{check['pass']:>3}  {check['criterion']}: {check['measured']} (target {check['target']})")
    print(f"Report written to {out}/ (report.json, report.csv, report.md, latency_vs_corpus_size.png, reader.png)")


def cmd_bench_page(args: argparse.Namespace) -> None:
    """`qa-system bench page`: many browser sessions on one search page; prints the measurements and writes the report."""
    from qa_system.bench.page_load import run_page_load

    result = run_page_load(
        settings_from_args(args),
        args.sessions,
        args.seconds,
        args.clicks,
        args.split,
        args.out,
        args.timeout,
        args.seed,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
        browser_nice=args.browser_nice,
    )
    for row in result.table().itertuples(index=False):
        print(f"{row.measurement}: {row.value}")
    print(f"Report written to {args.out}/ (report.json, report.md, records.csv, feedback.sqlite, streamlit.log)")
    if result.lost:
        raise QAError(
            f"{result.lost} acknowledged feedback clicks are not in the database.", f"see {args.out}/records.csv and streamlit.log."
        )


def cmd_bench_api(args: argparse.Namespace) -> None:
    """`qa-system bench api`: a load test of the REST API; prints its table and writes the report."""
    from qa_system.bench.api import run_api_bench

    table = run_api_bench(
        settings_from_args(args),
        args.out,
        args.backends,
        args.clients,
        args.seconds,
        args.url,
        args.domain[0],
        args.split,
        args.questions,
        args.retriever,
        args.top_k,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
        processes=args.processes,
    )
    print(table.to_string(index=False))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md, server-*.log)")


def cmd_bench_ingest(args: argparse.Namespace) -> None:
    """`qa-system bench ingest`: `index --input` on a large CSV of reviews; prints its speed and memory and writes the report."""
    from qa_system.bench.ingest import run_ingest_bench

    table = run_ingest_bench(
        settings_from_args(args),
        args.out,
        args.rows,
        args.embed_rows,
        args.seed,
        args.keep,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md)")


def register(commands, options: Options) -> None:
    """Add `bench` and its `page`, `api` and `ingest` variants to the command line."""
    p = commands.add_parser(
        "bench",
        parents=[options.common],
        help="measure indexing, retrieval, reader and end-to-end speed beside Haystack's stock components",
    )
    p.add_argument("--sizes", nargs="+", type=count("--sizes"), default=[1000, 10000, 100000], help="corpus sizes in reviews")
    p.add_argument("--queries", type=count("--queries"), default=200, help="questions for retrieval and end-to-end timing")
    p.add_argument(
        "--reader-questions",
        type=count("--reader-questions"),
        help="questions for the reader comparison and its EM/F1 (default: all electronics test)",
    )
    p.add_argument(
        "--budget", type=number("--budget", 0, above=True), default=60.0, help="seconds a slow baseline may spend on one measurement"
    )
    p.add_argument("--rag-questions", type=count("--rag-questions", 0), default=3, help="questions for the RAG end-to-end timing")
    p.add_argument("--skip-rag", action="store_true", help="leave the RAG pipeline out")
    p.add_argument(
        "--embed-sample",
        type=count("--embed-sample"),
        default=1000,
        help="reviews embedded for real (the other vectors are perturbed copies)",
    )
    p.add_argument("--seed", type=count("--seed", 0), default=0, help="seed of the synthetic reviews and vectors")
    p.add_argument("--out", type=Path, default=Path("reports/bench"))
    p.set_defaults(func=cmd_bench)
    others = p.add_subparsers(dest="bench", title="other benchmarks (`qa-system bench` alone: the speed report above)")

    p = others.add_parser(
        "page", parents=[options.common], help="many browser sessions asking and clicking feedback on one served search page at once"
    )
    p.add_argument(
        "--sessions", type=count("--sessions"), default=8, help="headless Chromium sessions, each on its own product (at most 16)"
    )
    p.add_argument("--seconds", type=number("--seconds", 0, above=True), default=60.0, help="how long they all ask and click")
    p.add_argument("--clicks", type=count("--clicks"), default=3, help="feedback clicks on each answer, 0.3 s apart (at most 20)")
    p.add_argument("--split", default="test", help="the labelled electronics questions the sessions ask")
    p.add_argument(
        "--timeout",
        type=number("--timeout", 0, above=True),
        default=120.0,
        help="seconds one answer (or one click's acknowledgement) may take",
    )
    p.add_argument("--seed", type=count("--seed", 0), default=0, help="seed of the buttons clicked")
    p.add_argument(
        "--browser-nice",
        type=count("--browser-nice", 0, 19),
        help="how far below the page server the browsers run (default 10: they stand in for users' own machines; 0: level)",
    )
    p.add_argument("--out", type=Path, default=Path("reports/page-load"))
    p.set_defaults(func=cmd_bench_page)

    p = others.add_parser(
        "api", parents=[options.common], help="load-test the REST API on loopback: throughput, latency percentiles, errors"
    )
    options.domain(p)
    p.add_argument(
        "--clients",
        type=count("--clients", 1, 256),
        nargs="+",
        default=[8],
        help="concurrent clients, each asking back to back; several counts are measured in turn on one server (e.g. 1 8 64)",
    )
    p.add_argument(
        "--processes", type=count("--processes"), default=1, help="processes of the server started (`qa-system api --processes`)"
    )
    p.add_argument("--seconds", type=number("--seconds", 0, above=True), default=60.0, help="how long the load lasts")
    p.add_argument(
        "--backends",
        nargs="+",
        choices=READER_BACKENDS,
        help="reader backends to serve in turn, one server each (ratio of the two); default: the configured one (onnx: int8)",
    )
    p.add_argument("--url", help="measure this running server instead of starting one (e.g. http://127.0.0.1:8000)")
    p.add_argument("--split", default="test", help="labelled questions of this split are asked")
    p.add_argument("--questions", type=count("--questions"), default=200, help="distinct questions, asked in turn")
    p.add_argument("--retriever", choices=RETRIEVERS, help="retriever of every question (default: the server's)")
    p.add_argument("--top-k", type=depth("--top-k"), default=TOP_K_RETRIEVER, help="reviews read per question")
    p.add_argument("--out", type=Path, default=Path("reports/bench-api"))
    p.set_defaults(func=cmd_bench_api)

    p = others.add_parser(
        "ingest", parents=[options.common], help="documents/s and peak memory of `index --input` on a large CSV of reviews"
    )
    p.add_argument("--rows", type=count("--rows"), default=100_000, help="reviews in the CSV (real SubjQA ones, then synthetic)")
    p.add_argument(
        "--embed-rows",
        type=count("--embed-rows", 0),
        help="rows indexed with embeddings too (default: all; 0: none), then re-run unchanged and with one row changed",
    )
    p.add_argument("--seed", type=count("--seed", 0), default=0, help="seed of the synthetic reviews")
    p.add_argument("--keep", action="store_true", help="keep the benchmark's collections (default: deleted at the end)")
    p.add_argument("--out", type=Path, default=Path("reports/bench-ingest"))
    p.set_defaults(func=cmd_bench_ingest)
