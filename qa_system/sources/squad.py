"""SQuAD v2.0 JSON: export SubjQA questions to it, read and validate files that users bring (v1.1 too).

SQuAD v2 is the format every extractive-QA trainer reads: ``{"version": "v2.0", "data":
[{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}], "is_impossible"}]}]}]}``. SubjQA questions become one paragraph per review
(title = product id). SubjQA spans that could not be located in the review have no offset, so
they cannot be training targets: they are left out of ``answers`` and counted in the export
report; a question whose spans are *all* unlocated is skipped (it is neither answerable with a
known span nor impossible).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from qa_system.errors import QAError, check_text, json_kind
from qa_system.sources.decoding import check_encoding
from qa_system.sources.subjqa import LabelledQuestion

VERSION = "v2.0"
SQUAD_FIX = 'pass a SQuAD v1.1 / v2.0 file: {"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [...]}]}]}.'


@dataclass
class SquadReport:
    """What an export wrote, or what validation found in a file."""

    questions: int = 0
    answerable: int = 0
    impossible: int = 0
    answers: int = 0
    # Export: SubjQA spans without a located offset (left out); validation: spans whose text is not at answer_start.
    unlocated_answers: int = 0
    skipped_questions: int = 0
    problems: list[str] = field(default_factory=list)
    format: str = "SQuAD v2.0"  # what a read file was: SQuAD v1.1, SQuAD v2.0, MRQA

    def summary(self) -> str:
        """One line for people: questions (answerable, impossible), answers, and what was not located or skipped."""
        return (
            f"{self.questions} questions ({self.answerable} answerable, {self.impossible} impossible), "
            f"{self.answers} answers; {self.unlocated_answers} answer(s) without a matching offset, "
            f"{self.skipped_questions} question(s) skipped"
        )


@dataclass(frozen=True)
class SquadExample:
    """One question of a SQuAD v2 file, flattened."""

    id: str
    title: str
    question: str
    context: str
    answers: list[tuple[str, int]]  # (text, answer_start), offsets verified against context
    is_impossible: bool

    @property
    def answer_texts(self) -> list[str]:
        """The gold texts as the SQuAD v2 script sees them: the answers, or [""] for an impossible question."""
        return [text for text, _ in self.answers] or [""]


def to_squad(questions: Iterable[LabelledQuestion], keep_unlocated: bool = False) -> tuple[dict[str, Any], SquadReport]:
    """SQuAD v2 dict of the questions (grouped by product, then review) and what was left out.

    ``keep_unlocated`` writes every annotated answer, those without a verified offset with
    ``answer_start`` -1: a gold file for the official evaluation script (which reads only the
    texts), so that it scores every question exactly as ``qa_system`` does. Not for training.
    """
    report = SquadReport()
    articles: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for question in questions:
        located = question.answers if keep_unlocated else question.located_answers
        report.unlocated_answers += len(question.answers) - len(question.located_answers)
        if question.answers and not located:
            report.skipped_questions += 1
            continue
        paragraphs = articles.setdefault(question.item_id, {})
        # By text as well as id: one id may name two texts (a review edited between two labels, two collections' documents).
        paragraph = paragraphs.setdefault((question.document_id, question.context), {"context": question.context, "qas": []})
        paragraph["qas"].append(
            {
                "id": question.id,
                "question": question.question,
                "answers": [{"text": a.text, "answer_start": -1 if a.start is None else a.start} for a in located],
                "is_impossible": not located,
            }
        )
        report.questions += 1
        report.answers += len(located)
        report.answerable += bool(located)
        report.impossible += not located
    data = [{"title": title, "paragraphs": list(paragraphs.values())} for title, paragraphs in articles.items()]
    return {"version": VERSION, "data": data}, report


def write_squad(questions: Iterable[LabelledQuestion], path: str | Path, keep_unlocated: bool = False) -> SquadReport:
    """Export questions to a SQuAD v2 JSON file (parent folders are created)."""
    squad, report = to_squad(questions, keep_unlocated)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(squad, ensure_ascii=False, indent=1), encoding="utf-8")
    return report


def is_held_out(title: str, percent: int = 10) -> bool:
    """Whether an article (a SQuADShifts group, a SQuAD article) belongs to the fixed held-out slice.

    Decided by a hash of the title alone, so the slice is the same whatever the file's order and
    whichever command asks; whole groups go one way, since a group's passages share questions' topics.
    """
    return int(hashlib.sha256(title.encode("utf-8")).hexdigest(), 16) % 100 < percent


def split_held_out(path: str | Path, out_dir: str | Path, percent: int = 10) -> tuple[Path, Path]:
    """Write ``<stem>-train.json`` (articles kept for training) and ``<stem>-heldout.json`` (see is_held_out)."""
    squad, out_dir, stem = _validated_json(path), Path(out_dir), Path(path).stem
    held_out = [is_held_out(str(a.get("title", "")), percent) for a in squad["data"]]
    train = _write_articles(squad, [a for a, h in zip(squad["data"], held_out) if not h], out_dir / f"{stem}-train.json")
    return train, _write_articles(squad, [a for a, h in zip(squad["data"], held_out) if h], out_dir / f"{stem}-heldout.json")


def sample_articles(path: str | Path, out_dir: str | Path, percent: int, salt: str = "sample") -> Path:
    """Write ``<stem>-sample<percent>.json``: about ``percent``% of the file's articles, whole, chosen
    by a hash of ``salt`` and the title (the same sample on every machine, independent of is_held_out's)."""
    squad = _validated_json(path)
    data = [a for a in squad["data"] if is_held_out(f"{salt}:{a.get('title', '')}", percent)]
    return _write_articles(squad, data, Path(out_dir) / f"{Path(path).stem}-sample{percent}.json")


def _validated_json(path: str | Path) -> dict:
    read_squad(path)  # validates, with the usual one-line errors
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _write_articles(squad: dict, data: list, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"version": squad.get("version", "v2.0"), "data": data}, ensure_ascii=False), encoding="utf-8")
    return target


