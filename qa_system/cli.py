"""`qa-system` command line: a thin door onto the library.

Every command parses its flags into ``Settings`` and calls one library function. A ``QAError``
(bad input the user can fix) is printed as one line on stderr with exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from qa_system.config import RETRIEVERS, STORE_BACKENDS, Settings
from qa_system.errors import QAError

DEFAULT_ITEM = "B0074BW614"


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=args.data_dir,
        home=args.home,
        store=args.store,
        es_url=args.es_url,
        embedding_model=args.embedding_model,
        query_embedding_model=args.query_embedding_model,
        reader_model=args.reader_model,
    )


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("settings (also QA_* environment variables)")
    group.add_argument("--data-dir", help="SubjQA root holding <domain>/splits/<split>.csv (default ../shared/data/subjqa)")
    group.add_argument("--home", help="where indexes and caches live (QA_HOME, default ~/.cache/qa_system)")
    group.add_argument("--store", choices=STORE_BACKENDS, help="document store backend (default memory)")
    group.add_argument("--es-url", help="Elasticsearch url (QA_ES_URL, default http://localhost:9200)")
    group.add_argument("--embedding-model", help="passage encoder: hub id or local path (default all-MiniLM-L6-v2 from its PyPI wheel)")
    group.add_argument("--query-embedding-model", help="separate question encoder for DPR-style models")
    group.add_argument("--reader-model", help="extractive QA model: hub id or local path (default models/reader-minilm-subjqa)")
    return common


# ------------------------------------------------------------------------------------ commands


def cmd_index(args: argparse.Namespace) -> None:
    from qa_system.indexing import build_index

    settings = _settings(args)
    index = build_index(settings, args.domain, embed=not args.no_embed, progress=True)
    m = index.manifest
    print(f"Indexed {m['documents']} reviews of {', '.join(m['domains'])} into the {index.backend} index '{index.name}'.")
    if "load_report" in m:
        print(f"  {m['load_report']}")
    timings = m["build_timings"]
    print(f"  took {timings['total_s']:.1f} s" + (f" (embedding {timings['embedding_s']:.1f} s)" if "embedding_s" in timings else ""))


def cmd_products(args: argparse.Namespace) -> None:
    from qa_system.stores import open_index

    counts = open_index(_settings(args), args.domain).item_counts()
    for item_id, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: args.limit]:
        print(f"{item_id}\t{count} reviews")


def cmd_search(args: argparse.Namespace) -> None:
    from qa_system.indexing import open_or_build_index
    from qa_system.pipelines import build_retrieval_pipeline

    settings = _settings(args)
    index = open_or_build_index(settings, args.domain, embeddings=args.retriever != "bm25")
    pipeline = build_retrieval_pipeline(args.retriever, settings, index=index)
    result = pipeline.run(args.question, item_id=args.item, split=args.split, top_k=args.top_k)
    documents = result["documents"]
    print(f"{len(documents)} review(s) for {args.item or 'all products'} ({args.retriever}, {1000 * result['timings']['retrieval_s']:.0f} ms)")
    for rank, document in enumerate(documents, 1):
        meta = document.meta
        snippet = textwrap.shorten(document.content or "", width=args.width, placeholder=" ...")
        print(f"\n{rank}. score {document.score:.3f}  review {meta.get('review_id')}  ({meta.get('item_id')}, {meta.get('split')})")
        print(textwrap.indent(textwrap.fill(snippet, width=100), "   "))


def highlight(text: str, start: int, end: int, tty: bool) -> str:
    """The answer marked inside its context: bold yellow on a terminal, **...** otherwise."""
    left, right = ("\033[1;33m", "\033[0m") if tty else ("**", "**")
    return f"{text[:start]}{left}{text[start:end]}{right}{text[end:]}"


def cmd_ask(args: argparse.Namespace) -> None:
    from qa_system.indexing import open_or_build_index
    from qa_system.pipelines import build_qa_pipeline

    settings = _settings(args)
    index = open_or_build_index(settings, args.domain, embeddings=args.retriever != "bm25")
    pipeline = build_qa_pipeline(args.retriever, settings, index=index, answer_stage=args.mode)
    result = pipeline.run(
        args.question, item_id=args.item, split=args.split, top_k=args.top_k,
        top_k_reader=args.answers, no_answer_threshold=args.no_answer_threshold,
    )
    timings = result["timings"]
    print(f"Q: {args.question}  ({args.item or 'all products'}; retrieval {1000 * timings['retrieval_s']:.0f} ms, "
          f"reader {1000 * timings['answer_s']:.0f} ms)")
    tty = sys.stdout.isatty()
    for rank, answer in enumerate(result["answers"], 1):
        if answer.data is None:
            print(f"\n{rank}. [no answer in these reviews]  score {answer.score:.2f}")
            continue
        document = answer.document
        span = answer.document_offset
        begin = max(0, span.start - args.context)
        end = min(len(document.content), span.end + args.context)
        context = highlight(document.content[begin:end], span.start - begin, span.end - begin, tty)
        print(f"\n{rank}. {answer.data}  score {answer.score:.2f}  review {document.meta.get('review_id')}")
        print(textwrap.indent(("..." if begin else "") + context + ("..." if end < len(document.content) else ""), "   "))


def cmd_eval_retriever(args: argparse.Namespace) -> None:
    from qa_system.evaluation.retrieval import evaluate_retrievers

    result = evaluate_retrievers(
        _settings(args), args.domain[0], args.split, args.retriever, args.k, out_dir=args.out, limit=args.limit
    )
    metrics = result["metrics"]
    columns = ["retriever", "definition", "group", "n", *[f"recall@{k}" for k in sorted(set(args.k))], "mrr", "map"]
    shown = metrics[metrics["group"].isin(["all", "answerable"])][columns]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(result["timings"].to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md, recall_at_k.png)")


# ------------------------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = argparse.ArgumentParser(prog="qa-system", description="Question answering over product reviews (SubjQA).")
    commands = parser.add_subparsers(dest="command", required=True)

    def domain_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--domain", action="append", help="SubjQA domain, repeatable (default electronics)")

    p = commands.add_parser("index", parents=[common], help="index a domain's reviews (all splits) into the store")
    domain_option(p)
    p.add_argument("--no-embed", action="store_true", help="skip dense embeddings (BM25 only; faster)")
    p.set_defaults(func=cmd_index)

    p = commands.add_parser("products", parents=[common], help="list the indexed products with their review counts")
    domain_option(p)
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_products)

    p = commands.add_parser("search", parents=[common], help="print the reviews a retriever ranks for a question")
    p.add_argument("question")
    domain_option(p)
    p.add_argument("--item", help=f"product (item_id) to search, e.g. {DEFAULT_ITEM}")
    p.add_argument("--split", help="only reviews of this split")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--width", type=int, default=400, help="characters of each review to print")
    p.set_defaults(func=cmd_search)

    p = commands.add_parser("ask", parents=[common], help="answer a question about a product from its reviews")
    p.add_argument("question")
    domain_option(p)
    p.add_argument("--item", help=f"product (item_id) to ask about, e.g. {DEFAULT_ITEM}")
    p.add_argument("--split", help="only reviews of this split")
    p.add_argument("--mode", choices=["extractive"], default="extractive", help="answer stage")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--top-k", type=int, default=3, help="reviews to retrieve")
    p.add_argument("--answers", type=int, default=3, help="answers to show")
    p.add_argument("--no-answer-threshold", type=float, help="logit margin an answer needs over 'no answer' (default: tuned)")
    p.add_argument("--context", type=int, default=150, help="characters of review shown around each answer")
    p.set_defaults(func=cmd_ask)

    evaluation = commands.add_parser("eval", help="evaluate a stage on a labelled split and write a report")
    stages = evaluation.add_subparsers(dest="stage", required=True)
    p = stages.add_parser("retriever", parents=[common], help="recall@k, MRR, MAP (strict and chapter definitions)")
    domain_option(p)
    p.add_argument("--split", default="test")
    p.add_argument("--retriever", nargs="+", choices=RETRIEVERS, default=list(RETRIEVERS))
    p.add_argument("--k", nargs="+", type=int, default=[1, 3, 5, 10, 20])
    p.add_argument("--out", type=Path, default=Path("reports/retriever"))
    p.add_argument("--limit", type=int, help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_eval_retriever)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "domain", None) is None:
        args.domain = ["electronics"]
    try:
        args.func(args)
    except QAError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; nothing saved was changed.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
