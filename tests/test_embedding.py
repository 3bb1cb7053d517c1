"""The bi-encoder's backends (ingestion/embedding.py, onnx_encoder.py): the int8 ONNX export against
sentence-transformers float32, its cache, the backend an index records and its questions follow, and a
BM25 server that embeds a collection only when a dense question first needs it."""

from __future__ import annotations

import json
import threading

import numpy as np
import onnx
import pytest
import torch

from qa_system.config import Settings, default_embedding_model
from qa_system.errors import QAError
from qa_system.ingestion.embedding import QueryEmbedder, RustTokenizer, TorchSentenceEncoder, load_encoder
from qa_system.ingestion.indexing import build_index, embeddings_match
from qa_system.ingestion.onnx_encoder import (
    EXPORT_INFO,
    INT8_FILE,
    TOKENS_PER_BATCH,
    cached_encoder_export,
    encoder_layout,
    is_complete,
    token_batches,
)
from qa_system.pipelines import build_retrieval_pipeline
from qa_system.serving.question import Question
from qa_system.serving.service import QAService
from qa_system.stores import try_open_index

SENTENCES = [
    "The battery lasts a week.",
    "Is it good for reading at night?",
    "The cord broke after two months.",
    "Deep bass and a comfortable fit for long flights.",
    "  Shipping was slow and the box was damaged.  ",
    "A precise wireless mouse with a solid scroll wheel " * 40,  # longer than the encoder's 256 tokens: truncated alike
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    """One export of the shipped MiniLM for the module (built once, about 10 s)."""
    return tmp_path_factory.mktemp("embedding-onnx")


def test_the_int8_export_embeds_as_sentence_transformers_does(onnx_cache):
    model = default_embedding_model()
    int8 = load_encoder(model, "onnx", "cpu", onnx_cache)
    float32 = TorchSentenceEncoder(model, "cpu")
    assert (int8.backend, int8.precision, int8.device) == ("onnx", "int8", "cpu")
    a, b = float32.encode(SENTENCES), int8.encode(SENTENCES, batch_size=4)
    assert a.shape == b.shape == (len(SENTENCES), 384) and b.dtype == np.float32
    assert np.allclose(np.linalg.norm(b, axis=1), 1, atol=1e-4)  # normalised inside the graph
    assert (a * b).sum(axis=1).min() > 0.97  # int8 weights: the same vector, give or take
    # Sentences rank alike: the similarities agree, and where float32 has a clear nearest sentence, so does int8.
    similar32, similar8 = a @ a.T - 2 * np.eye(len(a)), b @ b.T - 2 * np.eye(len(b))
    assert np.abs(similar32 - similar8).max() < 0.05
    top2 = np.sort(similar32, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.03
    assert clear.sum() >= 3 and (similar32.argmax(axis=1) == similar8.argmax(axis=1))[clear].all()
    assert int8.encode([]).shape[0] == 0


def test_the_float32_encoder_gives_sentence_transformers_own_vectors_in_the_texts_order():
    """``TorchSentenceEncoder.encode`` runs the model's modules itself (sorted by length, in batches), not ``encode``."""
    float32 = TorchSentenceEncoder(default_embedding_model(), "cpu")
    texts = [*SENTENCES, "ok", "Great sound.", *reversed(SENTENCES)]
    ours = float32.encode(texts, batch_size=3)  # several batches: the rows come back in the texts' order
    theirs = float32.model.encode(texts, batch_size=3, normalize_embeddings=True, convert_to_numpy=True)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (len(texts), 384)
    assert np.allclose(ours, theirs, atol=1e-6)
    assert np.allclose(ours[0], ours[-1], atol=1e-6) and not np.allclose(ours[0], ours[1], atol=1e-2)
    assert float32.encode([]).shape == (0, 384)
    float32.model.train()  # a model put in training mode (dropout) elsewhere embeds as in eval mode all the same
    assert np.allclose(float32.encode(texts[:3]), theirs[:3], atol=1e-6) and not float32.model.training


def test_the_float32_encoder_tokenises_with_its_rust_tokenizer_only_where_it_gives_the_modules_own_tokens():
    """Its own copy of the Rust tokenizer, padding and truncating as sentence-transformers' module does; a module that
    tokenises otherwise (here: told to cut texts at 8 tokens) keeps sentence-transformers' way."""
    encoder = TorchSentenceEncoder(default_embedding_model(), "cpu")
    assert encoder._tokenizer is not None
    texts = [*SENTENCES, "  Is it GOOD for reading?  ", "", "Crème brûlée ☺", "word " * 400]
    own, ours = encoder.model.preprocess(texts), encoder._features(texts)
    assert own.keys() == ours.keys() and ours["modality"] == "text"
    assert all(torch.equal(own[name], ours[name]) for name in ("input_ids", "token_type_ids", "attention_mask"))
    assert ours["input_ids"].shape == (len(texts), 256)  # the long text cut at the model's length, the rest padded to it
    cut = TorchSentenceEncoder(default_embedding_model(), "cpu")
    cut.model[0].processing_kwargs = {"text": {"max_length": 8}}
    assert RustTokenizer.matching(cut.model) is None
    cut._tokenizer = None
    assert cut._features(texts)["input_ids"].shape == (len(texts), 8)


def test_long_texts_are_batched_within_a_token_budget_and_a_question_with_its_phrases_in_one():
    lengths = np.array([20] * 40 + [256] * 10)
    batches = token_batches(lengths, batch_size=32)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # every text once
    assert batches[0] == list(range(40, 48))  # longest first: eight 256-token passages fill the budget
    assert all(len(b) <= 32 and len(b) * lengths[b].max() <= TOKENS_PER_BATCH for b in batches)
    assert [len(b) for b in batches] == [8, 8, 32, 2]
    # A question and its dozen candidate phrases: one batch, as the selector was fitted on.
    assert token_batches(np.array([12] + [60] * 12), batch_size=32) == [list(range(1, 13)) + [0]]


def test_the_export_is_cached_by_the_model_files_and_reused(onnx_cache, tmp_path, caplog):
    model = default_embedding_model()
    first = cached_encoder_export(model, onnx_cache)
    info = json.loads((first / EXPORT_INFO).read_text(encoding="utf-8"))
    assert is_complete(first) and info["layout"] == {"pooling": "mean", "normalize": True, "max_seq_length": 256}
    assert info["model_fingerprint"] and "int8" in info["quantization"]
    operators = {node.op_type for node in onnx.load(str(first / INT8_FILE)).graph.node}
    # int8 matrix products; attention and the residual LayerNorm as plain operators, faster than their fused kernels
    assert "DynamicQuantizeMatMul" in operators or "MatMulInteger" in operators
    assert {"Softmax", "LayerNormalization"} <= operators and not operators & {"QAttention", "Attention", "SkipLayerNormalization"}
    built = (first / EXPORT_INFO).stat().st_mtime_ns
    assert cached_encoder_export(model, onnx_cache) == first and (first / EXPORT_INFO).stat().st_mtime_ns == built  # reused, not rebuilt
    (first / EXPORT_INFO).write_text("{}", encoding="utf-8")  # an export cut short is not complete
    assert not is_complete(first)
    with caplog.at_level("WARNING"):
        assert cached_encoder_export(model, onnx_cache) == first and is_complete(first)  # built again
    # why a collection without vectors builds it too: the answer selector uses it
    assert "and the answer selector weighs each answer by its closeness in meaning to the question): building" in caplog.text


def test_a_stop_during_loading_leaves_the_cached_export_whole(onnx_cache, monkeypatch):
    """A native library that catches the interrupt fails with an error of its own: that is no damaged export to rebuild."""
    from qa_system import stopping
    from qa_system.ingestion import onnx_encoder

    model = default_embedding_model()
    export = cached_encoder_export(model, onnx_cache)
    built = (export / EXPORT_INFO).stat().st_mtime_ns

    def disguised(directory, threads=None):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("session creation failed") from None  # the interrupt only as its context

    monkeypatch.setattr(onnx_encoder, "OnnxSentenceEncoder", disguised)
    with pytest.raises(KeyboardInterrupt):
        onnx_encoder.load_onnx_encoder(model, onnx_cache)
    monkeypatch.setattr(stopping, "_asked", threading.Event())
    stopping.ask_to_stop()  # SIGTERM: a plain error meanwhile is the stop too

    def failing(directory, threads=None):
        raise RuntimeError("session creation failed")

    monkeypatch.setattr(onnx_encoder, "OnnxSentenceEncoder", failing)
    with pytest.raises(KeyboardInterrupt):
        onnx_encoder.load_onnx_encoder(model, onnx_cache)
    assert is_complete(export) and (export / EXPORT_INFO).stat().st_mtime_ns == built  # neither thrown away nor rebuilt


def test_a_layout_the_export_does_not_reproduce_is_one_line(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(
        json.dumps(
            [
                {"path": "", "type": "sentence_transformers.models.Transformer"},
                {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(QAError, match="QA_EMBEDDING_BACKEND=torch"):
        encoder_layout(tmp_path)


@pytest.mark.parametrize(
    ("pooling", "expected"),
    [
        ({"pooling_mode": "mean"}, "mean"),
        ({"pooling_mode": "cls"}, "cls"),
        ({"pooling_mode_mean_tokens": True}, "mean"),
        ({"pooling_mode_cls_token": True}, "cls"),
    ],
)
def test_the_pooling_is_read_in_both_layouts_sentence_transformers_writes(tmp_path, pooling, expected):
    # sentence-transformers 5.4+ saves {"pooling_mode": "mean"}; older versions one boolean per mode.
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(
        json.dumps(
            [
                {"path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
                {"path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
                {"path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
            ]
        )
    )
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 384, **pooling}))
    assert encoder_layout(tmp_path) == {"pooling": expected, "normalize": True, "max_seq_length": None}


@pytest.mark.parametrize("pooling", [{"pooling_mode": "max"}, {"pooling_mode": ["mean", "max"]}, {"pooling_mode_max_tokens": True}])
def test_a_pooling_the_export_does_not_reproduce_is_refused_in_both_layouts(tmp_path, pooling):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(
        json.dumps(
            [
                {"path": "", "type": "sentence_transformers.models.Transformer"},
                {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(QAError, match="QA_EMBEDDING_BACKEND=torch"):
        encoder_layout(tmp_path)


def test_an_unknown_embedding_backend_is_refused():
    with pytest.raises(QAError, match="onnx, torch"):
        Settings(embedding_backend="tensorrt")


def test_an_index_records_its_backend_and_its_questions_follow_it(settings, onnx_cache, monkeypatch):
    monkeypatch.setattr("qa_system.config.Settings.embedding_onnx_cache", property(lambda self: onnx_cache))
    int8 = settings.with_(embedding_backend="onnx", device="cpu")
    index = build_index(int8, progress=False)
    assert index.manifest["embedding_backend"] == "onnx" and embeddings_match(index, int8)
    # Configured for torch now: the saved int8 vectors are no longer the configured backend's (re-embedded on open) ...
    float32 = int8.with_(embedding_backend="torch")
    assert not embeddings_match(index, float32) and embeddings_match(index, float32, backend=False)
    # ... but a pipeline over them embeds its questions in int8, as its reviews were.
    pipeline = build_retrieval_pipeline("dense", float32, index=index)
    embedder = pipeline.pipeline.get_component("query_embedder")
    assert isinstance(embedder, QueryEmbedder) and embedder.backend == "onnx" and embedder.runs_on == "cpu"
    top = pipeline.run("Is the cord durable?", top_k=1)["documents"][0]
    assert top.meta["review_id"] == "r-phones-2"


def test_a_bm25_server_embeds_a_collection_only_when_a_dense_question_needs_it(settings, tiny_reader):
    served = settings.with_(retriever="bm25", reader_model=str(tiny_reader), reader_backend="torch", embedding_backend="torch")
    service = QAService(served).start()
    service._loading.result()
    assert service.ready and service.device == "cpu"
    saved = try_open_index(served, "subjqa-electronics")
    assert saved is not None and saved.embedding_model is None and "embedding_backend" not in saved.manifest
    assert all(d.embedding is None for d in saved.store.filter_documents())  # ready, and nothing embedded
    assert service.ask(Question("How is the bass?", item_id="HEADPHONES"))["documents"]  # BM25 questions embed nothing
    assert try_open_index(served, "subjqa-electronics").embedding_model is None

    answer = service.ask(Question("Is the cord durable?", item_id="HEADPHONES", retriever="dense"))
    assert answer["documents"][0].meta["review_id"] == "r-phones-2" and answer["device"] == "cpu"
    embedded = try_open_index(served, "subjqa-electronics")
    assert embedded.embedding_model == served.embedding_model and embedded.manifest["embedding_backend"] == "torch"
    index, written = service.index(None), embedded.manifest["created"]
    service.ask(Question("How is the bass?", item_id="HEADPHONES", retriever="hybrid"))
    service.ask(Question("Is the cord durable?", item_id="HEADPHONES", retriever="dense"))
    assert service.index(None) is index  # the second dense question (and the hybrid one) embedded nothing again
    assert try_open_index(served, "subjqa-electronics").manifest["created"] == written


def test_embed_at_start_embeds_while_the_server_starts(settings, tiny_reader):
    served = settings.with_(
        retriever="bm25", reader_model=str(tiny_reader), reader_backend="torch", embedding_backend="torch", embed_at_start=True
    )
    QAService(served).start()._loading.result()
    assert try_open_index(served, "subjqa-electronics").embedding_model == served.embedding_model
