"""`qa-system search | ask | shell`: the reviews a retriever ranks, and the answers read or generated from them
(``ask --url`` and ``shell`` from a service whose models are loaded once)."""

from __future__ import annotations

import argparse
import sys
import textwrap

from qa_system.cli.options import DEFAULT_ITEM, Options, count, depth, number, open_index_for, settings_from_args
from qa_system.config import RETRIEVERS
from qa_system.errors import check_text
from qa_system.safe_text import terminal_text


def text(name: str):
    """argparse type of a question or id: a byte that is not UTF-8 (kept as a lone surrogate) is one line, exit 2, before any work."""
    return lambda value: check_text(value, name)


def filter_json(value: str) -> dict | None:
    """argparse type of ``--filter``: a JSON filter in Haystack's syntax, checked by the library (one line, exit 2, before any work)."""
    from qa_system.retrieval.filters import parse_filters

    return parse_filters(value)


FILTER_HELP = 'only documents whose metadata pass this JSON filter (Haystack\'s syntax), e.g. \'{"field": "meta.rating", "operator": ">=", "value": 4}\''


def cmd_search(args: argparse.Namespace) -> None:
    """`qa-system search`: the reviews a retriever ranks for a question, each with its score and a snippet."""
    from qa_system.pipelines import build_retrieval_pipeline
    from qa_system.sources import split_names
    from qa_system.sources.records import user_metadata

    settings = settings_from_args(args)
    index = open_index_for(args, settings, embeddings=args.retriever != "bm25")
    pipeline = build_retrieval_pipeline(args.retriever, settings, index=index, rerank=args.rerank)
    result = pipeline.run(args.question, item_id=args.item, split=args.split, top_k=args.top_k, filters=args.filter)
    documents = result["documents"]
    name = args.retriever + (" + re-ranking" if args.rerank else "")
    print(terminal_text(f"{len(documents)} review(s) for {args.item or 'all products'} ({name}, {1000 * result['timings']['retrieval_s']:.0f} ms)"))
    for rank, document in enumerate(documents, 1):
        meta = document.meta
        snippet = textwrap.shorten(terminal_text(document.content or ""), width=args.width, placeholder=" ...")
        splits = " + ".join(split_names(document))
        own = ", ".join(f"{key} {value}" for key, value in user_metadata(meta).items())  # the source's columns: rating, date, ...
        print(terminal_text(f"\n{rank}. score {document.score:.3f}  {document_label(document)}  ({meta.get('item_id')}" + (f", {splits}" if splits else "") + (f"; {own})" if own else ")")))
        print(textwrap.indent(textwrap.fill(snippet, width=100), "   "))


def document_label(document) -> str:
    """``review R`` for SubjQA, ``document D`` for a collection's (with the passage's offset in it when split)."""
    return _label(document.id, document.meta)


def _label(document_id: str, meta: dict) -> str:
    if meta.get("review_id"):
        return f"review {meta['review_id']}"
    where = f" (from character {meta['source_offset']})" if meta.get("passages", 1) > 1 else ""
    return f"document {meta.get('document_id', document_id)}{where}"


def highlight(text: str, start: int, end: int, tty: bool) -> str:
    """The answer marked inside its context: bold yellow on a terminal, **...** otherwise (the text's own control characters shown as escapes)."""
    left, right = ("\033[1;33m", "\033[0m") if tty else ("**", "**")
    return f"{terminal_text(text[:start])}{left}{terminal_text(text[start:end])}{right}{terminal_text(text[end:])}"


