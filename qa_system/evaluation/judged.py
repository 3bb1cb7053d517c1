"""Judged evaluation: the cards a user reads, scored the way a shopper judges them.

A judged question was annotated over **every** document of its product (not the one review a
dataset's annotator saw): whether the documents answer it (``yes``, ``partly``, ``no``) and every
acceptable answer span. The format (JSON lines, one question a line) is the one of
``../shared/judged/PROTOCOL.md``::

    {"id": "electronics:B00..:0df1ffd0ba", "domain": "electronics", "item_id": "B00..",
     "question": "How is the design?", "answerable": "yes",
     "answers": [{"review_id": "08b0..", "start": 854, "end": 984, "text": "..."}], "best": 0}

How a card is judged (``verdict``): **right** when the documents answer (yes or partly) and its text
has SQuAD token F1 >= 0.5 with an acceptable span, or holds one and is at most 3x as long (a fragment
that scores below 0.5 is not right); **wrong** when it answered otherwise; **abstain-ok** for "no
answer" where the documents answer partly or not at all; **abstain-missed** for "no answer" where
they answer. The first card is **useful** when it is right or abstain-ok. Beside the first card:
right within the first three cards, and the calibration of the first card's stated chance
against whether it was useful (ECE and a reliability table).

The listed spans are never all the acceptable answers of a product with many reviews: a card that
answers but words it otherwise ("The location was perfect for us" where another review's "Great
location near Union Square" is listed) counts as wrong. **Card verdicts** close that gap the way
pooled relevance judgments do in search evaluation: a person judges a card's text for one question
(acceptable or not), once, and every later run reuses the verdict (``load_card_verdicts``). The report
lists the answer cards that neither match a span nor have a verdict (``cards-to-judge.jsonl``), in the
verdict file format with ``acceptable`` left to fill in. A listed span wins over a verdict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from qa_system import strict_json
from qa_system.errors import QAError, shown
from qa_system.metrics.calibration import expected_calibration_error, reliability_table
from qa_system.metrics.squad import f1 as token_f1, normalize_answer

ANSWERABLE = ("yes", "partly", "no")
VERDICTS = ("right", "wrong", "abstain-ok", "abstain-missed")
# A judged label file's longest line read: a question with its spans is a few kilobytes.
MAX_LINE_CHARS = 1_000_000
LABELS_FIX = "each line must be a JSON object with id, item_id, question, answerable (yes, partly or no) and answers (see the judged label format in the docs)."
SPAN_FIX = "give each answer the review_id of its document and character offsets into its text: text == document[start:end]."
VERDICTS_FIX = "each line must be a JSON object with id (a judged question's), text (a card's) and acceptable (true or false)."
CARDS_TO_JUDGE = "cards-to-judge.jsonl"


@dataclass(frozen=True)
class JudgedSpan:
    """An acceptable answer: its text, and where it stands (document id and character offsets)."""

    text: str
    review_id: str | None = None
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class JudgedQuestion:
    """One question, judged over every document of its product."""

    id: str
    item_id: str | None
    question: str
    answerable: str
    answers: tuple[JudgedSpan, ...] = ()
    domain: str = ""
    best: int | None = None
    # Card verdicts: a card's text (normalised, ``metrics.squad.normalize_answer``) -> whether a person found it acceptable.
    cards: Mapping[str, bool] = field(default_factory=dict, compare=False)
    where: str = field(default="", compare=False)  # the label file and line it was read from ("judged.jsonl, line 4")

    @property
    def spans(self) -> list[str]:
        """The acceptable answers' texts."""
        return [answer.text for answer in self.answers]

    def accepts(self, text: str) -> bool:
        """Whether an answer card of this text is right: the documents answer, and it matches a listed span
        (``is_right``) or a card verdict accepts it."""
        if self.answerable == "no":
            return False
        return is_right(text, self.spans) or self.cards.get(normalize_answer(text), False)

    def decided_by(self, text: str) -> str | None:
        """What decides an answer card of this text: ``spans`` (nothing answers, or it matches a listed span), ``verdict``
        (a person judged the card), or None (nothing: it counts as wrong, and is a card to judge)."""
        if self.answerable == "no" or is_right(text, self.spans):
            return "spans"
        return "verdict" if normalize_answer(text) in self.cards else None


