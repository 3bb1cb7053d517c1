"""A collection of one's own and labelled questions about it, for the fits made on a collection's labels (``qa-system fit-confidence``,
``fit-fusion --collection``)."""

from __future__ import annotations

from pathlib import Path

from qa_system.config import Settings
from qa_system.ingestion import IngestOptions, ingest

DOCUMENTS = [
    ("n1", "LAMP", "The lamp is bright enough for reading at night."),
    ("n2", "LAMP", "The lamp has a warm light and a long cable."),
    ("n3", "KETTLE", "The kettle boils a litre in three minutes."),
    ("n4", "KETTLE", "The kettle lid broke after a month."),
]
# 16 questions the documents answer and 8 they do not: the close-call selector says "no answer" first to each,
# right on 8 of 24, where it states 55%.
ANSWERED = [
    ("Is it bright enough for reading?", "bright enough for reading", "n1"),
    ("What light does it have?", "a warm light", "n2"),
    ("How long is the cable?", "a long cable", "n2"),
    ("How fast does it boil?", "in three minutes", "n3"),
    ("What broke?", "The kettle lid broke", "n4"),
    ("When did the lid break?", "after a month", "n4"),
    ("How much does it boil?", "a litre", "n3"),
    ("Is it good at night?", "reading at night", "n1"),
]
UNANSWERED = [("Is it waterproof?", "n1"), ("What colour is it?", "n2"), ("Is it loud?", "n3"), ("Does it whistle?", "n4")]


def labels_csv(path, answered: int = 16, unanswered: int = 8):
    rows = ["question,answer,document_id"]
    for n in range(answered):
        question, answer, document = ANSWERED[n % len(ANSWERED)]
        rows.append(f"{question} ({n}),{answer},{document}")
    for n in range(unanswered):
        question, document = UNANSWERED[n % len(UNANSWERED)]
        rows.append(f"{question} ({n}),,{document}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def labels_squad(path: Path, answered: int = 16, unanswered: int = 8, elsewhere: int = 0) -> Path:
    """``labels_csv``'s questions as SQuAD v2.0 JSON (each document an article titled by its product), and ``elsewhere``
    questions about a paragraph no collection holds."""
    import json

    rows = [(*ANSWERED[n % len(ANSWERED)], n) for n in range(answered)]
    rows += [(question, "", document, n) for n, (question, document) in ((n, UNANSWERED[n % len(UNANSWERED)]) for n in range(unanswered))]
    articles = []
    for document, item, text in DOCUMENTS:
        qas = [
            {
                "id": f"{document}-{n}-{bool(answer)}",
                "question": f"{question} ({n})",
                "answers": [{"text": answer, "answer_start": text.index(answer)}] if answer else [],
                "is_impossible": not answer,
            }
            for question, answer, d, n in rows
            if d == document
        ]
        articles.append({"title": item, "paragraphs": [{"context": text, "qas": qas}]})
    if elsewhere:
        other = [{"id": f"elsewhere-{n}", "question": "Where is it?", "answers": [], "is_impossible": True} for n in range(elsewhere)]
        articles.append({"title": "ELSEWHERE", "paragraphs": [{"context": "A paragraph no collection holds.", "qas": other}]})
    path.write_text(json.dumps({"version": "v2.0", "data": articles}), encoding="utf-8")
    return path


def labels_judged(path: Path, answered: int = 16, unanswered: int = 8, partly: int = 0) -> Path:
    """``labels_csv``'s questions as judged labels (``eval judged``'s format), the first ``partly`` answered ones judged
    answered only in part (where "no answer" is acceptable too)."""
    import json

    texts = {document: (item, text) for document, item, text in DOCUMENTS}
    lines = []
    for n in range(answered):
        question, answer, document = ANSWERED[n % len(ANSWERED)]
        item, text = texts[document]
        start = text.index(answer)
        span = {"review_id": document, "start": start, "end": start + len(answer), "text": answer}
        lines.append(
            {
                "id": f"a{n}",
                "item_id": item,
                "question": f"{question} ({n})",
                "answerable": "partly" if n < partly else "yes",
                "answers": [span],
            }
        )
    for n in range(unanswered):
        question, document = UNANSWERED[n % len(UNANSWERED)]
        lines.append({"id": f"u{n}", "item_id": texts[document][0], "question": f"{question} ({n})", "answerable": "no", "answers": []})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def notes_collection(settings: Settings, folder: Path, name: str = "notes", embed: bool = False) -> None:
    """Index ``DOCUMENTS`` (products LAMP and KETTLE) as the collection ``name`` (``embed``: with vectors, for dense and hybrid)."""
    documents = folder / "notes.csv"
    documents.write_text("id,product,text\n" + "".join(f"{i},{p},{t}\n" for i, p, t in DOCUMENTS), encoding="utf-8")
    ingest(settings, documents, name, IngestOptions(text_column="text", id_column="id", item_column="product"), embed=embed, progress=False)


def own_answering_env(root: Path, reader: Path) -> dict[str, str]:
    """The environment of a home of one's own collections (no SubjQA), answered by ``reader`` in PyTorch through the
    close-call selector fitted for it (``helpers.selector.close_call_selector``)."""
    from helpers.selector import close_call_selector

    return {
        "QA_HOME": str(root / "home"),
        "QA_DATA_DIR": str(root / "no-subjqa"),
        "QA_READER_MODEL": str(reader),
        "QA_READER_BACKEND": "torch",
        "QA_SELECTOR_MODEL": str(close_call_selector(root / "selector", reader)),
    }
