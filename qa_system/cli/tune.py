"""`qa-system fit-threshold`: the pipeline's no-answer threshold fitted on dev and stored in the index (see ``tuning.threshold``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from qa_system.cli.evaluate import candidates_option
from qa_system.cli.options import Options, count, depth, settings_from_args
from qa_system.config import RETRIEVERS


def cmd_fit_threshold(args: argparse.Namespace) -> None:
    """`qa-system fit-threshold`: fit the pipeline's no-answer threshold on dev and store it in the index; prints each fit."""
    from qa_system.tuning.threshold import fit_pipeline_thresholds

    settings = settings_from_args(args)
    readers = args.reader or [settings.reader_model]
    for domain in args.domain:
        fits = fit_pipeline_thresholds(
            settings,
            readers,
            args.retriever,
            domain,
            args.split,
            args.top_k_retriever,
            args.top_k,
            args.candidates,
            args.limit,
            args.out,
        )
        for fit in fits.to_dict("records"):
            print(
                f"{domain}: {fit['system']}, {fit['candidates']} candidates: no-answer threshold {fit['threshold']:.3f} "
                f"(F1 {fit['weighted_f1']:.3f} on {fit['questions']} {fit['fitted_on']} questions, unanswerable weighted to {fit['no_answer_prior']:.2f}), stored in the index"
            )
    print("`qa-system eval pipeline` with the same retriever, depth and candidates now reports it beside the reader's own threshold.")


def register(commands, options: Options) -> None:
    """Add `fit-threshold` to the command line."""
    p = commands.add_parser(
        "fit-threshold",
        parents=[options.common],
        help="fit the pipeline's no-answer threshold on dev for a retriever, depth and candidate protocol, and keep it in the index",
    )
    options.domain(p)
    p.add_argument("--split", default="dev", help="the split to fit on (dev only)")
    p.add_argument("--reader", nargs="+", help="reader models (default: the configured reader)")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument(
        "--top-k-retriever", type=depth("--top-k-retriever"), help="reviews read per question (default: the settings', QA_TOP_K_RETRIEVER)"
    )
    p.add_argument("--top-k", type=count("--top-k"), default=3, help="answers per question (top-k EM/F1 in the report)")
    candidates_option(p)
    p.add_argument("--out", type=Path, help="also write the dev report (with the dev-tuned rows) here")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_fit_threshold)
