"""Your own labels -> ``LabelledQuestion``s for `qa-system eval ... --labels FILE`.

* CSV (``question,answer,document_id[,item_id]``): rows naming the same question and document are
  one question with several answers; an empty answer means "no answer in this document". The
  documents are the collection's (by id), so a collection is needed.
* SQuAD v1.1 / v2.0 JSON or MRQA JSON lines (``sources.qa_files.read_qa_file``: the format comes
  from the content): each context is matched to the collection's document with the same text (a
  context that is in none is skipped and counted). Without a collection every context is its own
  gold document (``qa_files.labelled_questions``), which evaluates the reader on the file itself.
* Judged labels (``evaluation.judged``: whether the documents answer, every acceptable span) are told
  apart by their first line and sent to `qa-system eval judged`.

Answer offsets are located in the document's text (put back together from its passages); an
answer that is not found there keeps its text (EM / F1 compare texts) and is counted.
"""

from __future__ import annotations

import csv
import json
import unicodedata
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from qa_system.config import Settings
from qa_system.errors import QAError, shown
from qa_system.ingestion.collections import is_reserved_name, open_collection
from qa_system.ingestion.splitting import source_text
from qa_system.sources import GoldAnswer, LabelledQuestion, load_subjqa
from qa_system.sources.qa_files import labelled_questions, read_qa_file
from qa_system.sources.tables import header_delimiter, repeated_names
from qa_system.stores import Index

CSV_COLUMNS = ("question", "answer", "document_id")


@dataclass
class Labels:
    """Your labelled questions read from a file, and the collection they are asked over (None: each question's own context)."""

    questions: list[LabelledQuestion]
    path: Path
    collection: str | None  # None: each question's own context is its document
    format: str  # "CSV", "SQuAD v2.0", "MRQA", ...
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        """The labels as a report names them: the file, its format and the collection."""
        return f"{self.path.name} ({self.format})" + (f" on collection '{self.collection}'" if self.collection else "")


@dataclass(frozen=True)
class _Document:
    text: str
    item_id: str | None


def collection_documents(settings: Settings, collection: str) -> dict[str, _Document]:
    """The collection's documents by id, each put back together from its passages."""
    passages = defaultdict(list)
    for passage in open_collection(settings, collection).store.filter_documents():
        passages[passage.meta.get("document_id", passage.id)].append(passage)
    return {i: _Document(source_text(parts), parts[0].meta.get("item_id")) for i, parts in passages.items()}


def _question(
    qid: str, question: str, document_id: str, document: _Document, answers: list[str], domain: str
) -> tuple[LabelledQuestion, list[str]]:
    """The labelled question, and its answers that are not in the document's text."""
    located, missing = [], []
    for text in dict.fromkeys(a for a in answers if a.strip()):
        start = document.text.find(text)
        if start < 0:
            missing.append(text)
        located.append(GoldAnswer(text, start if start >= 0 else None))
    labelled = LabelledQuestion(
        id=qid,
        question=question,
        item_id=document.item_id,
        review_id=document_id,
        document_id=document_id,
        domain=domain,
        split=None,
        answers=located,
        is_subjective=False,
        context=document.text,
    )
    return labelled, missing


def _check_item(item_id: str | None, document: _Document, document_id: str, where: str) -> None:
    """A label's ``item_id``, when given, must be its document's product (as stored, or in another Unicode form):
    a question asked of another product would never find its document, and score 0 without a word."""
    if not item_id or (document.item_id is not None and _same_id(item_id, document.item_id)):
        return
    if document.item_id is None:
        raise QAError(
            f"{where}: item_id '{shown(item_id)}' is given, but document '{shown(document_id)}' belongs to no product.",
            "leave item_id empty.",
        )
    raise QAError(
        f"{where}: item_id '{shown(item_id)}' is not the product of document '{shown(document_id)}' ('{shown(document.item_id)}').",
        "leave item_id empty (the document's product is used), or write its product as `qa-system products` lists it.",
    )


def _same_id(given: str, stored: str) -> bool:
    return unicodedata.normalize("NFC", given.strip()) == unicodedata.normalize("NFC", stored.strip())


