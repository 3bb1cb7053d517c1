"""How far SubjQA's annotators agree with one another: the human reference beside a model's figures.

SubjQA's CSVs hold one row per annotation, and about half of its questions were annotated twice or
more. Two standard measures:

* **Whether there is an answer**: for each question annotated at least twice, the share of its
  annotation pairs that agree (both marked a span, or both "no answer"), and Fleiss' kappa, which
  corrects that agreement for chance (0: no better than chance; 1: always agree).
* **A held-out annotator** (SQuAD's human-performance protocol): each annotation of such a question
  is a prediction, scored against the question's other annotations with the official SQuAD v2 EM /
  F1; "always no answer", and any model's predictions, are scored against the very same gold: the
  model in the annotator's seat.

`qa-system eval reader|pipeline` score a model against all of a question's annotations, one more than
a held-out annotator faces; the seat puts both on the same gold. The rows are a reference, not a
ceiling: a model that learns when most annotators answer can beat any single one. Only SubjQA's CSVs
keep one row per annotation; other labels have no such rows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.evaluation.report import write_report
from qa_system.ingestion.labels import evaluation_questions
from qa_system.metrics.squad import best_scores, gold_answers
from qa_system.sources.subjqa import LabelledQuestion

ANNOTATOR, NO_ANSWER = "held-out annotator", "always no answer"
PREDICTIONS_FIX = "pass the predictions-*.json that `qa-system eval reader|pipeline` wrote for the same domain and split, without --limit."


def annotated_twice(questions: Sequence[LabelledQuestion]) -> list[LabelledQuestion]:
    """The questions with two annotations or more: the only ones whose annotators can be compared."""
    return [q for q in questions if len(q.annotations) > 1]


def read_predictions(path: str | Path) -> dict[str, str]:
    """A predictions file in the official SQuAD v2 format ({question id: answer, "" = none}), as `qa-system eval reader|pipeline` write them."""
    try:
        predictions = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:  # RecursionError: arrays nested thousands deep
        raise QAError(f"Cannot read predictions {path}: {error}.", PREDICTIONS_FIX) from error
    if not isinstance(predictions, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in predictions.items()):
        raise QAError(f"{path} is not SQuAD v2 predictions (an object of question id -> answer text).", PREDICTIONS_FIX)
    return predictions


def held_out_annotations(questions: Sequence[LabelledQuestion], predictions: dict[str, dict[str, str]] | None = None) -> pd.DataFrame:
    """One row per annotation of a question annotated at least twice and per system that answers in its seat: the annotation
    itself, "no answer", and each of ``predictions`` ({system: {question id: answer}}), all scored against the others' annotations."""
    predictions, questions = predictions or {}, annotated_twice(questions)
    for system, answers in predictions.items():
        missing = [q.id for q in questions if q.id not in answers]
        if missing:
            raise QAError(f"{system} has no answer for {len(missing)} of the questions (e.g. {missing[0]}).", PREDICTIONS_FIX)
    rows = []
    for question in questions:
        for i, annotation in enumerate(question.annotations):
            golds = gold_answers(question.annotations[:i] + question.annotations[i + 1 :])
            seat = {ANNOTATOR: annotation, NO_ANSWER: "", **{system: answers[question.id] for system, answers in predictions.items()}}
            for system, prediction in seat.items():
                em, f1 = best_scores(prediction, golds)
                rows.append(
                    {
                        "id": question.id,
                        "annotation": i,
                        "system": system,
                        "prediction": prediction,
                        "answerable": golds != [""],
                        "em": em,
                        "f1": f1,
                    }
                )
    return pd.DataFrame(rows, columns=["id", "annotation", "system", "prediction", "answerable", "em", "f1"])


def answerability_agreement(questions: Sequence[LabelledQuestion]) -> dict[str, float]:
    """Over the questions annotated at least twice: the share of annotation pairs that agree on whether there is an
    answer (averaged per question), and Fleiss' kappa for a varying number of annotators per question."""
    per_question, categories = [], Counter()
    for question in annotated_twice(questions):
        n = len(question.annotations)
        counts = Counter(text != "" for text in question.annotations)
        per_question.append(sum(c * (c - 1) for c in counts.values()) / (n * (n - 1)))
        categories.update(counts)
    if not per_question:
        return {
            "questions": 0,
            "agreement": float("nan"),
            "chance_agreement": float("nan"),
            "kappa": float("nan"),
            "span_share": float("nan"),
        }
    total = sum(categories.values())
    chance = sum((c / total) ** 2 for c in categories.values())
    agreement = sum(per_question) / len(per_question)
    kappa = (agreement - chance) / (1 - chance) if chance < 1 else float("nan")
    return {
        "questions": len(per_question),
        "agreement": agreement,
        "chance_agreement": chance,
        "kappa": kappa,
        "span_share": categories[True] / total,
    }


def summarize_annotators(records: pd.DataFrame) -> pd.DataFrame:
    """EM / F1 per system in an annotator's seat: over all held-out annotations, and by whether the others found an answer."""
    rows = []
    for system, of_system in records.groupby("system", sort=False):
        groups = {"all": of_system, "answerable": of_system[of_system["answerable"]], "unanswerable": of_system[~of_system["answerable"]]}
        rows += [
            {
                "system": system,
                "group": name,
                "annotations": len(g),
                "em": g["em"].mean(),
                "f1": g["f1"].mean(),
                "answered": (g["prediction"] != "").mean(),
            }
            for name, g in groups.items()
        ]
    return pd.DataFrame(rows)


def evaluate_annotators(
    settings: Settings,
    domain: str = "electronics",
    split: str = "test",
    out_dir: str | Path | None = None,
    limit: int | None = None,
    predictions: Sequence[str | Path] = (),
) -> dict:
    """Agreement of a SubjQA split's annotators, and each predictions file scored in an annotator's seat (the same gold);
    writes report.json / .csv / .md and records.csv to ``out_dir`` when given."""
    questions, what, source = evaluation_questions(settings, domain, split, None, limit)
    if not annotated_twice(questions):
        raise QAError(f"No question of {what} has two annotations.", "use SubjQA's CSV files (the hub dataset keeps no row per annotator).")
    systems = {}
    for path in map(Path, predictions):
        name = path.stem.removeprefix("predictions-")
        systems[f"{path.parent.name}/{name}" if name in systems else name] = read_predictions(path)  # two reports' same system: both kept
    records = held_out_annotations(questions, systems)
    agreement = answerability_agreement(questions)
    metrics = summarize_annotators(records)
    notes = [
        f"{agreement['questions']} of {len(questions)} questions have two annotations or more; "
        f"their annotators agree on whether there is an answer for {agreement['agreement']:.3f} of pairs "
        f"(chance: {agreement['chance_agreement']:.3f}; Fleiss' kappa {agreement['kappa']:.3f}).",
        "Each annotation is scored against the question's other annotations (SQuAD's human-performance protocol); "
        "'always no answer' and each predictions file against the same gold, in the annotator's seat.",
    ]
    summary = {**source, "questions": len(questions), "answerability": agreement}
    if out_dir is not None:
        write_report(out_dir, f"Annotator agreement: {what}", metrics, summary, records=records, notes=notes)
    return {"metrics": metrics, "answerability": agreement, "records": records, "notes": notes}