@dataclass(frozen=True)
class Card:
    """One card a door shows: an answer's text (None: "no answer") and its stated chance of being right."""

    text: str | None
    chance: float | None = None

    @property
    def no_answer(self) -> bool:
        """Whether the card says "no answer"."""
        return self.text is None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _value(value: object) -> str:
    """A label's value as its line writes it (JSON), shortened when long."""
    return shown(json.dumps(value, ensure_ascii=False), 60)


def _span(answer: dict, where: str) -> JudgedSpan:
    """One answer span; offsets, when given, are whole numbers 0 <= start <= end with the document they point into."""
    review_id, start, end = answer.get("review_id"), answer.get("start"), answer.get("end")
    if review_id is not None and (not isinstance(review_id, str) or not review_id.strip()):
        raise QAError(f"{where}: review_id is {_value(review_id)}, not a document id.", SPAN_FIX)
    if start is not None or end is not None:
        for name, offset in (("start", start), ("end", end)):
            if not _whole(offset) or offset < 0:
                raise QAError(f"{where}: {name} is {_value(offset)}, not a character offset (a whole number, 0 or more).", SPAN_FIX)
        if start > end:
            raise QAError(f"{where}: start {start} is after end {end}.", SPAN_FIX)
        if review_id is None:
            raise QAError(f"{where}: start and end are given without the review_id of the document they point into.", SPAN_FIX)
    return JudgedSpan(answer["text"], review_id, start, end)


def _judged(row: object, where: str) -> JudgedQuestion:
    if not isinstance(row, dict):
        raise QAError(f"{where}: not a JSON object.", LABELS_FIX)
    missing = [key for key in ("id", "question", "answerable") if not isinstance(row.get(key), str) or not row[key].strip()]
    if row.get("answerable") is not None and "answerable" in missing:  # there, but not a word: name its value below
        missing.remove("answerable")
    if missing:
        raise QAError(f"{where}: no {', '.join(missing)}.", LABELS_FIX)
    if row["answerable"] not in ANSWERABLE:
        raise QAError(f"{where}: answerable is {_value(row['answerable'])}, not one of yes, partly or no.", "use yes, partly or no.")
    answers = row.get("answers") or []
    if not isinstance(answers, list) or not all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
        raise QAError(f"{where}: answers is not a list of objects with a text.", LABELS_FIX)
    if row["answerable"] != "no" and not any(a["text"].strip() for a in answers):
        raise QAError(
            f"{where}: answerable is {row['answerable']}, but no answer span is given.", "add the spans that answer it, or mark it no."
        )
    if row["answerable"] == "no" and answers:
        raise QAError(
            f"{where}: answerable is no, but {len(answers)} answer span(s) are given.",
            "mark it yes or partly if the spans answer it, else leave out the answers.",
        )
    spans = tuple(_span(answer, f"{where}: answers[{n}]") for n, answer in enumerate(answers))
    best = row.get("best")
    if best is not None and (not _whole(best) or not 0 <= best < len(answers)):
        raise QAError(
            f"{where}: best is {_value(best)}, but the line has {len(answers)} answer(s) (best counts them from 0).",
            "set best to the index of one of the answers (0: the first), or to null when there is none.",
        )
    item_id = row.get("item_id")
    return JudgedQuestion(
        id=row["id"],
        item_id=str(item_id) if item_id not in (None, "") else None,
        question=row["question"],
        answerable=row["answerable"],
        answers=spans,
        domain=str(row.get("domain") or ""),
        best=best,
        where=where,
    )


def _raise_first(problems: Sequence[QAError]) -> None:
    """The first problem found in the labels, saying how many more there are: all of them are found in one run."""
    if problems:
        first, more = problems[0], len(problems) - 1
        also = f" The labels hold {more} more problem{'s' if more > 1 else ''}." if more else ""
        raise QAError(f"{first.problem}{also}", first.fix)


def _lines(lines: Iterable[str], path: Path) -> Iterable[str]:
    """The file's lines; a file that is not UTF-8 text is one QAError naming it."""
    try:
        yield from lines
    except UnicodeDecodeError as error:
        raise QAError(
            f"{path.name} is not UTF-8 text (byte {error.start} of a line cannot be read).", "save the labels as UTF-8 JSON lines."
        ) from None