def cmd_ask(args: argparse.Namespace) -> None:
    """`qa-system ask`: the answers to a question (spans read from the reviews, or a generated answer with ``--mode rag``), with timings."""
    settings = settings_from_args(args)
    if args.url:  # a client of a running server: Haystack and the models are not even imported
        _ask_server(args, settings.api_token)
        return
    from qa_system.pipelines import build_qa_pipeline

    index = open_index_for(args, settings, embeddings=args.retriever != "bm25")
    pipeline = build_qa_pipeline(args.retriever, settings, index=index, answer_stage=args.mode, rerank=args.rerank)
    if args.mode == "rag":
        _ask_rag(pipeline, args)
        return
    result = pipeline.run(
        args.question, item_id=args.item, split=args.split, top_k=args.top_k,
        top_k_reader=args.answers, no_answer_threshold=args.no_answer_threshold, filters=args.filter,
    )
    timings = result["timings"]
    print(terminal_text(f"Q: {args.question}  ({args.item or 'all products'}; retrieval {1000 * timings['retrieval_s']:.0f} ms, "
                        f"reader {1000 * timings['answer_s']:.0f} ms, {result['reader_backend']})"))
    _print_spans(result["answers"], args)


def _ask_server(args: argparse.Namespace, token: str | None) -> None:
    """`qa-system ask --url`: the answers of a running `qa-system api` (its models already loaded), printed as `ask` prints its own."""
    from qa_system.serving.client import ask_server

    body = ask_server(args.url, _question(args), token)
    timings = body["timings"]
    print(terminal_text(f"Q: {args.question}  ({body['item_id'] or 'all products'} in {body['collection']}; retrieval {1000 * timings['retrieval_s']:.0f} ms, "
                        f"answer {1000 * timings['answer_s']:.0f} ms, queue {1000 * timings.get('queue_s', 0):.0f} ms; {body['pipeline']} at {args.url})"))
    documents = {d["id"]: d for d in body["documents"]}
    tty = sys.stdout.isatty()
    for rank, answer in enumerate(body["answers"], 1):
        chance = f"{100 * answer['probability']:.0f}% chance right" if answer.get("probability") is not None else f"score {answer['score']:.2f}" if answer.get("score") is not None else ""
        if answer["kind"] == "no_answer":
            print(terminal_text(f"\n{rank}. [no answer in these reviews]  {chance}"))
        elif answer["kind"] == "generated":
            cited = ", ".join(document_label_of(documents.get(i)) for i in answer["cited_document_ids"])
            print(terminal_text(f"\n{rank}. {answer['text']}  (generated; cites {cited or 'nothing'})"))
        else:
            start = answer["start"] - answer["context_start"]
            print(terminal_text(f"\n{rank}. {answer['text']}  {chance}  {document_label_of(documents.get(answer['document_id']))}"))
            print(textwrap.indent(highlight(answer["context"], start, start + len(answer["text"]), tty), "   "))


def _question(args: argparse.Namespace):
    """The ``Question`` that `ask`'s flags describe, for a server or the in-process service."""
    from qa_system.errors import QAError
    from qa_system.serving.question import Question

    if args.rerank:
        raise QAError("The service answers without re-ranking.", "leave out --rerank with --url or in the shell.")
    # --domain defaults to electronics (cli.main): only a collection named on purpose is sent, else the server's default.
    collection = args.collection or (args.domain[0] if args.domain and args.domain != ["electronics"] else None)
    return Question(
        args.question, args.item, collection, retriever=args.retriever, mode=args.mode, top_k=args.top_k, split=args.split,
        top_k_reader=args.answers if args.mode == "extractive" else None, no_answer_threshold=args.no_answer_threshold,
    )  # fmt: skip


