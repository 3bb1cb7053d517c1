"""SubjQA loading: the original CSV distribution (or the published hub dataset) -> documents + questions.

SubjQA's CSVs hold one row per *annotation*. We turn them into

* one Haystack ``Document`` per review, with the trailing `` ANSWERNOTFOUND`` token removed; a
  review can occur in several splits (electronics: 258 of 1,615 reviews), so its ``split`` meta
  lists them all (``["dev", "test"]``, in ``SPLITS`` order), and a split filter finds it under each
  (``qa_system.stores.meta_filters``);
* one ``LabelledQuestion`` per ``q_review_id`` with all of its annotated answers.

Answer offsets are verified against the cleaned review. The annotated span texts are
PTB-tokenised (``do n't``, ``$ 750``) while the review is not, so a span whose characters match
the review once whitespace is ignored is *repaired* to the review's own text and offset. Spans
that still cannot be located (annotators dropped words from the middle of a span) keep their text
with ``start=None``: the text still counts for EM/F1, training skips them, and the load report
counts and lists them.
"""

from __future__ import annotations

import ast
import csv
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from haystack import Document

from qa_system.errors import QAError

NO_ANSWER_TOKEN = "ANSWERNOTFOUND"
SPLITS = ("train", "dev", "test")
REQUIRED_COLUMNS = (
    "item_id",
    "domain",
    "q_review_id",
    "question",
    "is_ques_subjective",
    "review_id",
    "review",
    "human_ans_spans",
    "human_ans_indices",
)
HUB_DATASET = "subjqa"


@dataclass(frozen=True)
class GoldAnswer:
    """One annotated answer span: its text, and where it starts in the cleaned review (None when it could not be located)."""

    text: str
    # Character offset in the cleaned review; None when the annotation could not be located.
    start: int | None

    @property
    def end(self) -> int | None:
        """The character offset just past the answer in the review; None when it was not located."""
        return None if self.start is None else self.start + len(self.text)


@dataclass
class LabelledQuestion:
    """A SubjQA question about one review, with every answer its annotators marked (none: unanswerable).

    ``document_id`` is the id of the review's ``Document`` in the index; ``context`` the cleaned review.
    """

    id: str
    question: str
    item_id: str
    review_id: str
    document_id: str
    domain: str
    split: str
    answers: list[GoldAnswer]
    is_subjective: bool
    context: str = field(repr=False, default="")
    # The published `subjqa` dataset (which the reference chapter used) keeps a question's spans only
    # when its *first* annotation is a span: 198 of electronics test's 358 questions have no answers
    # there, against 120 with no span at all. Only the chapter's recall definition uses this.
    first_annotation_no_answer: bool = False
    # Each annotation as marked, in file order ("" = no answer here): how far annotators agree
    # (``evaluation.annotators``). Empty for labels without one row per annotation.
    annotations: list[str] = field(default_factory=list)

    @property
    def no_answer(self) -> bool:
        """True when no annotator selected a span (every annotation was ANSWERNOTFOUND)."""
        return not self.answers

    @property
    def chapter_no_answer(self) -> bool:
        """Unanswerable as the published dataset, and so the reference chapter, labels it."""
        return self.no_answer or self.first_annotation_no_answer

    @property
    def answer_texts(self) -> list[str]:
        """Gold texts as the SQuAD v2 script sees them: the spans, or [""] for an unanswerable question."""
        return [a.text for a in self.answers] or [""]

    @property
    def located_answers(self) -> list[GoldAnswer]:
        """The answers whose offsets were found in the review (what training learns from)."""
        return [a for a in self.answers if a.start is not None]


def gold_document(question: LabelledQuestion) -> Document:
    """The labelled review as the index holds it (same id and content; of its splits, the question's)."""
    meta = {"item_id": question.item_id, "review_id": question.review_id, "domain": question.domain, "split": [question.split]}
    return Document(id=question.document_id, content=question.context, meta=meta)


