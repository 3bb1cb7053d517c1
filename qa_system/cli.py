"""`qa-system` command line: a thin door onto the library.

Every command parses its flags into ``Settings`` and calls one library function. A ``QAError``
(bad input the user can fix) is printed as one line on stderr with exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path

from qa_system.config import GENERATORS, READER_BACKENDS, RETRIEVERS, STORE_BACKENDS, Settings
from qa_system.errors import QAError

DEFAULT_ITEM = "B0074BW614"


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=args.data_dir,
        home=args.home,
        store=args.store,
        es_url=args.es_url,
        opensearch_url=args.opensearch_url,
        embedding_model=args.embedding_model,
        query_embedding_model=args.query_embedding_model,
        reader_model=args.reader_model,
        reader_backend=args.reader_backend,
        reader_onnx_model=args.reader_onnx_model,
        # Generation flags exist only on the commands that generate (ask, eval rag).
        generator=getattr(args, "generator", None),
        generator_model=getattr(args, "model", None),
        generator_base_url=getattr(args, "base_url", None),
        max_new_tokens=getattr(args, "max_new_tokens", None),
        temperature=getattr(args, "temperature", None),
        num_beams=getattr(args, "num_beams", None),
    )


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("settings (also QA_* environment variables)")
    group.add_argument("--data-dir", help="SubjQA root holding <domain>/splits/<split>.csv (default ../shared/data/subjqa)")
    group.add_argument("--home", help="where indexes and caches live (QA_HOME, default ~/.cache/qa_system)")
    group.add_argument("--store", choices=STORE_BACKENDS, help="document store backend (default memory)")
    group.add_argument("--es-url", help="Elasticsearch url (QA_ES_URL, default http://localhost:9200)")
    group.add_argument("--opensearch-url", help="OpenSearch url (QA_OPENSEARCH_URL, default http://localhost:9200)")
    group.add_argument("--embedding-model", help="passage encoder: hub id or local path (default all-MiniLM-L6-v2 from its PyPI wheel)")
    group.add_argument("--query-embedding-model", help="separate question encoder for DPR-style models")
    group.add_argument("--reader-model", help="extractive QA model: hub id or local path (default models/reader-minilm-subjqa)")
    group.add_argument("--reader-backend", choices=READER_BACKENDS, help="torch (default) or onnx: ONNX Runtime int8, after `qa-system export-onnx`")
    group.add_argument("--reader-onnx-model", help="the reader's .onnx file or export directory (default <reader model>/onnx, int8)")
    return common


def _generator_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("generation (RAG; also QA_* environment variables)")
    group.add_argument("--generator", choices=GENERATORS, help="smollm2 (default, offline), hf (local model), openai (any OpenAI-compatible server)")
    group.add_argument("--model", help="hf: model id or path (causal chat LM or seq2seq); openai: the served model name")
    group.add_argument("--base-url", help="openai: the server's url, e.g. http://127.0.0.1:8080/v1")
    group.add_argument("--max-new-tokens", type=int, help="longest answer in tokens (default 64)")
    group.add_argument("--temperature", type=float, help="0 = greedy (default); above 0 samples")
    group.add_argument("--num-beams", type=int, help="beam search width, local generators (default 1)")
    return options


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
    if m.get("vector_search") is False:
        print("  no review vectors: the server has no k-NN plugin, so only --retriever bm25 runs on this index")


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
    pipeline = build_retrieval_pipeline(args.retriever, settings, index=index, rerank=args.rerank)
    result = pipeline.run(args.question, item_id=args.item, split=args.split, top_k=args.top_k)
    documents = result["documents"]
    name = args.retriever + (" + re-ranking" if args.rerank else "")
    print(f"{len(documents)} review(s) for {args.item or 'all products'} ({name}, {1000 * result['timings']['retrieval_s']:.0f} ms)")
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
    pipeline = build_qa_pipeline(args.retriever, settings, index=index, answer_stage=args.mode, rerank=args.rerank)
    if args.mode == "rag":
        _ask_rag(pipeline, args)
        return
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


def _ask_rag(pipeline, args: argparse.Namespace) -> None:
    """The generated answer (streamed with --stream), then the reviews it cites and the others it was given."""
    print(f"Q: {args.question}  ({args.item or 'all products'})")
    if args.stream:
        print("A: ", end="", flush=True)
    stream = (lambda chunk: print(chunk.content, end="", flush=True)) if args.stream else None
    result = pipeline.run(args.question, item_id=args.item, split=args.split, top_k=args.top_k, streaming_callback=stream)
    answer = result["answers"][0]
    meta, timings = answer.meta, result["timings"]
    if args.stream:
        print()
    if answer.data is None:
        print(f"A: [no answer in these reviews: {meta['no_answer_reason']}]")
    elif not args.stream:
        print(f"A: {answer.data}")
    tokens = meta["usage"].get("completion_tokens")
    speed = f", {tokens / timings['generator']:.1f} tokens/s" if tokens and timings.get("generator") else ""
    print(f"   (retrieval {1000 * timings['retrieval_s']:.0f} ms, prompt {1000 * timings.get('prompt_builder', 0):.0f} ms, "
          f"generation {timings.get('generator', 0):.1f} s{speed})")
    prompt = meta["prompt"]
    if prompt.get("truncated"):
        shortened = ", ".join(f"[{n}]" for n in prompt["truncated_reviews"]) or "none"
        print(f"   (prompt cut to {prompt['budget_tokens']} tokens: reviews shortened {shortened}; {len(prompt['dropped_document_ids'])} dropped)")
    for heading, cited in (("Cited reviews", True), ("Also given", False)):
        documents = [d for d in answer.documents if d.meta["referenced"] is cited]
        if documents:
            print(f"\n{heading}:")
        for document in documents:
            snippet = textwrap.shorten(document.content or "", width=2 * args.context, placeholder=" ...")
            print(f"[{document.meta['source_index']}] review {document.meta.get('review_id')}  ({document.meta.get('item_id')})")
            print(textwrap.indent(textwrap.fill(snippet, width=100), "    "))


def cmd_export_squad(args: argparse.Namespace) -> None:
    from qa_system.training import subjqa_to_squad_files

    settings = _settings(args)
    for path, report in subjqa_to_squad_files(args.domain, args.split, args.out, settings.data_dir).items():
        print(f"{path}: {report.summary()}")


def cmd_train_reader(args: argparse.Namespace) -> None:
    from qa_system.training import TrainingConfig, subjqa_to_squad_files, train_reader

    settings = _settings(args)
    squad_dir = args.squad_dir or settings.home / "squad"
    train_files, dev_files = list(args.train_file or []), list(args.dev_file or [])
    if not args.no_subjqa:
        exported = subjqa_to_squad_files(args.domain, ["train", "dev"], squad_dir, settings.data_dir)
        for path, report in exported.items():
            print(f"{path}: {report.summary()}")
        train_files += [squad_dir / f"{d}-train.json" for d in args.domain]
        dev_files += [squad_dir / f"{d}-dev.json" for d in args.domain]
    config = TrainingConfig(
        epochs=args.epochs, learning_rate=args.learning_rate, batch_size=args.batch_size, seed=args.seed,
        max_seq_length=args.max_seq_length, doc_stride=args.doc_stride, patience=args.patience, max_steps=args.max_steps,
    )
    select_on = args.select_on or (squad_dir / "electronics-dev.json" if "electronics" in args.domain and not args.no_subjqa else None)
    result = train_reader(train_files, dev_files, args.base_model or settings.embedding_model, args.output, config, select_on=select_on)
    print(f"Saved the best model (epoch {result.best_epoch}, no-answer threshold {result.no_answer_threshold:.3f}) to {result.output_dir}")
    for name, metrics in result.dev_metrics.items():
        print(f"  dev {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if isinstance(v, float)))


def cmd_train_retriever(args: argparse.Namespace) -> None:
    import torch

    from qa_system.retrieval.training import RetrieverTrainingConfig, train_retriever, tuned_encoders

    settings = _settings(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = RetrieverTrainingConfig(
        encoders=args.encoders, epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed,
        hard_negatives=args.hard_negatives, max_seq_length=args.max_seq_length, patience=args.patience, max_steps=args.max_steps,
    )
    result = train_retriever(args.domain, args.base_model or settings.embedding_model, args.output, config, settings, args.query_base_model)
    print(f"Saved the best encoder (epoch {result.best_epoch}, {result.seconds / 60:.1f} min) to {result.output_dir}")
    for name, metrics in result.dev_metrics.items():
        print(f"  dev {name}: strict recall@1 {metrics['recall@1']:.3f}, recall@3 {metrics['recall@3']:.3f}, MRR {metrics['mrr']:.3f}")
    passage, query = tuned_encoders(result.output_dir)
    if query is not None and passage == settings.embedding_model:
        print(f"Use it with --query-embedding-model {result.output_dir} (the indexed review vectors stay valid).")
    else:
        flags = f"--embedding-model {passage}" + (f" --query-embedding-model {query}" if query else "")
        print(f"Use it with {flags}; `qa-system index {flags}` re-embeds the reviews.")


def cmd_fit_fusion(args: argparse.Namespace) -> None:
    from qa_system.indexing import open_or_build_index
    from qa_system.retrieval.calibration import fit_fusion_on_dev, fit_rerank_on_dev

    settings = _settings(args)
    for domain in args.domain:
        index = open_or_build_index(settings, domain)
        fit = fit_fusion_on_dev(settings, domain, index, args.split, args.limit)
        dev = fit["dev"]
        print(f"{domain}: fusion {fit['mode']} (sparse weight {fit['sparse_weight']:.2f}, dense weight {fit['dense_weight']:.2f}, k {fit['k']:g}); "
              f"{fit['fitted_on']} strict recall@1 {dev['fused']['recall@1']:.3f} (BM25 {dev['bm25']['recall@1']:.3f}, dense {dev['dense']['recall@1']:.3f})")
        if args.rerank:
            fit = fit_rerank_on_dev(settings, domain, index, "hybrid", args.split, args.limit)
            dev = fit["dev"]
            print(f"{domain}: re-ranking retriever weight {fit['retriever_weight']:.2f}; "
                  f"{fit['fitted_on']} strict recall@1 {dev['reranked']['recall@1']:.3f} (hybrid alone {dev['retriever']['recall@1']:.3f})")
    print(f"Stored in the index manifest for the question encoder {settings.query_embedding_model or settings.embedding_model}.")


def _print_answer_metrics(result: dict, out: Path) -> None:
    metrics = result["metrics"]
    shown = metrics[metrics["group"].isin(["all", "answerable", "unanswerable", "always no answer"])]
    columns = ["system", "group", "questions", "em", "f1", "em_top_k", "f1_top_k", "answered", "latency_ms"]
    print(shown[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"Report written to {out}/ (report.json, report.csv, report.md, em_f1.png, predictions-*.json, gold.json)")


def cmd_eval_reader(args: argparse.Namespace) -> None:
    from qa_system.evaluation.answering import evaluate_readers

    settings = _settings(args)
    readers = args.reader or [settings.reader_model]
    result = evaluate_readers(settings, readers, args.domain[0], args.split, args.top_k, args.out, args.limit, args.no_answer_threshold)
    _print_answer_metrics(result, args.out)


def cmd_eval_pipeline(args: argparse.Namespace) -> None:
    from qa_system.evaluation.answering import evaluate_pipelines

    settings = _settings(args)
    readers = args.reader or [settings.reader_model]
    result = evaluate_pipelines(
        settings, readers, args.retriever, args.domain[0], args.split, args.top_k_retriever, args.top_k,
        args.out, args.limit, args.no_answer_threshold,
    )
    _print_answer_metrics(result, args.out)


def cmd_eval_rag(args: argparse.Namespace) -> None:
    from qa_system.evaluation.rag import evaluate_rag

    result = evaluate_rag(
        _settings(args), args.retriever, args.domain[0], args.split, args.top_k_retriever, args.out, args.limit, args.compare_extractive
    )
    metrics = result["metrics"]
    columns = ["system", "group", "questions", "em", "f1", "sas", "no_answer_accuracy", "citation_precision", "retrieval_ms", "prompt_ms", "generation_ms", "tokens_per_s"]
    print(metrics[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md, records.csv, rag_metrics.png, latency.png, predictions-*.json, gold.json)")


def cmd_eval_retriever(args: argparse.Namespace) -> None:
    from qa_system.evaluation.retrieval import evaluate_retrievers

    result = evaluate_retrievers(
        _settings(args), args.domain[0], args.split, args.retriever, args.k, out_dir=args.out, limit=args.limit, tuned_model=args.tuned_model
    )
    for note in result["notes"]:
        print(note)
    metrics = result["metrics"]
    columns = ["retriever", "definition", "group", "n", *[f"recall@{k}" for k in sorted(set(args.k))], "mrr", "map"]
    shown = metrics[metrics["group"].isin(["all", "answerable"])][columns]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(result["timings"].to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(f"Report written to {args.out}/ (report.json, report.csv, report.md, recall_at_k.png)")


def cmd_tune_bm25(args: argparse.Namespace) -> None:
    from qa_system.evaluation.bm25_grid import RULE, describe, tune_bm25

    table = tune_bm25(_settings(args), args.domain[0], args.split, out_dir=args.out, limit=args.limit)
    print(table.head(args.show).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(
        f"Recommended ({RULE}): {describe(table[table['recommended']].iloc[0])}. Report written to {args.out}/ (report.json, report.csv, report.md)"
    )


def cmd_ui(args: argparse.Namespace) -> None:
    from qa_system.webapp import run_app

    _settings(args)  # bad flags fail here, as one line, rather than inside the page
    code = run_app(args.port, args.address, vars(args), watch=args.dev)
    if code:
        raise QAError(f"Streamlit exited with code {code}.", "see its messages above (is the port in use? try --port).")


def cmd_export_feedback(args: argparse.Namespace) -> None:
    from qa_system.feedback import FeedbackStore

    export = FeedbackStore(_settings(args).feedback_db).export_squad(args.out)
    print(f"{export.path}: {export.summary()}")
    print(f"Train on it with: qa-system train-reader --train-file {export.path}")


def cmd_export_onnx(args: argparse.Namespace) -> None:
    from qa_system.onnx_reader import FP32_FILE, INT8_FILE, export_onnx, read_export_info

    model = args.model or _settings(args).reader_model
    output = export_onnx(model, args.output, reduce_range=not args.full_range)
    fused = read_export_info(output)["fused_operators"]
    for name in (FP32_FILE, INT8_FILE):
        print(f"{output / name}  {(output / name).stat().st_size / 2**20:.1f} MiB")
    print("fused operators: " + (", ".join(f"{op} {n}" for op, n in fused.items()) or "none (model type not fusable)"))
    print("Use it with: --reader-backend onnx" + ("" if args.output is None else f" --reader-onnx-model {output}"))


def cmd_bench(args: argparse.Namespace) -> None:
    # Sleeping rather than spinning OpenMP threads (read when torch loads): on a busy small machine
    # spinning makes the PyTorch baselines several times slower, which would flatter the ONNX reader.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from qa_system.bench import run_bench

    out = run_bench(
        _settings(args), args.out, args.sizes, args.queries, args.reader_questions, args.budget,
        0 if args.skip_rag else args.rag_questions, args.embed_sample, args.seed, progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    for check in json.loads((out / "report.json").read_text(encoding="utf-8"))["metrics"]:
        print(f"{check['pass']:>3}  {check['criterion']}: {check['measured']} (target {check['target']})")
    print(f"Report written to {out}/ (report.json, report.csv, report.md, latency_vs_corpus_size.png, reader.png)")


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
    p.add_argument("--rerank", action="store_true", help="re-rank the reviews by the reader's answerability (fitted by fit-fusion --rerank)")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--width", type=int, default=400, help="characters of each review to print")
    p.set_defaults(func=cmd_search)

    generation = _generator_options()
    p = commands.add_parser("ask", parents=[common, generation], help="answer a question about a product from its reviews")
    p.add_argument("question")
    domain_option(p)
    p.add_argument("--item", help=f"product (item_id) to ask about, e.g. {DEFAULT_ITEM}")
    p.add_argument("--split", help="only reviews of this split")
    p.add_argument("--mode", choices=["extractive", "rag"], default="extractive", help="answer stage: extracted span, or generated answer citing the reviews")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--rerank", action="store_true", help="re-rank the reviews by the reader's answerability before answering")
    p.add_argument("--top-k", type=int, default=3, help="reviews to retrieve")
    p.add_argument("--answers", type=int, default=3, help="answers to show (extractive)")
    p.add_argument("--no-answer-threshold", type=float, help="logit margin an answer needs over 'no answer' (default: tuned; extractive)")
    p.add_argument("--context", type=int, default=150, help="characters of review shown around each answer (rag: half the snippet of each review)")
    p.add_argument("--stream", action="store_true", help="print the generated answer as it is written (rag)")
    p.set_defaults(func=cmd_ask)

    evaluation = commands.add_parser("eval", help="evaluate a stage on a labelled split and write a report")
    stages = evaluation.add_subparsers(dest="stage", required=True)
    p = stages.add_parser("retriever", parents=[common], help="recall@k, MRR, MAP (strict and chapter definitions)")
    domain_option(p)
    p.add_argument("--split", default="test")
    p.add_argument(
        "--retriever", nargs="+", default=list(RETRIEVERS), metavar="VARIANT",
        help="bm25, dense, hybrid, dense-ft, hybrid-ft (-ft: the fine-tuned encoder), each optionally +rerank, e.g. hybrid-ft+rerank",
    )
    p.add_argument("--tuned-model", type=Path, help="fine-tuned encoder of the -ft variants (default models/retriever-minilm-subjqa)")
    p.add_argument("--k", nargs="+", type=int, default=[1, 3, 5, 10, 20])
    p.add_argument("--out", type=Path, default=Path("reports/retriever"))
    p.add_argument("--limit", type=int, help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_eval_retriever)

    def answer_eval_options(p: argparse.ArgumentParser, out: str) -> None:
        domain_option(p)
        p.add_argument("--split", default="test")
        p.add_argument("--reader", nargs="+", help="reader models to compare (default: the configured reader)")
        p.add_argument("--top-k", type=int, default=3, help="answers per question (top-k EM/F1)")
        p.add_argument("--no-answer-threshold", type=float, help="override the reader's tuned threshold")
        p.add_argument("--out", type=Path, default=Path(out))
        p.add_argument("--limit", type=int, help="only the first N questions (a quick look)")

    p = stages.add_parser("reader", parents=[common], help="EM / F1 of readers given the gold review")
    answer_eval_options(p, "reports/reader")
    p.set_defaults(func=cmd_eval_reader)
    p = stages.add_parser("pipeline", parents=[common], help="EM / F1 of retriever + reader with per-product filters")
    answer_eval_options(p, "reports/pipeline")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--top-k-retriever", type=int, default=3)
    p.set_defaults(func=cmd_eval_pipeline)
    p = stages.add_parser("rag", parents=[common, generation], help="generated answers: F1, SAS, no-answer accuracy, citation precision, latency")
    domain_option(p)
    p.add_argument("--split", default="test")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--top-k-retriever", type=int, default=3, help="reviews in the prompt")
    p.add_argument("--compare-extractive", action="store_true", help="also run the extractive pipeline (--reader-model) on the same questions")
    p.add_argument("--out", type=Path, default=Path("reports/rag"))
    p.add_argument("--limit", type=int, help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_eval_rag)

    p = commands.add_parser("export-squad", parents=[common], help="write SubjQA splits as SQuAD v2 JSON files")
    domain_option(p)
    p.add_argument("--split", nargs="+", default=["train", "dev", "test"])
    p.add_argument("--out", type=Path, default=Path("data/squad"))
    p.set_defaults(func=cmd_export_squad)

    p = commands.add_parser("train-reader", parents=[common], help="fine-tune an extractive reader on SubjQA and/or SQuAD v2 files")
    domain_option(p)
    p.add_argument("--no-subjqa", action="store_true", help="train only on --train-file / --dev-file")
    p.add_argument("--train-file", nargs="+", type=Path, help="extra SQuAD v2 training files (e.g. SQuAD itself)")
    p.add_argument("--dev-file", nargs="+", type=Path, help="extra SQuAD v2 dev files (pooled to tune the no-answer threshold)")
    p.add_argument("--select-on", type=Path, help="dev file whose F1 selects the epoch (default electronics dev)")
    p.add_argument("--base-model", help="model to fine-tune (default: the all-MiniLM-L6-v2 encoder)")
    p.add_argument("--output", type=Path, default=Path("models/reader-custom"))
    p.add_argument("--squad-dir", type=Path, help="where the SubjQA SQuAD files are written (default <home>/squad)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-seq-length", type=int, default=384)
    p.add_argument("--doc-stride", type=int, default=128)
    p.add_argument("--patience", type=int, default=1, help="epochs without dev F1 gain before stopping")
    p.add_argument("--max-steps", type=int, help="stop after N optimiser steps (a smoke run)")
    p.set_defaults(func=cmd_train_reader)

    p = commands.add_parser("train-retriever", parents=[common], help="fine-tune the dense retriever's encoder on SubjQA (question, review) pairs")
    domain_option(p)
    p.add_argument("--encoders", choices=["question", "shared", "separate"], default="question",
                   help="question: train the question encoder against the frozen review vectors (no re-indexing, minutes on CPU); "
                        "shared: one encoder for both; separate: both, DPR-style (both re-embed the reviews)")
    p.add_argument("--base-model", help="passage encoder to start from (default: the configured --embedding-model)")
    p.add_argument("--query-base-model", help="question encoder to start from, DPR-style (default: --base-model)")
    p.add_argument("--output", type=Path, default=Path("models/retriever-minilm-subjqa"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--hard-negatives", type=int, default=1, help="extra reviews of the same product per question, beyond those in the batch")
    p.add_argument("--max-seq-length", type=int, default=256, help="word pieces per text for the encoders that learn")
    p.add_argument("--patience", type=int, default=1, help="epochs without dev recall@1 gain before stopping")
    p.add_argument("--max-steps", type=int, help="stop after N optimiser steps (a smoke run)")
    p.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a busy machine: no spinning threads)")
    p.set_defaults(func=cmd_train_retriever)

    p = commands.add_parser("fit-fusion", parents=[common], help="fit the hybrid fusion (and --rerank's mix) on a dev split for the configured encoders")
    domain_option(p)
    p.add_argument("--split", default="dev")
    p.add_argument("--rerank", action="store_true", help="also fit the answerability re-ranking of hybrid (needs the reader model)")
    p.add_argument("--limit", type=int, help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_fit_fusion)

    p = commands.add_parser("tune-bm25", parents=[common], help="score BM25 analyzers and k1 / b on a labelled split (per-product filters)")
    domain_option(p)
    p.add_argument("--split", default="dev")
    p.add_argument("--show", type=int, default=10, help="print the best N settings")
    p.add_argument("--out", type=Path, default=Path("reports/bm25-grid"))
    p.add_argument("--limit", type=int, help="only the first N questions (a quick look)")
    p.set_defaults(func=cmd_tune_bm25)

    p = commands.add_parser("ui", parents=[common], help="serve the search page (Streamlit) on http://ADDRESS:PORT")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", default="localhost", help="0.0.0.0 to serve other machines")
    p.add_argument("--dev", action="store_true", help="reload the page when ui/ files change")
    p.set_defaults(func=cmd_ui)

    p = commands.add_parser("export-feedback", parents=[common], help="write the search page's answer feedback as SQuAD v2 training data")
    p.add_argument("--out", type=Path, default=Path("data/feedback-squad.json"))
    p.set_defaults(func=cmd_export_feedback)

    p = commands.add_parser("export-onnx", parents=[common], help="export a reader to ONNX, fp32 and dynamically int8-quantised")
    p.add_argument("--model", help="reader model directory or hub id (default: the configured reader)")
    p.add_argument("--output", type=Path, help="export directory (default <model>/onnx)")
    p.add_argument("--full-range", action="store_true", help="8-bit rather than 7-bit int8 weights: only for CPUs with VNNI (AVX2 saturates)")
    p.set_defaults(func=cmd_export_onnx)

    p = commands.add_parser("bench", parents=[common], help="measure indexing, retrieval, reader and end-to-end speed beside Haystack's stock components")
    p.add_argument("--sizes", nargs="+", type=int, default=[1000, 10000, 100000], help="corpus sizes in reviews")
    p.add_argument("--queries", type=int, default=200, help="questions for retrieval and end-to-end timing")
    p.add_argument("--reader-questions", type=int, help="questions for the reader comparison and its EM/F1 (default: all electronics test)")
    p.add_argument("--budget", type=float, default=60.0, help="seconds a slow baseline may spend on one measurement")
    p.add_argument("--rag-questions", type=int, default=3, help="questions for the RAG end-to-end timing")
    p.add_argument("--skip-rag", action="store_true", help="leave the RAG pipeline out")
    p.add_argument("--embed-sample", type=int, default=1000, help="reviews embedded for real (the other vectors are perturbed copies)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic reviews and vectors")
    p.add_argument("--out", type=Path, default=Path("reports/bench"))
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "domain", None) is None:
        # Training learns from every provided domain; everything else works on electronics by default.
        args.domain = ["electronics", "restaurants", "tripadvisor"] if args.command in ("train-reader", "train-retriever") else ["electronics"]
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
