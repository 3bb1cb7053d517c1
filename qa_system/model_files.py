"""A model's files on disk and the one fingerprint of them.

Three things must change when a model's files change, and only then: the vectors of an index (a
retrained encoder rewritten at the same path), the fitted values keyed by a model (fusion,
re-ranking, no-answer thresholds), and the reader's ONNX export built from it (cached or manual).
They all use ``model_fingerprint``. It covers what the model computes with: weights, configuration,
tokenizer, sub-modules such as sentence-transformers' ``1_Pooling/``, and ``qa_system.json``, whose
tuned no-answer threshold an export copies. It leaves out what does not: model cards (``*.md``),
hidden files, and an ``onnx/`` export folder inside the model (an export of the model, not the model).

The digest is SHA-256 over each file's relative path and content, cut to 16 hex digits, and kept in
memory per file size and modification time (an encoder is fingerprinted on every pipeline build).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

# A folder of exports inside a model directory (reading/onnx.py's default `export-onnx` location).
EXPORT_FOLDER = "onnx"
FINGERPRINT_LENGTH = 16


def model_files_dir(model: str | Path) -> Path | None:
    """The directory holding the model's files: itself, or a hub id's snapshot in the local Hugging Face cache (None: not on disk)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(model), local_files_only=True))
    except Exception:  # not downloaded (or not a hub id): whoever loads it says which
        return None


def fingerprinted_files(directory: Path) -> list[Path]:
    """The files of a model directory that its fingerprint covers, sorted (see the module doc)."""
    files = []
    for path in directory.rglob("*"):
        parts = path.relative_to(directory).parts
        if any(part.startswith(".") for part in parts) or parts[0] == EXPORT_FOLDER or not path.is_file() or path.suffix == ".md":
            continue
        files.append(path)
    return sorted(files)


def model_fingerprint(model: str | Path) -> str | None:
    """The fingerprint of a model's files (a directory, or a hub id in the local cache); None when they are not on disk.

    >>> model_fingerprint("models/reader-minilm-subjqa")  # doctest: +SKIP
    '3f0c2a...'
    """
    directory = model_files_dir(model)
    files = fingerprinted_files(directory) if directory is not None else []
    if not files:
        return None
    return _digest(directory, tuple((str(p.relative_to(directory)), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@lru_cache(maxsize=32)
def _digest(directory: Path, files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for relative, _, _ in files:
        digest.update(relative.encode())
        with (directory / relative).open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:FINGERPRINT_LENGTH]