def cmd_shell(args: argparse.Namespace) -> None:
    """`qa-system shell`: questions read line by line and answered by one service (or a running API with --url),
    so that only the first pays for loading the models. ``:item ID`` picks the product, ``:quit`` (or end of input) ends."""
    from qa_system.errors import QAError

    settings = settings_from_args(args)
    service = None
    if not args.url:  # with --url, a client of the running server: the models are not even imported
        from qa_system.serving.service import QAService, ServedCollection

        names = [ServedCollection(args.collection)] if args.collection else [ServedCollection(d, subjqa_domain=True) for d in args.domain]
        service = QAService(settings, names, any_collection=True)
        args.collection, args.domain = service.names[0], None  # the service's own name for its default collection
    print(terminal_text(f"Ask about {args.item or 'all products'} ({args.url or service.names[0]}); ':item ID' picks a product, ':quit' ends."), file=sys.stderr)
    for line in sys.stdin:
        line = line.strip()
        if line in (":quit", ":q"):
            break
        if line.startswith(":item"):
            args.item = line.removeprefix(":item").strip() or None
            continue
        if not line:
            continue
        try:
            _answer_line(argparse.Namespace(**{**vars(args), "question": check_text(line, "the question")}), service, settings.api_token)
        except QAError as error:  # a bad question is one line; the shell goes on
            print(terminal_text(f"error: {error}", newlines=False), file=sys.stderr)


def _answer_line(args: argparse.Namespace, service, token: str | None) -> None:
    """One shell question, answered by the server at ``args.url`` or by ``service`` in this process."""
    if service is None:
        _ask_server(args, token)
        return
    result = service.ask(_question(args))
    timings = result["timings"]
    print(terminal_text(f"Q: {args.question}  ({args.item or 'all products'}; retrieval {1000 * timings['retrieval_s']:.0f} ms, "
                        f"answer {1000 * timings['answer_s']:.0f} ms; {result['pipeline']})"))
    if args.mode == "rag" and result["answers"] and result["answers"][0].data is not None and not result["answers"][0].meta.get("withheld"):
        print(terminal_text(f"A: {result['answers'][0].data}"))
        return
    _print_spans(result["answers"], args)


def document_label_of(body: dict | None) -> str:
    """``document_label`` of a document as the API returns it (JSON)."""
    return "?" if body is None else _label(body["id"], body.get("meta", {}))


def _print_spans(answers, args: argparse.Namespace) -> None:
    """Extractive answers best first, each with its score named as what it is and its review, the answer highlighted."""
    from qa_system.serving.answer_views import answer_views, rank_answers

    views = answer_views(answers)
    close = rank_answers(views).close_call
    if close:
        print(terminal_text(f"\n{close}"))
    tty = sys.stdout.isatty()
    for rank, view in enumerate(views, 1):
        if view.kind == "no_answer":
            print(terminal_text(f"\n{rank}. [no answer in these reviews]  {view.score_label}"))
            continue
        document, start, end = view.document, view.start, view.end
        begin, stop = max(0, start - args.context), min(len(document.content), end + args.context)
        context = highlight(document.content[begin:stop], start - begin, end - begin, tty)
        others = f"  (said in {view.support} reviews)" if view.support > 1 else ""
        print(terminal_text(f"\n{rank}. {view.text}  {view.score_label}  {document_label(document)}{others}"))
        print(textwrap.indent(("..." if begin else "") + context + ("..." if stop < len(document.content) else ""), "   "))


def _ask_rag(pipeline, args: argparse.Namespace) -> None:
    """The generated answer (streamed with --stream), then the reviews it cites and the others it was given."""
    print(terminal_text(f"Q: {args.question}  ({args.item or 'all products'})"))
    if args.stream:
        print("A: ", end="", flush=True)
    stream = (lambda chunk: print(terminal_text(chunk.content), end="", flush=True)) if args.stream else None
    result = pipeline.run(args.question, item_id=args.item, split=args.split, top_k=args.top_k, streaming_callback=stream, filters=args.filter)
    answer = result["answers"][0]
    meta, timings = answer.meta, result["timings"]
    if args.stream:
        print()
    if "withheld" in meta:  # the grounding check: the reviews cited do not say what was generated
        print(terminal_text(f"A (generated, withheld): {meta['withheld']['text']}\n   Withheld: {meta['withheld']['reason']}. The extractive answers instead:"))
        _print_spans(result["answers"], args)
        return
    if answer.data is None:
        print(terminal_text(f"A: [no answer in these reviews: {meta['no_answer_reason']}]"))
    elif not args.stream:
        print(terminal_text(f"A: {answer.data}"))
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
            # shorten needs room for its " ..." placeholder: --context 0 still shows a stub of each review.
            snippet = textwrap.shorten(terminal_text(document.content or ""), width=max(2 * args.context, 10), placeholder=" ...")
            print(terminal_text(f"[{document.meta['source_index']}] {document_label(document)}  ({document.meta.get('item_id')})"))
            print(textwrap.indent(textwrap.fill(snippet, width=100), "    "))



