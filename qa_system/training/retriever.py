"""Fine-tuning the dense retriever's encoders on SubjQA (question, own review) pairs.

Farm-haystack 1.x could train its DPR retriever; Haystack 3 cannot, so this is a plain PyTorch
loop around sentence-transformers' ``MultipleNegativesRankingLoss``: each question is scored
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
import math
import random
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from haystack import Document

from qa_system.config import Settings
from qa_system.errors import QAError, check_count, check_number
from qa_system.evaluation.retrieval import run_retriever
from qa_system.metrics.ranking import retrieval_metrics
from qa_system.reading.model import MODEL_INFO_FILE, read_model_info
from qa_system.reproducibility import machine, seed_everything
from qa_system.retrieval.encoders import DEFAULT_RETRIEVER_MODEL
from qa_system.sources import LabelledQuestion, SubjQA, in_split, load_subjqa, split_names

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

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_seq_length", "patience"):
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
        return [self.questions, [texts[i] for i in self.positive_ids], *([texts[i] for i in column] for column in self.negative_ids)]


@dataclass
class RetrieverTrainingResult:
    output_dir: Path
    best_epoch: int
    dev_metrics: dict[str, dict[str, float]]
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


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
                raise QAError(f"The {pair.product[0]} reviews are too few for {hard_negatives} hard negatives per question.", "lower --hard-negatives.")
            used.update(picks)
            negatives.append(picks)
        batches.append(Batch([p.question for p in chosen], [p.document_id for p in chosen], [list(c) for c in zip(*negatives)] if hard_negatives else []))
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


def dev_recall(query_model, passages: np.ndarray, questions: Sequence[LabelledQuestion], documents: Sequence[Document], label: str = "dev") -> dict[str, float]:
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


def load_encoder(name_or_path: str, max_seq_length: int | None = None, what: str = "base model"):
    """A SentenceTransformer on CPU (any sentence-transformers id or path; a bare HF encoder gets mean pooling)."""
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(str(name_or_path), device="cpu")
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise QAError(f"Could not load the {what} '{name_or_path}': {detail}", "pass a sentence-transformers model directory or a hub id.") from error
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model


def indexed_vectors(settings: Settings, domains: Sequence[str], encoder: str) -> dict[str, np.ndarray]:
    """Review vectors already in the domains' saved indexes when ``encoder`` made them (saves encoding them again)."""
    from qa_system.ingestion.indexing import embeddings_match
    from qa_system.stores import index_name, try_open_index

    wanted = settings.with_(embedding_model=encoder)
    vectors: dict[str, np.ndarray] = {}
    for domain in domains:
        index = try_open_index(settings, index_name(domain))
        if index is not None and embeddings_match(index, wanted):
            vectors.update({d.id: np.asarray(d.embedding, dtype=np.float32) for d in index.store.filter_documents() if d.embedding is not None})
    return vectors


def _embed(model, texts: list[str]):
    return model(model.preprocess(texts))["sentence_embedding"]


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
    (output_dir / MODEL_INFO_FILE).write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    (output_dir / "README.md").write_text(model_card(info), encoding="utf-8")


