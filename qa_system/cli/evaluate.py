"""`qa-system eval retriever | reader | pipeline | rag | judged | annotators` and `tune-bm25`: a stage on a labelled split, and a report."""

from __future__ import annotations

import argparse
from pathlib import Path

from qa_system.cli.options import Options, count, depth, number, settings_from_args
from qa_system.config import CANDIDATE_PROTOCOLS, GOLD_PROTOCOLS, RETRIEVERS
from qa_system.errors import QAError
from qa_system.safe_text import terminal_text


def _print_answer_metrics(result: dict, out: Path) -> None:
    metrics = result["metrics"]
    shown = metrics[
        metrics["group"].isin(["all", "answerable", "unanswerable", "gold retrieved", "gold not retrieved", "always no answer"])
    ]
    keys = [c for c in ("system", "candidates", "gold") if c in metrics]
    calibrated = ["ece"] if metrics["ece"].notna().any() else []  # only the answer selector's scores are probabilities
    columns = [
        *keys,
        "group",
        "questions",
        "em",
        "f1",
        "no_answer_f1",
        "f1_top_k",
        "answered",
        "answered_right",
        "answered_wrong",
        "abstained_wrong",
        *calibrated,
        "latency_ms",
    ]
    print(shown[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-"))
    print("Read with: " + ", ".join(f"{system} {backend}" for system, backend in result["reader_backends"].items()))
    thresholds = result.get("thresholds")
    if thresholds is not None and not thresholds.empty:
        print("No-answer thresholds (logit margin over 'no answer'):")
        print(thresholds.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    plots = "em_f1.png, reliability.png" if calibrated else "em_f1.png"
    print(f"Report written to {out}/ (report.json, report.csv, report.md, {plots}, predictions-*.json, gold.json)")


def _one_domain(args: argparse.Namespace) -> str:
    """The one SubjQA --domain an evaluation reads (one report per domain: a second was silently left out before)."""
    if len(args.domain) > 1:
        raise QAError(
            f"An evaluation reads one domain; got {len(args.domain)} (--domain {' '.join(args.domain)}).",
            "run the command once per domain, each with its own --out.",
        )
    return args.domain[0]


def _what_to_evaluate(args: argparse.Namespace, settings, embeddings: bool, needs_index: bool = True):
    """(labels, index, domain): a SubjQA --domain; a SubjQA --collection; or --labels FILE on --collection NAME.

    The reader alone needs no index: SQuAD / MRQA labels without a collection give it their own contexts.
    """
    from qa_system.ingestion import collection_manifest, open_collection
    from qa_system.ingestion.labels import load_labels

    if args.collection is None and args.labels is None:
        return None, None, _one_domain(args)
    if args.domain:
        raise QAError("--domain names SubjQA's labels, --collection / --labels your own.", "pass one of them.")
    if args.labels is None:
        manifest = collection_manifest(settings, args.collection)
        if not manifest.get("domains"):
            raise QAError(
                f"Collection '{args.collection}' has no labels of its own.",
                "pass --labels FILE (CSV question,answer,document_id[,item_id], SQuAD JSON or MRQA JSON lines).",
            )
        return None, open_collection(settings, args.collection, embeddings), manifest["domains"][0]
    if args.collection is None and needs_index:
        raise QAError(
            "Retrieval is evaluated on a collection.",
            "add --collection NAME (index the labelled documents with `qa-system index --input FILE --collection NAME`).",
        )
    labels = load_labels(args.labels, settings, args.collection)
    for note in labels.notes:  # questions left out, answers not found: said before the run, as well as in the report
        print(terminal_text(note))
    return labels, open_collection(settings, args.collection, embeddings) if needs_index else None, None


def report_folder_option(p: argparse.ArgumentParser, kind: str) -> None:
    """``--out``: the folder a report is written to (``choose_report_folder`` picks it when unsaid)."""
    p.add_argument(
        "--out", type=Path, help=f"the report's folder (default: reports/{kind}; with --collection, reports/<collection>-{kind})"
    )
    p.set_defaults(report_kind=kind)


def choose_report_folder(args: argparse.Namespace) -> None:
    """``args.out`` as given, else ``reports/<kind>``, named after the collection evaluated when there is one: a report on
    a collection of one's own does not overwrite SubjQA's, nor another collection's."""
    if args.out is None:
        collection = getattr(args, "collection", None)
        args.out = Path("reports") / (f"{collection}-{args.report_kind}" if collection else args.report_kind)


def cmd_eval_reader(args: argparse.Namespace) -> None:
    """`qa-system eval reader`: readers' EM / F1 given the gold review; prints the table and writes the report."""
    choose_report_folder(args)
    from qa_system.evaluation.answering import evaluate_readers

    settings = settings_from_args(args)
    readers = args.reader or [settings.reader_model]
    labels, _, domain = _what_to_evaluate(args, settings, embeddings=False, needs_index=False)
    result = evaluate_readers(
        settings, readers, domain, args.split, args.top_k, args.out, args.limit, args.no_answer_threshold, labels=labels
    )
    _print_answer_metrics(result, args.out)


def cmd_eval_pipeline(args: argparse.Namespace) -> None:
    """`qa-system eval pipeline`: retriever + reader EM / F1 on a labelled split; prints the table and writes the report."""
    choose_report_folder(args)
    from qa_system.evaluation.answering import evaluate_pipelines

    settings = settings_from_args(args)
    readers = args.reader or [settings.reader_model]
    labels, index, domain = _what_to_evaluate(args, settings, embeddings=args.retriever != "bm25")
    result = evaluate_pipelines(
        settings,
        readers,
        args.retriever,
        domain,
        args.split,
        args.top_k_retriever,
        args.top_k,
        args.out,
        args.limit,
        args.no_answer_threshold,
        args.candidates,
        labels=labels,
        index=index,
        golds=args.gold,
    )
    _print_answer_metrics(result, args.out)


def cmd_eval_rag(args: argparse.Namespace) -> None:
    """`qa-system eval rag`: generated answers scored (F1, SAS, no-answer accuracy, citations, latency); prints the table and writes the report."""
    choose_report_folder(args)
    from qa_system.evaluation.rag import evaluate_rag

    settings = settings_from_args(args)
    labels, index, domain = _what_to_evaluate(args, settings, embeddings=args.retriever != "bm25")
    result = evaluate_rag(
        settings,
        args.retriever,
        domain,
        args.split,
        args.top_k_retriever,
        args.out,
        args.limit,
        args.compare_extractive,
        labels=labels,
        index=index,
    )
    metrics = result["metrics"]
    columns = [
        "system",
        "group",
        "questions",
        "em",
        "f1",
        "sas",
        "no_answer_accuracy",
        "citation_precision",
        "support",
        "withheld",
        "retrieval_ms",
        "prompt_ms",
        "generation_ms",
        "tokens_per_s",
    ]
    print(metrics[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-"))
    print(
        f"Report written to {args.out}/ (report.json, report.csv, report.md, records.csv, rag_metrics.png, latency.png, predictions-*.json, gold.json)"
    )


def cmd_eval_annotators(args: argparse.Namespace) -> None:
    """`qa-system eval annotators`: how far SubjQA's annotators agree (the human reference); prints the table and writes the report."""
    choose_report_folder(args)
    from qa_system.evaluation.annotators import evaluate_annotators

    settings = settings_from_args(args)
    result = evaluate_annotators(settings, _one_domain(args), args.split, args.out, args.limit, args.predictions)
    for note in result["notes"]:
        print(note)
    print(result["metrics"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md, records.csv)")


def cmd_eval_retriever(args: argparse.Namespace) -> None:
    """`qa-system eval retriever`: recall@k, MRR and MAP of retriever variants; prints the tables and writes the report."""
    choose_report_folder(args)
    from qa_system.evaluation.retrieval import evaluate_retrievers

    settings = settings_from_args(args)
    labels, index, domain = _what_to_evaluate(args, settings, embeddings=any(not r.startswith("bm25") for r in args.retriever))
    result = evaluate_retrievers(
        settings,
        domain,
        args.split,
        args.retriever,
        args.k,
        out_dir=args.out,
        limit=args.limit,
        tuned_model=args.tuned_model,
        candidates=args.candidates,
        labels=labels,
        index=index,
        golds=args.gold,
    )
    for note in result["notes"]:
        print(note)
    metrics = result["metrics"]
    columns = ["retriever", "candidates", "definition", "group", "n", *[f"recall@{k}" for k in sorted(set(args.k))], "mrr", "map"]
    shown = metrics[metrics["group"].isin(["all", "answerable"])][columns]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(result["timings"].to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md, recall_at_k.png)")


def cmd_tune_bm25(args: argparse.Namespace) -> None:
    """`qa-system tune-bm25`: BM25 analyzers and k1 / b scored on a labelled split; prints the best rows and the recommended
    setting, which ``--apply`` stores in the collection (``--reset`` removes it)."""
    import pandas as pd

    from qa_system.retrieval.fitted import OWN_BM25_STORES
    from qa_system.tuning.bm25 import (
        IN_FORCE,
        apply_bm25,
        check_applies,
        describe,
        describe_setting,
        reset_bm25,
        rule,
        setting_in_force,
        tune_bm25,
    )

    settings = settings_from_args(args)
    if args.apply and args.reset:
        raise QAError("--apply stores a setting; --reset removes it.", "pass one of them.")
    if args.apply or args.reset:  # before anything is opened, built or scored: a search server's BM25 is its own
        check_applies(settings.store, args.collection or f"subjqa-{_one_domain(args)}")
    if args.reset:
        index = _tuned_index(args, settings)
        removed = reset_bm25(settings, index)
        state = "now uses" if removed else "had no setting of its own: it uses"
        print(f"BM25 of collection '{index.name}' {state} the defaults ({describe_setting(IN_FORCE)}).")
        _say_stale_fits(args, settings, index)
        return
    choose_report_folder(args)
    labels, index, domain = _what_to_evaluate(args, settings, embeddings=False)
    if args.apply:
        index = index or _tuned_index(args, settings)
    in_force = setting_in_force(index)
    table = tune_bm25(settings, domain, args.split, out_dir=args.out, limit=args.limit, labels=labels, index=index, in_force=in_force)
    shown = table.head(args.show)
    if args.show and not shown["recommended"].any():  # ranked lower than the best N: shown below them
        shown = pd.concat([shown, table[table["recommended"]]])
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    best = describe(table[table["recommended"]].iloc[0])
    print(f"Recommended ({rule(in_force)}): {best}. Report written to {args.out}/ (report.json, report.csv, report.md)")
    if args.apply:
        apply_bm25(settings, index, table)
        print(
            f"Applied to collection '{index.name}': its questions now use {best} "
            f"(`qa-system tune-bm25 {_collection_flags(args, index)} --reset{settings.store_flags}` goes back to the defaults)."
        )
        _say_stale_fits(args, settings, index)
    elif (index.backend if index is not None else settings.store) in OWN_BM25_STORES:
        print("The collection's questions use it once you run the same command with --apply.")


def _tuned_index(args: argparse.Namespace, settings):
    """The collection a BM25 setting is stored in: --collection, or the SubjQA --domain's."""
    from qa_system.ingestion import open_collection
    from qa_system.ingestion.indexing import open_or_build_index

    if args.collection:
        return open_collection(settings, args.collection, embeddings=False)
    return open_or_build_index(settings, [_one_domain(args)], embeddings=False)


def _collection_flags(args: argparse.Namespace, index) -> str:
    return f"--collection {index.name}" if args.collection else f"--domain {_one_domain(args)}"


def _say_stale_fits(args: argparse.Namespace, settings, index) -> None:
    """Name the stored fits that were made with the BM25 setting before, and the command that fits them again."""
    from qa_system.retrieval.fitted import bm25_defaults, bm25_parameters, fits_for_other_bm25

    stale = fits_for_other_bm25(index, bm25_parameters(index) or bm25_defaults())
    if stale:
        labels = " --labels FILE" if args.collection else ""
        print(
            f"Fitted with the BM25 setting before, and read until fitted again: {' and '.join(stale)} "
            f"(`qa-system fit-fusion {_collection_flags(args, index)}{labels}{settings.store_flags}"
            f"{' --rerank' if any('re-ranking' in what for what in stale) else ''}`)."
        )


def candidate_protocol(text: str) -> str:
    """argparse type of --candidates: the library's check, an unknown protocol one line (exit 2)."""
    from qa_system.evaluation.retrieval import check_candidates

    return check_candidates(text)[0]


def gold_option(p: argparse.ArgumentParser) -> None:
    """Add ``--gold`` (annotated: the question's own review's answers; pooled: those of every review it was asked of)."""
    p.add_argument(
        "--gold",
        nargs="+",
        choices=GOLD_PROTOCOLS,
        default=["annotated"],
        help="annotated: the question's own review's answers (default); pooled: the answers of every review of the product the "
        "same question was asked of (unanswerable only if none has one); both: side by side",
    )


def candidates_option(p: argparse.ArgumentParser) -> None:
    """Add ``--candidates`` (the candidate protocols, ``split`` by default) to a command's parser."""
    p.add_argument(
        "--candidates",
        nargs="+",
        type=candidate_protocol,
        metavar="{" + ",".join(CANDIDATE_PROTOCOLS) + "}",
        default=["split"],
        help="which reviews a question is asked of: split = its product's reviews in its split (the reference chapter's), "
        "product = all its product's reviews (the search page's); both = side by side in one report",
    )


def cmd_eval_judged(args: argparse.Namespace) -> None:
    """`qa-system eval judged`: the cards users read, judged over all documents of each product; prints the table and writes the report."""
    choose_report_folder(args)
    from qa_system.evaluation.judged import CARDS_TO_JUDGE, JudgedSystem, evaluate_judged, judged_table, load_judged

    settings = settings_from_args(args)
    readers = args.reader or [settings.reader_model]
    paired = {"--selector": args.selector or [settings.selector_model], "--top-k-retriever": args.top_k_retriever or [None]}
    for flag, values in paired.items():
        if len(values) not in (1, len(readers)):
            raise QAError(
                f"{len(readers)} --reader and {len(values)} {flag} given.",
                f"give one {flag} for all readers, or one per --reader, in the same order.",
            )
    selectors, depths = ([values[0]] * len(readers) if len(values) == 1 else values for values in paired.values())
    systems = [JudgedSystem(reader, selector, top_k) for reader, selector, top_k in zip(readers, selectors, depths)]
    problems: list[QAError] = []  # those of the label files, reported with those found against the collections
    questions = load_judged(args.labels, args.verdicts or [], problems)[: args.limit]
    runs = evaluate_judged(settings, questions, systems, collection=args.collection, out_dir=args.out, problems=problems)
    print(judged_table(runs).to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md, records.csv, reliability.png, {CARDS_TO_JUDGE})")


def _register_judged(stages, options: Options) -> None:
    """Add `eval judged` to the `eval` stages."""
    p = stages.add_parser(
        "judged",
        parents=[options.common],
        help="the first card users read, judged over every document of the product: useful, right, wrong, abstentions, top 3, calibration",
    )
    p.add_argument(
        "--labels",
        type=Path,
        nargs="+",
        required=True,
        metavar="FILE",
        help="judged questions, JSON lines (see the docs' judged label format)",
    )
    p.add_argument(
        "--verdicts",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="card verdicts, JSON lines: cards a person judged acceptable or not beyond the listed spans (the report's "
        "cards-to-judge.jsonl, filled in)",
    )
    options.collection(p)
    p.add_argument("--reader", nargs="+", help="reader models to compare (default: the configured reader)")
    p.add_argument(
        "--selector", nargs="+", help="their answer selectors, one for all or one per --reader ('none': the reader decides alone)"
    )
    p.add_argument(
        "--top-k-retriever",
        nargs="+",
        type=depth("--top-k-retriever"),
        help="reviews read per question, one for all or one per --reader (default: the settings')",
    )
    report_folder_option(p, "judged")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_eval_judged)


def _register_annotators(stages, options: Options) -> None:
    """Add `eval annotators` to the `eval` stages."""
    p = stages.add_parser(
        "annotators", parents=[options.common], help="how far SubjQA's annotators agree: the human reference beside a model's EM / F1"
    )
    options.domain(p)
    p.add_argument("--split", default="test")
    p.add_argument(
        "--predictions",
        nargs="+",
        type=Path,
        default=[],
        metavar="FILE",
        help="predictions-*.json that `eval reader|pipeline` wrote for this split: each scored in an annotator's seat (the same gold)",
    )
    report_folder_option(p, "annotators")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_eval_annotators)


def register(commands, options: Options) -> None:
    """Add `eval retriever | reader | pipeline | rag | annotators` and `tune-bm25` to the command line."""
    evaluation = commands.add_parser("eval", help="evaluate a stage on a labelled split and write a report")
    stages = evaluation.add_subparsers(dest="stage", required=True)

    def own_labels(p: argparse.ArgumentParser) -> None:
        options.collection(p)
        p.add_argument(
            "--labels",
            type=Path,
            help="your labels: CSV (question,answer,document_id[,item_id]; empty answer = none), SQuAD v1.1 / v2.0 JSON "
            "or MRQA JSON lines, their documents in --collection (the reader alone: without it, each question's own context)",
        )

    p = stages.add_parser(
        "retriever",
        parents=[options.common],
        help="recall@k, MRR, MAP (strict and chapter definitions); hybrid and +rerank use what `qa-system fit-fusion` stored, else the defaults",
    )
    options.domain(p)
    own_labels(p)
    p.add_argument("--split", default="test")
    p.add_argument(
        "--retriever",
        nargs="+",
        default=list(RETRIEVERS),
        metavar="VARIANT",
        help="bm25, dense, hybrid, dense-ft, hybrid-ft (-ft: the fine-tuned encoder), each optionally +rerank, e.g. hybrid-ft+rerank",
    )
    p.add_argument("--tuned-model", type=Path, help="fine-tuned encoder of the -ft variants (default models/retriever-minilm-subjqa)")
    p.add_argument("--k", nargs="+", type=depth("--k"), default=[1, 3, 5, 10, 20])
    report_folder_option(p, "retriever")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")
    candidates_option(p)
    gold_option(p)
    p.set_defaults(func=cmd_eval_retriever)

    def answer_eval_options(p: argparse.ArgumentParser, out: str) -> None:
        options.domain(p)
        own_labels(p)
        p.add_argument("--split", default="test")
        p.add_argument("--reader", nargs="+", help="reader models to compare (default: the configured reader)")
        p.add_argument("--top-k", type=count("--top-k"), default=3, help="answers per question (top-k EM/F1)")
        p.add_argument("--no-answer-threshold", type=number("--no-answer-threshold"), help="override the reader's tuned threshold")
        report_folder_option(p, out)
        p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")

    p = stages.add_parser("reader", parents=[options.common], help="EM / F1 of readers given the gold review")
    answer_eval_options(p, "reader")
    p.set_defaults(func=cmd_eval_reader)
    p = stages.add_parser(
        "pipeline",
        parents=[options.common],
        help="EM / F1 of retriever + reader with per-product filters (and at the no-answer threshold `qa-system fit-threshold` stored, if any)",
    )
    answer_eval_options(p, "pipeline")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument(
        "--top-k-retriever", type=depth("--top-k-retriever"), help="reviews read per question (default: the settings', QA_TOP_K_RETRIEVER)"
    )
    candidates_option(p)
    gold_option(p)
    p.set_defaults(func=cmd_eval_pipeline)
    p = stages.add_parser(
        "rag",
        parents=[options.common, options.generation],
        help="generated answers: F1, SAS, no-answer accuracy, citation precision, latency",
    )
    options.domain(p)
    own_labels(p)
    p.add_argument("--split", default="test")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument(
        "--top-k-retriever",
        type=depth("--top-k-retriever"),
        help="reviews in the prompt (default: the settings', QA_TOP_K_RETRIEVER, as `ask` reads)",
    )
    p.add_argument(
        "--compare-extractive", action="store_true", help="also run the extractive pipeline (--reader-model) on the same questions"
    )
    report_folder_option(p, "rag")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_eval_rag)

    _register_judged(stages, options)

    _register_annotators(stages, options)

    p = commands.add_parser(
        "tune-bm25", parents=[options.common], help="score BM25 analyzers and k1 / b on a labelled split (per-product filters)"
    )
    options.domain(p)
    own_labels(p)
    p.add_argument("--split", default="dev")
    p.add_argument("--show", type=count("--show"), default=10, help="print the best N settings")
    report_folder_option(p, "bm25-grid")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")
    p.add_argument("--apply", action="store_true", help="store the recommended setting in the collection: its questions use it from now on")
    p.add_argument("--reset", action="store_true", help="remove the collection's stored setting: its questions use the defaults")
    p.set_defaults(func=cmd_tune_bm25)
