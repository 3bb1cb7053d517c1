"""Fine-tuning the dense retriever's encoders on SubjQA (question, own review) pairs.

Farm-haystack 1.x could train its DPR retriever; Haystack 3 cannot, so this runs sentence-transformers'
``SentenceTransformerTrainer`` (checkpoints, ``--resume-from``) with its ``MultipleNegativesRankingLoss``
over batches made here (``product_batches``, fed in order by ``FixedBatches``): each question is scored
against its own review, the other reviews of its batch (in-batch negatives) and ``hard_negatives``
more. Batches keep a product's questions together, so the in-batch negatives include the other
reviews *of the same product in the same split*: exactly the candidates the retriever must tell
apart at query time, where the filters are item_id and split. Reviews of other splits are never
used (they are the dev and test data). No batch holds the same review twice, so no question is
pushed away from its own review.

Three kinds of encoder (``encoders``):

* ``question`` (default): only the question encoder learns, against the frozen review vectors of
  the base model. The saved index stays valid (no re-embedding), every review is encoded once,
  and a step costs a forward and backward pass over short questions only: minutes on 2 CPU
  cores, where training the passage side costs hours.
* ``shared``: one encoder for questions and reviews (the reviews must be re-embedded).
* ``separate``: question and passage encoders both learn (DPR-style; re-embedded).

SubjQA's dev splits copy train: 249 of electronics' 255 dev questions are train questions on the
same review. Training leaves out every train review that is also a dev review (and its
questions), so that dev recall measures retrieval, not memory.

After each epoch: strict recall@1 and MRR on the dev splits of the training domains, per-product
and split filters as in ``qa-system eval retriever``, from batch-encoded embeddings. The epoch
with the best mean dev recall@1 (MRR breaks ties) is kept; training stops after ``patience``
epochs without gain. Models are saved with ``model.save`` (sentence-transformers format, which
``SentenceTransformersTextEmbedder`` and the indexer load by path), with ``qa_system.json`` (kind,
passage encoder, data, hyperparameters, dev figures, time, machine) and a model card (README.md);
``retrieval.encoders.tuned_encoders`` says which encoder settings a saved model needs.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from transformers import TrainerCallback

from qa_system.config import Settings
from qa_system.devices import is_cuda, resolve_device
from qa_system.errors import QAError, check_count, check_number
from qa_system.evaluation.retrieval import run_retriever
from qa_system.metrics.ranking import retrieval_metrics
from qa_system.reading.model import MODEL_INFO_FILE, read_model_info
from qa_system.reproducibility import machine, seed_everything
from qa_system.retrieval.encoders import DEFAULT_RETRIEVER_MODEL
from qa_system.sources import LabelledQuestion, SubjQA, in_split, load_subjqa, split_names
from qa_system.training.progress import quiet_progress

DEV_KS = (1, 3)
ENCODER_KINDS = ("question", "shared", "separate")


@dataclass(frozen=True)
class RetrieverTrainingConfig:
    """Hyperparameters of one fine-tuning run (all recorded in the model's qa_system.json)."""

    encoders: str = "question"
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 2e-5
    seed: int = 42
    hard_negatives: int = 1
    max_seq_length: int = 256  # word pieces per text for the encoders that learn (a frozen one keeps its own)
    scale: float = 20.0  # MultipleNegativesRankingLoss's inverse temperature
    patience: int = 1
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_steps: int | None = None  # stop after this many optimiser steps (smoke runs)
    checkpoint_steps: int = 100  # a checkpoint every this many steps (and at each epoch's end) in OUTPUT/checkpoints

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_seq_length", "patience", "checkpoint_steps"):
            check_count(getattr(self, name), name)
        check_count(self.seed, "seed", 0)
        check_count(self.hard_negatives, "hard_negatives", 0)
        check_count(self.max_steps, "max_steps", optional=True)
        check_number(self.learning_rate, "learning_rate", 0, above=True)
        check_number(self.scale, "scale", 0, above=True)
        check_number(self.warmup_ratio, "warmup_ratio", 0, maximum=1)
        check_number(self.weight_decay, "weight_decay", 0)


@dataclass(frozen=True)
class TrainingPair:
    """A question and the id of its own review; ``product`` is (domain, item_id)."""

    question: str
    document_id: str
    product: tuple[str, str]


@dataclass
class TrainingData:
    """The pairs to learn from and the reviews they may use (positives and negatives)."""

    pairs: list[TrainingPair]
    texts: dict[str, str]
    reviews_of_product: dict[tuple[str, str], list[str]]
    reviews_of_domain: dict[str, list[str]]


@dataclass(frozen=True)
class Batch:
    """Texts for one step: questions, their reviews, and one column of reviews per hard negative."""

    questions: list[str]
    positive_ids: list[str]
    negative_ids: list[list[str]]  # [negative index][example]

    def columns(self, texts: dict[str, str]) -> list[list[str]]:
        """The batch's texts, column by column: questions, their reviews, then each hard negative's."""
        return [self.questions, [texts[i] for i in self.positive_ids], *([texts[i] for i in column] for column in self.negative_ids)]


@dataclass
class RetrieverTrainingResult:
    """What a run gave: where the best epoch's encoders are, its dev figures, every epoch's, and how far it went."""

    output_dir: Path
    best_epoch: int
    dev_metrics: dict[str, dict[str, float]]
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0  # optimiser steps done, a resumed run's included
    finished: bool = True  # False: stopped before its last step (resume it); its checkpoints are kept


def held_out_reviews(data: SubjQA) -> set[tuple[str, str]]:
    """(domain, review_id) of every review in a dev split: training never sees them."""
    return {(d.meta["domain"], d.meta["review_id"]) for d in data.documents if in_split(d, "dev")}


def training_data(data: SubjQA, split: str = "train") -> TrainingData:
    """The ``split``'s (question, own review) pairs and reviews, less the held-out ones."""
    held_out = held_out_reviews(data)
    documents = [d for d in data.documents if in_split(d, split) and (d.meta["domain"], d.meta["review_id"]) not in held_out]
    reviews_of_product: dict[tuple[str, str], list[str]] = defaultdict(list)
    reviews_of_domain: dict[str, list[str]] = defaultdict(list)
    for document in documents:
        reviews_of_product[(document.meta["domain"], document.meta["item_id"])].append(document.id)
        reviews_of_domain[document.meta["domain"]].append(document.id)
    texts = {d.id: d.content or "" for d in documents}
    pairs = [
        TrainingPair(q.question, q.document_id, (q.domain, q.item_id))
        for q in data.questions
        if q.split == split and q.document_id in texts
    ]
    return TrainingData(pairs, texts, dict(reviews_of_product), dict(reviews_of_domain))


def product_batches(data: TrainingData, batch_size: int, hard_negatives: int, rng: random.Random) -> list[Batch]:
    """Shuffled batches that keep a product's questions together, with no review twice in a batch.

    Together, a question's in-batch negatives include the other reviews of its product (the
    positives of its neighbours); ``hard_negatives`` more per question come from the product's
    reviews not yet in the batch, topped up from other products of the domain. A question whose
    review is already in the batch waits for the next one, so no question is pushed away from
    its own review.
    """
    groups: dict[tuple[str, str], list[TrainingPair]] = defaultdict(list)
    for pair in data.pairs:
        groups[pair.product].append(pair)
    products = list(groups)
    rng.shuffle(products)
    pending = deque(pair for product in products for pair in rng.sample(groups[product], len(groups[product])))
    batches = []
    while pending:
        chosen, used, deferred = [], set(), []
        while pending and len(chosen) < batch_size:
            pair = pending.popleft()
            if pair.document_id in used:
                deferred.append(pair)
                continue
            chosen.append(pair)
            used.add(pair.document_id)
        pending.extendleft(reversed(deferred))
        negatives = []
        for pair in chosen:
            picks = _unused(data.reviews_of_product[pair.product], used, hard_negatives, rng)
            picks += _unused(data.reviews_of_domain[pair.product[0]], used | set(picks), hard_negatives - len(picks), rng)
            if len(picks) < hard_negatives:
                raise QAError(
                    f"The {pair.product[0]} reviews are too few for {hard_negatives} hard negatives per question.",
                    "lower --hard-negatives.",
                )
            used.update(picks)
            negatives.append(picks)
        batches.append(
            Batch(
                [p.question for p in chosen], [p.document_id for p in chosen], [list(c) for c in zip(*negatives)] if hard_negatives else []
            )
        )
    return batches


def _unused(candidates: list[str], used: set[str], count: int, rng: random.Random) -> list[str]:
    if count <= 0:
        return []
    free = [c for c in candidates if c not in used]
    return rng.sample(free, min(count, len(free)))


# ------------------------------------------------------------------------------------ dev recall


def encode(model, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """Unit-length embeddings (as the indexer and the query embedder produce them)."""
    return model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)


def dev_recall(
    query_model, passages: np.ndarray, questions: Sequence[LabelledQuestion], documents: Sequence[Document], label: str = "dev"
) -> dict[str, float]:
    """Strict recall@1/3 and MRR with per-product and split filters; ``passages`` are the documents' vectors.

    The same records and metrics as ``evaluate_retrievers``; only the ranking is computed from
    batch-encoded questions instead of one pipeline run per question.
    """
    queries = encode(query_model, [q.question for q in questions])
    rows: dict[tuple[str, str], list[int]] = defaultdict(list)
    for row, document in enumerate(documents):
        for split in split_names(document):
            rows[(document.meta["item_id"], split)].append(row)
    query_row = {id(q): i for i, q in enumerate(questions)}

    def retrieve(question: LabelledQuestion, depth: int) -> list[Document]:
        candidates = rows[(question.item_id, question.split)]
        scores = passages[candidates] @ queries[query_row[id(question)]]
        order = np.argsort(-scores, kind="stable")[:depth]
        return [Document(id=documents[candidates[i]].id, meta=documents[candidates[i]].meta, score=float(scores[i])) for i in order]

    table = retrieval_metrics(run_retriever(questions, retrieve, max(DEV_KS), label=label), DEV_KS)
    row = table[(table["definition"] == "strict") & (table["group"] == "all")].iloc[0]
    return {"recall@1": float(row["recall@1"]), "recall@3": float(row["recall@3"]), "mrr": float(row["mrr"]), "questions": int(row["n"])}


# ------------------------------------------------------------------------------------ encoders


def load_encoder(name_or_path: str, max_seq_length: int | None = None, what: str = "base model", device: str = "cpu"):
    """A SentenceTransformer on ``device`` (resolved; any sentence-transformers id or path; a bare HF encoder gets mean pooling)."""
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(str(name_or_path), device=device)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise QAError(
            f"Could not load the {what} '{name_or_path}': {detail}", "pass a sentence-transformers model directory or a hub id."
        ) from error
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model


def indexed_vectors(settings: Settings, domains: Sequence[str], encoder: str) -> dict[str, np.ndarray]:
    """Review vectors already in the domains' saved indexes when ``encoder`` made them (saves encoding them again)."""
    from qa_system.ingestion.indexing import embeddings_match
    from qa_system.stores import index_name, try_open_index

    # Training compares float32 vectors: an index embedded in int8 is not reused.
    wanted = settings.with_(embedding_model=encoder, embedding_backend="torch")
    vectors: dict[str, np.ndarray] = {}
    for domain in domains:
        index = try_open_index(settings, index_name(domain))
        if index is not None and embeddings_match(index, wanted):
            vectors.update(
                {d.id: np.asarray(d.embedding, dtype=np.float32) for d in index.store.filter_documents() if d.embedding is not None}
            )
    return vectors


def _selection_key(metrics: dict[str, dict[str, float]]) -> tuple[float, float]:
    return metrics["mean"]["recall@1"], metrics["mean"]["mrr"]


def save_encoders(query_model, passage_model, kind: str, output_dir: Path, info: dict[str, Any]) -> None:
    """question: the question encoder; shared: the one encoder; separate: ``passage/`` and ``query/``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    if kind == "separate":
        passage_model.save(str(output_dir / "passage"))
        query_model.save(str(output_dir / "query"))
    else:
        query_model.save(str(output_dir))
    write_model_info(output_dir, info)


def write_model_info(output_dir: Path, info: dict[str, Any]) -> None:
    """``qa_system.json`` and the model card (README.md) of a trained encoder."""
    (output_dir / MODEL_INFO_FILE).write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    (output_dir / "README.md").write_text(model_card(info), encoding="utf-8")


# ------------------------------------------------------------------------------------ the trainer's parts


@dataclass
class Encoders:
    """The encoders of one run. ``vectors``: the frozen passage encoder's review vectors (``question`` kind), else None."""

    kind: str
    query: Any  # SentenceTransformer: the model the trainer trains
    passage: Any  # the same model (shared), a second one that learns (separate), or the frozen one (question)
    vectors: dict[str, Any] | None = None

    @property
    def learning(self) -> list:
        """The models whose weights change."""
        return [self.query] if self.kind != "separate" else [self.query, self.passage]

    def passages(self, documents: Sequence[Document]) -> np.ndarray:
        """The documents' vectors as the retriever would index them."""
        if self.vectors is not None:
            return np.stack([self.vectors[d.id].numpy() for d in documents])
        return encode(self.passage, [d.content or "" for d in documents])


def load_encoders(
    config: RetrieverTrainingConfig,
    base_model: str,
    query_base_model: str | None,
    settings: Settings,
    domains: Sequence[str],
    reviews: dict[str, str],
    resume_from: Path | None = None,
) -> Encoders:
    """The base encoders (a separate passage encoder resumed from its checkpoint), and the frozen review vectors."""
    import torch

    frozen = config.encoders == "question"
    passage_base = str(resume_from / "passage") if resume_from is not None and config.encoders == "separate" else base_model
    device = resolve_device(settings.device)
    passage = load_encoder(passage_base, None if frozen else config.max_seq_length, device=device)
    if config.encoders == "shared":
        return Encoders("shared", passage, passage)
    query = load_encoder(query_base_model or base_model, config.max_seq_length, "question base model", device)
    if not frozen:
        return Encoders("separate", query, passage)
    # The passage encoder never changes: every review is encoded once (or read from a saved index).
    passage.eval()
    known = indexed_vectors(settings, domains, base_model)
    missing = [i for i in reviews if i not in known]
    if missing:
        print(
            f"encoding {len(missing)} reviews with the frozen passage encoder ({len(reviews) - len(missing)} taken from saved indexes)",
            flush=True,
        )
        known.update(zip(missing, encode(passage, [reviews[i] for i in missing])))
    return Encoders("question", query, passage, {i: torch.from_numpy(np.asarray(known[i], dtype=np.float32)) for i in reviews})


def epoch_rows(train: TrainingData, config: RetrieverTrainingConfig) -> tuple[dict[str, list[str]], list[list[int]], list[int]]:
    """Every epoch's ``product_batches`` as dataset columns (question, positive, negative_1.. review ids), the row
    indices of each batch in training order, and the step that ends each epoch. Fixed by the seed, so a resumed
    run sees the very batches the interrupted one would have."""
    rng = random.Random(config.seed)
    columns: dict[str, list[str]] = {"question": [], "positive": [], **{f"negative_{n + 1}": [] for n in range(config.hard_negatives)}}
    batches, epoch_ends = [], []
    for _ in range(config.epochs):
        for batch in product_batches(train, config.batch_size, config.hard_negatives, rng):
            first = len(columns["question"])
            columns["question"] += batch.questions
            columns["positive"] += batch.positive_ids
            for n, column in enumerate(batch.negative_ids):
                columns[f"negative_{n + 1}"] += column
            batches.append(list(range(first, len(columns["question"]))))
        epoch_ends.append(len(batches))
    return columns, batches, epoch_ends


class FixedBatches:
    """A batch sampler that yields precomputed batches of row indices in order.

    It is also the trainer's ``batch_sampler`` argument (called with the dataset, it returns itself);
    a class rather than a closure, since the training arguments are pickled into each checkpoint.
    """

    def __init__(self, batches: list[list[int]]):
        self.batches = batches

    def __call__(self, dataset, **kwargs) -> FixedBatches:
        return self

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


@dataclass
class ReviewCollator:
    """Tokenizes a batch's questions with the question encoder; its reviews (ids in the rows) become the frozen
    review vectors (as ``<column>_sentence_embedding``) or tokens of the passage encoder."""

    encoders: Encoders
    texts: dict[str, str]
    valid_label_columns: list[str] = field(default_factory=list)

    def __call__(self, rows: list[dict[str, str]]) -> dict[str, Any]:
        import torch

        batch = {f"question_{k}": v for k, v in self.encoders.query.preprocess([r["question"] for r in rows]).items()}
        for column in [c for c in rows[0] if c != "question"]:
            ids = [r[column] for r in rows]
            if self.encoders.vectors is not None:
                batch[f"{column}_sentence_embedding"] = torch.stack([self.encoders.vectors[i] for i in ids])
            else:
                batch.update({f"{column}_{k}": v for k, v in self.encoders.passage.preprocess([self.texts[i] for i in ids]).items()})
        return batch


class ReviewRankingLoss(MultipleNegativesRankingLoss):
    """MultipleNegativesRankingLoss whose review columns are embedded by the passage encoder, or are already vectors.

    A separate passage encoder is a sub-module: the trainer's optimiser, over the loss's parameters, updates it too.
    """

    def __init__(self, encoders: Encoders, scale: float):
        super().__init__(encoders.query, scale=scale)
        self.passage_model = encoders.passage if encoders.kind == "separate" else None

    def forward(self, features, labels):
        """The loss of one batch: ``features`` are the question column's, then each review column's."""
        reviews = self.passage_model or self.model
        embeddings = [self.model(features[0])["sentence_embedding"]]
        embeddings += [f["sentence_embedding"] if "input_ids" not in f else reviews(f)["sentence_embedding"] for f in features[1:]]
        return self.compute_loss_from_embeddings(embeddings, labels)


SELECTION_FILE = "qa_selection.json"  # in each checkpoint: the epochs' dev figures so far, for a resumed run


class EpochSelection(TrainerCallback):
    """At the end of each epoch (``evaluate_at``: step -> epoch), strict recall@1 / MRR on the dev splits; the best
    epoch's encoders are saved to ``output_dir``; training stops after ``patience`` epochs without gain. Its record
    goes into every checkpoint (``SELECTION_FILE``) and comes back with ``restore``."""

    def __init__(
        self, encoders: Encoders, dev_sets: dict, evaluate_at: dict[int, int], output_dir: Path, info: dict[str, Any], patience: int
    ):
        self.encoders, self.dev_sets, self.evaluate_at, self.output_dir, self.info, self.patience = (
            encoders,
            dev_sets,
            evaluate_at,
            output_dir,
            info,
            patience,
        )
        self.history: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self.stale = 0
        self.losses: list[float] = []

    def evaluate(self, label: str) -> dict[str, dict[str, float]]:
        """Dev figures per domain and their mean, as the retriever ranks each question's candidates."""
        import torch

        for model in self.encoders.learning:
            model.eval()
        with torch.inference_mode():
            metrics = {
                domain: dev_recall(
                    self.encoders.query, self.encoders.passages(documents), questions, documents, label=f"{label} {domain} dev"
                )
                for domain, (questions, documents) in self.dev_sets.items()
            }
        for model in self.encoders.learning:
            model.train()
        metrics["mean"] = {k: float(np.mean([m[k] for m in metrics.values()])) for k in ("recall@1", "recall@3", "mrr")}
        return metrics

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Keep the training loss of the epoch."""
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))

    def on_step_end(self, args, state, control, **kwargs):
        """At an epoch's end: evaluate, keep the best, stop when stale; a checkpoint then."""
        epoch = self.evaluate_at.get(state.global_step)
        if epoch is None:
            return
        metrics = self.evaluate(f"epoch {epoch}")
        self.history.append(
            {"epoch": epoch, "steps": state.global_step, "train_loss": float(np.mean(self.losses)) if self.losses else None, "dev": metrics}
        )
        self.losses = []
        print(json.dumps(self.history[-1]), flush=True)
        if self.best is None or _selection_key(metrics) > _selection_key(self.best["dev"]):
            self.best, self.stale = self.history[-1], 0
            info = {**self.info, "best_epoch": epoch, "dev_metrics": metrics, "history": self.history}
            save_encoders(self.encoders.query, self.encoders.passage, self.encoders.kind, self.output_dir, info)
        else:
            self.stale += 1
        control.should_save = True  # a checkpoint at each epoch's end: a resumed run starts from its record
        control.should_training_stop = control.should_training_stop or self.stale >= self.patience

    def on_save(self, args, state, control, **kwargs):
        """Put the record (and a separate passage encoder, which the trainer does not save) into the checkpoint."""
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.encoders.kind == "separate":
            self.encoders.passage.save(str(checkpoint / "passage"))
        record = {
            "history": self.history,
            "best": self.best,
            "stale": self.stale,
            "losses": self.losses,
            "hyperparameters": self.info["hyperparameters"],
        }
        (checkpoint / SELECTION_FILE).write_text(json.dumps(record, default=str), encoding="utf-8")

    def restore(self, checkpoint: Path) -> None:
        """The record of the run that wrote ``checkpoint``; a QAError when that run had other settings."""
        record = json.loads((checkpoint / SELECTION_FILE).read_text(encoding="utf-8"))
        if record["hyperparameters"] != json.loads(json.dumps(self.info["hyperparameters"], default=str)):
            raise QAError(
                f"{checkpoint} was saved by a run with other settings ({record['hyperparameters']}).",
                "resume with the same flags, or start afresh.",
            )
        self.history, self.best, self.stale, self.losses = record["history"], record["best"], record["stale"], record["losses"]


def _training_arguments(
    config: RetrieverTrainingConfig, checkpoints: Path, total_steps: int, batches: list[list[int]], progress: bool, device: str = "cpu"
):
    from sentence_transformers.sentence_transformer.training_args import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments(
        output_dir=str(checkpoints),
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        max_steps=total_steps,
        lr_scheduler_type="linear",
        warmup_steps=int(config.warmup_ratio * total_steps),
        max_grad_norm=1.0,
        seed=config.seed,
        batch_sampler=FixedBatches(batches),
        save_strategy="steps",
        save_steps=config.checkpoint_steps,
        save_total_limit=2,
        logging_strategy="steps",
        logging_steps=1,
        report_to=[],
        use_cpu=not is_cuda(device),
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        eval_strategy="no",
        remove_unused_columns=False,
    )


def _dev_sets(data: SubjQA, domains: Sequence[str]) -> dict[str, tuple[list[LabelledQuestion], list[Document]]]:
    dev_sets = {
        domain: (
            [q for q in data.questions if q.split == "dev" and q.domain == domain],
            [d for d in data.documents if in_split(d, "dev") and d.meta["domain"] == domain],
        )
        for domain in domains
    }
    dev_sets = {domain: dev for domain, dev in dev_sets.items() if dev[0]}
    if not dev_sets:
        raise QAError(
            f"No dev questions in {', '.join(domains)}: nothing to select the epoch on.", "train on domains that have a dev split."
        )
    return dev_sets


def _run_info(config, base_model, query_base_model, domains, train, dev_sets, output_dir) -> dict[str, Any]:
    from qa_system.model_files import model_fingerprint

    frozen = config.encoders == "question"
    return {
        "base_model": base_model,
        "query_base_model": query_base_model,
        "encoders": config.encoders,
        "passage_encoder": base_model if frozen else None,
        "passage_fingerprint": model_fingerprint(base_model) if frozen else None,
        "domains": list(domains),
        "train_questions": len(train.pairs),
        "held_out": "train reviews that are also dev reviews, with their questions (SubjQA dev copies train)",
        "dev_questions": {domain: len(dev[0]) for domain, dev in dev_sets.items()},
        "hyperparameters": asdict(config),
        "machine": machine(),
        "output_dir": str(output_dir),
        "trainer": "sentence-transformers SentenceTransformerTrainer",
    }


def train_retriever(
    domains: Sequence[str],
    base_model: str,
    output_dir: str | Path = DEFAULT_RETRIEVER_MODEL,
    config: RetrieverTrainingConfig = RetrieverTrainingConfig(),
    settings: Settings | None = None,
    query_base_model: str | None = None,
    progress: bool = True,
    resume_from: str | Path | None = None,
    callbacks: Sequence = (),
) -> RetrieverTrainingResult:
    """Fine-tune the retriever's encoder(s) on the SubjQA train splits of ``domains`` with sentence-transformers'
    ``SentenceTransformerTrainer`` (see the module doc).

    :param base_model: the passage encoder (and the question encoder unless ``query_base_model``).
    :param settings: where the data and the saved indexes are (their review vectors are reused).
    :param resume_from: a checkpoint (``OUTPUT/checkpoints/checkpoint-N``) or "last": continue an interrupted run.
    :param callbacks: more ``transformers.TrainerCallback`` objects (tests stop a run with one).
    :returns: where the model is, its epoch, dev figures per domain (and their mean), the history and the steps run.
    """
    from datasets import Dataset
    from sentence_transformers.sentence_transformer.trainer import SentenceTransformerTrainer

    from qa_system.training.reader import CHECKPOINTS, resume_point

    if config.encoders not in ENCODER_KINDS:
        raise QAError(f"Unknown encoder kind '{config.encoders}'.", f"use one of: {', '.join(ENCODER_KINDS)}.")
    began, settings, output_dir = time.time(), settings or Settings.from_env(), Path(output_dir)
    checkpoint = resume_point(resume_from, output_dir)
    data = load_subjqa(list(domains), ["train", "dev"], settings.data_dir)
    dev_sets, train = _dev_sets(data, domains), training_data(data)
    if not train.pairs:
        raise QAError(f"No training questions in the train split of {', '.join(domains)}.", "check the domains and the data directory.")
    seed_everything(config.seed)
    reviews = {**train.texts, **{d.id: d.content or "" for _, documents in dev_sets.values() for d in documents}}
    encoders = load_encoders(config, base_model, query_base_model, settings, domains, reviews, checkpoint)
    columns, batches, epoch_ends = epoch_rows(train, config)
    total_steps = min(len(batches), config.max_steps or len(batches))
    evaluate_at = {}  # step -> the epoch it ends (a max_steps run ends its last epoch early)
    for epoch, end in enumerate(epoch_ends, start=1):
        evaluate_at.setdefault(min(end, total_steps), epoch)
    info = _run_info(config, base_model, query_base_model, domains, train, dev_sets, output_dir)
    selection = EpochSelection(encoders, dev_sets, evaluate_at, output_dir, info, config.patience)
    if checkpoint is not None:
        selection.restore(checkpoint)
    else:
        selection.history.append({"epoch": 0, "steps": 0, "dev": selection.evaluate("base model")})
        print(json.dumps(selection.history[-1]), flush=True)
    trainer = SentenceTransformerTrainer(
        model=encoders.query,
        args=_training_arguments(config, output_dir / CHECKPOINTS, total_steps, batches, progress, resolve_device(settings.device)),
        train_dataset=Dataset.from_dict(columns),
        loss=ReviewRankingLoss(encoders, config.scale),
        data_collator=ReviewCollator(encoders, reviews),
        callbacks=[selection, *callbacks],
    )
    quiet_progress(trainer, progress, "training the question encoder")  # the progress and one line per epoch say enough
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finished = trainer.state.global_step >= total_steps or selection.stale >= config.patience
    result = RetrieverTrainingResult(
        output_dir,
        selection.best["epoch"],
        selection.best["dev"],
        selection.history,
        time.time() - began,
        trainer.state.global_step,
        finished,
    )
    if finished:
        info = {
            **read_model_info(output_dir),
            "history": selection.history,
            "training_seconds": result.seconds,
            "steps": trainer.state.global_step,
        }
        write_model_info(output_dir, info)
        shutil.rmtree(output_dir / CHECKPOINTS, ignore_errors=True)
    return result


def model_card(info: dict[str, Any]) -> str:
    """The model card (README.md): what the encoder was trained on, how, and its dev figures per epoch."""
    domains = info["domains"]
    dev_domains = list(info["dev_questions"])
    header = "| epoch | steps | train loss | " + " | ".join(f"{d} dev r@1" for d in dev_domains) + " | mean r@1 | mean MRR |"
    lines = [header, "|" + "---|" * (5 + len(dev_domains))]
    for record in info["history"]:
        dev = record["dev"]
        loss = record.get("train_loss")
        cells = [str(record["epoch"]), str(record["steps"]), f"{loss:.3f}" if loss is not None else "(base model)"]
        cells += [f"{dev[d]['recall@1']:.3f}" for d in dev_domains] + [f"{dev['mean']['recall@1']:.3f}", f"{dev['mean']['mrr']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    hyper = "\n".join(f"| {k} | {v} |" for k, v in info["hyperparameters"].items())
    machine = info["machine"]
    minutes = info.get("training_seconds", 0.0) / 60
    domain_args = " ".join(f"--domain {d}" for d in domains)
    output = info["output_dir"]
    flagged = ("epochs", "batch_size", "learning_rate", "seed", "hard_negatives", "max_seq_length", "patience", "max_steps")
    hyper_args = " ".join(
        f"--{k.replace('_', '-')} {v:g}" if isinstance(v, float) else f"--{k.replace('_', '-')} {v}"
        for k, v in info["hyperparameters"].items()
        if k in flagged and v is not None
    )
    hyper_args += f" --threads {machine.get('torch_threads')}"
    if info["encoders"] == "question":
        flags = f"--query-embedding-model {output}"
        usage = f'qa-system search "Is it good for reading?" --item B0074BW614 --retriever dense {flags}   # the indexed review vectors stay valid'
    else:
        passage = f"{output}/passage" if info["encoders"] == "separate" else output
        flags = f"--embedding-model {passage}" + (f" --query-embedding-model {output}/query" if info["encoders"] == "separate" else "")
        usage = f"qa-system index {domain_args} {flags}   # re-embeds the reviews with this encoder"
    return f"""# Dense retriever encoder fine-tuned on SubjQA ({", ".join(domains)})

A sentence-transformers bi-encoder ({info["encoders"]} encoders) for the dense retriever of `qa_system`:
questions and reviews are embedded, and a product's reviews are ranked by cosine similarity.

- **Base model**: `{info["base_model"]}`{f" (questions: `{info['query_base_model']}`)" if info.get("query_base_model") else ""}
- **Data**: SubjQA train splits of {", ".join(domains)}: {info["train_questions"]} (question, own review) pairs.
  Held out: {info["held_out"]}.
- **Loss**: MultipleNegativesRankingLoss over batches that keep a product's questions together, so the in-batch
  negatives include the other reviews of the same product in the same split, plus
  {info["hyperparameters"]["hard_negatives"]} more such review(s) per question; no review twice in a batch.
- **Selection**: the epoch with the best mean strict recall@1 on the dev splits (per-product and split filters);
  best epoch: {info["best_epoch"]}.
- **Training time**: {minutes:.1f} min on {machine.get("processor")} ({machine.get("cpu_count")} CPU cores, {machine.get("torch_threads")} torch threads, torch {machine.get("torch")}, {machine.get("device")}).

## Dev strict recall per epoch

{chr(10).join(lines)}

## Hyperparameters

| name | value |
|---|---|
{hyper}

## Use and rebuild

```bash
{usage}
qa-system fit-fusion --domain electronics --rerank {flags}   # hybrid fusion and re-ranking fitted on dev
qa-system eval retriever --domain electronics --retriever bm25 dense dense-ft hybrid-ft hybrid-ft+rerank --tuned-model {output}
qa-system train-retriever {domain_args} --encoders {info["encoders"]} {hyper_args} --output {output}   # rebuilds this model
```
"""