def _json_lines(paths: Iterable[str | Path], kind: str, each: str, fix: str) -> Iterable[tuple[object, str]]:
    """Each non-blank line of JSON lines files, parsed, with where it stands ("file, line N"); a missing file or a line
    that is not JSON is one QAError naming it."""
    for path in map(Path, paths):
        if not path.is_file():
            raise QAError(f"No {kind} file {path}.", f"pass the path of an existing JSON lines file ({each} a line).")
        with path.open(encoding="utf-8-sig", errors="strict") as lines:
            for number, line in enumerate(_lines(lines, path), 1):
                where = f"{path.name}, line {number}"
                if len(line) > MAX_LINE_CHARS:
                    raise QAError(f"{where}: longer than {MAX_LINE_CHARS:,} characters.", fix)
                if not line.strip():
                    continue
                try:
                    yield strict_json.loads(line), where
                except strict_json.Refused as error:  # a repeated key or NaN: which value was meant?
                    raise QAError(f"{where}: {error}.", fix) from None
                except json.JSONDecodeError as error:
                    raise QAError(f"{where}: not JSON ({error.msg}).", fix) from None
                except RecursionError:
                    raise QAError(f"{where}: JSON nested too deeply to be a {kind} line.", fix) from None


def load_judged(
    paths: Iterable[str | Path], verdicts: Iterable[str | Path] = (), problems: list[QAError] | None = None
) -> list[JudgedQuestion]:
    """Judged questions from JSON lines files (blank lines skipped), with the card verdicts of ``verdicts`` files
    (``load_card_verdicts``; those of questions not loaded are left out); bad lines are one QAError naming the first one's file
    and line, and how many more there are. Given a ``problems`` list, bad lines are added to it and left out instead, for
    ``evaluate_judged`` to count with what it finds against the collections."""
    gathered: list[QAError] = [] if problems is None else problems
    questions: list[JudgedQuestion] = []
    seen: dict[str, str] = {}
    for row, where in _json_lines(paths, "judged label", "one judged question", LABELS_FIX):
        try:
            question = _judged(row, where)
        except QAError as problem:
            gathered.append(problem)
            continue
        if question.id in seen:
            gathered.append(
                QAError(f"{where}: id {question.id!r} was already given ({seen[question.id]}).", "give every question its own id.")
            )
            continue
        seen[question.id] = where
        questions.append(question)
    if problems is None:
        _raise_first(gathered)
    if not questions and not gathered:
        raise QAError("The judged label files hold no question.", "pass files with one judged question a line.")
    cards = load_card_verdicts(verdicts)
    return [replace(q, cards=cards[q.id]) if q.id in cards else q for q in questions]


def load_card_verdicts(paths: Iterable[str | Path]) -> dict[str, dict[str, bool]]:
    """Card verdicts from JSON lines files, ``{"id": <judged question>, "text": <card>, "acceptable": true|false}`` a line
    (other keys, such as a ``note``, are ignored): question id -> normalised card text -> acceptable. Two lines that
    judge one card differently, or a line still to judge (``acceptable`` null), are one QAError naming the line."""
    cards: dict[str, dict[str, bool]] = {}
    seen: dict[tuple[str, str], str] = {}
    for row, where in _json_lines(paths, "card verdict", "one card verdict", VERDICTS_FIX):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not isinstance(row.get("text"), str):
            raise QAError(f"{where}: not an object with an id and a text.", VERDICTS_FIX)
        acceptable = row.get("acceptable")
        if not isinstance(acceptable, bool):
            raise QAError(f"{where}: acceptable is {json.dumps(acceptable)}.", "judge the card (true or false), or leave the line out.")
        text = normalize_answer(row["text"])
        known = cards.setdefault(row["id"], {})
        if known.get(text, acceptable) != acceptable:
            raise QAError(f"{where}: judges the card of {seen[row['id'], text]} the other way.", "keep one verdict per card.")
        known[text] = acceptable
        seen.setdefault((row["id"], text), where)
    return cards


def is_right(text: str, spans: Sequence[str]) -> bool:
    """F1 >= 0.5 with an acceptable span, or holding one whole and at most 3x as long."""
    answer = normalize_answer(text)
    for span in spans:
        gold = normalize_answer(span)
        if not gold or not answer:
            continue
        if token_f1(text, span) >= 0.5 or (f" {gold} " in f" {answer} " and len(answer) <= 3 * len(gold)):
            return True
    return False