@dataclass
class LoadReport:
    """What loading SubjQA found: the rows read, how each answer's offset was located, and each split's size."""

    rows: int = 0
    answers: Counter = field(default_factory=Counter)  # exact / repaired / unlocated
    unlocated: list[tuple[str, str]] = field(default_factory=list)  # (question id, span text)
    splits: dict[str, dict[str, int]] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for people: questions and reviews per split, and how many answer offsets were exact, repaired or not found."""
        per_split = ", ".join(f"{s}: {c['questions']} questions / {c['documents']} reviews" for s, c in self.splits.items())
        a = self.answers
        return (
            f"{per_split}; answer offsets: {a['exact']} exact, {a['repaired']} repaired "
            f"(tokenisation spaces), {a['unlocated']} not locatable in the review (kept as text only)"
        )

    def as_dict(self) -> dict:
        """The report as JSON-ready data (for index manifests and reports)."""
        return {"rows": self.rows, "answers": dict(self.answers), "unlocated": self.unlocated, "splits": self.splits}


@dataclass
class SubjQA:
    """The documents (one per review) and labelled questions of one or more domains, with the load report."""

    documents: list[Document]
    questions: list[LabelledQuestion]
    report: LoadReport

    def questions_for(self, split: str) -> list[LabelledQuestion]:
        """The questions of one split (``train``, ``dev`` or ``test``)."""
        return [q for q in self.questions if q.split == split]


def clean_review(review: str) -> str:
    """Drop the trailing ANSWERNOTFOUND token every SubjQA review carries."""
    review = review.rstrip()
    if review.endswith(NO_ANSWER_TOKEN):
        review = review[: -len(NO_ANSWER_TOKEN)]
    return review.rstrip()


def document_id(domain: str, review_id: str) -> str:
    """The review's id in every index: the same whichever splits are loaded."""
    return f"{domain}/{review_id}"


def split_names(document: Document) -> list[str]:
    """The splits the review is in: its ``split`` meta (a list; a plain string is one split)."""
    splits = document.meta.get("split")
    return list(splits) if isinstance(splits, list) else [splits] if splits else []


def in_split(document: Document, split: str) -> bool:
    """Whether ``document`` (a review, possibly in several splits) is in ``split``."""
    return split in split_names(document)


def locate_answer(review: str, text: str, start: int) -> tuple[GoldAnswer | None, str]:
    """Verify an annotated span against the review; returns the answer and how it was located."""
    if start >= 0 and review[start : start + len(text)] == text:
        return GoldAnswer(text, start), "exact"
    kept = [i for i, ch in enumerate(review) if not ch.isspace()]
    squeezed_review = "".join(review[i] for i in kept)
    squeezed_text = re.sub(r"\s+", "", text)
    if not squeezed_text:
        return None, "unlocated"
    matches = [m.start() for m in re.finditer(re.escape(squeezed_text), squeezed_review)]
    if not matches:
        return None, "unlocated"
    # Several occurrences: the one nearest to the annotated offset is the annotated one.
    best = min(matches, key=lambda m: abs(kept[m] - start))
    begin, end = kept[best], kept[best + len(squeezed_text) - 1] + 1
    return GoldAnswer(review[begin:end], begin), "repaired"


def _parse_start(indices: str) -> int:
    try:
        return int(ast.literal_eval(indices)[0])
    except (ValueError, SyntaxError, TypeError, IndexError):
        return -1


