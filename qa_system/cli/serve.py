"""`qa-system ui | api | export-feedback`: the search page, the REST API, and the feedback their users gave."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from qa_system.cli.options import Options, count, settings_from_args
from qa_system.errors import QAError

logger = logging.getLogger(__name__)


def cmd_ui(args: argparse.Namespace) -> None:
    """`qa-system ui`: serve the search page until stopped; ``--collection`` names the collection it opens
    (a mistyped one is refused first; SubjQA electronics is then indexed only when a visitor picks it)."""
    from qa_system.ingestion import collection_manifest
    from qa_system.serving.webapp import run_app

    settings = settings_from_args(args).with_(
        page_collection=args.page_collection
    )  # bad flags fail here, as one line, rather than inside the page
    if args.page_collection is not None:
        collection_manifest(settings, args.page_collection)
    code = run_app(args.port, args.address, vars(args), watch=args.dev)
    if code is None:
        print("Search page stopped.", file=sys.stderr)
    elif code:
        raise QAError(f"Streamlit exited with code {code}.", "see its messages above (is the port in use? try --port).")


def cmd_api(args: argparse.Namespace) -> None:
    """`qa-system api`: serve the REST API until stopped; a collection name that does not exist is refused first."""
    from qa_system.errors import Unavailable
    from qa_system.ingestion import collection_manifest
    from qa_system.serving.api import run_api
    from qa_system.serving.api.documents import check_guarded
    from qa_system.serving.service import DEFAULT_COLLECTIONS

    settings = settings_from_args(args).with_(
        api_rate_limit=args.rate_limit,
        api_workers=args.workers,
        api_processes=args.processes,
        embed_at_start=args.embed_at_start or None,
        log_level=args.log_level,
    )
    check_guarded(settings)
    served = args.served or DEFAULT_COLLECTIONS
    for collection in served:  # a mistyped name is refused before the server starts (a domain is built on first start)
        if not collection.subjqa_domain:
            try:
                collection_manifest(settings, collection.name)
            except Unavailable as error:  # a search server not up yet (a container starting): the server waits for it
                logger.warning("%s The API starts, and loads the collections once it answers.", error)
                break
    run_api(settings, served, args.host, args.port)


def served(subjqa_domain: bool):
    """argparse type of --domain / --collection: what to serve, in the order named (a bad collection name is one line)."""

    def parse(name: str):
        from qa_system.ingestion import check_collection_name
        from qa_system.serving.service import ServedCollection

        return ServedCollection(name if subjqa_domain else check_collection_name(name), subjqa_domain)

    return parse


def collection_name(name: str) -> str:
    """argparse type of ``ui --collection``: a valid collection name (a bad one is one line)."""
    from qa_system.ingestion import check_collection_name

    return check_collection_name(name)


def cmd_export_feedback(args: argparse.Namespace) -> None:
    """`qa-system export-feedback`: the feedback users gave, written as SQuAD v2 training data."""
    from qa_system.serving.feedback import FeedbackStore

    export = FeedbackStore(settings_from_args(args).feedback_db).export_squad(args.out)
    print(f"{export.path}: {export.summary()}")
    print(f"Train on it with: qa-system train-reader --train-file {export.path}")


def register(commands, options: Options) -> None:
    """Add `ui`, `api` and `export-feedback` to the command line."""
    p = commands.add_parser("ui", parents=[options.common], help="serve the search page (Streamlit) on http://ADDRESS:PORT")
    p.add_argument("--port", type=count("--port", 1, 65535), default=8501)
    p.add_argument("--address", default="localhost", help="0.0.0.0 to serve other machines")
    p.add_argument("--dev", action="store_true", help="reload the page when ui/ files change")
    p.add_argument(
        "--collection",
        dest="page_collection",
        type=collection_name,
        metavar="NAME",
        help="the collection the page opens (QA_PAGE_COLLECTION; default: SubjQA electronics, indexed on first use); the URL's ?collection= opens another",
    )
    p.set_defaults(func=cmd_ui)

    p = commands.add_parser(
        "api", parents=[options.common, options.generation], help="serve the REST API (FastAPI; OpenAPI docs at /docs) on http://HOST:PORT"
    )
    p.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to serve other machines (then set QA_API_TOKEN)")
    p.add_argument("--port", type=count("--port", 1, 65535), default=8000)
    # One list in the order named, both flags: the first is the default collection.
    p.add_argument(
        "--domain",
        dest="served",
        action="append",
        type=served(True),
        metavar="DOMAIN",
        help="SubjQA domain to serve (its index built on first start), repeatable (default: electronics alone)",
    )
    p.add_argument(
        "--collection",
        dest="served",
        action="append",
        type=served(False),
        metavar="NAME",
        help="collection to serve as saved (`qa-system collections` lists them; `qa-system index --input` makes one), repeatable; "
        "the first --domain or --collection named is the default one",
    )
    p.add_argument("--workers", type=count("--workers"), help="questions answered at once, each in a thread (QA_API_WORKERS, default 4)")
    p.add_argument(
        "--processes",
        type=count("--processes"),
        help="server processes, each with its own models and --workers threads (QA_API_PROCESSES, default 1): more than one pays "
        "on a GPU or many cores; questions only (the document routes need one process)",
    )
    p.add_argument(
        "--rate-limit", type=count("--rate-limit", 0), help="requests a minute per client, 0 for none (QA_API_RATE_LIMIT, default 600)"
    )
    p.add_argument(
        "--embed-at-start",
        action="store_true",
        help="embed the served collections while starting (QA_EMBED_AT_START); by default a BM25 server embeds one when a dense or hybrid question first needs it",
    )
    p.add_argument(
        "--log-level",
        metavar="LEVEL",
        help="what the server logs on stderr, its own lines and uvicorn's (QA_LOG_LEVEL, default info: each change to the documents "
        "with its client, and every request): critical, error, warning, info or debug",
    )
    p.set_defaults(func=cmd_api)

    p = commands.add_parser(
        "export-feedback", parents=[options.common], help="write the search page's answer feedback as SQuAD v2 training data"
    )
    p.add_argument("--out", type=Path, default=Path("data/feedback-squad.json"))
    p.set_defaults(func=cmd_export_feedback)
