"""Trained retriever encoders as data: where ``train_retriever`` saves them and which settings they need.

Read by evaluation and the CLI's ``-ft`` variants; the training loop itself is ``training/retriever.py``.
"""

from __future__ import annotations

from pathlib import Path

from qa_system.config import REPO_ROOT
from qa_system.errors import QAError
from qa_system.reading.model import read_model_info

DEFAULT_RETRIEVER_MODEL = REPO_ROOT / "models" / "retriever-minilm-subjqa"


def tuned_encoders(model_dir: str | Path) -> tuple[str, str | None]:
    """(passage encoder, question encoder or None = the same) to configure for a model ``train_retriever`` wrote.

    A question-encoder model searches the vectors of the passage encoder it was trained against,
    so the existing index serves it; the other kinds need the reviews embedded by their passage encoder.
    """
    from qa_system.config import default_embedding_model
    from qa_system.model_files import model_fingerprint

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file() and not (model_dir / "passage").is_dir():
        raise QAError(
            f"There is no trained retriever encoder at {model_dir}.", "train one with `qa-system train-retriever`, or pass its directory."
        )
    info = read_model_info(model_dir)
    kind = info.get("encoders", "shared")
    if kind == "separate":
        return str(model_dir / "passage"), str(model_dir / "query")
    if kind != "question":
        return str(model_dir), None
    passage = info["passage_encoder"]
    if not Path(passage).exists() and model_fingerprint(default_embedding_model()) == info.get("passage_fingerprint"):
        passage = default_embedding_model()  # the stock MiniLM, installed elsewhere on this machine
    return passage, str(model_dir)