def build(sources: Iterable[tuple[str, str, Iterable[dict]]]) -> SubjQA:
    """Group annotation rows (SubjQA CSV columns), given as (domain, split, rows), into documents and questions."""
    report = LoadReport()
    documents: dict[str, Document] = {}
    # q_review_id is unique within a split only: SubjQA's dev reuses 249 train ids (same question, other annotators).
    questions: dict[tuple[str, str], LabelledQuestion] = {}
    for source_domain, split, rows in sources:
        split_docs, split_questions = set(), set()
        for row in rows:
            report.rows += 1
            domain = row["domain"]
            review = clean_review(row["review"])
            doc_id = document_id(domain, row["review_id"])
            if doc_id not in documents:
                documents[doc_id] = Document(
                    id=doc_id,
                    content=review,
                    meta={"item_id": row["item_id"], "review_id": row["review_id"], "domain": domain, "split": []},
                )
            if split not in documents[doc_id].meta["split"]:
                documents[doc_id].meta["split"].append(split)
            split_docs.add(doc_id)
            qid = row["q_review_id"]
            question = questions.get((split, qid))
            if question is None:
                question = questions[(split, qid)] = LabelledQuestion(
                    id=qid,
                    question=row["question"].strip(),
                    item_id=row["item_id"],
                    review_id=row["review_id"],
                    document_id=doc_id,
                    domain=domain,
                    split=split,
                    answers=[],
                    is_subjective=str(row["is_ques_subjective"]).strip().lower() == "true",
                    context=review,
                    first_annotation_no_answer=row["human_ans_spans"].strip() in ("", NO_ANSWER_TOKEN),
                )
            split_questions.add(qid)
            span = row["human_ans_spans"].strip()
            per_annotation = row.get("per_annotation", True)  # a CSV row is one annotator's mark
            if not span or span == NO_ANSWER_TOKEN:
                if per_annotation:
                    question.annotations.append("")
                continue
            answer, how = locate_answer(review, span, _parse_start(row["human_ans_indices"]))
            report.answers[how] += 1
            if answer is None:
                report.unlocated.append((qid, span))
                answer = GoldAnswer(span, None)
            if per_annotation:
                question.annotations.append(answer.text)
            if answer not in question.answers:
                question.answers.append(answer)
        report.splits[f"{source_domain}/{split}"] = {"questions": len(split_questions), "documents": len(split_docs)}
    for document in documents.values():
        document.meta["split"].sort(key=lambda s: SPLITS.index(s) if s in SPLITS else len(SPLITS))
    return SubjQA(list(documents.values()), list(questions.values()), report)


RECOPY = "re-copy the file from SubjQA (subjqa/<domain>/splits/<split>.csv)."