def verdict(card: Card, judged: JudgedQuestion) -> str:
    """right, wrong, abstain-ok or abstain-missed (see the module doc)."""
    if card.no_answer:
        return "abstain-missed" if judged.answerable == "yes" else "abstain-ok"
    return "right" if judged.accepts(card.text or "") else "wrong"


def judge(judged: JudgedQuestion, cards: Sequence[Card]) -> dict:
    """One question's record: the first card, its verdict and stated chance, and what the first three hold."""
    first = cards[0] if cards else Card(None)
    first_verdict = verdict(first, judged)
    top3 = [verdict(card, judged) for card in cards[:3]]
    decided = [None if card.no_answer else judged.decided_by(card.text or "") for card in cards[:3]]
    return {
        "id": judged.id,
        "domain": judged.domain,
        "item_id": judged.item_id,
        "question": judged.question,
        "answerable": judged.answerable,
        "first": "" if first.no_answer else first.text,
        "verdict": first_verdict,
        "useful": first_verdict in ("right", "abstain-ok"),
        "chance": first.chance if first.chance is not None else math.nan,
        "right_top3": "right" in top3,
        "useful_top3": any(v in ("right", "abstain-ok") for v in top3),
        "cards": json.dumps([{"text": c.text, "chance": c.chance} for c in cards], ensure_ascii=False),
        "first_by_card_verdict": bool(decided) and decided[0] == "verdict",
        "to_judge": json.dumps([c.text for c, by in zip(cards, decided) if not c.no_answer and by is None], ensure_ascii=False),
    }


def summarize_judged(records: pd.DataFrame) -> pd.DataFrame:
    """Per domain and overall: the shares of each first-card verdict, useful first, right within three, ECE."""
    groups = [("all", records)]
    if records["domain"].nunique() > 1:  # one domain: its rows would repeat "all"
        groups += list(records.groupby("domain", sort=True))
    rows = []
    for name, part in groups:
        row = {"set": name, "questions": len(part), "useful_first": part["useful"].mean()}
        row.update({verdict_name.replace("-", "_"): (part["verdict"] == verdict_name).mean() for verdict_name in VERDICTS})
        row["right_top3"], row["useful_top3"] = part["right_top3"].mean(), part["useful_top3"].mean()
        stated = part["chance"].notna().all()  # a chance on every first card, or no calibration figure
        row["ece"] = expected_calibration_error(part["chance"], part["useful"]) if stated else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class JudgedRun:
    """One system's records over the judged questions, and their summary."""

    system: str
    records: pd.DataFrame
    summary: pd.DataFrame = field(init=False)

    def __post_init__(self) -> None:
        self.summary = summarize_judged(self.records)

    def reliability(self) -> pd.DataFrame | None:
        """The first cards' reliability bins, when every first card states a chance."""
        if self.records["chance"].isna().any():
            return None
        return reliability_table(self.records["chance"], self.records["useful"])


def judge_all(
    system: str,
    questions: Sequence[JudgedQuestion],
    ask: Callable[[JudgedQuestion], list[Card]],
    on_question: Callable[[], None] | None = None,
) -> JudgedRun:
    """Ask every question (``ask`` gives the cards a door shows, best first) and judge the cards."""
    records = []
    for question in questions:
        records.append(judge(question, ask(question)))
        if on_question is not None:
            on_question()
    return JudgedRun(system, pd.DataFrame.from_records(records))


def answer_cards(answers: Sequence) -> list[Card]:
    """The cards the doors show for a pipeline's answers, in their order: each span once (an index may hold
    a review twice), "no answer" as a card of its own, each with its stated chance when the stage gives one."""
    cards, seen = [], set()
    for answer in answers:
        meta = getattr(answer, "meta", None) or {}
        data = getattr(answer, "data", None)
        if data is None or not str(data).strip():
            cards.append(Card(None, meta.get("probability")))
            continue
        document, offset = getattr(answer, "document", None), getattr(answer, "document_offset", None)
        if document is not None and offset is not None:
            key = (document.meta.get("review_id", document.id), offset.start, offset.end)
            if key in seen:
                continue
            seen.add(key)
        cards.append(Card(str(data), meta.get("probability")))
    return cards


