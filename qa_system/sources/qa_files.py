"""Extractive-QA files in any supported format -> SquadExamples, deduplicated across files, a report per file.

The format is read from the content, not the file name: a JSON object with a ``data`` list is
SQuAD (v1.1 or v2.0, see squad.py); JSON lines whose first line is an MRQA header or a context
with ``qas`` are MRQA (see mrqa.py); gzip-compressed files are read through.

Several files can hold the same question: SQuAD 2.0 dev's answerable questions are SQuAD 1.1
dev's, with the same ids. A question is the same when its id is; the first file that holds it
keeps it and later ones count it as a duplicate. One id naming two different questions is an
error, since either would be dropped silently otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qa_system.errors import QAError
from qa_system.sources.mrqa import parse_mrqa
from qa_system.sources.squad import SquadExample, SquadReport, parse_squad
from qa_system.sources.subjqa import GoldAnswer, LabelledQuestion

FIX = "pass SQuAD v1.1 / v2.0 JSON ({\"data\": [...]}) or MRQA JSON lines (a header line, then one context with its 'qas' per line)."


@dataclass
class FileReport:
    """What one file gave a training or evaluation run (its questions), and what it lost."""

    path: Path
    read: SquadReport  # the file itself: format, questions read, answers not located, questions skipped
    examples: list[SquadExample] = field(default_factory=list)  # the questions used
    duplicates: int = 0  # questions an earlier file already gave (dropped)
    dev_questions: int = 0  # questions whose id is a dev question's
    dev_dropped: bool = False  # whether those were dropped

    @property
    def unanswerable(self) -> int:
        """The used questions that have no answer."""
        return sum(e.is_impossible for e in self.examples)

    def summary(self) -> str:
        """One line for people: what the file gave, and what was dropped or skipped and why."""
        dev = (
            f"; {self.dev_questions} dev question(s) {'dropped' if self.dev_dropped else 'kept (also in a dev file)'}"
            if self.dev_questions
            else ""
        )
        return (
            f"{self.path} ({self.read.format}): used {len(self.examples)} questions ({len(self.examples) - self.unanswerable} answerable, "
            f"{self.unanswerable} unanswerable); dropped {self.duplicates} duplicate(s) of earlier files, "
            f"{self.read.skipped_questions} question(s) without a located answer, {self.read.unlocated_answers} answer(s) not located{dev}"
        )

    def as_dict(self) -> dict:
        """The report as JSON-ready data (a training run records it)."""
        return {
            "file": self.path.name,
            "format": self.read.format,
            "used": len(self.examples),
            "unanswerable": self.unanswerable,
            "duplicates": self.duplicates,
            "skipped_questions": self.read.skipped_questions,
            "unlocated_answers": self.read.unlocated_answers,
            "dev_questions": self.dev_questions,
            "dev_dropped": self.dev_dropped,
        }


def read_qa_file(path: str | Path) -> tuple[list[SquadExample], SquadReport]:
    """Read and validate one SQuAD or MRQA file, whichever its content is (``report.format`` says which)."""
    path = Path(path)
    try:
        data = path.read_bytes()
        text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")
    except FileNotFoundError as error:
        raise QAError(f"QA file {path} does not exist.", "check the path.") from error
    except IsADirectoryError as error:
        raise QAError(f"{path} is a directory, not a QA file.", FIX) from error
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise QAError(f"{path} is not UTF-8 text ({type(error).__name__}: {error}).", FIX) from error
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:  # RecursionError: arrays in arrays thousands deep
        first = text.lstrip().split("\n", 1)[0]
        if _is_mrqa_line(first):
            return parse_mrqa(text.splitlines(), path)
        raise QAError(f"{path} is neither SQuAD JSON nor MRQA JSON lines ({error}).", FIX) from error
    if isinstance(whole, dict) and "data" in whole:
        return parse_squad(whole, path)
    if _is_mrqa_record(whole):  # MRQA with a single line
        return parse_mrqa([text], path)
    raise QAError(f"{path} is JSON but neither SQuAD (a top-level 'data' list) nor MRQA (a header, then contexts with 'qas').", FIX)


def _is_mrqa_line(line: str) -> bool:
    try:
        return _is_mrqa_record(json.loads(line))
    except (json.JSONDecodeError, RecursionError):
        return False


def _is_mrqa_record(record: object) -> bool:
    return isinstance(record, dict) and (isinstance(record.get("header"), dict) or ("context" in record and "qas" in record))


def read_qa_files(paths: Sequence[str | Path], dev_ids: Collection[str] = (), drop_dev: bool = False) -> list[FileReport]:
    """Each file's questions, a question used once (by the first file that holds it), with what was dropped.

    ``dev_ids``: the ids of dev questions, counted in training files (and dropped with ``drop_dev``).
    """
    kept: dict[str, tuple[SquadExample, Path]] = {}
    reports = []
    for path in map(Path, paths):
        examples, read = read_qa_file(path)
        report = FileReport(path, read, dev_dropped=drop_dev)
        for example in examples:
            if example.id in kept:
                first, where = kept[example.id]
                if first.question.strip() != example.question.strip():
                    raise QAError(
                        f"Question id '{example.id}' names different questions in {where} and {path}.",
                        "give the questions of different data sets different ids.",
                    )
                report.duplicates += 1
                continue
            if example.id in dev_ids:
                report.dev_questions += 1
                if drop_dev:
                    continue
            kept[example.id] = (example, path)
            report.examples.append(example)
        reports.append(report)
    return reports


def labelled_questions(examples: Sequence[SquadExample], source: str) -> list[LabelledQuestion]:
    """SQuAD / MRQA questions as the evaluation runners take them: a context is a 'review' of its title's 'product'.

    ``source`` (e.g. the file name) stands where SubjQA has its domain; the split is "file".
    """
    questions = []
    for example in examples:
        context_id = hashlib.sha1(example.context.encode("utf-8")).hexdigest()[:16]
        answers = [GoldAnswer(text, start) for text, start in example.answers]
        questions.append(
            LabelledQuestion(
                example.id,
                example.question,
                example.title,
                context_id,
                f"{example.title}/{context_id}",
                source,
                "file",
                answers,
                is_subjective=False,
                context=example.context,
            )
        )
    return questions