def _csv_labels(path: Path, documents: dict[str, _Document], collection: str) -> tuple[list[LabelledQuestion], list[str], int]:
    """The questions of a CSV labels file, what says which of their answers are not in their document's text
    (``_not_found``), and how many rows had no question."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            header = handle.readline()
            handle.seek(0)
            reader = csv.DictReader(handle, delimiter=header_delimiter(header))  # a European spreadsheet's ";" too
            columns = [c.strip() for c in reader.fieldnames or []]
            if repeated := repeated_names(columns):  # a row's values would go to one of them, unsaid
                raise QAError(
                    f"{path} repeats the column name(s) {', '.join(repeated)}.", "give every column a unique name in the header row."
                )
            missing = [c for c in CSV_COLUMNS if c not in columns]
            if missing:
                raise QAError(
                    f"{path} has no column(s) {', '.join(missing)}; its columns are: {', '.join(columns) or '(none)'}.",
                    "write a header row: question,answer,document_id[,item_id].",
                )
            grouped: dict[tuple[str, str], dict] = {}
            # A SubjQA review is stored as "<domain>/<review_id>", and shown (search, the page) by its review id: either names it.
            reviews = {i.split("/", 1)[1]: i for i in documents if "/" in i} if is_reserved_name(collection) else {}
            blank = 0
            for row in reader:
                if None in row:  # more fields than the header names: one of them was a text holding a comma, unquoted
                    raise QAError(
                        f"{path} line {reader.line_num}: the row has {len(columns) + len(row[None])} fields where the header has {len(columns)}.",
                        'quote a field that holds a comma ("It is big, but light") or remove the extra fields.',
                    )
                row = {k.strip(): (v or "").strip() for k, v in row.items()}
                if not row.get("question"):
                    blank += any(row.values())  # a row of nothing at all is no row
                    continue
                document_id = reviews.get(row["document_id"], row["document_id"])
                if document_id not in documents:
                    raise QAError(
                        f"{path} line {reader.line_num}: document '{document_id}' is not in collection '{collection}'.",
                        "use the ids of the collection's documents (its --id-column values; `qa-system search --collection` shows them).",
                    )
                _check_item(row.get("item_id"), documents[document_id], document_id, f"{path} line {reader.line_num}")
                entry = grouped.setdefault((row["question"], document_id), {"id": f"{path.stem}-{reader.line_num}", "answers": []})
                entry["answers"].append(row["answer"])
    except UnicodeDecodeError as error:
        raise QAError(f"{path} is not UTF-8 text ({error.reason}).", "re-save the labels file as UTF-8.") from None
    except csv.Error as error:
        raise QAError(f"{path} is not readable CSV ({error}).", "repair the file (quote fields holding commas).") from None
    questions, missing = [], []
    for (question, document_id), entry in grouped.items():
        labelled, absent = _question(entry["id"], question, document_id, documents[document_id], entry["answers"], collection)
        questions.append(labelled)
        missing += _not_found(labelled, absent)
    return questions, missing, blank


def _not_found(question: LabelledQuestion, answers: list[str]) -> list[str]:
    """Each of ``answers`` that is not in the text of ``question``'s document, named with the question's id and text."""
    return [f"'{shown(answer, 60)}' ({question.id}: '{shown(question.question, 60)}')" for answer in answers]


def load_labels(path: str | Path, settings: Settings | None = None, collection: str | None = None) -> Labels:
    """The labelled questions of ``path`` (CSV, SQuAD JSON or MRQA JSON lines), their gold documents taken from
    ``collection``, or without one (SQuAD / MRQA) each question's own context."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise QAError(
            f"The labels {path} are a folder, not a file.", "pass one labels file to --labels (CSV, SQuAD JSON or MRQA JSON lines)."
        )
    if not path.is_file():
        raise QAError(
            f"The labels file {path} does not exist.",
            "pass a CSV (question,answer,document_id[,item_id]), SQuAD JSON or MRQA JSON lines file to --labels.",
        )
    if is_judged_file(path):
        raise QAError(
            f"{path} holds judged labels (whether the documents answer each question, and its acceptable spans).",
            f"evaluate them with `qa-system eval judged --labels {path}` (with --collection NAME for a collection of your own).",
        )
    documents = collection_documents(settings or Settings.from_env(), collection) if collection else None
    notes, missing, unread = [], [], ""
    if path.suffix.lower() == ".csv":
        if documents is None:
            raise QAError(
                "CSV labels name their documents by id, so they need a collection.",
                "add --collection NAME (the collection those ids are in).",
            )
        questions, missing, blank = _csv_labels(path, documents, collection)
        file_format = "CSV"
        if blank:
            notes.append(
                f"{path.name}: {blank} {'row' if blank == 1 else 'rows'} without a question {'was' if blank == 1 else 'were'} left out."
            )
    else:
        examples, report = read_qa_file(path)
        file_format = report.format
        if report.skipped_questions or report.unlocated_answers:
            unread = f"{report.unlocated_answers} answers not at their given offsets and {report.skipped_questions} questions left without one were left out"
            first = f" (the first: {report.problems[0]})" if report.problems else ""
            notes.append(f"{path.name}: {unread}{first}.")
        if documents is None:
            questions = labelled_questions(examples, path.name)
        else:
            by_text = {document.text: i for i, document in documents.items()}
            questions, unmatched = [], 0
            for example in examples:
                if example.context not in by_text:
                    unmatched += 1
                    continue
                document_id = by_text[example.context]
                labelled, absent = _question(
                    example.id, example.question, document_id, documents[document_id], [text for text, _ in example.answers], collection
                )
                questions.append(labelled)
                missing += _not_found(labelled, absent)
            if unmatched:
                notes.append(f"{unmatched} questions whose context is no document of collection '{collection}' were left out.")
    if not questions:
        if file_format == "CSV":  # a row naming a document the collection lacks was refused already
            rows = f" ({blank} {'row' if blank == 1 else 'rows'} without a question)" if blank else ""
            raise QAError(
                f"{path} holds no labelled question{rows}.", "write one question a row under the header question,answer,document_id."
            )
        if collection is None:
            raise QAError(
                f"{path} holds no labelled question that can be read{f' ({unread})' if unread else ''}.",
                "check the file's answers and their answer_start offsets.",
            )
        raise QAError(
            f"{path} holds no labelled question whose document is in collection '{collection}'.",
            f"index the labelled documents first (`qa-system index --input {path} --collection {collection}`), or check the file.",
        )
    if missing:
        one = len(missing) == 1
        notes.append(
            f"{len(missing)} {'answer is' if one else 'answers are'} not found in {'its' if one else 'their'} document's text "
            f"({'it still counts' if one else 'they still count'}, as text): {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}."
        )
    return Labels(questions, path, collection, file_format, notes)


