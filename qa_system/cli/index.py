"""`qa-system index | products | export-squad`: documents into the store, and out as SQuAD files."""

from __future__ import annotations

import argparse
from pathlib import Path

from qa_system.cli.options import Options, count, settings_from_args


def cmd_index(args: argparse.Namespace) -> None:
    from qa_system.indexing import build_index

    settings = settings_from_args(args)
    index = build_index(settings, args.domain, embed=not args.no_embed, progress=True, force=args.force)
    m = index.manifest
    print(f"Indexed {m['documents']} reviews of {', '.join(m['domains'])} into the {index.backend} index '{index.name}'.")
    if "load_report" in m:
        print(f"  {m['load_report']}")
    timings = m["build_timings"]
    print(f"  took {timings['total_s']:.1f} s" + (f" (embedding {timings['embedding_s']:.1f} s)" if "embedding_s" in timings else ""))
    if m.get("vector_search") is False:
        print("  no review vectors: the server has no k-NN plugin, so only --retriever bm25 runs on this index")
    if m.get("vector_search") is False:
        print("  no review vectors: the server has no k-NN plugin, so only --retriever bm25 runs on this index")


def cmd_products(args: argparse.Namespace) -> None:
    from qa_system.stores import open_index

    counts = open_index(settings_from_args(args), args.domain).item_counts()
    for item_id, reviews in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: args.limit]:
        print(f"{item_id}\t{reviews} reviews")


def cmd_export_squad(args: argparse.Namespace) -> None:
    from qa_system.reading.training import subjqa_to_squad_files

    settings = settings_from_args(args)
    for path, report in subjqa_to_squad_files(args.domain, args.split, args.out, settings.data_dir).items():
        print(f"{path}: {report.summary()}")



def register(commands, options: Options) -> None:
    p = commands.add_parser("index", parents=[options.common], help="index a domain's reviews (all splits) into the store")
    options.domain(p)
    p.add_argument("--no-embed", action="store_true", help="skip dense embeddings (BM25 only; faster)")
    p.add_argument("--force", action="store_true", help="replace the saved index even when the new data holds far fewer documents")
    p.set_defaults(func=cmd_index)

    p = commands.add_parser("products", parents=[options.common], help="list the indexed products with their review counts")
    options.domain(p)
    p.add_argument("--limit", type=count("--limit"), default=50)
    p.set_defaults(func=cmd_products)

    p = commands.add_parser("export-squad", parents=[options.common], help="write SubjQA splits as SQuAD v2 JSON files")
    options.domain(p)
    p.add_argument("--split", nargs="+", default=["train", "dev", "test"])
    p.add_argument("--out", type=Path, default=Path("data/squad"))
    p.set_defaults(func=cmd_export_squad)
