"""Loading a reader's weights: any Hugging Face QA model id or directory, plus the settings stored beside it.

Split from the reader component so that its backends (``onnx.py``) and its training load models
the same way without importing the component.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qa_system.errors import QAError
from qa_system.hub import load_options, quiet_local_load, unreachable

# What ``train_reader`` stores beside a model (no-answer threshold, training data, machine).
MODEL_INFO_FILE = "qa_system.json"


class ModelLoadError(QAError):
    """The model itself does not load (missing, incomplete, unreachable): every backend fails the same way."""


def read_model_info(model_dir: str | Path) -> dict[str, Any]:
    """The ``qa_system.json`` that ``train_reader`` stores beside a model ({} for other models)."""
    path = Path(model_dir) / MODEL_INFO_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise QAError(f"{path} is not valid JSON ({error}).", "re-train the reader or delete the file.") from error


def load_qa_model(name_or_path: str | Path, what: str = "reader model", weights: bool = True):
    """Tokenizer and AutoModelForQuestionAnswering (float32) from a local directory or a Hugging Face model id; with
    ``weights=False`` the tokenizer alone (and None), for a process whose model is read elsewhere.

    A bare encoder (e.g. a sentence-transformers model) gets a freshly initialised QA head.
    """
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    name = str(name_or_path)
    if name.startswith("~"):
        name = str(Path(name).expanduser())
    looks_local = Path(name).exists() or name.startswith((".", "/"))
    if looks_local and not (Path(name) / "config.json").is_file():
        raise ModelLoadError(
            f"The {what} directory '{name}' has no config.json.",
            "pass a directory written by train_reader / save_pretrained, or a Hugging Face model id.",
        )
    options = load_options(name)  # offline: the local cache only, instead of ~50 s of retries
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **options)
        # float32 whatever the stored dtype: the shipped reader is stored in fp16 to stay small.
        with quiet_local_load(name):
            model = AutoModelForQuestionAnswering.from_pretrained(name, dtype=torch.float32, **options) if weights else None
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        if options:
            hub = unreachable(what, name)
            raise ModelLoadError(hub.problem, hub.fix) from error
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(
            f"Could not load the {what} '{name}': {detail}",
            "pass a complete model directory (config, weights, tokenizer) or a model id reachable on the hub.",
        ) from error
    if not tokenizer.is_fast:
        raise ModelLoadError(
            f"The tokenizer of '{name}' is not a fast tokenizer.", "use a model with a tokenizer.json (fast tokenizer); offsets need it."
        )
    return tokenizer, model
