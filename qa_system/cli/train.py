"""`qa-system train-reader | train-retriever | fit-fusion | export-onnx`: the models and fitted values the pipelines read."""

from __future__ import annotations

import argparse
from pathlib import Path

from qa_system.cli.options import Options, count, number, settings_from_args
from qa_system.errors import QAError


def cmd_train_reader(args: argparse.Namespace) -> None:
    """`qa-system train-reader`: fine-tune an extractive reader; prints the best epoch's dev figures and where it was saved."""
    from qa_system.training.distillation import DistillationConfig
    from qa_system.training.interpolation import interpolate_readers
    from qa_system.training.reader import TrainingConfig, resume_point, train_reader, training_device
    from qa_system.training.reader_data import subjqa_to_squad_files

    settings = settings_from_args(args)
    finetuned = args.output.with_name(args.output.name + "-finetuned") if args.interpolate else args.output
    resume_point(args.resume_from, finetuned)  # a wrong checkpoint is refused before any work
    training_device(settings.device)  # so is a GPU that is not there
    if args.interpolate and not args.base_model:
        raise QAError("--interpolate mixes the new reader with the reader it was fine-tuned from.", "pass that reader as --base-model.")
    distillation = None if args.teacher is None else DistillationConfig(args.teacher, args.distill_temperature, args.distill_alpha)
    squad_dir = args.squad_dir or settings.home / "squad"
    train_files, dev_files = list(args.train_file or []), list(args.dev_file or [])
    if not args.no_subjqa:
        exported = subjqa_to_squad_files(args.domain, ["train", "dev"], squad_dir, settings.data_dir)
        for path, report in exported.items():
            print(f"{path}: {report.summary()}")
        train_files += [squad_dir / f"{d}-train.json" for d in args.domain]
        dev_files += [squad_dir / f"{d}-dev.json" for d in args.domain]
    config = TrainingConfig(
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        seed=args.seed,
        max_seq_length=args.max_seq_length,
        doc_stride=args.doc_stride,
        patience=args.patience,
        max_steps=args.max_steps,
        checkpoint_steps=args.checkpoint_steps,
    )
    select_on = args.select_on or (squad_dir / "electronics-dev.json" if "electronics" in args.domain and not args.no_subjqa else None)
    result = train_reader(
        train_files,
        dev_files,
        args.base_model or settings.embedding_model,
        finetuned,
        config,
        select_on=select_on,
        distillation=distillation,
        drop_dev_questions=args.drop_dev_questions,
        no_answer_prior=args.no_answer_prior,
        resume_from=args.resume_from,
        device=settings.device,
    )
    print(f"Saved the best model (epoch {result.best_epoch}, no-answer threshold {result.no_answer_threshold:.3f}) to {result.output_dir}")
    if args.interpolate:
        result = interpolate_readers(
            args.base_model,
            finetuned,
            args.output,
            dev_files,
            args.interpolate,
            max_seq_length=args.max_seq_length,
            doc_stride=args.doc_stride,
        )
        print(
            f"Saved its mix with {args.base_model} (weight {result.weight}, no-answer threshold {result.no_answer_threshold:.3f}, best pooled dev F1) to {result.output_dir}"
        )
    for name, metrics in result.dev_metrics.items():
        print(f"  dev {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if isinstance(v, float)))


def cmd_train_retriever(args: argparse.Namespace) -> None:
    """`qa-system train-retriever`: fine-tune the question (and passage) encoder; prints the dev figures and how to use it."""
    import torch

    from qa_system.retrieval.encoders import tuned_encoders
    from qa_system.training.reader import resume_point
    from qa_system.training.retriever import RetrieverTrainingConfig, train_retriever

    settings = settings_from_args(args)
    resume_point(args.resume_from, args.output)  # a wrong checkpoint is refused before any work
    if args.threads:
        torch.set_num_threads(args.threads)
    config = RetrieverTrainingConfig(
        encoders=args.encoders,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        hard_negatives=args.hard_negatives,
        max_seq_length=args.max_seq_length,
        patience=args.patience,
        max_steps=args.max_steps,
        checkpoint_steps=args.checkpoint_steps,
    )
    result = train_retriever(
        args.domain,
        args.base_model or settings.embedding_model,
        args.output,
        config,
        settings,
        args.query_base_model,
        resume_from=args.resume_from,
    )
    if not result.finished:
        print(f"Stopped at step {result.steps}: `qa-system train-retriever ... --resume-from last` goes on from its last checkpoint.")
    print(f"Saved the best encoder (epoch {result.best_epoch}, {result.seconds / 60:.1f} min) to {result.output_dir}")
    for name, metrics in result.dev_metrics.items():
        print(f"  dev {name}: strict recall@1 {metrics['recall@1']:.3f}, recall@3 {metrics['recall@3']:.3f}, MRR {metrics['mrr']:.3f}")
    passage, query = tuned_encoders(result.output_dir)
    if query is not None and passage == settings.embedding_model:
        print(f"Use it with --query-embedding-model {result.output_dir} (the indexed review vectors stay valid).")
    else:
        flags = f"--embedding-model {passage}" + (f" --query-embedding-model {query}" if query else "")
        print(f"Use it with {flags}; `qa-system index {flags}` re-embeds the reviews.")


def fusion_fit_line(name: str, fit: dict) -> str:
    """What `fit-fusion` fitted, in one line, and when the questions could not tell the retrievers apart, that too."""
    from qa_system.tuning.fusion import fitted_on

    dev = fit["dev"]
    line = (
        f"{name}: fusion {fit['mode']} (sparse weight {fit['sparse_weight']:.2f}, dense weight {fit['dense_weight']:.2f}, k {fit['k']:g}); "
        f"{fitted_on(fit)} strict recall@1 {dev['fused']['recall@1']:.3f} (BM25 {dev['bm25']['recall@1']:.3f}, dense {dev['dense']['recall@1']:.3f})"
    )
    if dev["fused"] == dev["bm25"] == dev["dense"]:
        line += (
            ". BM25, dense and the fusion rank these questions' documents alike (recall@1 and MRR), so they cannot tell the "
            "weights apart: the most even ones are kept; questions whose documents are harder to find can tell"
        )
    return line


def _fusion_targets(args: argparse.Namespace, settings):
    """(name, index, labels) to fit on: each SubjQA ``--domain``'s index and dev split, or ``--collection`` with ``--labels``."""
    from qa_system.errors import QAError
    from qa_system.ingestion import open_collection
    from qa_system.ingestion.indexing import open_or_build_index
    from qa_system.ingestion.labels import load_labels

    if args.collection is None and args.labels is None:
        return [(domain, open_or_build_index(settings, domain), None) for domain in args.domain]
    if args.domain or args.collection is None or args.labels is None:
        raise QAError(
            "fit-fusion fits a SubjQA --domain on its dev split, or --collection NAME on --labels FILE.", "pass one or the other."
        )
    labels = load_labels(args.labels, settings, args.collection)
    return [(args.collection, open_collection(settings, args.collection, embeddings=True), labels)]


def cmd_fit_fusion(args: argparse.Namespace) -> None:
    """`qa-system fit-fusion`: fit the hybrid's fusion (and ``--rerank``'s mix) on dev and store it in the index."""
    from qa_system.tuning.fusion import fit_fusion_on_dev, fit_rerank_on_dev, fitted_on

    settings = settings_from_args(args)
    for domain, index, labels in _fusion_targets(args, settings):
        fit = fit_fusion_on_dev(settings, domain, index, args.split, args.limit, labels)
        print(fusion_fit_line(domain, fit))
        if args.rerank:
            fit = fit_rerank_on_dev(settings, domain, index, "hybrid", args.split, args.limit, labels=labels)
            dev = fit["dev"]
            print(
                f"{domain}: re-ranking retriever weight {fit['retriever_weight']:.2f}; "
                f"{fitted_on(fit)} strict recall@1 {dev['reranked']['recall@1']:.3f} (hybrid alone {dev['retriever']['recall@1']:.3f})"
            )
    print(f"Stored in the index manifest for the question encoder {settings.query_embedding_model or settings.embedding_model}.")


def cmd_export_onnx(args: argparse.Namespace) -> None:
    """`qa-system export-onnx`: a reader exported to ONNX, fp32 and int8; prints the files and how to use them."""
    from qa_system.reading.onnx import FP32_FILE, INT8_FILE, export_onnx, read_export_info
    from qa_system.reading.onnx_cache import cached_export

    settings = settings_from_args(args)
    model = args.model or settings.reader_model
    reduce_range = True if args.seven_bit else False if args.full_range else None  # None: this CPU decides
    if args.output is None:
        if reduce_range is not None:
            raise QAError(
                "The cached export's int8 weights are chosen by this CPU (full-range with VNNI/AMX, 7-bit otherwise).",
                "pass --output DIR with --full-range or --seven-bit for an export to take to another machine.",
            )
        output = cached_export(model, settings.reader_onnx_cache)
    else:
        output = export_onnx(model, args.output, reduce_range=reduce_range)
    info = read_export_info(output)
    for name in (FP32_FILE, INT8_FILE):
        print(f"{output / name}  {(output / name).stat().st_size / 2**20:.1f} MiB")
    print(
        f"int8 weights: {'7-bit' if info['reduce_range'] else 'full-range'}; fused operators: "
        + (", ".join(f"{op} {n}" for op, n in info["fused_operators"].items()) or "none (model type not fusable)")
    )
    print("The reader uses it by default." if args.output is None else f"Use it with: --reader-onnx-model {output}")


def register(commands, options: Options) -> None:
    """Add `train-reader`, `train-retriever`, `fit-fusion` and `export-onnx` to the command line."""
    p = commands.add_parser(
        "train-reader", parents=[options.common], help="fine-tune an extractive reader on SubjQA and/or SQuAD / MRQA files"
    )
    options.domain(p)
    p.add_argument("--no-subjqa", action="store_true", help="train only on --train-file / --dev-file")
    p.add_argument(
        "--train-file",
        nargs="+",
        type=Path,
        help="extra training files: SQuAD v1.1 / v2.0 JSON or MRQA JSON lines (format read from the content); a question in several files is used once",
    )
    p.add_argument("--dev-file", nargs="+", type=Path, help="extra dev files, same formats (pooled to tune the no-answer threshold)")
    p.add_argument(
        "--drop-dev-questions", action="store_true", help="leave out training questions whose id is a dev question's (counted either way)"
    )
    p.add_argument(
        "--select-on",
        type=Path,
        help="dev file whose F1 (unanswerable questions reweighted to the training share) selects the epoch (default electronics dev)",
    )
    p.add_argument(
        "--no-answer-prior",
        type=number("--no-answer-prior", 0, maximum=1),
        metavar="SHARE",
        help="share of unanswerable questions the threshold is tuned for (default: the training files'); "
        "give your own data's share when --train-file adds all-answerable data such as SQuADShifts",
    )
    p.add_argument("--base-model", help="model to fine-tune (default: the all-MiniLM-L6-v2 encoder)")
    p.add_argument("--output", type=Path, default=Path("models/reader-custom"))
    p.add_argument("--squad-dir", type=Path, help="where the SubjQA SQuAD files are written (default <home>/squad)")
    p.add_argument("--epochs", type=count("--epochs"), default=2)
    p.add_argument("--learning-rate", type=number("--learning-rate", 0, above=True), default=1e-4)
    p.add_argument("--batch-size", type=count("--batch-size"), default=16)
    p.add_argument("--seed", type=count("--seed", 0), default=42)
    p.add_argument("--max-seq-length", type=count("--max-seq-length"), default=384)
    p.add_argument("--doc-stride", type=count("--doc-stride"), default=128)
    p.add_argument("--patience", type=count("--patience"), default=1, help="epochs without dev F1 gain before stopping")
    p.add_argument("--max-steps", type=count("--max-steps"), help="stop after N optimiser steps (a smoke run)")
    p.add_argument(
        "--checkpoint-steps",
        type=count("--checkpoint-steps"),
        default=100,
        help="save a checkpoint every N optimiser steps in OUTPUT/checkpoints (the last two are kept; removed when the run ends)",
    )
    p.add_argument(
        "--resume-from",
        metavar="CHECKPOINT",
        help="continue an interrupted run of the same command: a checkpoint folder (OUTPUT/checkpoints/checkpoint-N) or 'last'",
    )
    p.add_argument("--teacher", help="distil from this QA model's start/end distributions (it must use the base model's tokenizer)")
    p.add_argument(
        "--distill-temperature",
        type=number("--distill-temperature", 0, above=True),
        default=2.0,
        help="softmax temperature of the distillation",
    )
    p.add_argument(
        "--distill-alpha",
        type=number("--distill-alpha", 0, maximum=1),
        default=0.5,
        help="weight of the gold-span loss; 1 - alpha goes to the teacher's",
    )
    p.add_argument(
        "--interpolate",
        type=number("--interpolate", 0, maximum=1),
        nargs="+",
        metavar="WEIGHT",
        help="then mix the new weights with --base-model's (WiSE-FT) at these weights of the new model, e.g. 0.5 0.75 1, "
        "and keep the best on the pooled dev files (the fine-tuned model stays in OUTPUT-finetuned)",
    )
    p.set_defaults(func=cmd_train_reader)

    p = commands.add_parser(
        "train-retriever", parents=[options.common], help="fine-tune the dense retriever's encoder on SubjQA (question, review) pairs"
    )
    options.domain(p)
    p.add_argument(
        "--encoders",
        choices=["question", "shared", "separate"],
        default="question",
        help="question: train the question encoder against the frozen review vectors (no re-indexing, minutes on CPU); "
        "shared: one encoder for both; separate: both, DPR-style (both re-embed the reviews)",
    )
    p.add_argument("--base-model", help="passage encoder to start from (default: the configured --embedding-model)")
    p.add_argument("--query-base-model", help="question encoder to start from, DPR-style (default: --base-model)")
    p.add_argument("--output", type=Path, default=Path("models/retriever-minilm-subjqa"))
    p.add_argument("--epochs", type=count("--epochs"), default=3)
    p.add_argument("--batch-size", type=count("--batch-size"), default=32)
    p.add_argument("--learning-rate", type=number("--learning-rate", 0, above=True), default=2e-5)
    p.add_argument("--seed", type=count("--seed", 0), default=42)
    p.add_argument(
        "--hard-negatives",
        type=count("--hard-negatives", 0),
        default=1,
        help="extra reviews of the same product per question, beyond those in the batch",
    )
    p.add_argument("--max-seq-length", type=count("--max-seq-length"), default=256, help="word pieces per text for the encoders that learn")
    p.add_argument("--patience", type=count("--patience"), default=1, help="epochs without dev recall@1 gain before stopping")
    p.add_argument("--max-steps", type=count("--max-steps"), help="stop after N optimiser steps (a smoke run)")
    p.add_argument("--threads", type=count("--threads"), help="torch CPU threads (1 is fastest on a busy machine: no spinning threads)")
    p.add_argument(
        "--checkpoint-steps",
        type=count("--checkpoint-steps"),
        default=100,
        help="save a checkpoint every N optimiser steps and at each epoch's end in OUTPUT/checkpoints (the last two are kept; removed when the run ends)",
    )
    p.add_argument(
        "--resume-from",
        metavar="CHECKPOINT",
        help="continue an interrupted run with the same flags: a checkpoint folder (OUTPUT/checkpoints/checkpoint-N) or 'last'",
    )
    p.set_defaults(func=cmd_train_retriever)

    p = commands.add_parser(
        "fit-fusion", parents=[options.common], help="fit the hybrid fusion (and --rerank's mix) on a dev split for the configured encoders"
    )
    options.domain(p)
    options.collection(p)
    p.add_argument(
        "--labels", type=Path, help="with --collection: your labelled questions about its documents (CSV, SQuAD JSON or MRQA JSON lines)"
    )
    p.add_argument("--split", default="dev", help="the SubjQA split to fit on (dev)")
    p.add_argument("--rerank", action="store_true", help="also fit the answerability re-ranking of hybrid (needs the reader model)")
    p.add_argument("--limit", type=count("--limit"), help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_fit_fusion)

    p = commands.add_parser("export-onnx", parents=[options.common], help="export a reader to ONNX, fp32 and dynamically int8-quantised")
    p.add_argument("--model", help="reader model directory or hub id (default: the configured reader)")
    p.add_argument(
        "--output", type=Path, help="export directory to take elsewhere (default: build the export the reader uses, in the cache)"
    )
    weights = p.add_mutually_exclusive_group()
    weights.add_argument(
        "--full-range", action="store_true", help="with --output: 8-bit int8 weights, for CPUs with VNNI/AMX (AVX2 saturates)"
    )
    weights.add_argument(
        "--seven-bit", action="store_true", help="with --output: 7-bit int8 weights, for CPUs without (default: what this CPU has)"
    )
    p.set_defaults(func=cmd_export_onnx)