def register(commands, options: Options) -> None:
    """Add `search` and `ask` to the command line."""
    p = commands.add_parser("search", parents=[options.common], help="print the reviews a retriever ranks for a question")
    p.add_argument("question", type=text("the question"))
    options.domain(p)
    options.collection(p)
    p.add_argument("--item", type=text("the item id"), help=f"product (item_id) to search, e.g. {DEFAULT_ITEM}")
    p.add_argument("--split", help="only reviews of this split")
    p.add_argument("--filter", type=filter_json, help=FILTER_HELP)
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--rerank", action="store_true", help="re-rank the reviews by the reader's answerability (fitted by fit-fusion --rerank)")
    p.add_argument("--top-k", type=depth("--top-k"), default=3)
    p.add_argument("--width", type=count("--width", 3), default=400, help="characters of each review to print")
    p.set_defaults(func=cmd_search)

    p = commands.add_parser("ask", parents=[options.common, options.generation], help="answer a question about a product from its reviews")
    p.add_argument("question", type=text("the question"))
    options.domain(p)
    options.collection(p)
    p.add_argument("--item", type=text("the item id"), help=f"product (item_id) to ask about, e.g. {DEFAULT_ITEM}")
    p.add_argument("--split", help="only reviews of this split")
    p.add_argument("--filter", type=filter_json, help=FILTER_HELP)
    p.add_argument("--mode", choices=["extractive", "rag"], default="extractive", help="answer stage: extracted span, or generated answer citing the reviews")
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--rerank", action="store_true", help="re-rank the reviews by the reader's answerability before answering")
    p.add_argument("--top-k", type=depth("--top-k"), default=3, help="reviews to retrieve")
    p.add_argument("--answers", type=count("--answers"), default=3, help="answers to show (extractive)")
    p.add_argument("--no-answer-threshold", type=number("--no-answer-threshold"), help="logit margin an answer needs over 'no answer' (default: tuned; extractive)")
    p.add_argument("--context", type=count("--context", 0), default=150, help="characters of review shown around each answer (rag: half the snippet of each review)")
    p.add_argument("--stream", action="store_true", help="print the generated answer as it is written (rag)")
    p.add_argument("--url", help="ask a running `qa-system api` at this URL (e.g. http://127.0.0.1:8000; QA_API_TOKEN is sent) instead of loading the models here")
    p.set_defaults(func=cmd_ask)

    p = commands.add_parser("shell", parents=[options.common, options.generation], help="answer questions typed line by line, the models loaded once")
    options.domain(p)
    options.collection(p)
    p.add_argument("--item", type=text("the item id"), help=f"product (item_id) to ask about first, e.g. {DEFAULT_ITEM} (':item ID' changes it)")
    p.add_argument("--mode", choices=["extractive", "rag"], default="extractive")
    p.add_argument("--retriever", choices=RETRIEVERS)
    p.add_argument("--top-k", type=depth("--top-k"), default=3, help="reviews to retrieve")
    p.add_argument("--answers", type=count("--answers"), default=3, help="answers to show (extractive)")
    p.add_argument("--no-answer-threshold", type=number("--no-answer-threshold"))
    p.add_argument("--context", type=count("--context", 0), default=150, help="characters of review shown around each answer")
    p.add_argument("--url", help="ask a running `qa-system api` at this URL instead of loading the models here")
    p.set_defaults(func=cmd_shell, split=None, rerank=False)