@dataclass(frozen=True)
class JudgedSystem:
    """A configuration to judge: a reader and its answer selector (``none``: the reader decides alone)."""

    reader: str
    selector: str
    top_k: int | None = None  # documents retrieved per question (None: the settings')

    @property
    def label(self) -> str:
        """The system's name in reports: its reader's and selector's folder names (and the documents read, when set)."""
        return self.named(Path(self.reader).name, Path(self.selector).name)

    def named(self, reader: str, selector: str) -> str:
        """The system's name with its reader and selector called ``reader`` and ``selector``."""
        name = f"{reader} + {selector if self.selector != 'none' else 'no selector'}"
        return name if self.top_k is None else f"{name}, top {self.top_k}"


def system_labels(systems: Sequence[JudgedSystem]) -> list[str]:
    """Each system's name in reports; two that would share one (folders of the same name) are named by their paths."""
    short = [system.label for system in systems]
    return [system.named(system.reader, system.selector) if short.count(label) > 1 else label for system, label in zip(systems, short)]


def judged_indexes(settings, names: Iterable[str], collections: bool, embeddings: bool, progress: bool = True) -> dict:
    """The index each judged question is asked of, by name: the collection of that name when ``collections`` (the
    user named it) or when one exists, else the SubjQA domain's index (built on first use)."""
    from qa_system.ingestion import list_collections, open_collection
    from qa_system.ingestion.indexing import open_or_build_index

    names = list(names)
    if not all(names):
        raise QAError(
            "A judged question names no domain and no --collection was given.", "pass --collection NAME, or give each line a domain."
        )
    own = set() if collections else {c.name for c in list_collections(settings)}
    return {
        name: open_collection(settings, name, embeddings)
        if collections or name in own
        else open_or_build_index(settings, name, embeddings=embeddings, progress=progress)
        for name in names
    }


def _label_where(question: JudgedQuestion) -> str:
    return question.where or f"Judged question {question.id!r}"


def unknown_domains(settings, questions: Sequence[JudgedQuestion]) -> tuple[set[str], list[QAError]]:
    """The ``domain`` values that name neither a collection nor a SubjQA domain of ``settings.data_dir``, and a problem for
    each question that gives one."""
    from qa_system.ingestion import list_collections
    from qa_system.sources import available_domains

    own = {c.name for c in list_collections(settings)}
    domains = available_domains(settings.data_dir)
    unknown = {q.domain for q in questions if q.domain and q.domain not in own and q.domain not in domains}
    fix = (
        f"use a collection's name ({', '.join(sorted(own)) or 'none yet'}), a SubjQA domain of {settings.data_dir} "
        f"({', '.join(domains) or 'none found'}), or pass --collection NAME."
    )
    return unknown, [
        QAError(f"{_label_where(q)}: domain '{shown(q.domain)}' is neither a collection nor a SubjQA domain.", fix)
        for q in questions
        if q.domain in unknown
    ]


def _documents(index, ids: Iterable[str]) -> dict[str, tuple[str, str | None]]:
    """The documents of ``index`` with these ids, put back together from their passages: id -> (text, item_id). An own
    collection's passages name their document (``document_id``), a SubjQA review its ``review_id``."""
    from qa_system.ingestion.splitting import source_text

    ids = set(ids)
    if not ids:
        return {}
    conditions = [{"field": field, "operator": "in", "value": sorted(ids)} for field in ("meta.document_id", "meta.review_id", "id")]
    passages: dict[str, list] = {}
    for passage in index.store.filter_documents(filters={"operator": "OR", "conditions": conditions}):
        key = next((value for value in (passage.meta.get("document_id"), passage.meta.get("review_id")) if value in ids), passage.id)
        passages.setdefault(key, []).append(passage)
    return {key: (source_text(parts), parts[0].meta.get("item_id")) for key, parts in passages.items()}


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def _span_problem(span: JudgedSpan, documents: Mapping, item_id: str | None, where: str, place: tuple[str, str]) -> QAError | None:
    """What is wrong with one answer span against ``documents``, those of ``place`` (its name in words, and the flag
    that names it: "collection 'manuals'", "--collection manuals"); None when nothing is."""
    if span.review_id is None:
        return None
    if span.review_id not in documents:
        return QAError(
            f"{where}: review_id '{shown(span.review_id)}' is not a document of {place[0]}.",
            f"use the id of one of its documents (`qa-system search QUESTION {place[1]}` shows them).",
        )
    text, product = documents[span.review_id]
    if item_id is not None and product is not None and product != item_id:
        return QAError(
            f"{where}: '{shown(span.review_id)}' is a document of product '{shown(product)}', not of the question's '{shown(item_id)}'.",
            "list only spans found in the documents of the question's product.",
        )
    if span.start is None:
        if _squeezed(span.text) not in _squeezed(text):
            return QAError(f"{where}: the text is not in '{shown(span.review_id)}'.", SPAN_FIX)
        return None
    if span.end > len(text):
        return QAError(f"{where}: end {span.end} is past the end of '{shown(span.review_id)}' ({len(text)} characters).", SPAN_FIX)
    # The text of a document put back together from passages may hold a space where a line break stood between them.
    if _squeezed(text[span.start : span.end]) != _squeezed(span.text):
        return QAError(
            f"{where}: the text {_value(span.text)} is not the document's text at {span.start}:{span.end} "
            f"({_value(text[span.start : span.end])}).",
            SPAN_FIX,
        )
    return None