def read_squad(path: str | Path) -> tuple[list[SquadExample], SquadReport]:
    """Read and validate a SQuAD v1.1 or v2.0 file (see parse_squad)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as error:
        raise QAError(f"SQuAD file {path} does not exist.", "check the path (export one with `qa-system export-squad`).") from error
    return parse_squad(load_squad_json(data, path), path)


def load_squad_json(data: bytes, name: str | Path, encoding: str = "utf-8") -> dict:
    """A SQuAD file's JSON, checked to hold a top-level ``data`` list; a QAError (encoding, JSON, shape) names the file.

    A UTF-8 byte-order mark is fine; ``encoding`` reads files in another text encoding.
    """
    try:
        squad = json.loads(data.decode("utf-8-sig" if check_encoding(encoding) == "utf-8" else encoding))
    except UnicodeDecodeError as error:
        raise QAError(
            f"{name} is not {encoding} text ({error.reason}).", "pass --encoding with the file's encoding, or re-save it as UTF-8."
        ) from None
    except json.JSONDecodeError as error:
        raise QAError(f"{name} is not valid JSON (line {error.lineno}: {error.msg}).", SQUAD_FIX) from None
    except RecursionError:  # arrays in arrays thousands deep: no SQuAD file, and json's parser recurses
        raise QAError(f"{name} nests JSON arrays or objects too deeply to read.", SQUAD_FIX) from None
    if not isinstance(squad, dict) or not isinstance(squad.get("data"), list):
        raise QAError(f"{name} has no top-level 'data' list.", SQUAD_FIX)
    return squad


class SquadParagraph(NamedTuple):
    """One paragraph of a SQuAD file, its shape checked: the article's title (as given), the context, the raw record and where it is."""

    title: str
    context: str
    record: dict
    where: str  # "data[a].paragraphs[p]"


def squad_paragraphs(squad: dict, name: str | Path) -> Iterator[SquadParagraph]:
    """Every paragraph of a loaded SQuAD dict (``load_squad_json``), each article and context checked
    (``checked_list``, ``checked_field``): what both the labels reader and the documents reader walk."""
    for a, article in enumerate(squad["data"]):
        title = str(article.get("title") or "") if isinstance(article, dict) else ""
        for p, paragraph in enumerate(checked_list(article, "paragraphs", f"data[{a}]", name)):
            where = f"data[{a}].paragraphs[{p}]"
            yield SquadParagraph(title, checked_field(paragraph, "context", str, where, name), paragraph, where)


