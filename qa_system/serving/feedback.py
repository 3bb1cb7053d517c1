"""Answer feedback: one SQLite row per click on the search page, exported as SQuAD v2 training data.

Users judge an answer with one of three verdicts (``VERDICTS``). Every click is kept (nothing is
overwritten, so disagreements and changes of mind stay visible to whoever analyses them), each once
(a page names its clicks: ``click_id``), and
``export_squad`` turns the clicks into labels that ``qa-system train-reader --train-file`` reads:

* ``correct`` on an answer span: the span, at the reader's offsets in its review, is a gold answer.
* ``correct`` on the "no answer" card: the user confirms that the reviews shown hold no answer;
  the question becomes *impossible* for the closest review (the one the card showed first).
* ``wrong`` and ``wrong_span`` ("right review, wrong answer") are not exported: they say what the
  answer is *not*, which SQuAD cannot express, and a wrong span is no evidence that the review
  has no answer. Neither are judgements of generated (RAG) answers, which have no span. All of
  them stay in the database for error analysis.

When clicks on the same question and review contradict each other, the latest click on each
prediction counts, and a confirmed span beats a confirmed "no answer" (the user found one). A span
that is not at its offsets in its review (which an older version could store) is never exported.
A review is told apart by its collection and its text as well as its id: two collections may hold
one id, and a review edited between two clicks is a new text, each exported with its own spans.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Collection, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qa_system.errors import NO_SPACE, NoSpace, QAError, Unavailable, check_text
from qa_system.sources.squad import SquadReport, to_squad
from qa_system.sources.subjqa import GoldAnswer, LabelledQuestion

VERDICTS = {
    "correct": "Right answer",
    "wrong": "Wrong answer",
    "wrong_span": "Right review, wrong answer",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    verdict TEXT NOT NULL,
    question TEXT NOT NULL,
    answer TEXT,
    start INTEGER,
    "end" INTEGER,
    document_id TEXT,
    item_id TEXT,
    review_id TEXT,
    context TEXT,
    score REAL,
    pipeline TEXT,
    labelled_question_id TEXT,
    click_id TEXT,
    collection TEXT
)
"""
# SQLite's codes for a file that is not a database, or one whose pages do not hold together.
DAMAGED = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})
# Columns a database of an earlier version lacks, added when it is opened.
_LATER_COLUMNS = ("click_id", "collection")
# A click the page may see twice (a rerun repeats it) is stored once: its id is unique.
_CLICK_INDEX = "CREATE UNIQUE INDEX IF NOT EXISTS feedback_click_id ON feedback (click_id)"


@dataclass(frozen=True)
class Feedback:
    """One click. ``answer`` None is the "no answer" prediction; ``context`` is the review's text,
    kept so that an export needs no index (and survives re-indexing)."""

    verdict: str
    question: str
    answer: str | None
    start: int | None
    end: int | None
    document_id: str | None
    item_id: str | None = None
    review_id: str | None = None
    context: str | None = None
    score: float | None = None
    pipeline: str | None = None  # which retriever / answer stage / model produced the answer
    labelled_question_id: str | None = None  # evaluation mode: the SubjQA question asked
    click_id: str | None = None  # the page's id of the click; recording it again stores nothing
    collection: str | None = None  # the collection asked (None: clicks recorded before it was kept)
    created: str = ""  # ISO time, set when recorded
    id: int | None = None

    @classmethod
    def about(cls, document: Any, **values: Any) -> Feedback:
        """A click on an answer shown with ``document`` (a Haystack Document, or None): its id, review id
        and text are kept, so that the export needs no index. ``values``: the other fields."""
        if document is not None:
            values = {"review_id": document.meta.get("review_id"), "context": document.content, **values, "document_id": document.id}
        return cls(**{"document_id": None, **values})

    def validated(self) -> Feedback:
        """The feedback, once its text is UTF-8, its verdict known, its question given and a span's offsets inside its review; else a QAError."""
        for field in fields(self):
            check_text(getattr(self, field.name), f"the feedback's {field.name}")
        if self.verdict not in VERDICTS:
            raise QAError(f"Unknown feedback verdict '{self.verdict}'.", f"use one of: {', '.join(VERDICTS)}.")
        if not self.question.strip():
            raise QAError("Feedback needs the question it is about.", "ask a question before judging its answers.")
        if self.click_id is not None and (not self.click_id.strip() or not self.click_id.isprintable()):
            # one blank id shared by every client would make each later click "sent again", and drop it
            raise QAError(
                f"The feedback's click_id {self.click_id!r} is blank or holds control characters.",
                "send a unique id of printable characters for each click, or leave click_id out.",
            )
        if self.is_span and not self.located:
            raise QAError(
                f"The answer '{self.answer[:40]}' is not at offsets {self.start}-{self.end} of its review.",
                "record the reader's own offsets (0 <= start < end <= the review's length).",
            )
        return self

    @property
    def is_span(self) -> bool:
        """An extracted answer (with offsets); generated answers have none and cannot become SQuAD labels."""
        return self.answer is not None and self.start is not None and self.end is not None

    @property
    def located(self) -> bool:
        """A span that is its review's text at its offsets (plain slicing would also take -10:-1, or an empty 50:5)."""
        return (
            self.is_span
            and self.context is not None
            and 0 <= self.start < self.end <= len(self.context)
            and self.context[self.start : self.end] == self.answer
        )