def check_judged(
    questions: Sequence[JudgedQuestion],
    indexes: Mapping[str, object],
    collection: str | None = None,
    problems: Sequence[QAError] = (),
) -> None:
    """Every judged question checked against the index it is asked of (``indexes`` by name: ``collection``, else the
    question's domain): its product is one the index holds, and each answer span names a document of that product
    whose text at its offsets is the span's (whitespace runs compared as one space). The first problem (of ``problems``,
    found before, then these) is one QAError naming the label's file and line, and how many more there are."""
    problems = list(problems)
    by_index: dict[str, list[JudgedQuestion]] = {}
    for question in questions:
        by_index.setdefault(collection or question.domain, []).append(question)
    for name, part in by_index.items():
        index = indexes[name]
        counts = index.item_counts()
        place = (f"collection '{name}'", f"--collection {name}") if index.name == name else (f"SubjQA domain '{name}'", f"--domain {name}")
        documents = _documents(index, (span.review_id for q in part for span in q.answers if span.review_id is not None))
        for question in part:
            where = _label_where(question)
            if question.item_id is not None and counts and question.item_id not in counts:
                problems.append(
                    QAError(
                        f"{where}: item_id '{shown(question.item_id)}' has no documents in {place[0]}.",
                        f"use an item id that `qa-system products {place[1]}` lists.",
                    )
                )
                continue
            for number, span in enumerate(question.answers):
                if (problem := _span_problem(span, documents, question.item_id, f"{where}: answers[{number}]", place)) is not None:
                    problems.append(problem)
    _raise_first(problems)


def evaluate_judged(
    settings,
    questions: Sequence[JudgedQuestion],
    systems: Sequence[JudgedSystem],
    collection: str | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    problems: Sequence[QAError] = (),
    index=None,
) -> list[JudgedRun]:
    """Ask every judged question of ``questions`` as the doors do (the configured retriever over the
    question's product, ``settings.top_k_retriever`` documents, the extractive pipeline) with each system,
    and judge the cards. Questions are asked of ``index`` (a collection opened already), else of ``collection``, else
    of the collection their domain names, else of their SubjQA domain's (``judged_indexes``). Every label is checked
    against them first (``check_judged``), and the first problem is raised with the count of all of them, those already
    found in the label files (``problems``) included."""
    from qa_system.evaluation.answering import confidence_note
    from qa_system.evaluation.report import check_out_dir
    from qa_system.pipelines import build_qa_pipeline
    from qa_system.progress import Progress

    check_out_dir(out_dir)
    if index is not None:
        collection = index.name
    embeddings = settings.retriever != "bm25"
    by_collection: dict[str | None, list[JudgedQuestion]] = {}
    for question in questions:
        if collection is None and not question.domain:
            raise QAError(
                f"{_label_where(question)}: no domain, and no --collection was given.",
                "pass --collection NAME, or give each line a domain: a collection's name or a SubjQA domain.",
            )
        by_collection.setdefault(collection or question.domain, []).append(question)
    unknown, named = (set(), []) if collection else unknown_domains(settings, questions)
    indexes = (
        {index.name: index}
        if index is not None
        else judged_indexes(settings, [name for name in by_collection if name not in unknown], collection is not None, embeddings, progress)
    )
    # Before any question is asked: a bad label would stop the run midway.
    check_judged([q for q in questions if q.domain not in unknown], indexes, collection, [*problems, *named])
    runs, notes = [], []
    bar = Progress(len(questions) * len(systems), "judged questions", "questions", enabled=progress)
    for system, label in zip(systems, system_labels(systems)):
        configured = settings.model_copy(
            update={
                "reader_model": system.reader,
                "selector_model": system.selector,
                "top_k_retriever": system.top_k or settings.top_k_retriever,
            }
        )
        records = []
        for name, part in by_collection.items():
            pipeline = build_qa_pipeline(configured.retriever, configured, index=indexes[name], answer_stage="extractive")
            if (note := confidence_note(indexes[name], configured, part, system.reader)) and note not in notes:
                notes.append(note)

            def ask(question: JudgedQuestion, pipeline=pipeline) -> list[Card]:
                result = pipeline.run(
                    question.question, item_id=question.item_id, top_k=configured.top_k_retriever, top_k_reader=configured.top_k_reader
                )
                return answer_cards(result.get("answers", []))

            records.append(judge_all(label, part, ask, on_question=bar.update).records)
        runs.append(JudgedRun(label, pd.concat(records, ignore_index=True)))
    bar.close()
    if out_dir is not None:
        write_judged_report(out_dir, runs, questions, notes)
    return runs