def parse_squad(squad: Any, path: Path) -> tuple[list[SquadExample], SquadReport]:
    """Validate a loaded SQuAD v1.1 / v2.0 dict (``path`` names it in errors).

    A structurally bad record raises a QAError naming it. Answers whose text is not found at
    ``answer_start`` in the context are dropped, counted and listed in the report (the first few),
    since training on them would teach the wrong span; a question left without any answer is
    skipped (counted) rather than turned into an "impossible" one. v1.1 has no ``is_impossible``:
    its questions are answerable.
    """
    if not isinstance(squad, dict) or not isinstance(squad.get("data"), list):
        raise QAError(f"{path} has no top-level 'data' list.", SQUAD_FIX)
    examples, report, seen = [], SquadReport(), set()
    versioned = str(squad.get("version", "")).lstrip("v")
    for paragraph in squad_paragraphs(squad, path):
        where = paragraph.where
        for q, qa in enumerate(checked_list(paragraph.record, "qas", where, path)):
            qid = str(checked_field(qa, "id", (str, int), f"{where}.qas[{q}]", path))
            if qid in seen:
                raise QAError(f"{path}: {where}.qas[{q}] repeats the question id '{qid}'.", "give every question a unique id.")
            seen.add(qid)
            versioned = versioned or ("2.0" if "is_impossible" in qa else "")
            example = _example(qa, qid, f"{where}.qas[{q}]", paragraph.title, paragraph.context, path, report)
            if example is not None:
                examples.append(example)
    report.format = f"SQuAD v{versioned or '1.1'}"
    return examples, report


def _example(qa: dict, qid: str, where: str, title: str, context: str, path: Path, report: SquadReport) -> SquadExample | None:
    """One validated question; None (counted as skipped) when it is answerable but no answer offset is valid."""
    question = checked_field(qa, "question", str, where, path)
    answers, given = [], checked_list(qa, "answers", where, path)
    for i, answer in enumerate(given):
        text = checked_field(answer, "text", str, f"{where}.answers[{i}]", path)
        start = checked_field(answer, "answer_start", int, f"{where}.answers[{i}]", path)
        if start >= 0 and context[start : start + len(text)] == text and text.strip():
            answers.append((text, start))
        else:
            report.unlocated_answers += 1
            if len(report.problems) < 10:
                report.problems.append(f"{where} (id {qid}): '{text[:40]}' is not at offset {start}")
    is_impossible = qa.get("is_impossible", not given)
    if not isinstance(is_impossible, bool):
        raise QAError(f"{path}: {where} (id {qid}) has a non-boolean is_impossible.", "use true or false.")
    if is_impossible and answers:
        raise QAError(
            f"{path}: {where} (id {qid}) is marked impossible but has answers.", "remove its answers or set is_impossible to false."
        )
    if not is_impossible and not answers:
        report.skipped_questions += 1
        return None
    report.questions += 1
    report.answers += len(answers)
    report.answerable += bool(answers)
    report.impossible += is_impossible
    return SquadExample(qid, title, question, context, answers, is_impossible)


def checked_field(record: Any, name: str, kind, where: str, path: str | Path, form: str = "SQuAD v2"):
    """record[name] checked to be a ``kind`` (and, text, to be UTF-8); else a QAError naming the record.

    The one check of a SQuAD or MRQA record's fields (``mrqa.py`` reads its lines with it).
    """
    if not isinstance(record, dict) or name not in record:
        raise QAError(f"{path}: {where} has no '{name}'.", f"fix that record ({form} format).")
    value = record[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise QAError(
            f"{path}: {where}.{name} is {json_kind(value)}, not {' or '.join(json_kind(k()) for k in kinds)}.",
            f"fix that record ({form} format).",
        )
    try:  # JSON can escape half a character ("\\ud800"), which no tokenizer takes
        return check_text(value, f"the {name} at {where} of {path}")
    except QAError as error:
        raise QAError(error.problem, "write the file as UTF-8 text, without \\ud800-\\udfff escapes (half a character).") from None


def checked_list(record: Any, name: str, where: str, path: str | Path, form: str = "SQuAD v2") -> list:
    """record[name] checked to be a list (``checked_field``)."""
    return checked_field(record, name, list, where, path, form)
