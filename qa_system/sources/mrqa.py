"""MRQA 2019 shared-task JSON lines -> the same SquadExample as a SQuAD file.

The format: a header line ``{"header": {"dataset", "split"}}``, then one context per line,
``{"context", "qas": [{"qid", "question", "detected_answers": [{"text", "char_spans": [[start,
end]], ...}], ...}], ...}`` with *inclusive* character ends. The context is kept exactly as given
(some MRQA sets join passages with tokens such as [PAR], [TLE], [SEP]; the spans refer to that
text). MRQA found its spans by matching normalised tokens, so a span's text may differ from the
answer text in case, articles or punctuation ("The 49ers" -> "49ers", "salt-tax" -> "salt tax"):
a span is accepted when both agree after SQuAD normalisation with spaces removed, and the
answer text becomes the context's own characters, so that ``context[start:start + len(text)]``
holds as for SQuAD. Other spans are dropped, counted and listed in the report; a question left
without any span is skipped. MRQA questions are all answerable. Files are read by
``qa_files.read_qa_file``, which tells MRQA from SQuAD by the content.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from qa_system.errors import QAError
from qa_system.metrics.squad import normalize_answer
from qa_system.sources.squad import SquadExample, SquadReport, checked_field, checked_list

FORMAT = "MRQA"


def parse_mrqa(lines: Iterable[str], path: Path) -> tuple[list[SquadExample], SquadReport]:
    """Validate MRQA lines (``path`` names the file in errors); the header line is optional."""
    examples, report, seen, dataset = [], SquadReport(format=FORMAT), set(), path.stem
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as error:  # RecursionError: nested thousands deep
            raise QAError(
                f"{path}: line {number} is not valid JSON ({error}).", "pass an MRQA JSON lines file: one JSON object per line."
            ) from error
        if isinstance(record, dict) and isinstance(record.get("header"), dict):
            dataset = str(record["header"].get("dataset", dataset))
            continue
        where = f"line {number}"
        context = checked_field(record, "context", str, where, path, FORMAT)
        for q, qa in enumerate(checked_list(record, "qas", where, path, FORMAT)):
            qid = str(checked_field(qa, "qid", (str, int), f"{where}.qas[{q}]", path, FORMAT))
            if qid in seen:
                raise QAError(f"{path}: {where}.qas[{q}] repeats the question id '{qid}'.", "give every question a unique qid.")
            seen.add(qid)
            question = checked_field(qa, "question", str, f"{where}.qas[{q}]", path, FORMAT)
            answers = _located_answers(qa, qid, f"{where}.qas[{q}]", context, path, report)
            if not answers:
                report.skipped_questions += 1
                continue
            report.questions += 1
            report.answerable += 1
            report.answers += len(answers)
            # A title per context: held-out slices (squad.is_held_out) keep a context's questions together.
            examples.append(SquadExample(qid, f"{dataset}:{number}", question, context, answers, False))
    return examples, report


def _located_answers(qa: dict, qid: str, where: str, context: str, path: Path, report: SquadReport) -> list[tuple[str, int]]:
    """(context text, start) of every detected span that matches its answer text, in the file's order, once each."""
    answers: list[tuple[str, int]] = []
    for i, detected in enumerate(checked_list(qa, "detected_answers", where, path, FORMAT)):
        text = checked_field(detected, "text", str, f"{where}.detected_answers[{i}]", path, FORMAT)
        for span in checked_list(detected, "char_spans", f"{where}.detected_answers[{i}]", path, FORMAT):
            if not (isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in span)):
                raise QAError(
                    f"{path}: {where}.detected_answers[{i}] has a char span that is not [start, end]: {str(span)[:40]}.",
                    "fix that record (MRQA format).",
                )
            start, end = span
            segment = context[start : end + 1] if 0 <= start <= end < len(context) else ""
            if segment.strip() and _key(segment) == _key(text):
                if (segment, start) not in answers:
                    answers.append((segment, start))
            else:
                report.unlocated_answers += 1
                if len(report.problems) < 10:
                    report.problems.append(f"{where} (qid {qid}): '{text[:40]}' is not at characters {start}-{end}")
    return answers


def _key(text: str) -> str:
    """SQuAD-normalised text without spaces: MRQA's token matching ignores case, articles and punctuation."""
    return "".join(normalize_answer(text).split())
