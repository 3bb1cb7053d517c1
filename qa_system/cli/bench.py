"""`qa-system bench`: speed of every stage beside Haystack's stock components."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from qa_system.cli.options import Options, count, number, settings_from_args


def cmd_bench(args: argparse.Namespace) -> None:
    # Sleeping rather than spinning OpenMP threads (read when torch loads): on a busy small machine
    # spinning makes the PyTorch baselines several times slower, which would flatter the ONNX reader.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from qa_system.bench import run_bench

    out = run_bench(
        settings_from_args(args), args.out, args.sizes, args.queries, args.reader_questions, args.budget,
        0 if args.skip_rag else args.rag_questions, args.embed_sample, args.seed, progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    for check in json.loads((out / "report.json").read_text(encoding="utf-8"))["metrics"]:
        print(f"{check['pass']:>3}  {check['criterion']}: {check['measured']} (target {check['target']})")
    print(f"Report written to {out}/ (report.json, report.csv, report.md, latency_vs_corpus_size.png, reader.png)")



def cmd_bench_ingest(args: argparse.Namespace) -> None:
    from qa_system.bench.ingest import run_ingest_bench

    table = run_ingest_bench(
        settings_from_args(args), args.out, args.rows, args.embed_rows, args.seed, args.keep, progress=lambda message: print(message, file=sys.stderr, flush=True)
    )
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md)")


def register(commands, options: Options) -> None:
    p = commands.add_parser("bench-ingest", parents=[options.common], help="documents/s and peak memory of `index --input` on a large CSV of reviews")
    p.add_argument("--rows", type=count("--rows"), default=100_000, help="reviews in the CSV (real SubjQA ones, then synthetic)")
    p.add_argument("--embed-rows", type=count("--embed-rows", 0), help="rows indexed with embeddings too (default: all; 0: none), then re-run unchanged and with one row changed")
    p.add_argument("--seed", type=count("--seed", 0), default=0, help="seed of the synthetic reviews")
    p.add_argument("--keep", action="store_true", help="keep the benchmark's collections (default: deleted at the end)")
    p.add_argument("--out", type=Path, default=Path("reports/bench-ingest"))
    p.set_defaults(func=cmd_bench_ingest)

    p = commands.add_parser("bench", parents=[options.common], help="measure indexing, retrieval, reader and end-to-end speed beside Haystack's stock components")
    p.add_argument("--sizes", nargs="+", type=count("--sizes"), default=[1000, 10000, 100000], help="corpus sizes in reviews")
    p.add_argument("--queries", type=count("--queries"), default=200, help="questions for retrieval and end-to-end timing")
    p.add_argument("--reader-questions", type=count("--reader-questions"), help="questions for the reader comparison and its EM/F1 (default: all electronics test)")
    p.add_argument("--budget", type=number("--budget", 0, above=True), default=60.0, help="seconds a slow baseline may spend on one measurement")
    p.add_argument("--rag-questions", type=count("--rag-questions", 0), default=3, help="questions for the RAG end-to-end timing")
    p.add_argument("--skip-rag", action="store_true", help="leave the RAG pipeline out")
    p.add_argument("--embed-sample", type=count("--embed-sample"), default=1000, help="reviews embedded for real (the other vectors are perturbed copies)")
    p.add_argument("--seed", type=count("--seed", 0), default=0, help="seed of the synthetic reviews and vectors")
    p.add_argument("--out", type=Path, default=Path("reports/bench"))
    p.set_defaults(func=cmd_bench)
