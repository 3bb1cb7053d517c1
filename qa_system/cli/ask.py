"""`qa-system search | ask | shell`: the reviews a retriever ranks, and the answers read or generated from them
(``ask --url`` and ``shell`` from a service whose models are loaded once)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from html import unescape

from qa_system.cli.options import DEFAULT_ITEM, Options, count, depth, number, open_index_for, settings_from_args
from qa_system.config import RETRIEVERS, TOP_K_READER, TOP_K_RETRIEVER
from qa_system.errors import QAError, check_question_text, check_text, shown
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
    from qa_system.serving.answer_views import no_documents_note
    from qa_system.sources import split_names
    from qa_system.sources.records import user_metadata

    settings = settings_from_args(args)
    index = open_index_for(args, settings, embeddings=args.retriever != "bm25")
    pipeline = build_retrieval_pipeline(args.retriever, settings, index=index, rerank=args.rerank)
    result = pipeline.run(args.question, item_id=args.item, split=args.split, top_k=args.top_k, filters=args.filter)
    documents = result["documents"]
    name = args.retriever + (" + re-ranking" if args.rerank else "")
    noun = singular(noun_read(documents, args))
    print(
        terminal_text(
            f"{len(documents)} {noun}(s) for {asked_about(args.item, args)} ({name}, {1000 * result['timings']['retrieval_s']:.0f} ms)"
        )
    )
    if not documents:  # why, as `ask` says it
        print(terminal_text(no_documents_note(noun_read(documents, args), **result["nothing_read"])))
    for rank, document in enumerate(documents, 1):
        meta = document.meta
        snippet = textwrap.shorten(terminal_text(document.content or ""), width=args.width, placeholder=" ...")
        splits = " + ".join(split_names(document))
        own = ", ".join(f"{key} {value}" for key, value in user_metadata(meta).items())  # the source's columns: rating, date, ...
        about = ", ".join(filter(None, (meta.get("item_id"), splits)))  # a collection without products names none
        details = "; ".join(filter(None, (about, own)))
        line = f"{rank}. score {document.score:.3f}  {document_label(document)}" + (f"  ({details})" if details else "")
        # One line whatever the ids and metadata hold: a line break in them would print a result line of their own making.
        print("\n" + terminal_text(line, newlines=False))
        print(textwrap.indent(textwrap.fill(snippet, width=100), "   "))


def collection_noun(args: argparse.Namespace) -> str:
    """What the collection asked holds, where nothing read says: SubjQA's domains reviews, a collection of your own documents."""
    from qa_system.nouns import DOCUMENTS, REVIEWS

    subjqa = getattr(args, "subjqa_domain", None)  # the shell's: its collection is named even for a SubjQA domain
    return (REVIEWS if subjqa else DOCUMENTS) if subjqa is not None else DOCUMENTS if getattr(args, "collection", None) else REVIEWS


def asked_about(item: str | None, args: argparse.Namespace) -> str:
    """What a question was asked about: its item, else all the products of SubjQA's reviews or all of a collection's
    documents (``collection_noun``)."""
    from qa_system.nouns import REVIEWS

    return item or ("all products" if collection_noun(args) == REVIEWS else "all documents")


def noun_read(documents, args: argparse.Namespace) -> str:
    """What ``documents`` are: "reviews" for SubjQA's (their meta holds a review_id), "documents" for a collection's
    (``answer_views.noun_of``); what the collection holds (``collection_noun``) when none was read."""
    from qa_system.nouns import noun_of

    return noun_of(documents) or collection_noun(args)


def singular(noun: str) -> str:
    """The noun for one: review, document (``answer_views.singular``)."""
    from qa_system.serving.answer_views import singular as one

    return one(noun)


def document_label(document) -> str:
    """``review R`` for SubjQA, ``document D`` for a collection's (with the passage's offset in it when split)."""
    from qa_system.serving.answer_views import document_label as label

    return label(document.id, document.meta)


