"""Tuning the phrase encoder on judged labels: does this phrase answer what the shopper asked.

The dense retriever's sentence encoder says whether a candidate phrase talks about the question's
topic (``reading.phrase_similarity``); judged questions say which phrases answer it. The encoder is
fine-tuned on them with sentence-transformers' ``MultipleNegativesRankingLoss``: each question
against one of its right phrases (a listed span, or a candidate a span or card verdict accepts), one
of its own wrong candidates, and the other phrases of its batch.

The selector learns from the similarity on its training questions, so those must be what a tuned
encoder says of questions it never saw, as at serving time: ``cross_fitted_encoders`` tunes one
encoder per fold of the products, and each product's candidates are scored by the encoder tuned
without it. The encoder served is tuned on all the questions. Each tuned encoder is kept with the
key of its data and recipe, so a second run reuses the folds the first finished.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from qa_system.evaluation.judged import JudgedQuestion
from qa_system.reading.selection_features import candidates
from qa_system.training.judged_selector import MODE
from qa_system.training.selector import _read_document

TUNING_FILE = "phrase_tuning.json"


@dataclass(frozen=True)
class PhraseTuning:
    """The recipe: two passes, batches of 32 triplets (the other 31 questions' phrases are in-batch negatives)."""

    epochs: int = 2
    learning_rate: float = 2e-5
    batch_size: int = 32
    max_seq_length: int = 128
    seed: int = 0


@dataclass(frozen=True)
class PhraseExample:
    """One judged question's phrases: those that answer it and the candidates that do not."""

    question: str
    item_id: str
    right: tuple[str, ...]
    wrong: tuple[str, ...]


def phrase_examples(records: Sequence[dict], judged: dict[str, JudgedQuestion], mode: str = MODE) -> list[PhraseExample]:
    """For each record of ``judged_selector.read_judged``: the candidates grown to phrases, sorted into right and wrong
    by the question's label, and its listed spans among the right ones."""
    examples = []
    for record in sorted(records, key=lambda r: r["id"]):
        label = judged[record["id"]]
        documents = [_read_document(d) for d in record["modes"][mode]]
        texts = {c.text for c in candidates(documents, phrases=True)}
        right = {text for text in texts if label.accepts(text)} | set(label.spans if label.answerable != "no" else ())
        wrong = texts - right
        examples.append(PhraseExample(record["question"], record["item_id"], tuple(sorted(right)), tuple(sorted(wrong))))
    return examples


def triplets(examples: Sequence[PhraseExample], seed: int = 0) -> dict[str, list[str]]:
    """(question, right phrase, wrong phrase) columns: every right phrase once, beside one of the question's own wrong
    candidates (another question's when it has none)."""
    rng = random.Random(seed)
    every_wrong = [text for e in examples for text in e.wrong]
    columns: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for example in examples:
        for phrase in example.right:
            columns["anchor"].append(example.question)
            columns["positive"].append(phrase)
            columns["negative"].append(rng.choice(example.wrong or every_wrong))
    return columns


def _key(base_model: str, examples: Sequence[PhraseExample], tuning: PhraseTuning) -> str:
    data = json.dumps([str(base_model), [asdict(e) for e in examples], asdict(tuning)], sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def tune_phrase_encoder(
    base_model: str,
    examples: Sequence[PhraseExample],
    output_dir: str | Path,
    tuning: PhraseTuning = PhraseTuning(),
    device: str = "cpu",
    progress: bool = True,
) -> Path:
    """Fine-tune ``base_model`` on ``examples`` and save it (sentence-transformers format) to ``output_dir``; an encoder
    already there, tuned from the same model, data and recipe, is kept as it is."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments

    from qa_system.devices import is_cuda
    from qa_system.errors import QAError
    from qa_system.reproducibility import seed_everything
    from qa_system.training.progress import quiet_progress

    output_dir = Path(output_dir)
    key = _key(base_model, examples, tuning)
    done = output_dir / TUNING_FILE
    if done.is_file() and json.loads(done.read_text(encoding="utf-8")).get("key") == key:
        return output_dir
    columns = triplets(examples, tuning.seed)
    if not columns["anchor"] or not any(e.wrong for e in examples):
        raise QAError(
            "The judged questions give no right and wrong phrases to tune the phrase encoder on.", "pass answerable judged questions."
        )
    seed_everything(tuning.seed)
    model = SentenceTransformer(str(base_model), device=device)
    model.max_seq_length = tuning.max_seq_length
    steps = tuning.epochs * -(-len(columns["anchor"]) // tuning.batch_size)
    scratch = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    arguments = SentenceTransformerTrainingArguments(
        output_dir=str(scratch / "checkpoints"),
        num_train_epochs=tuning.epochs,
        per_device_train_batch_size=tuning.batch_size,
        learning_rate=tuning.learning_rate,
        warmup_steps=int(0.1 * steps),
        seed=tuning.seed,
        save_strategy="no",
        report_to=[],
        use_cpu=not is_cuda(device),
        disable_tqdm=not progress,
        dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=arguments, train_dataset=Dataset.from_dict(columns), loss=MultipleNegativesRankingLoss(model)
    )
    quiet_progress(trainer, progress, f"tuning the phrase encoder on {len(examples)} questions")
    trainer.train()
    model.save(str(scratch / "model"))
    store_in_half_precision(scratch / "model")
    info = {"key": key, "base_model": str(base_model), "questions": len(examples), "triplets": len(columns["anchor"]), **asdict(tuning)}
    (scratch / "model" / TUNING_FILE).write_text(json.dumps(info, indent=1), encoding="utf-8")
    shutil.rmtree(output_dir, ignore_errors=True)
    (scratch / "model").rename(output_dir)
    shutil.rmtree(scratch, ignore_errors=True)
    return output_dir


def store_in_half_precision(model_dir: Path) -> None:
    """Keep the saved weights in float16: half the size on disk, loaded back as float32 (the config's dtype), and the
    same vectors to about 1e-4."""
    from safetensors.torch import load_file, save_file

    for path in Path(model_dir).glob("*.safetensors"):
        weights = load_file(str(path))
        save_file({name: w.half() if w.is_floating_point() else w for name, w in weights.items()}, str(path), metadata={"format": "pt"})


def cross_fitted_encoders(
    base_model: str,
    examples: Sequence[PhraseExample],
    work_dir: str | Path,
    folds: int = 5,
    tuning: PhraseTuning = PhraseTuning(),
    device: str = "cpu",
    progress: bool = True,
) -> dict[str, Path]:
    """For each product, an encoder tuned on the questions of the other folds (products split at random into ``folds``),
    kept under ``work_dir``: what scores that product's candidates for the selector's training rows."""
    products = np.array(sorted({e.item_id for e in examples}))
    fold_of = dict(zip(np.random.default_rng(tuning.seed).permutation(products), np.arange(len(products)) % folds))
    encoder_of = {}
    for fold in range(folds):
        inside = [e for e in examples if fold_of[e.item_id] != fold]
        path = tune_phrase_encoder(base_model, inside, Path(work_dir) / f"phrase-encoder-fold-{fold}", tuning, device, progress)
        encoder_of.update({str(item): path for item, f in fold_of.items() if f == fold})
    return encoder_of