def is_judged_file(path: str | Path) -> bool:
    """Whether ``path`` holds judged labels (``evaluation.judged``): JSON lines whose first question says whether the
    documents answer it. Only the first line is read, and only its first megabyte (a SQuAD file is one long line)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            line = next((line for line in iter(lambda: file.readline(1_000_000), "") if line.strip()), "")
        row = json.loads(line)
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(row, dict) and "answerable" in row and "question" in row


def evaluation_questions(
    settings: Settings, domain: str, split: str, labels: Labels | None = None, limit: int | None = None
) -> tuple[list[LabelledQuestion], str, dict]:
    """What an evaluation asks: the first ``limit`` questions of ``labels`` (your own), else of SubjQA's ``domain``
    ``split``; what they are, for a report's title; and where they come from, for its summary."""
    if labels is not None:
        if not isinstance(labels, Labels):  # a path, from Python
            raise QAError(
                f"labels is a {type(labels).__name__} ({shown(str(labels))}), not labels read from a file.",
                "pass qa_system.load_labels(path, settings, collection), which reads and checks the file.",
            )
        return (
            labels.questions[:limit],
            labels.title,
            {"labels": str(labels.path), "format": labels.format, "collection": labels.collection},
        )
    return load_subjqa(domain, split, settings.data_dir).questions[:limit], f"SubjQA {domain} {split}", {"domain": domain, "split": split}


def labels_index(settings: Settings, labels: Labels, embeddings: bool = False) -> Index:
    """The collection that holds the documents of ``labels``: what a retriever searches when they are evaluated."""
    if labels.collection is None:
        raise QAError(
            f"{labels.path} was read without a collection, so there are no documents to retrieve from.",
            "load it with the collection that holds its documents (`--collection NAME`; load_labels(path, settings, collection)).",
        )
    return open_collection(settings, labels.collection, embeddings=embeddings, progress=False)


def evaluation_index(settings: Settings, domain: str, labels: Labels | None, embeddings: bool, progress: bool = True) -> Index:
    """What an evaluation retrieves from: the collection of ``labels``, else the SubjQA domain's index
    (built on first use); the index beside ``evaluation_questions``."""
    from qa_system.ingestion.indexing import open_or_build_index

    if labels is not None:
        return labels_index(settings, labels, embeddings)
    return open_or_build_index(settings, domain, embeddings=embeddings, progress=progress)