def highlight(segments, tty: bool) -> str:
    """A review's ``Segment``s as the page cuts them (``highlight_segments``: whole words, "…" where cut), the answer
    marked: bold yellow on a terminal, **...** otherwise; HTML entities of the stored review decoded in each piece,
    after the offsets did their work (as the page shows it), and the text's own control characters shown as escapes."""
    left, right = ("\033[1;33m", "\033[0m") if tty else ("**", "**")
    marked = []
    for segment in segments:
        piece = terminal_text(unescape(segment.text))
        marked.append(f"{left}{piece}{right}" if segment.highlighted else piece)
    return "".join(marked)


def print_card(card, snippet: str | None = None) -> None:
    """One ``AnswerCard`` as every CLI door prints it: its line, where it came from and in how many documents, the review around it, its note."""
    # A file of a folder is its own product: "document manual.md (manual.md)" named it twice.
    named = card.product and card.product not in (card.source.removeprefix("document ").split(" (")[0], "")
    source = f"  {card.source}" + (f" ({card.product})" if named else "") if card.source else ""
    others = f"  ({card.said_in})" if card.said_in else ""
    print("\n" + terminal_text(f"{card.line}{source}{others}", newlines=False))
    if snippet:
        print(textwrap.indent(snippet, "   "))
    if card.note:
        print(terminal_text(f"   {card.note}"))


def cmd_ask(args: argparse.Namespace) -> None:
    """`qa-system ask`: the answers to a question (spans read from the reviews, or a generated answer with ``--mode rag``), with timings."""
    check_question_text(args.question)  # before any model loads (the pipeline checks it too)
    _check_generation_flags(args)
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
        args.question,
        item_id=args.item,
        split=args.split,
        top_k=args.top_k,
        top_k_reader=args.answers,
        no_answer_threshold=args.no_answer_threshold,
        filters=args.filter,
    )
    timings = result["timings"]
    print(
        terminal_text(
            f"Q: {args.question}  ({asked_about(args.item, args)}; retrieval {1000 * timings['retrieval_s']:.0f} ms, "
            f"reader {1000 * timings['answer_s']:.0f} ms, {result['reader_backend']})"
        )
    )
    _print_spans(result["answers"], args)


def _ask_server(args: argparse.Namespace, token: str | None) -> None:
    """`qa-system ask --url`: the answers of a running `qa-system api` (its models already loaded), printed as `ask` prints its own."""
    from qa_system.serving.answer_views import ELLIPSIS, AnswerCard, Segment, highlight_segments
    from qa_system.serving.client import ask_server, public_url

    body = ask_server(args.url, _question(args), token)
    timings = body["timings"]
    print(
        terminal_text(
            f"Q: {args.question}  ({asked_about(body['item_id'], args)} in {body['collection']}; retrieval {1000 * timings['retrieval_s']:.0f} ms, "
            f"answer {1000 * timings['answer_s']:.0f} ms, queue {1000 * timings.get('queue_s', 0):.0f} ms; {body['pipeline']} at {public_url(args.url)})"
        )
    )
    tty = sys.stdout.isatty()
    _print_withheld(next((a["withheld"] for a in body["answers"] if a.get("withheld")), None))
    for answer in body["answers"]:  # the server's cards: the labels and notes every door shows
        snippet = None
        if answer["kind"] == "span":
            begin = answer["context_start"]
            segments = highlight_segments(answer["context"], [(answer["start"] - begin, answer["end"] - begin)])
            snippet = highlight([Segment(ELLIPSIS), *segments] if begin else segments, tty)
        print_card(AnswerCard.of(answer["card"]), snippet)


def _question(args: argparse.Namespace):
    """The ``Question`` that `ask`'s flags describe, for a server or the in-process service."""
    from qa_system.serving.question import Question

    if args.rerank:
        raise QAError("The service answers without re-ranking.", "leave out --rerank with --url or in the shell.")
    return Question(
        args.question,
        args.item,
        _collection(args),
        retriever=args.retriever,
        mode=args.mode,
        top_k=args.top_k,
        split=args.split,
        top_k_reader=args.answers if args.mode == "extractive" else None,
        no_answer_threshold=args.no_answer_threshold,
        filters=getattr(args, "filter", None),
        all_products=args.item is None,  # no --item: every document, as `ask` reads them
    )