def judged_table(runs: Sequence[JudgedRun]) -> pd.DataFrame:
    """Every run's summary, one table (the system's name first)."""
    return pd.concat([run.summary.assign(system=run.system) for run in runs], ignore_index=True).pipe(
        lambda t: t[["system", *[c for c in t if c != "system"]]]
    )


def write_judged_report(
    out_dir: str | Path, runs: Sequence[JudgedRun], questions: Sequence[JudgedQuestion], extra_notes: Sequence[str] = ()
) -> Path:
    """report.json / .csv / .md, records.csv (every question's cards and verdict), reliability.png and the cards to judge
    (``extra_notes``: more lines for the report's notes)."""
    from qa_system.evaluation.report import write_report
    from qa_system.metrics.calibration import reliability_diagram

    tables = {run.system: table for run in runs if (table := run.reliability()) is not None and not table.empty}
    figures = (
        {"reliability.png": reliability_diagram(tables, title="First card: stated chance against judged usefulness")} if tables else {}
    )
    sections = (
        {"reliability (10 bins)": pd.concat([t.assign(system=name) for name, t in tables.items()], ignore_index=True)} if tables else {}
    )
    answerable = pd.Series([q.answerable for q in questions]).value_counts().to_dict()
    notes = [
        "Each question asked as the doors ask it; the cards judged over every document of the product (judged label format).",
        "useful_first = right + abstain_ok; right_top3: a right answer within the first three cards; useful_top3: a right answer, or an "
        "acceptable 'no answer', within the first three; ece: the first card's stated chance against its usefulness.",
        f"Questions: {len(questions)} ({', '.join(f'{k} {v}' for k, v in sorted(answerable.items()))}).",
        *extra_notes,
    ]
    records = pd.concat([run.records.assign(system=run.system) for run in runs], ignore_index=True)
    to_judge = write_cards_to_judge(Path(out_dir) / CARDS_TO_JUDGE, records, questions)
    by_verdict = ", ".join(f"{run.system} {int(run.records['first_by_card_verdict'].sum())}" for run in runs)
    notes.append(f"First cards decided by a card verdict (--verdicts): {by_verdict}.")
    notes.append(
        f"Answer cards within the first three that match no listed span and have no verdict (counted wrong): {to_judge}, in {CARDS_TO_JUDGE} to judge."
    )
    return write_report(
        out_dir,
        "Judged questions: the first card as a user reads it",
        judged_table(runs),
        {"systems": [r.system for r in runs]},
        figures,
        sections,
        records,
        notes,
    )


def write_cards_to_judge(path: Path, records: pd.DataFrame, questions: Sequence[JudgedQuestion]) -> int:
    """Each answer card within the first three that no listed span and no verdict decides, once, as a card verdict line
    with ``acceptable`` null (to fill in: true or false); returns how many."""
    asked = {q.id: q.question for q in questions}
    lines = {}
    for qid, texts in zip(records["id"], records["to_judge"]):
        for text in json.loads(texts):
            lines.setdefault((qid, normalize_answer(text)), {"id": qid, "question": asked.get(qid, ""), "text": text, "acceptable": None})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines.values()), encoding="utf-8")
    return len(lines)
