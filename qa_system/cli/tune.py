"""`qa-system fit-threshold`: the pipeline's no-answer threshold fitted on dev and stored in the index (``tuning.threshold``);
`qa-system fit-confidence`: the answers' chances recalibrated to a collection of one's own (``tuning.confidence``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from qa_system.cli.evaluate import candidates_option
from qa_system.cli.options import Options, count, depth, settings_from_args
from qa_system.config import RETRIEVERS
from qa_system.safe_text import terminal_text


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
    p.add_argument(
        "--limit", type=count("--limit"), help="only the first N questions (the threshold fitted on them is stored all the same)"
    )
    p.set_defaults(func=cmd_fit_threshold)
    _register_fit_confidence(commands, options)


def cmd_fit_confidence(args: argparse.Namespace) -> None:
    """`qa-system fit-confidence`: recalibrate the answer selector's chances to a collection on its labelled questions,
    remove that (``--reset``), or say what they are calibrated on now (neither)."""
    from qa_system.errors import QAError
    from qa_system.ingestion import open_collection
    from qa_system.retrieval.fitted import confidence_fit
    from qa_system.tuning.confidence import check_own_collection, fit_confidence, fit_line, reset_confidence, status_line

    settings = settings_from_args(args)
    check_own_collection(args.collection)
    if args.reset and args.labels is not None:
        raise QAError("--reset removes the fit; --labels makes one.", "pass one of them.")
    if args.labels is None:
        index = open_collection(settings, args.collection, embeddings=False, progress=False)
        if args.reset:
            removed = reset_confidence(settings, index)
            print(f"'{args.collection}': " + ("recalibration removed." if removed else "no recalibration was stored."))
        print(terminal_text(status_line(confidence_fit(index, settings), args.collection, settings.store_flags)))
        return
    from qa_system.evaluation.judged import load_judged
    from qa_system.ingestion.labels import is_judged_file, load_labels
    from qa_system.tuning.confidence import fit_confidence_judged

    judged = is_judged_file(args.labels)
    if args.verdicts and not judged:
        raise QAError(f"--verdicts judge the cards of judged labels; {args.labels} holds other labels.", "leave --verdicts out.")
    if judged:
        questions = load_judged([args.labels], args.verdicts or [])[: args.limit]
    else:
        labels = load_labels(args.labels, settings, args.collection)
        for note in labels.notes:  # questions left out (about documents the collection does not hold, ...): said before the fit
            print(terminal_text(note))
    index = open_collection(settings, args.collection, embeddings=args.retriever != "bm25")
    earlier = confidence_fit(index, settings)
    if judged:
        fit = fit_confidence_judged(settings, index, questions, args.labels.name, args.retriever, args.top_k_retriever, args.out)
    else:
        fit = fit_confidence(settings, index, labels, args.retriever, args.top_k_retriever, args.limit, args.out)
    print(terminal_text(fit_line(fit, args.collection)))
    if not fit["stored"]:
        print(terminal_text(status_line(earlier, args.collection, settings.store_flags)))
        return
    replaced = f" It replaces the fit on {earlier['calibrated_on']}." if earlier else ""
    print(
        terminal_text(
            f"Stored in '{args.collection}': every door now states these chances "
            f"(`qa-system fit-confidence --collection {args.collection} --reset{settings.store_flags}` removes them).{replaced}"
        )
    )


def _register_fit_confidence(commands, options: Options) -> None:
    p = commands.add_parser(
        "fit-confidence",
        parents=[options.common],
        help="recalibrate the answers' chances to a collection of your own on its labelled questions, and keep the fit in it "
        "(without --labels: what they are calibrated on now)",
    )
    p.add_argument("--collection", required=True, help="a collection of your own that `qa-system collections` lists")
    p.add_argument(
        "--labels",
        type=Path,
        help="labelled questions about its documents: CSV (question,answer,document_id[,item_id]; empty answer = none), SQuAD JSON, "
        "MRQA JSON lines or judged labels (`eval judged`'s format); at least 20, some answered right and some not",
    )
    p.add_argument("--verdicts", type=Path, nargs="+", help="with judged labels: card verdicts, as `eval judged --verdicts` takes them")
    p.add_argument("--reset", action="store_true", help="remove the collection's fit: chances as calibrated on product reviews")
    # Without --labels or --reset it says what the collection's chances are calibrated on now.
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25", help="the retriever the questions are asked with")
    p.add_argument(
        "--top-k-retriever",
        type=depth("--top-k-retriever"),
        help="documents read per question (default: the settings', QA_TOP_K_RETRIEVER)",
    )
    p.add_argument("--out", type=Path, help="also write the evaluation report of the chances as stated here")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions")
    p.set_defaults(func=cmd_fit_confidence)