def _collection(args: argparse.Namespace) -> str | None:
    """The collection a server or the in-process service is asked: the one named on purpose (--domain's default is
    cli.main's), else None for the server's default."""
    from qa_system.errors import QAError

    domains = None if getattr(args, "domain_default", False) else args.domain
    if domains and len(domains) > 1:
        raise QAError(
            f"--domain names {len(domains)} domains, and a server answers from one collection.",
            "pass one --domain (or --collection) with --url or in the shell.",
        )
    return args.collection or (domains[0] if domains else None)


def cmd_shell(args: argparse.Namespace) -> None:
    """`qa-system shell`: questions read line by line and answered by one service (or a running API with --url),
    so that only the first pays for loading the models. ``:item ID`` picks the product, ``:quit`` (or end of input) ends."""
    from qa_system.errors import QAError
    from qa_system.serving.client import check_url, public_url

    settings = settings_from_args(args)
    service = None
    if args.url:  # a client of the running server: the models are not even imported
        check_url(args.url)
    else:
        from qa_system.serving.service import QAService, ServedCollection

        names = [ServedCollection(args.collection)] if args.collection else [ServedCollection(d, subjqa_domain=True) for d in args.domain]
        service = QAService(settings, names, any_collection=True)
        args.subjqa_domain = not args.collection
        args.collection, args.domain = service.names[0], None  # the service's own name for its default collection
    print(
        terminal_text(
            f"Ask about {asked_about(args.item, args)} ({public_url(args.url) if args.url else service.names[0]}); ':item ID' picks a product, "
            "':help' lists the commands, ':quit' ends."
        ),
        file=sys.stderr,
    )
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            if line.startswith(":"):  # a command: never asked as a question
                command, _, value = line.partition(" ")
                if command in (":quit", ":q") and not value.strip():
                    break
                _shell_command(command, value.strip(), args, service, settings.api_token)
                continue
            _answer_line(argparse.Namespace(**{**vars(args), "question": check_text(line, "the question")}), service, settings.api_token)
        except QAError as error:  # a bad question or command is one line; the shell goes on
            print(terminal_text(f"error: {error}", newlines=False), file=sys.stderr)


SHELL_COMMANDS = {
    ":item ID": "ask about the product ID from now on (`qa-system products` lists them)",
    ":item": "ask about all products",
    ":help": "list these commands",
    ":quit": "end (so does the end of input)",
}


def _shell_command(command: str, value: str, args: argparse.Namespace, service, token: str | None = None) -> None:
    """One shell command other than a plain ``:quit``: ``:help``, ``:item [ID]`` (checked by ``service``, else by the server at
    ``args.url``, sent ``token``); an unknown one is a QAError listing the known."""
    from qa_system.errors import QAError

    if command in (":quit", ":q", ":help") and value:  # ":quit now" neither ends nor is asked
        raise QAError(f"'{command}' takes nothing after it (it was given '{shown(value, 40)}').", f"type '{command}' alone.")
    if command == ":help":
        width = max(map(len, SHELL_COMMANDS))
        print("\n".join(f"{name.ljust(width)}  {what}" for name, what in SHELL_COMMANDS.items()), file=sys.stderr)
        return
    if command != ":item":
        raise QAError(f"Unknown command '{shown(command, 40)}'.", f"use one of: {', '.join(SHELL_COMMANDS)} (':help' says what each does).")
    item = check_text(value, "the item id") or None
    if item is not None and service is not None:  # named at once, the item before it kept
        from qa_system.pipelines import check_item

        check_item(service.index(args.collection), item)
    elif item is not None:  # the server's products (GET /products), the item before it kept on refusal
        from qa_system.serving.client import check_item_at

        item = check_item_at(args.url, item, _collection(args), token)
    args.item = item
    print(terminal_text(f"Asking about {asked_about(item, args)}."), file=sys.stderr)


def _answer_line(args: argparse.Namespace, service, token: str | None) -> None:
    """One shell question, answered by the server at ``args.url`` or by ``service`` in this process."""
    if service is None:
        _ask_server(args, token)
        return
    result = service.ask(_question(args))
    timings = result["timings"]
    print(
        terminal_text(
            f"Q: {args.question}  ({asked_about(args.item, args)}; retrieval {1000 * timings['retrieval_s']:.0f} ms, "
            f"answer {1000 * timings['answer_s']:.0f} ms; {result['pipeline']})"
        )
    )
    _print_spans(result["answers"], args)


