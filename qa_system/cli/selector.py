"""`qa-system train-selector`: the answer selector for the configured reader, trained on cross-fitted reader outputs."""

from __future__ import annotations

import argparse
from pathlib import Path

from qa_system.cli.options import Options, count, number, settings_from_args
from qa_system.errors import QAError


def cmd_train_selector(args: argparse.Namespace) -> None:
    """With --judged, fit on judged questions; else cross-fit the reader's SubjQA stage by product, then fit the selector on what the fold readers made of their own folds."""
    from qa_system.model_files import model_fingerprint
    from qa_system.training.reader import TrainingConfig
    from qa_system.training.selector import cross_fit_readers, fit_selector, selector_frames

    settings = settings_from_args(args)
    if args.text_judged and not args.judged:
        raise QAError("--text-judged teaches only the judged selector's text model.", "pass --judged FILE... beside it.")
    if args.verdicts and not args.judged:
        raise QAError("--verdicts judges cards of judged questions.", "pass --judged FILE... beside it.")
    if args.tune_encoder and not args.judged:
        raise QAError("--tune-encoder tunes the judged selector's phrase encoder.", "pass --judged FILE... beside it.")
    if args.judged:
        return _train_on_judged(args, settings)
    if args.general_reader is None:
        raise QAError(
            "Training on SubjQA's labels cross-fits the reader's SubjQA stage from its general stage.",
            "pass --general-reader DIR, or --judged FILE... to fit on judged questions.",
        )
    work_dir = args.work_dir or settings.home / "selector"
    config = TrainingConfig(epochs=1, learning_rate=args.learning_rate, seed=args.seed)
    records = cross_fit_readers(settings, args.general_reader, work_dir, args.domain, args.folds, config, rehearsal=args.train_file or [])
    questions, spans = selector_frames(records)
    reader = {"reader": str(settings.reader_model), "reader_fingerprint": model_fingerprint(settings.reader_model)}
    provenance = {
        "general_reader": str(args.general_reader),
        "domains": list(args.domain),
        "folds": args.folds,
        "rehearsal": [Path(p).name for p in args.train_file or []],
        "fold_training": config.__dict__,
    }
    oof = fit_selector(questions, spans, args.output, reader, args.folds, provenance=provenance)
    table = oof.groupby(["domain", "mode"])[["f1", "null_f1", "answered"]].mean().rename(columns={"null_f1": "always_no_answer_f1"})
    print(
        "Out-of-fold decisions on the cross-fitted training questions (a product's questions never seen by the models that decided them):"
    )
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    print(
        f"Saved the answer selector for {settings.reader_model} to {args.output}; `qa-system eval reader|pipeline --split dev` measures it."
    )


def _shown_path(path) -> str:
    """A path as selector.json records it: relative to the repository (``../shared/...`` beside it), else its file
    name alone, never this machine's."""
    import os

    from qa_system.config import REPO_ROOT

    relative = os.path.relpath(Path(path).resolve(), REPO_ROOT)
    return relative if not relative.startswith(f"..{os.sep}..") else Path(path).name