@dataclass(frozen=True)
class FeedbackExport:
    """The confirmed answers as SQuAD v2 data, what they hold, and how many of the clicks became labels."""

    squad: dict[str, Any]  # the SQuAD v2 data
    report: SquadReport  # what it holds
    clicks: int  # all clicks in the database
    used_clicks: int  # clicks that became a label
    path: Path | None = None  # the file ``export_squad`` wrote

    def summary(self) -> str:
        """One line for people: the labelled questions (answerable, impossible) and the clicks they came from."""
        return f"{self.report.questions} labelled questions ({self.report.answerable} answerable, {self.report.impossible} impossible) from {self.used_clicks} of {self.clicks} clicks"


class FeedbackStore:
    """The feedback table of one SQLite file (created on first use; one short connection per call,
    so Streamlit's session threads can share it)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """An open connection to the database (made if missing), committed on leaving (reads open no transaction). A
        file that cannot be opened or written is one ``Unavailable`` line naming it, never a traceback in a door."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(sqlite3.connect(self.path, timeout=10)) as connection:
                connection.row_factory = sqlite3.Row
                with connection:
                    connection.execute(_SCHEMA)
                    present = {row["name"] for row in connection.execute("PRAGMA table_info(feedback)")}
                    for column in (c for c in _LATER_COLUMNS if c not in present):
                        connection.execute(f"ALTER TABLE feedback ADD COLUMN {column} TEXT")
                    connection.execute(_CLICK_INDEX)
                with connection:
                    yield connection
        except (OSError, sqlite3.Error) as error:
            code = getattr(error, "sqlite_errorcode", 0) & 0xFF if isinstance(error, sqlite3.Error) else None  # its primary code
            if code == sqlite3.SQLITE_FULL or (isinstance(error, OSError) and error.errno in NO_SPACE):
                raise NoSpace(
                    f"No space left on the disk of the feedback database {self.path}; nothing was saved.",
                    "free space there (or point QA_FEEDBACK_DB at another disk), then send the click again.",
                ) from error
            if code in DAMAGED:
                raise Unavailable(
                    f"The feedback database {self.path} is damaged ({error}).",
                    f"move it aside (`sqlite3 {self.path.name} .recover` may get its clicks back); a new one is made at the next click.",
                ) from error
            raise Unavailable(
                f"The feedback database {self.path} cannot be used ({error}).", "point QA_FEEDBACK_DB at a file this process can write."
            ) from error

    def record(self, feedback: Feedback) -> Feedback:
        """Store one click (committed before returning) and return it with its id and time; a click
        whose ``click_id`` is stored already is not stored again (the stored one is returned)."""
        return self.record_click(feedback)[0]

    def record_click(self, feedback: Feedback) -> tuple[Feedback, bool]:
        """``record``, and whether the click was new: told by the insert itself, so that clients sending one click at
        once learn it was new from exactly one answer."""
        feedback = feedback.validated()
        values = {f.name: getattr(feedback, f.name) for f in fields(Feedback) if f.name != "id"}
        values["created"] = feedback.created or datetime.now(UTC).isoformat(timespec="seconds")
        columns = ", ".join(f'"{name}"' for name in values)
        insert = f"INSERT INTO feedback ({columns}) VALUES ({', '.join('?' * len(values))}) ON CONFLICT (click_id) DO NOTHING"
        with self._connection() as connection:
            cursor = connection.execute(insert, list(values.values()))
            if cursor.rowcount == 0:
                stored = connection.execute("SELECT * FROM feedback WHERE click_id = ?", (feedback.click_id,)).fetchone()
                return Feedback(**dict(stored)), False
        return Feedback(**{**values, "id": cursor.lastrowid}), True

    def all(self) -> list[Feedback]:
        """Every click, oldest first."""
        with self._connection() as connection:
            rows = connection.execute("SELECT * FROM feedback ORDER BY id").fetchall()
        return [Feedback(**dict(row)) for row in rows]

    def counts(self) -> dict[str, int]:
        """Clicks per verdict."""
        with self._connection() as connection:
            rows = connection.execute("SELECT verdict, COUNT(*) FROM feedback GROUP BY verdict").fetchall()
        return {verdict: count for verdict, count in rows}

    def export(self) -> FeedbackExport:
        """The exportable clicks as SQuAD v2, in memory (rules in the module doc)."""
        clicks = self.all()
        questions, used = feedback_to_questions(clicks)
        if not questions:
            raise QAError("No feedback can become training data yet.", "mark answers (or a 'no answer') as right on the search page first.")
        squad, report = to_squad(questions)
        return FeedbackExport(squad, report, len(clicks), used)

    def export_squad(self, path: str | Path) -> FeedbackExport:
        """``export()`` written to a SQuAD v2 file."""
        export = self.export()
        path = Path(path)
        write_whole(path, json.dumps(export.squad, ensure_ascii=False, indent=1))
        return replace(export, path=path)