def _print_withheld(withheld: dict | None) -> None:
    if withheld:  # the grounding check: the reviews cited do not say what was generated
        print(
            terminal_text(
                f"A (generated, withheld): {withheld['text']}\n   Withheld: {withheld['reason']}. The extractive answers instead:"
            )
        )


def _print_spans(answers, args: argparse.Namespace) -> None:
    """The answers best first as cards (``answer_cards``: the labels and notes every door shows), each span
    with its review and product, the answer highlighted."""
    from qa_system.serving.answer_views import answer_cards, answer_views, reading_noun

    views = answer_views(answers)
    noun = reading_noun(views, collection_noun(args))  # what was read, or what the collection holds where nothing was
    tty = sys.stdout.isatty()
    _print_withheld(next((v.withheld for v in views if v.withheld), None))
    for view, card in zip(views, answer_cards(views, noun)):
        snippet = None
        if view.kind == "span":
            snippet = highlight(view.segments(args.context), tty)
        print_card(card, snippet)


GENERATION_FLAGS = ("generator", "model", "base_url", "max_new_tokens", "temperature", "num_beams", "stream")


def _check_generation_flags(args: argparse.Namespace) -> None:
    """Generation flags without ``--mode rag`` would be ignored while the reader answers: refused, saying so."""
    given = [f"--{name.replace('_', '-')}" for name in GENERATION_FLAGS if getattr(args, name, None) not in (None, False)]
    if args.mode != "rag" and given:
        one = len(given) == 1
        raise QAError(
            f"{', '.join(given)} set{'s' if one else ''} how an answer is generated.",
            f"add --mode rag, or leave {'it' if one else 'them'} out.",
        )


# The label of an answer streamed as it is written: the grounding check may still withhold it.
STREAM_LABEL = "Generated (checked once written)"