def _read_csv(path: Path) -> Iterator[dict]:
    """The file's rows as dicts; any malformed shape is one QAError naming the file, the line and the fix."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            while header == []:  # blank lines before the header
                header = next(reader, None)
            if header is None:
                raise QAError(f"{path} is empty.", RECOPY)
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise QAError(
                    f"{path} is missing the SubjQA column(s) {', '.join(missing)}.",
                    "point --data-dir at the original SubjQA CSVs (subjqa/<domain>/splits/<split>.csv).",
                )
            rows = 0
            while True:
                line = reader.line_num + 1  # where the next record starts (a quoted review may span lines)
                fields = next(reader, None)
                if fields is None:
                    break
                if not fields:  # a blank line
                    continue
                if len(fields) != len(header):
                    # A short row is a cut-off line or an unclosed quote; a long one an unquoted comma:
                    # either way the columns no longer line up, so no value of the row can be trusted.
                    how = "fewer" if len(fields) < len(header) else "more"
                    raise QAError(
                        f"{path} line {line}: the row has {how} fields ({len(fields)}) than the header ({len(header)}).",
                        f"repair that row (quote fields holding commas or quotes), or {RECOPY}",
                    )
                rows += 1
                yield dict(zip(header, fields))
            if not rows:
                raise QAError(f"{path} has a header but no rows.", RECOPY)
    except UnicodeDecodeError as error:
        raise QAError(
            f"{path} line {_first_undecodable_line(path)} is not UTF-8 text ({error.reason}).",
            f"re-save the file as UTF-8, or {RECOPY}",
        ) from error
    except csv.Error as error:
        raise QAError(f"{path} line {reader.line_num} is not readable CSV ({error}).", RECOPY) from error
    except OSError as error:
        raise QAError(f"{path} cannot be read ({error.strerror or error}).", "check its permissions, or re-copy it.") from error


def _first_undecodable_line(path: Path) -> int | str:
    """The 1-based line of the first bytes that are not UTF-8 (the decoder only knows its chunk's offset)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return "?"


def available_domains(data_dir: Path) -> list[str]:
    """The SubjQA domains found in ``data_dir`` (folders with a ``splits/`` folder), sorted; none when it does not exist."""
    return sorted(p.name for p in Path(data_dir).iterdir() if (p / "splits").is_dir()) if Path(data_dir).is_dir() else []


def available_splits(data_dir: Path, domain: str) -> list[str]:
    """The splits a domain has files for: books and movies style domains have only dev and test."""
    return [split for split in SPLITS if (Path(data_dir) / domain / "splits" / f"{split}.csv").is_file()]


def _csv_rows(data_dir: Path, domains: Sequence[str], splits: Sequence[str]) -> list[tuple[str, str, Iterator[dict]]]:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise QAError(
            f"SubjQA data directory {data_dir} does not exist.",
            "pass --data-dir (or set QA_DATA_DIR) to a folder holding <domain>/splits/<split>.csv.",
        )
    known = available_domains(data_dir)
    sources = []
    for domain in domains:
        if domain not in known:
            raise QAError(f"Unknown domain '{domain}' in {data_dir}.", f"use one of: {', '.join(known) or '(none found)'}.")
        for split in splits:
            path = data_dir / domain / "splits" / f"{split}.csv"
            if not path.is_file():
                raise QAError(
                    f"No '{split}' split for domain '{domain}' ({path} is missing).",
                    f"use one of: {', '.join(available_splits(data_dir, domain) or SPLITS)}.",
                )
            sources.append((domain, split, _read_csv(path)))
    return sources


def source_files(domains: Sequence[str], splits: Sequence[str], data_dir: str | Path) -> list[Path]:
    """The CSV files that ``load_subjqa`` reads for these domains and splits (none for a hub source)."""
    if str(data_dir).startswith("hub:"):
        return []
    return [Path(data_dir) / domain / "splits" / f"{split}.csv" for domain in domains for split in splits]


def _hub_rows(name: str, domains: Sequence[str], splits: Sequence[str]) -> list[tuple[str, str, Iterator[dict]]]:
    """The published dataset (one row per question-review pair) mapped onto the CSV's columns."""
    try:
        from datasets import load_dataset
    except ImportError as error:
        raise QAError(
            "Loading SubjQA from the hub needs the 'datasets' package.", "pip install datasets, or pass a data directory."
        ) from error

    def rows(domain: str, split: str) -> Iterator[dict]:
        split_name = "validation" if split == "dev" else split
        try:
            dataset = load_dataset(name, domain, split=split_name)
        except Exception as error:  # the hub client raises many types; all mean "cannot load"
            raise QAError(
                f"Could not load '{name}' ({domain}/{split}) from the hub: {error}.", "check the network, or pass a local data directory."
            ) from error
        for record in dataset:
            answers = record["answers"]
            base = {
                "item_id": record["title"],
                "domain": record["domain"],
                "q_review_id": record["id"],
                "question": record["question"],
                "is_ques_subjective": record["is_ques_subjective"],
                "review_id": record["review_id"],
                "review": record["context"],
                "per_annotation": False,  # the hub keeps each question's spans, not one row per annotator
            }
            if not answers["text"]:
                yield {**base, "human_ans_spans": NO_ANSWER_TOKEN, "human_ans_indices": "(-1, -1)"}
            for text, start in zip(answers["text"], answers["answer_start"]):
                yield {**base, "human_ans_spans": text, "human_ans_indices": f"({start}, {start + len(text)})"}

    return [(domain, split, rows(domain, split)) for domain in domains for split in splits]


def load_subjqa(
    domains: str | Sequence[str] = "electronics",
    splits: str | Sequence[str] = SPLITS,
    source: str | Path | None = None,
) -> SubjQA:
    """Load SubjQA from a directory of the original CSVs (default: ../shared/data/subjqa) or a hub name.

    >>> data = load_subjqa("electronics", ["test"])
    >>> len(data.questions)
    358
    """
    domains = [domains] if isinstance(domains, str) else list(domains)
    splits = [splits] if isinstance(splits, str) else list(splits)
    for split in splits:
        if split not in SPLITS:
            raise QAError(f"Unknown split '{split}'.", f"use one of: {', '.join(SPLITS)}.")
    if source is None:
        from qa_system.config import Settings

        source = Settings.from_env().data_dir
    if isinstance(source, str) and not Path(source).exists() and source.startswith("hub:"):
        return build(_hub_rows(source.removeprefix("hub:"), domains, splits))
    return build(_csv_rows(Path(source), domains, splits))