def write_whole(path: Path, text: str) -> None:
    """``text`` written beside ``path``, then renamed to it: whoever reads ``path`` meanwhile (another export
    of the page, say) reads the old file or the new one, never one being rewritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


# Clicks one page run may record for one answer: a page sends its whole click log, so this bounds what
# a hostile (or stuck) client can make the server write; a person does not click this fast.
MAX_NEW_CLICKS = 20


def unrecorded_clicks(clicked: object, recorded: int, offered: Collection[str] = tuple(VERDICTS)) -> list[str]:
    """The verdicts of the clicks a page logged (oldest first) after the first ``recorded`` ones.

    The search page's buttons log every click in the browser and send the whole log, because
    Streamlit merges reruns that arrive faster than the server runs the page, and a plain button's
    clicks would merge with them (two clicks, one row). The log comes from the browser: anything
    that is not a list of the verdicts ``offered`` is ignored, and at most ``MAX_NEW_CLICKS`` are new at once.
    """
    if not isinstance(clicked, (list, tuple)):
        return []
    new = list(clicked[recorded : recorded + MAX_NEW_CLICKS])
    return new if all(isinstance(v, str) and v in offered for v in new) else []


def feedback_to_questions(clicks: list[Feedback]) -> tuple[list[LabelledQuestion], int]:
    """Labelled questions (one per question and review) from the clicks, and how many clicks were used."""
    latest: dict[tuple, Feedback] = {}
    for click in clicks:  # oldest first, so later clicks on the same prediction win
        if click.document_id is not None and click.context is not None and (click.located or click.answer is None):
            review = (click.collection or "", click.document_id, click.context)
            latest[(" ".join(click.question.split()), review, click.start, click.end, click.answer is None)] = click
    grouped: dict[tuple[str, tuple], list[Feedback]] = {}
    for (question, review, *_), click in latest.items():
        if click.verdict == "correct":
            grouped.setdefault((question, review), []).append(click)
    questions, used = [], 0
    for (question, (collection, document_id, context)), confirmed in grouped.items():
        spans = [c for c in confirmed if c.is_span]
        kept = spans or confirmed
        used += len(kept)
        first = kept[0]
        key = hashlib.sha1(f"{question}\n{collection}\n{document_id}\n{context}".encode()).hexdigest()[:16]
        questions.append(
            LabelledQuestion(
                id=f"feedback-{key}",
                question=question,
                item_id=first.item_id or "",
                review_id=first.review_id or "",
                document_id=document_id,
                domain="",  # not needed by SQuAD; the document id names the review
                split="",
                answers=list(dict.fromkeys(GoldAnswer(c.answer, c.start) for c in spans)),
                is_subjective=False,
                context=first.context,
            )
        )
    return questions, used
