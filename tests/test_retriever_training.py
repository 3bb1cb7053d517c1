"""Retriever domain adaptation on tiny data: pairs and hard negatives, training runs that reload,
re-embedding when the encoder changes, fusion fitting and answerability re-ranking on toy rankings."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from haystack import Document

from helpers.subjqa import SPLIT_ROWS, row, write_subjqa
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion.indexing import build_index, open_or_build_index
from qa_system.model_files import model_fingerprint
from qa_system.pipelines import check_embeddings
from qa_system.retrieval.encoders import tuned_encoders
from qa_system.retrieval.fusion import FusionParameters, RankedCandidates, fit_fusion, fusion_grid, ranking_scores
from qa_system.retrieval.rerank import mix
from qa_system.sources import load_subjqa
from qa_system.training.retriever import (
    RetrieverTrainingConfig,
    TrainingData,
    TrainingPair,
    product_batches,
    train_retriever,
    training_data,
)

WORDS = "the screen battery sound bass cord mouse scroll wheel shipping reading good how is it".split()


def tiny_encoder(directory: Path, seed: int = 0) -> str:
    """A 2-layer, 32-wide BERT with a word-level vocabulary, saved as a plain HF model (sentence-transformers adds mean pooling)."""
    import string

    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    characters = string.ascii_lowercase + string.digits + string.punctuation
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *characters, *(f"##{c}" for c in characters)]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(dict.fromkeys(tokens))}, do_lower_case=True)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> str:
    return tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


# SubjQA's dev split copies train questions on the same reviews: r-kindle-1 here (the dev reviews
# r-kindle-3 and r-phones-2 are not in train).
COPIED_DEV = {
    **SPLIT_ROWS,
    "train": [*SPLIT_ROWS["train"], row("q10", "How is the scroll wheel?", "r-mouse-1", "the scroll wheel feels solid")],
    "dev": [row("q1", "Is it good for reading?", "r-kindle-1", "great for reading books at night"), *SPLIT_ROWS["dev"]],
}


def test_pairs_leave_out_the_reviews_that_dev_copies(tmp_path):
    data = load_subjqa("electronics", ["train", "dev"], write_subjqa(tmp_path / "subjqa", COPIED_DEV))
    train = training_data(data)
    assert sorted(p.document_id for p in train.pairs) == ["electronics/r-kindle-2", "electronics/r-mouse-1", "electronics/r-phones-1"]
    assert "electronics/r-kindle-1" not in train.texts  # not a negative either
    assert train.reviews_of_product[("electronics", "KINDLE")] == ["electronics/r-kindle-2"]
    assert all(p.product[0] == "electronics" for p in train.pairs)


def toy_training_data() -> TrainingData:
    """Product A: 4 reviews, 5 questions (two on a1); B: 3 reviews; C: one review."""
    reviews = {"A": ["a1", "a2", "a3", "a4"], "B": ["b1", "b2", "b3"], "C": ["c1"]}
    asked = ["a1", "a1", "a2", "a3", "a4", "b1", "b2", "c1"]
    product = {r: p for p, rs in reviews.items() for r in rs}
    pairs = [TrainingPair(f"question {i} on {r}", r, ("d", product[r])) for i, r in enumerate(asked)]
    return TrainingData(pairs, {r: f"review {r}" for r in product}, {("d", p): rs for p, rs in reviews.items()}, {"d": list(product)})


def test_batches_keep_products_together_never_repeat_a_review_and_draw_hard_negatives_from_the_product():
    data = toy_training_data()
    product = {r: p for (_, p), rs in data.reviews_of_product.items() for r in rs}
    batches = product_batches(data, batch_size=3, hard_negatives=1, rng=random.Random(0))
    assert sorted(q for b in batches for q in b.questions) == sorted(p.question for p in data.pairs)  # every pair once
    for batch in batches:
        (negatives,) = batch.negative_ids
        ids = batch.positive_ids + negatives
        assert len(ids) == len(set(ids)), batch  # no review twice: nobody is pushed away from its own review
        for positive, negative in zip(batch.positive_ids, negatives):
            same_product_left = set(data.reviews_of_product[("d", product[positive])]) - set(batch.positive_ids)
            # A hard negative from the positive's own product, unless all its reviews not among the positives are negatives already.
            assert product[negative] == product[positive] or not (same_product_left - set(negatives)), batch
        questions, reviews, negative_texts = batch.columns(data.texts)
        assert reviews == [f"review {i}" for i in batch.positive_ids] and len(negative_texts) == len(questions)
    # A product's questions sit together: product A's first batch holds only A questions (batch of 3).
    first_a = next(b for b in batches if product[b.positive_ids[0]] == "A")
    assert {product[i] for i in first_a.positive_ids} == {"A"}
    # Same seed, same batches.
    assert product_batches(data, 3, 1, random.Random(0)) == batches
    assert product_batches(data, 3, 0, random.Random(0))[0].negative_ids == []
    with pytest.raises(QAError, match="hard negatives"):
        product_batches(data, 8, 2, random.Random(0))


def _weights(model_dir: Path) -> np.ndarray:
    from safetensors.numpy import load_file

    return np.concatenate([v.ravel() for _, v in sorted(load_file(str(model_dir / "model.safetensors")).items())])


@pytest.mark.parametrize("kind", ["question", "shared"])
def test_two_training_steps_save_an_encoder_the_retriever_reloads(tmp_path, settings, encoder, kind):
    from haystack_integrations.components.embedders.sentence_transformers import SentenceTransformersTextEmbedder

    out = tmp_path / "retriever"
    config = RetrieverTrainingConfig(
        encoders=kind, epochs=1, max_steps=2, batch_size=2, hard_negatives=0, learning_rate=1e-3, max_seq_length=64
    )
    result = train_retriever(["electronics"], encoder, out, config, settings, progress=False)
    assert result.best_epoch == 1 and result.history[0]["epoch"] == 0 and result.history[1]["steps"] == 2
    info = json.loads((out / "qa_system.json").read_text())
    assert info["encoders"] == kind and info["train_questions"] == 3 and info["best_epoch"] == 1
    assert set(info["dev_metrics"]) == {"electronics", "mean"} and 0 <= info["dev_metrics"]["mean"]["recall@1"] <= 1
    assert "Dev strict recall per epoch" in (out / "README.md").read_text()
    assert not np.allclose(_weights(out), _weights(Path(encoder)))  # it learned something
    passage, query = tuned_encoders(out)
    assert (passage, query) == ((encoder, str(out)) if kind == "question" else (str(out), None))
    embedder = SentenceTransformersTextEmbedder(model=str(out), normalize_embeddings=True, progress_bar=False)
    embedder.warm_up()
    vector = embedder.run(text="How is the sound?")["embedding"]
    assert len(vector) == 32 and np.isclose(np.linalg.norm(vector), 1.0, atol=1e-4)


def test_training_is_reproducible(tmp_path, settings, encoder):
    config = RetrieverTrainingConfig(epochs=1, max_steps=2, batch_size=1, hard_negatives=1, learning_rate=1e-3)
    for name in ("a", "b"):
        train_retriever(["electronics"], encoder, tmp_path / name, config, settings, progress=False)
    assert np.array_equal(_weights(tmp_path / "a"), _weights(tmp_path / "b"))


def stop_after(steps: int):
    """A trainer callback that stops the run after ``steps`` optimiser steps, as a kill would (with a checkpoint then)."""
    from transformers import TrainerCallback

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == steps:
                control.should_save = control.should_training_stop = True

    return Stop()


@pytest.mark.parametrize("kind", ["question", "separate"])
def test_an_interrupted_run_resumes_from_its_checkpoint_where_it_stopped(tmp_path, settings, encoder, kind):
    config = RetrieverTrainingConfig(
        encoders=kind, epochs=3, batch_size=2, hard_negatives=0, learning_rate=1e-3, checkpoint_steps=1, patience=3
    )
    whole = train_retriever(["electronics"], encoder, tmp_path / "whole", config, settings, progress=False)
    assert whole.finished and whole.steps == 6 and [h["epoch"] for h in whole.history] == [0, 1, 2, 3]
    assert not (tmp_path / "whole" / "checkpoints").exists()  # a finished run keeps no checkpoints

    out = tmp_path / "resumed"
    stopped = train_retriever(["electronics"], encoder, out, config, settings, progress=False, callbacks=[stop_after(3)])
    assert not stopped.finished and stopped.steps == 3 and [h["epoch"] for h in stopped.history] == [0, 1]
    assert (out / "checkpoints" / "checkpoint-3" / "trainer_state.json").is_file()
    resumed = train_retriever(["electronics"], encoder, out, config, settings, progress=False, resume_from="last")
    assert resumed.finished and resumed.steps == 6  # the step count goes on from the checkpoint's, 4 to 6
    assert [(h["epoch"], h["steps"]) for h in resumed.history] == [(h["epoch"], h["steps"]) for h in whole.history]
    info = json.loads((out / "qa_system.json").read_text())
    assert info["steps"] == 6 and len(info["history"]) == 4
    # Batches, learning-rate schedule, optimiser state and random generators come back: the weights are the uninterrupted run's.
    for model in ["query", "passage"] if kind == "separate" else ["."]:
        assert np.allclose(_weights(out / model), _weights(tmp_path / "whole" / model), atol=1e-6)
    with pytest.raises(QAError, match="No checkpoint to resume from"):
        train_retriever(["electronics"], encoder, out, config, settings, progress=False, resume_from="last")
    with pytest.raises(QAError, match="was saved by a run with other settings"):
        train_retriever(["electronics"], encoder, tmp_path / "again", config, settings, progress=False, callbacks=[stop_after(2)])
        train_retriever(
            ["electronics"],
            encoder,
            tmp_path / "again",
            RetrieverTrainingConfig(encoders=kind, epochs=2, batch_size=2, hard_negatives=0),
            settings,
            progress=False,
            resume_from="last",
        )


def test_training_errors_are_one_line(tmp_path, settings, encoder):
    with pytest.raises(QAError, match="Could not load the base model"):
        train_retriever(
            ["electronics"], str(tmp_path / "missing"), tmp_path / "out", RetrieverTrainingConfig(max_steps=1), settings, progress=False
        )
    with pytest.raises(QAError, match="Unknown encoder kind"):
        train_retriever(["electronics"], encoder, tmp_path / "out", RetrieverTrainingConfig(encoders="both"), settings, progress=False)
    with pytest.raises(QAError, match="no trained retriever encoder"):
        tuned_encoders(tmp_path / "nothing")


def test_an_index_is_re_embedded_when_the_encoder_changes_even_in_place(tmp_path, tiny_subjqa):
    first, second = tiny_encoder(tmp_path / "first", seed=0), tiny_encoder(tmp_path / "second", seed=1)
    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", embedding_model=first)
    index = build_index(settings, "electronics", progress=False)
    vectors = {d.id: d.embedding for d in index.store.filter_documents()}
    assert index.manifest["embedding_fingerprint"] == model_fingerprint(first)

    # Same model: the saved index is reused as it is.
    assert open_or_build_index(settings, "electronics", progress=False).manifest["created"] == index.manifest["created"]
    # Another encoder: refused by dense pipelines, rebuilt by open_or_build_index.
    other = settings.with_(embedding_model=second)
    with pytest.raises(QAError, match="was embedded with .*first, not with the configured .*second"):
        check_embeddings(index, other)
    rebuilt = open_or_build_index(other, "electronics", progress=False)
    assert rebuilt.embedding_model == second
    assert all(not np.allclose(d.embedding, vectors[d.id]) for d in rebuilt.store.filter_documents())

    # The same path retrained (new weights): the fingerprint tells, and the vectors are rebuilt.
    tiny_encoder(tmp_path / "second", seed=2)
    with pytest.raises(QAError, match="earlier version"):
        check_embeddings(rebuilt, other)
    again = open_or_build_index(other, "electronics", progress=False)
    assert again.manifest["embedding_fingerprint"] == model_fingerprint(second) != rebuilt.manifest["embedding_fingerprint"]
    check_embeddings(again, other)


def _docs(*ids_scores):
    return [Document(id=i, content=i, score=s) for i, s in ids_scores]


def toy_candidates() -> list[RankedCandidates]:
    """BM25 is right, and sure, on q1; the encoder is right, and sure, on q2; both are half right on q3.

    Each alone gets 2 of 3 first; an even min-max mix gets all three.
    """
    return [
        RankedCandidates(_docs(("A", 9.0), ("B", 1.0), ("X", 0.0)), _docs(("B", 0.52), ("A", 0.50), ("X", 0.0)), "A"),
        RankedCandidates(_docs(("C", 5.0), ("D", 4.8), ("Y", 0.0)), _docs(("D", 0.9), ("C", 0.1), ("Y", 0.0)), "D"),
        RankedCandidates(_docs(("E", 3.0), ("F", 2.0), ("Z", 0.0)), _docs(("E", 0.7), ("F", 0.6), ("Z", 0.0)), "E"),
    ]


def test_fusion_fitting_beats_each_part_on_a_toy_ranking():
    candidates = toy_candidates()
    sparse_alone = ranking_scores((c.sparse, c.relevant_id) for c in candidates)
    dense_alone = ranking_scores((c.dense, c.relevant_id) for c in candidates)
    assert sparse_alone[0] == dense_alone[0] == pytest.approx(2 / 3)
    parameters, scores = fit_fusion(candidates)
    assert scores["recall@1"] == 1.0 and parameters.mode == "minmax"
    assert 0 < parameters.sparse_weight < 1 and parameters.sparse_weight + parameters.dense_weight == pytest.approx(1)
    # The grid holds each part alone, so a fit is never worse than its best part on its data.
    grid = fusion_grid()
    assert FusionParameters("minmax", 60.0, 1.0, 0.0) in grid and FusionParameters("minmax", 60.0, 0.0, 1.0) in grid
    # BM25 barely prefers G, the encoder is sure of H, and G is right: only a BM25-heavy fusion gets both.
    bm25_side = RankedCandidates(_docs(("G", 2.0), ("H", 1.8), ("W", 0.0)), _docs(("H", 0.9), ("W", 0.5), ("G", 0.1)), "G")
    parameters, scores = fit_fusion(candidates[:1] + [bm25_side])
    assert scores["recall@1"] == 1.0 and parameters.sparse_weight > parameters.dense_weight


def test_answerability_mix_reorders_and_weight_one_keeps_the_retriever_order():
    documents = _docs(("A", 10.0), ("B", 8.0), ("C", 1.0))
    answerability = [-3.0, 2.5, float("-inf")]  # C: nothing to read
    assert [d.id for d in mix(documents, answerability, retriever_weight=1.0)] == ["A", "B", "C"]
    reranked = mix(documents, answerability, retriever_weight=0.3)
    assert [d.id for d in reranked] == ["B", "A", "C"]
    assert reranked[0].meta["retrieval_score"] == 8.0 and reranked[0].meta["answerability"] == 2.5
    assert reranked[2].meta["answerability"] == -3.0  # floored at the least answerable readable review
    assert mix([], [], 0.5) == []


@pytest.fixture()
def tuned_setup(tmp_path, tiny_subjqa, tiny_reader, encoder):
    """Tiny data indexed with the tiny encoder, a question encoder trained from it for two steps, the tiny reader."""
    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", embedding_model=encoder, reader_model=str(tiny_reader))
    build_index(settings, "electronics", progress=False)
    model = tmp_path / "retriever"
    train_retriever(
        ["electronics"],
        encoder,
        model,
        RetrieverTrainingConfig(epochs=1, max_steps=2, batch_size=2, hard_negatives=0),
        settings,
        progress=False,
    )
    return settings, model


def test_fitted_fusion_is_stored_per_question_encoder_and_read_by_the_hybrid_pipeline(tuned_setup):
    from qa_system.pipelines import build_retrieval_pipeline
    from qa_system.retrieval.fitted import fusion_parameters
    from qa_system.stores import open_index
    from qa_system.tuning.fusion import fit_fusion_on_dev

    settings, model = tuned_setup
    index = open_index(settings, "electronics")
    fit = fit_fusion_on_dev(settings, "electronics", index)
    assert fit["fitted_on"] == "electronics dev" and fit["questions"] == 2
    assert fit["dev"]["fused"]["recall@1"] >= max(fit["dev"]["bm25"]["recall@1"], fit["dev"]["dense"]["recall@1"])
    reopened = open_index(settings, "electronics")  # saved with the index
    assert fusion_parameters(reopened, settings) == FusionParameters(fit["mode"], fit["k"], fit["sparse_weight"], fit["dense_weight"])
    fusion = build_retrieval_pipeline("hybrid", settings, index=reopened).pipeline.get_component("fusion")
    assert (fusion.mode, fusion.sparse_weight, fusion.dense_weight) == (fit["mode"], fit["sparse_weight"], fit["dense_weight"])
    # Another question encoder has no fit yet: the defaults.
    assert fusion_parameters(reopened, settings.with_(query_embedding_model=str(model))) == FusionParameters()


def test_an_evaluation_names_the_fits_in_force_and_never_fits(tuned_setup):
    from qa_system.retrieval.fitted import MANIFEST_KEY, encoder_key
    from qa_system.stores import open_index, saved_manifest
    from qa_system.tuning.fusion import fit_fusion_on_dev, fits_in_force

    settings, _ = tuned_setup
    index = open_index(settings, "electronics")
    [bm25, note] = fits_in_force(settings, index, "hybrid", rerank=False)
    assert bm25 == "BM25 stemmer english, stopwords none, k1 1.2, b 1: the defaults, none stored by tune-bm25 --apply."
    assert note.startswith(  # the domain named: without it, fit-fusion fits electronics
        "fusion minmax (sparse weight 0.50, dense weight 0.50): the defaults, no fit stored; run `qa-system fit-fusion --domain electronics`"
    )
    assert MANIFEST_KEY not in saved_manifest(settings, "subjqa-electronics")  # nothing fitted, nothing written
    fit = fit_fusion_on_dev(settings, "electronics", index)
    assert fit["sparse"]["k1"] == 1.2 and fit["sparse"]["stopwords"] is None  # the BM25 defaults it saw
    [_, note] = fits_in_force(settings, open_index(settings, "electronics"), "hybrid", rerank=False)
    assert "stored by fit-fusion, fitted on electronics dev (2 questions): strict recall@1" in note and "other BM25 settings" not in note
    # A fit on the first question alone (`fit-fusion --limit 1`) is told apart from one on the whole split.
    fit_fusion_on_dev(settings, "electronics", index, limit=1)
    [_, note] = fits_in_force(settings, open_index(settings, "electronics"), "hybrid", rerank=False)
    assert "fitted on electronics dev (1 question): strict recall@1" in note
    stale = {**fit, "sparse": {**fit["sparse"], "k1": 2.0}, "fitted_on": "stale"}
    index.manifest[MANIFEST_KEY][encoder_key(settings)]["fusion"] = stale
    [_, note] = fits_in_force(settings, index, "hybrid", rerank=False)
    # said, not refitted (the setting it saw was printed as a dict of every init parameter)
    assert "fitted on stale" in note and "it was fitted for other BM25 settings (stemmer english, stopwords none, k1 2, b 1)" in note
    assert index.manifest[MANIFEST_KEY][encoder_key(settings)]["fusion"] is stale
    [_, fusion, rerank] = fits_in_force(settings, index, "hybrid", rerank=True)
    assert rerank.startswith(
        "re-ranking of hybrid: retriever weight 0.50, the default; run `qa-system fit-fusion --domain electronics --rerank`"
    )


def manifest_bytes(settings: Settings) -> dict[str, bytes]:
    """Every file of the saved indexes (a memory index keeps its manifest in its one file), by path."""
    return {str(p.relative_to(settings.index_dir)): p.read_bytes() for p in sorted(settings.index_dir.rglob("*")) if p.is_file()}


def test_evaluating_hybrid_never_writes_to_the_index(tuned_setup, tmp_path, monkeypatch, capsys):
    from qa_system.cli import main

    settings, _ = tuned_setup
    for name, value in {
        "QA_HOME": settings.home,
        "QA_DATA_DIR": settings.data_dir,
        "QA_EMBEDDING_MODEL": settings.embedding_model,
        "QA_READER_MODEL": settings.reader_model,
        "QA_READER_BACKEND": "torch",
    }.items():
        monkeypatch.setenv(name, str(value))
    evaluations = [
        ["eval", "pipeline", "--retriever", "hybrid", "--split", "test", "--out", str(tmp_path / "pipeline")],
        ["eval", "pipeline", "--retriever", "hybrid", "--split", "dev", "--out", str(tmp_path / "pipeline-dev")],
        [
            "eval",
            "retriever",
            "--retriever",
            "hybrid",
            "hybrid+rerank",
            "--split",
            "test",
            "--k",
            "1",
            "--out",
            str(tmp_path / "retriever"),
        ],
    ]
    before = manifest_bytes(settings)
    assert before
    for command in evaluations:
        assert main(command) == 0, command
        assert manifest_bytes(settings) == before, command  # byte for byte: no fit, no threshold written
    notes = json.loads((tmp_path / "retriever" / "report.json").read_text())["fitted"]
    assert (
        "BM25 stemmer english" in notes[0]
        and "the defaults, no fit stored" in notes[1]
        and "retriever weight 0.50, the default" in notes[-1]
    )
    assert "the defaults, no fit stored" in (tmp_path / "pipeline" / "report.md").read_text()
    # The fitting commands write; evaluations then read their fits, and still write nothing.
    assert main(["fit-fusion", "--rerank"]) == 0
    assert main(["fit-threshold", "--retriever", "hybrid"]) == 0
    fitted = manifest_bytes(settings)
    assert fitted != before
    capsys.readouterr()
    for command in evaluations:
        assert main(command) == 0, command
        assert manifest_bytes(settings) == fitted, command
    assert "dev-tuned threshold" in capsys.readouterr().out
    pipeline_notes = (tmp_path / "pipeline" / "report.md").read_text()
    assert "fusion minmax" in pipeline_notes or "fusion rrf" in pipeline_notes
    assert "stored by fit-fusion, fitted on electronics dev" in pipeline_notes
    notes = json.loads((tmp_path / "retriever" / "report.json").read_text())["fitted"]
    assert "stored by fit-fusion, fitted on electronics dev" in notes[1] and "stored by fit-fusion --rerank" in notes[-1]


def test_retriever_evaluation_puts_stock_fine_tuned_fused_and_reranked_side_by_side(tuned_setup, tmp_path):
    from qa_system.evaluation.retrieval import CHANCE, evaluate_retrievers

    settings, model = tuned_setup
    variants = ["bm25", "dense", "dense-ft", "hybrid-ft", "hybrid-ft+rerank"]
    result = evaluate_retrievers(settings, "electronics", "test", variants, ks=(1, 3), out_dir=tmp_path / "report", tuned_model=model)
    metrics = result["metrics"]
    assert list(metrics["retriever"].unique()) == [*variants, CHANCE]  # chance: the reference row, last
    assert set(metrics["definition"]) == {"strict", "chapter"}
    assert any(n.startswith("hybrid-ft: fusion") and "the defaults, no fit stored" in n for n in result["notes"])  # fit-fusion was not run
    assert any(n.startswith("hybrid-ft+rerank: re-ranking of hybrid") for n in result["notes"])
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    encoders = {row["variant"]: row for row in report["encoders"]}
    assert encoders["dense-ft"]["question_encoder"] == str(model) and encoders["dense-ft"]["passage_encoder"] == settings.embedding_model
    assert encoders["dense-ft"]["index"] == "subjqa-electronics"  # a question encoder searches the existing vectors
    # A reranked list is a permutation of the retrieved candidates.
    reranked = result["records"]["hybrid-ft+rerank"]
    assert (reranked["retrieved"] == result["records"]["hybrid-ft"]["retrieved"]).all()


def test_a_shared_encoder_variant_reads_its_own_index(tmp_path, tiny_subjqa, encoder):
    from qa_system.evaluation.retrieval import CHANCE, evaluate_retrievers

    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", embedding_model=encoder)
    model = tmp_path / "shared"
    train_retriever(
        ["electronics"],
        encoder,
        model,
        RetrieverTrainingConfig(encoders="shared", epochs=1, max_steps=1, batch_size=2, hard_negatives=0),
        settings,
        progress=False,
    )
    result = evaluate_retrievers(
        settings, "electronics", "test", ["dense", "dense-ft"], ks=(1,), out_dir=tmp_path / "report", tuned_model=model
    )
    # k = 1 retrieves one review per question; chance is still exact, from the candidates the filters allow.
    assert list(result["metrics"]["retriever"].unique()) == ["dense", "dense-ft", CHANCE]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [row["index"] for row in report["encoders"]] == ["subjqa-electronics", "subjqa-electronics@shared"]


def test_cli_trains_fits_and_refuses_unknown_variants(tmp_path, tiny_subjqa, encoder, capsys):
    from qa_system.cli import main

    common = ["--data-dir", str(tiny_subjqa), "--home", str(tmp_path / "home"), "--embedding-model", encoder]
    out = tmp_path / "retriever"
    args = [
        "--domain",
        "electronics",
        "--output",
        str(out),
        "--epochs",
        "1",
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--hard-negatives",
        "0",
        "--threads",
        "1",
    ]
    assert main(["train-retriever", *common, *args]) == 0
    assert f"Use it with --query-embedding-model {out}" in capsys.readouterr().out
    assert main(["train-retriever", *common, *args, "--resume-from", "last"]) == 2  # a finished run keeps no checkpoint
    assert capsys.readouterr().err.startswith(f"error: No checkpoint to resume from in {out / 'checkpoints'}.")
    assert main(["train-retriever", *common, *args, "--resume-from", str(tmp_path)]) == 2
    assert "is not a training checkpoint (no trainer_state.json)" in capsys.readouterr().err
    assert main(["fit-fusion", *common, "--query-embedding-model", str(out)]) == 0
    assert "electronics: fusion" in capsys.readouterr().out
    assert main(["eval", "retriever", *common, "--retriever", "bm25", "hybird"]) == 2
    assert "Unknown retriever variant 'hybird'" in capsys.readouterr().err


def test_fit_fusion_fits_a_collection_of_ones_own_on_its_labels(home, tmp_path, monkeypatch, capsys):
    """An evaluation of hybrid on one's own collection advised `qa-system fit-fusion`, which fitted SubjQA's dev split only."""
    from helpers.confidence import labels_csv, notes_collection
    from qa_system.cli import main

    monkeypatch.setenv("QA_HOME", str(home.home))
    monkeypatch.delenv("QA_STORE", raising=False)
    notes_collection(home, tmp_path, embed=True)
    labels = labels_csv(tmp_path / "labels.csv")
    evaluate = [
        "eval",
        "retriever",
        "--collection",
        "notes",
        "--labels",
        str(labels),
        "--retriever",
        "hybrid",
        "--out",
        str(tmp_path / "r"),
    ]
    assert main(evaluate) == 0
    [_, note] = json.loads((tmp_path / "r" / "report.json").read_text())["fitted"]
    assert "no fit stored; run `qa-system fit-fusion --collection notes --labels FILE` with the same encoders" in note
    report = (tmp_path / "r" / "report.md").read_text()  # in the words of a collection, not of SubjQA's reviews and splits
    assert "over the collection 'notes' (4 documents in 4 passages" in report and "candidate documents per question" in report
    assert "review" not in report
    capsys.readouterr()
    assert main(["fit-fusion", "--collection", "notes", "--labels", str(labels)]) == 0
    assert capsys.readouterr().out.startswith("notes: fusion ")
    assert main(evaluate) == 0
    [_, note] = json.loads((tmp_path / "r" / "report.json").read_text())["fitted"]
    assert "stored by fit-fusion, fitted on labels.csv (24 questions): strict recall@1" in note
    assert main(["fit-fusion", "--collection", "notes"]) == 2
    assert "fit-fusion fits a SubjQA --domain on its dev split, or --collection NAME on --labels FILE" in capsys.readouterr().err


def test_fit_fusion_says_when_the_questions_cannot_tell_the_retrievers_apart():
    """One Reddit post per item: BM25, dense and every fusion found each question's post first, and `fit-fusion`
    stored 0.5 / 0.5 as if it had chosen them."""
    from qa_system.cli.train import fusion_fit_line

    same = {"recall@1": 0.958, "mrr": 0.97}
    fit = {"mode": "minmax", "sparse_weight": 0.5, "dense_weight": 0.5, "k": 60, "fitted_on": "fit.csv"}
    tied = fusion_fit_line("reddit", {**fit, "dev": {"fused": same, "bm25": dict(same), "dense": dict(same)}})
    assert tied.startswith("reddit: fusion minmax (sparse weight 0.50, dense weight 0.50, k 60); fit.csv strict recall@1 0.958")
    assert "cannot tell the weights apart: the most even ones are kept" in tied
    chosen = fusion_fit_line("reddit", {**fit, "dev": {"fused": same, "bm25": {"recall@1": 0.9, "mrr": 0.93}, "dense": dict(same)}})
    assert "cannot tell" not in chosen
