"""`qa-system export-pipeline`: one pipeline of ``pipelines/*.yml``, settings resolved, as plain Haystack YAML (``Pipeline.loads``, Hayhooks)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qa_system.cli.options import Options, count, depth, open_index_for, settings_from_args
from qa_system.config import RETRIEVERS, TOP_K_READER, TOP_K_RETRIEVER
from qa_system.disk_cache import atomic_file
from qa_system.errors import QAError

STAGES = ("extractive", "retrieval")


def cmd_export_pipeline(args: argparse.Namespace) -> None:
    """`qa-system export-pipeline`: write the pipeline `ask` (or `search`) runs as a YAML file that loads as it is."""
    from qa_system.pipelines.portable import export_pipeline

    settings = settings_from_args(args)
    index = open_index_for(args, settings, embeddings=args.retriever != "bm25")
    stage = None if args.stage == "retrieval" else args.stage
    text = export_pipeline(args.retriever, index, settings, stage, args.rerank, args.top_k, args.answers)
    if args.output.is_dir():
        raise QAError(f"{args.output} is a directory.", f"name a file, e.g. --output {args.output / (args.stage + '.yml')}.")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(args.output) as handle:
        handle.write(text)
    print(f"{args.output}: {args.stage} pipeline ({args.retriever}) over index '{index.name}' ({index.backend})")
    print("Load it with Pipeline.loads(text, allowed_modules=['qa_system']), or serve it with Hayhooks:", file=sys.stderr)
    print(
        f"  HAYSTACK_DESERIALIZATION_ALLOWLIST=qa_system hayhooks run  &&  hayhooks pipeline deploy-yaml --name {args.stage} {args.output}",
        file=sys.stderr,
    )


def register(commands, options: Options) -> None:
    """Add `export-pipeline` to the command line."""
    p = commands.add_parser(
        "export-pipeline",
        parents=[options.common],
        help="write a pipeline (settings resolved) as Haystack YAML that Pipeline.loads and Hayhooks read as it is",
    )
    p.add_argument("stage", choices=STAGES, help="extractive: retrieval + reader (+ answer selector); retrieval: the retriever alone")
    options.domain(p)
    options.collection(p)
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument(
        "--rerank", action="store_true", help="re-rank the reviews by the reader's answerability (fitted by fit-fusion --rerank)"
    )
    p.add_argument("--top-k", type=depth("--top-k"), help=f"reviews to retrieve (default: QA_TOP_K_RETRIEVER, {TOP_K_RETRIEVER})")
    p.add_argument("--answers", type=count("--answers"), help=f"answers to return (extractive; default: QA_TOP_K_READER, {TOP_K_READER})")
    p.add_argument("--output", type=Path, required=True, help="the YAML file to write")
    p.set_defaults(func=cmd_export_pipeline)