def _train_on_judged(args: argparse.Namespace, settings) -> None:
    """Read the judged questions with the configured reader over the reviews the pipeline retrieves, then fit the selector on them."""
    import pandas as pd

    from qa_system.evaluation.judged import judged_indexes, load_judged
    from qa_system.model_files import model_fingerprint
    from qa_system.pipelines import build_retrieval_pipeline
    from qa_system.reading.phrase_similarity import PhraseSimilarity
    from qa_system.reading.reader import ExtractiveReader
    from qa_system.reading.selection_features import SIMILARITY_FEATURE, TUNED_SIMILARITY_FEATURE
    from qa_system.retrieval.filters import make_filters
    from qa_system.training.judged_selector import fit_judged_selector, judged_frames, read_judged, summarize_out_of_fold

    questions = load_judged(args.judged, args.verdicts or [])
    text_questions = load_judged(args.text_judged, args.verdicts or []) if args.text_judged else []
    names = {args.collection or q.domain for q in [*questions, *text_questions]}
    indexes = judged_indexes(settings, names, args.collection is not None, embeddings=False)
    pipelines = {name: build_retrieval_pipeline("bm25", settings, index=index) for name, index in indexes.items()}

    def retrieve(question):
        return pipelines[args.collection or question.domain].run(
            question.question, filters=make_filters(item_id=question.item_id), top_k=settings.top_k_retriever
        )["documents"]

    extractive = ExtractiveReader.from_settings(settings)
    labels = {q.id: q for q in [*questions, *text_questions]}
    records = read_judged(extractive, questions, retrieve)

    def phrase_similarity(model) -> PhraseSimilarity:
        return PhraseSimilarity(str(model), settings.embedding_backend, settings.device, settings.embedding_onnx_cache)

    # A sentence encoder says how close each phrase's meaning is to the question's; the selector records it. With
    # --tune-encoder, also one tuned on these questions (each product's rows scored by an encoder tuned without it).
    similarities, by_product = {SIMILARITY_FEATURE: phrase_similarity(settings.embedding_model)}, {}
    if args.tune_encoder:
        from qa_system.devices import resolve_device
        from qa_system.training.phrase_encoder import cross_fitted_encoders, phrase_examples, tune_phrase_encoder

        examples, device = phrase_examples(records, labels), resolve_device(settings.device)
        work_dir = args.work_dir or settings.home / "selector"
        folds = cross_fitted_encoders(settings.embedding_model, examples, work_dir, args.folds, device=device)
        by_product = {item: {TUNED_SIMILARITY_FEATURE: phrase_similarity(path)} for item, path in folds.items()}
        similarities[TUNED_SIMILARITY_FEATURE] = phrase_similarity(
            tune_phrase_encoder(settings.embedding_model, examples, Path(args.output) / "phrase-encoder", device=device)
        )
    spans_questions, spans, texts = judged_frames(records, labels, similarities, by_product)
    if text_questions:
        texts = pd.concat([texts, judged_frames(read_judged(extractive, text_questions, retrieve), labels)[2]], ignore_index=True)
    reader = {"reader": _shown_path(settings.reader_model), "reader_fingerprint": model_fingerprint(settings.reader_model)}
    provenance = {
        "judged": [_shown_path(p) for p in args.judged],
        "text_judged": [_shown_path(p) for p in args.text_judged or []],
        **({"verdicts": [_shown_path(p) for p in args.verdicts]} if args.verdicts else {}),
        "top_k_retriever": settings.top_k_retriever,
        "retriever": "bm25",
        **({"phrase_encoder": "tuned on the judged questions, cross-fitted by product"} if args.tune_encoder else {}),
    }
    decisions = fit_judged_selector(
        spans_questions, spans, texts, args.output, reader, args.folds, provenance=provenance, similarities=similarities
    )
    print("Out-of-fold first cards on the judged training questions (a product's questions never seen by the models that decided them):")
    print(summarize_out_of_fold(decisions).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"Saved the answer selector for {settings.reader_model} to {args.output}; `qa-system eval judged` measures it.")


def register(commands, options: Options) -> None:
    """Add `train-selector` to the command line."""
    from qa_system.config import REPO_ROOT

    p = commands.add_parser(
        "train-selector",
        parents=[options.common],
        help="train the answer selector of the configured reader on k-fold cross-fitted reader outputs (resumable: work is kept in --work-dir)",
    )
    options.domain(p)
    p.add_argument(
        "--judged",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="fit on judged questions (JSON lines, the judged label format) read over the top --top-k-retriever reviews of each "
        "product, in the collection named by --collection or by each question's domain (else that SubjQA domain)",
    )
    p.add_argument(
        "--text-judged",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="with --judged: judged questions that teach only whether a card shows the reader's own span or its phrase "
        "(e.g. factual questions, scripts/squadshifts_judged.py), not when to answer",
    )
    p.add_argument(
        "--verdicts",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="with --judged: card verdicts (JSON lines, as `eval judged --verdicts` reads them) that decide candidates beyond the listed spans",
    )
    p.add_argument(
        "--tune-encoder",
        action="store_true",
        help="with --judged: also weigh each phrase's similarity to the question by a copy of the configured sentence encoder "
        "fine-tuned on the judged phrases (one per fold of --folds, kept in --work-dir, and the one served, saved beside the selector)",
    )
    options.collection(p)
    p.add_argument("--general-reader", help="without --judged: the general-QA reader the configured reader's SubjQA stage started from")
    p.add_argument(
        "--train-file", nargs="+", type=Path, help="more training files for each fold's reader (the rehearsal of the reader's recipe)"
    )
    p.add_argument("--folds", type=count("--folds", 2), default=5, help="folds, by product (default 5)")
    p.add_argument(
        "--learning-rate",
        type=number("--learning-rate", 0, above=True),
        default=5e-5,
        help="of each fold's SubjQA stage (the reader's recipe: 5e-5)",
    )
    p.add_argument("--seed", type=count("--seed", 0), default=42)
    p.add_argument("--work-dir", type=Path, help="fold readers and their outputs (default QA_HOME/selector); a second run continues there")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "models" / "answer-selector")
    p.set_defaults(func=cmd_train_selector)