def _ask_rag(pipeline, args: argparse.Namespace) -> None:
    """The generated answer (streamed with --stream), then the reviews it cites and the others it was given."""
    print(terminal_text(f"Q: {args.question}  ({asked_about(args.item, args)})"))
    if args.stream:  # provisional until the grounding check has read it: said so before the first word
        print(f"{STREAM_LABEL}: ", end="", flush=True)
    stream = (lambda chunk: print(terminal_text(chunk.content), end="", flush=True)) if args.stream else None
    try:
        result = pipeline.run(
            args.question, item_id=args.item, split=args.split, top_k=args.top_k, streaming_callback=stream, filters=args.filter
        )
    finally:
        if args.stream:  # the streamed line ends, also before an error
            print()
    answer = result["answers"][0]
    meta, timings = answer.meta, result["timings"]
    if "withheld" in meta:
        _print_spans(result["answers"], args)
        return
    noun = noun_read(answer.documents, args)
    if answer.data is None:
        print(terminal_text(f"A: [no answer in these {noun}: {meta['no_answer_reason']}]"))
    elif not args.stream:
        print(terminal_text(f"A: {unescape(answer.data)}"))
    else:
        print(f"   Checked: the {noun} it {'cites' if meta.get('cited_document_ids') else 'was given'} say it.")
    if meta.get("flags"):  # the grounding check's: it cites no review, it repeated itself
        from qa_system.serving.answer_views import answer_cards, answer_views

        print(terminal_text(f"   {answer_cards(answer_views([answer]), noun)[0].note}"))
    tokens = meta["usage"].get("completion_tokens")
    speed = f", {tokens / timings['generator']:.1f} tokens/s" if tokens and timings.get("generator") else ""
    print(
        f"   (retrieval {1000 * timings['retrieval_s']:.0f} ms, prompt {1000 * timings.get('prompt_builder', 0):.0f} ms, "
        f"generation {timings.get('generator', 0):.1f} s{speed})"
    )
    prompt = meta["prompt"]
    if prompt.get("truncated"):
        shortened = ", ".join(f"[{n}]" for n in prompt["truncated_reviews"]) or "none"
        print(
            f"   (prompt cut to {prompt['budget_tokens']} tokens: {noun} shortened {shortened}; {len(prompt['dropped_document_ids'])} dropped)"
        )
    for heading, cited in ((f"Cited {noun}", True), ("Also given", False)):
        documents = [d for d in answer.documents if d.meta["referenced"] is cited]
        if documents:
            print(f"\n{heading}:")
        for document in documents:
            # shorten needs room for its " ..." placeholder: --context 0 still shows a stub of each review.
            snippet = textwrap.shorten(terminal_text(document.content or ""), width=max(2 * args.context, 10), placeholder=" ...")
            product = f"  ({document.meta['item_id']})" if document.meta.get("item_id") else ""
            print(terminal_text(f"[{document.meta['source_index']}] {document_label(document)}{product}", newlines=False))
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
    p.add_argument(
        "--rerank", action="store_true", help="re-rank the reviews by the reader's answerability (fitted by fit-fusion --rerank)"
    )
    p.add_argument("--top-k", type=depth("--top-k"), help=f"reviews to retrieve (default: QA_TOP_K_RETRIEVER, {TOP_K_RETRIEVER})")
    p.add_argument("--width", type=count("--width", 3), default=400, help="characters of each review to print")
    p.set_defaults(func=cmd_search)

    p = commands.add_parser("ask", parents=[options.common, options.generation], help="answer a question about a product from its reviews")
    p.add_argument("question", type=text("the question"))
    options.domain(p)
    options.collection(p)
    p.add_argument("--item", type=text("the item id"), help=f"product (item_id) to ask about, e.g. {DEFAULT_ITEM}")
    p.add_argument("--split", help="only reviews of this split")
    p.add_argument("--filter", type=filter_json, help=FILTER_HELP)
    p.add_argument(
        "--mode",
        choices=["extractive", "rag"],
        default="extractive",
        help="answer stage: extracted span, or generated answer citing the reviews",
    )
    p.add_argument("--retriever", choices=RETRIEVERS, default="bm25")
    p.add_argument("--rerank", action="store_true", help="re-rank the reviews by the reader's answerability before answering")
    p.add_argument("--top-k", type=depth("--top-k"), help=f"reviews to retrieve (default: QA_TOP_K_RETRIEVER, {TOP_K_RETRIEVER})")
    p.add_argument("--answers", type=count("--answers"), help=f"answers to show (extractive; default: QA_TOP_K_READER, {TOP_K_READER})")
    p.add_argument(
        "--no-answer-threshold",
        type=number("--no-answer-threshold"),
        help="logit margin an answer needs over 'no answer' (default: tuned; extractive)",
    )
    p.add_argument(
        "--context",
        type=count("--context", 0),
        default=150,
        help="characters of review shown around each answer (rag: half the snippet of each review)",
    )
    p.add_argument("--stream", action="store_true", help="print the generated answer as it is written (rag)")
    p.add_argument(
        "--url",
        help="ask a running `qa-system api` at this URL (e.g. http://127.0.0.1:8000; QA_API_TOKEN is sent) instead of loading the models here",
    )
    p.set_defaults(func=cmd_ask)

    p = commands.add_parser(
        "shell", parents=[options.common, options.generation], help="answer questions typed line by line, the models loaded once"
    )
    options.domain(p)
    options.collection(p)
    p.add_argument(
        "--item", type=text("the item id"), help=f"product (item_id) to ask about first, e.g. {DEFAULT_ITEM} (':item ID' changes it)"
    )
    p.add_argument("--mode", choices=["extractive", "rag"], default="extractive")
    p.add_argument("--retriever", choices=RETRIEVERS)
    p.add_argument("--top-k", type=depth("--top-k"), help=f"reviews to retrieve (default: QA_TOP_K_RETRIEVER, {TOP_K_RETRIEVER})")
    p.add_argument("--answers", type=count("--answers"), help=f"answers to show (extractive; default: QA_TOP_K_READER, {TOP_K_READER})")
    p.add_argument("--no-answer-threshold", type=number("--no-answer-threshold"))
    p.add_argument("--context", type=count("--context", 0), default=150, help="characters of review shown around each answer")
    p.add_argument("--url", help="ask a running `qa-system api` at this URL instead of loading the models here")
    p.set_defaults(func=cmd_shell, split=None, rerank=False)