def train_retriever(
    domains: Sequence[str],
    base_model: str,
    output_dir: str | Path = DEFAULT_RETRIEVER_MODEL,
    config: RetrieverTrainingConfig = RetrieverTrainingConfig(),
    settings: Settings | None = None,
    query_base_model: str | None = None,
    progress: bool = True,
) -> RetrieverTrainingResult:
    """Fine-tune the retriever's encoder(s) on the SubjQA train splits of ``domains`` (see the module doc).

    :param base_model: the passage encoder (and the question encoder unless ``query_base_model``).
    :param settings: where the data and the saved indexes are (their review vectors are reused).
    :returns: where the model is, its epoch, dev figures per domain (and their mean) and the history.
    """
    import torch
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    from qa_system.model_files import model_fingerprint

    if config.encoders not in ENCODER_KINDS:
        raise QAError(f"Unknown encoder kind '{config.encoders}'.", f"use one of: {', '.join(ENCODER_KINDS)}.")
    began = time.time()
    settings = settings or Settings.from_env()
    output_dir = Path(output_dir)
    data = load_subjqa(list(domains), ["train", "dev"], settings.data_dir)
    dev_sets = {
        domain: ([q for q in data.questions if q.split == "dev" and q.domain == domain], [d for d in data.documents if in_split(d, "dev") and d.meta["domain"] == domain])
        for domain in domains
    }
    dev_sets = {domain: dev for domain, dev in dev_sets.items() if dev[0]}
    if not dev_sets:
        raise QAError(f"No dev questions in {', '.join(domains)}: nothing to select the epoch on.", "train on domains that have a dev split.")
    train = training_data(data)
    if not train.pairs:
        raise QAError(f"No training questions in the train split of {', '.join(domains)}.", "check the domains and the data directory.")
    seed_everything(config.seed)
    rng = random.Random(config.seed)

    frozen = config.encoders == "question"
    passage_model = load_encoder(base_model, None if frozen else config.max_seq_length)
    if config.encoders == "shared":
        query_model = passage_model
    else:
        query_model = load_encoder(query_base_model or base_model, config.max_seq_length, "question base model")
    trained = [query_model] if frozen else list({id(m): m for m in (passage_model, query_model)}.values())
    cache: dict[str, torch.Tensor] = {}
    if frozen:
        # The passage encoder never changes: every review is encoded once (or read from a saved index).
        passage_model.eval()
        documents = [*({"id": i, "content": t} for i, t in train.texts.items()), *({"id": d.id, "content": d.content or ""} for _, docs in dev_sets.values() for d in docs)]
        known = indexed_vectors(settings, domains, base_model)
        missing = [d for d in documents if d["id"] not in known]
        if missing:
            print(f"encoding {len(missing)} reviews with the frozen passage encoder ({len(documents) - len(missing)} taken from saved indexes)", flush=True)
            known.update(zip((d["id"] for d in missing), encode(passage_model, [d["content"] for d in missing])))
        cache = {d["id"]: torch.from_numpy(np.asarray(known[d["id"]], dtype=np.float32)) for d in documents}

    parameters = [(n, p) for m in trained for n, p in m.named_parameters()]
    no_decay = ("bias", "LayerNorm.weight")
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in parameters if not n.endswith(no_decay)], "weight_decay": config.weight_decay},
            {"params": [p for n, p in parameters if n.endswith(no_decay)], "weight_decay": 0.0},
        ],
        lr=config.learning_rate,
    )
    loss_function = MultipleNegativesRankingLoss(query_model, scale=config.scale)
    epochs = [product_batches(train, config.batch_size, config.hard_negatives, rng) for _ in range(config.epochs)]
    total_steps = min(sum(len(e) for e in epochs), config.max_steps or math.inf)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total_steps), total_steps)

    def reviews(ids: list[str]):
        return torch.stack([cache[i] for i in ids]) if frozen else _embed(passage_model, [train.texts[i] for i in ids])

    def evaluate(label: str) -> dict[str, dict[str, float]]:
        for model in trained:
            model.eval()
        metrics = {}
        with torch.inference_mode():
            for domain, (questions, documents) in dev_sets.items():
                passages = torch.stack([cache[d.id] for d in documents]).numpy() if frozen else encode(passage_model, [d.content or "" for d in documents])
                metrics[domain] = dev_recall(query_model, passages, questions, documents, label=f"{label} {domain} dev")
        metrics["mean"] = {k: float(np.mean([m[k] for m in metrics.values()])) for k in ("recall@1", "recall@3", "mrr")}
        return metrics

    info_base = {
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
    }
    history: list[dict[str, Any]] = [{"epoch": 0, "steps": 0, "dev": evaluate("base model")}]
    print(json.dumps(history[-1]), flush=True)
    best: RetrieverTrainingResult | None = None
    step, stale = 0, 0
    for epoch, batches in enumerate(epochs, start=1):
        for model in trained:
            model.train()
        bar = tqdm(batches, desc=f"epoch {epoch}", unit="batch", disable=not progress)
        losses = []
        for batch in bar:
            embeddings = [_embed(query_model, batch.questions), reviews(batch.positive_ids), *(reviews(column) for column in batch.negative_ids)]
            loss = loss_function.compute_loss_from_embeddings(embeddings, None)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for _, p in parameters], 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
            step += 1
            if step >= total_steps:
                break
        metrics = evaluate(f"epoch {epoch}")
        history.append({"epoch": epoch, "steps": step, "train_loss": float(np.mean(losses)) if losses else None, "dev": metrics})
        print(json.dumps(history[-1]), flush=True)
        if best is None or _selection_key(metrics) > _selection_key(best.dev_metrics):
            best = RetrieverTrainingResult(output_dir, epoch, metrics)
            stale = 0
            info = {**info_base, "best_epoch": epoch, "dev_metrics": metrics, "history": history, "training_seconds": time.time() - began}
            save_encoders(query_model, passage_model, config.encoders, output_dir, info)
        else:
            stale += 1
        if stale >= config.patience or step >= total_steps:
            break
    best.history, best.seconds = history, time.time() - began
    info = read_model_info(output_dir)
    info.update(history=history, training_seconds=best.seconds)
    (output_dir / MODEL_INFO_FILE).write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    (output_dir / "README.md").write_text(model_card(info), encoding="utf-8")
    return best


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
    hyper_args = " ".join(f"--{k.replace('_', '-')} {v:g}" if isinstance(v, float) else f"--{k.replace('_', '-')} {v}" for k, v in info["hyperparameters"].items() if k in flagged and v is not None)
    hyper_args += f" --threads {machine.get('torch_threads')}"
    if info["encoders"] == "question":
        flags = f"--query-embedding-model {output}"
        usage = f'qa-system search "Is it good for reading?" --item B0074BW614 --retriever dense {flags}   # the indexed review vectors stay valid'
    else:
        passage = f"{output}/passage" if info["encoders"] == "separate" else output
        flags = f"--embedding-model {passage}" + (f" --query-embedding-model {output}/query" if info["encoders"] == "separate" else "")
        usage = f"qa-system index {domain_args} {flags}   # re-embeds the reviews with this encoder"
    return f"""# Dense retriever encoder fine-tuned on SubjQA ({', '.join(domains)})

A sentence-transformers bi-encoder ({info['encoders']} encoders) for the dense retriever of `qa_system`:
questions and reviews are embedded, and a product's reviews are ranked by cosine similarity.

- **Base model**: `{info['base_model']}`{f" (questions: `{info['query_base_model']}`)" if info.get('query_base_model') else ''}
- **Data**: SubjQA train splits of {', '.join(domains)}: {info['train_questions']} (question, own review) pairs.
  Held out: {info['held_out']}.
- **Loss**: MultipleNegativesRankingLoss over batches that keep a product's questions together, so the in-batch
  negatives include the other reviews of the same product in the same split, plus
  {info['hyperparameters']['hard_negatives']} more such review(s) per question; no review twice in a batch.
- **Selection**: the epoch with the best mean strict recall@1 on the dev splits (per-product and split filters);
  best epoch: {info['best_epoch']}.
- **Training time**: {minutes:.1f} min on {machine.get('processor')} ({machine.get('cpu_count')} CPU cores, {machine.get('torch_threads')} torch threads, torch {machine.get('torch')}, {machine.get('device')}).

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
qa-system train-retriever {domain_args} --encoders {info['encoders']} {hyper_args} --output {output}   # rebuilds this model
```
"""
