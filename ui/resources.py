"""The page's door to the library's service (``qa_system.serving.service``): which service, and the
progress bars shown while it works. Opening collections, building pipelines, keeping them within the
memory budget, uploads and the reader's export are the service's; only their display is here."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
from cards import REVIEWS, Nouns

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion import CollectionInfo, IngestOptions, IngestProgress, IngestReport
from qa_system.safe_text import markdown_literal
from qa_system.serving.background import BackgroundTask
from qa_system.serving.served import PAGE_COLLECTION
from qa_system.serving.service import QAService, ServedCollection
from qa_system.serving.shared import shared_service
from qa_system.sources.decoding import EncodingError
from qa_system.stores import Index

# The upload form's Encoding picker: every encoding the library's messages suggest (UTF-16 with a byte-order mark is read as such).
UPLOAD_ENCODINGS = ["utf-8", "latin-1", "cp1252", "utf-16-le", "utf-16-be"]


def default_collection(settings: Settings) -> str:
    """The collection the page opens first: ``qa-system ui --collection`` (QA_PAGE_COLLECTION), else SubjQA electronics."""
    return settings.page_collection or PAGE_COLLECTION


def store_choices() -> list[str]:
    """The document stores the page offers: the configured one (QA_STORE) first, then memory, and Elasticsearch /
    OpenSearch whenever QA_ES_URL / QA_OPENSEARCH_URL name a server."""
    try:
        settings = Settings.from_env()
    except QAError:  # said by the page when it reads its settings
        return ["memory"]
    servers = [
        store for store, field in (("elasticsearch", "es_url"), ("opensearch", "opensearch_url")) if field in settings.model_fields_set
    ]
    return list(dict.fromkeys([settings.store, "memory", *servers]))


def service(settings: Settings) -> QAService:
    """The process's service of these settings, shared by every visitor (and by an API in this process)."""
    return shared_service(settings, (ServedCollection(default_collection(settings)),), any_collection=True)


def collections(settings: Settings) -> dict[str, CollectionInfo | None]:
    """The collections the page offers, by name: its default first (None before a SubjQA one is built), then the store's others."""
    available = service(settings).available()
    default = default_collection(settings)
    return {default: available.pop(default, None), **available}


def _follow(task: BackgroundTask, opening: str, describe: Callable[[int, int], str]):
    """``task``'s result, with a progress bar while it runs (it goes on if the visitor leaves)."""

    def now() -> tuple[float, str] | None:
        done, total = task.progress
        return (done / total, describe(done, total)) if total else None

    if not task.wait(0.2):
        with st.spinner(opening):
            _progress_bar_until_done(task, opening, now)
    return task.result()


def _progress_bar_until_done(task: BackgroundTask, opening: str, now: Callable[[], tuple[float, str] | None]) -> None:
    """A progress bar while ``task`` runs, showing ``now()``'s (share done, text) whenever it has one."""
    bar = st.progress(0.0, text=opening)
    while not task.wait(0.5):
        if (progress := now()) is not None:
            bar.progress(*progress)
    bar.empty()


def open_index(settings: Settings, collection: str, nouns: Nouns = REVIEWS) -> Index:
    """The collection's index, opened by the service (a SubjQA one built on first use, with its progress)."""
    return _follow(
        service(settings).opening(collection),
        f"Opening the {nouns.one} index…",
        lambda done, total: (
            f"First start: embedding {total} {nouns.many} for search ({done}/{total}). Later starts load the saved index in seconds."
        ),
    )


def prepare_fast_reader(settings: Settings) -> None:
    """The reader's int8 ONNX export, built into the cache on the first question (about half a minute,
    once per model version), with its progress; when it cannot be built the reader warns and uses PyTorch."""
    _follow(
        service(settings).preparing_reader(),
        "Preparing the fast reader…",
        lambda done, total: f"First question: building the int8 ONNX reader, once per model version (step {done} of {total}).",
    )


class Upload:
    """A file being indexed into ``collection`` by the service: the work goes on when its visitor leaves
    or the page reruns, and the visitor's next run follows it again."""

    def __init__(self, collection: str, file_name: str, embed: bool):
        self.collection, self.file_name, self.embed = collection, file_name, embed
        self.task: BackgroundTask[IngestReport] | None = None
        self.latest: IngestProgress | None = None

    def progressed(self, progress: IngestProgress) -> None:
        """The ingestion's latest progress, for the visitor's progress bar."""
        self.latest = progress


def start_upload(settings: Settings, file, collection: str, options: IngestOptions, embed: bool) -> Upload | None:
    """An uploaded CSV / JSON lines file into ``collection``; None while another upload into that collection runs."""
    upload = Upload(collection, file.name, embed)
    upload.task = service(settings).start_upload(file, collection, options, embed, upload.progressed)
    return upload if upload.task is not None else None


def upload_message(error: QAError) -> str:
    """An upload's error as the page says it. The library's message names the CLI's flag (``--encoding cp1252``);
    here the encoding is picked in the upload form, so a file that does not decode says which to pick there."""
    if not isinstance(error, EncodingError):
        return str(error)
    if error.encoding in UPLOAD_ENCODINGS:
        pick = f"choose Encoding {error.encoding} above"
    else:
        pick = "choose the file's encoding under Encoding above"
    return f"{error.problem} Fix: {pick}, or re-save the file as UTF-8."


def follow_upload(upload: Upload) -> IngestReport:
    """A progress bar while ``upload`` runs; its report when done, or its error raised again."""
    assert upload.task is not None

    def now() -> tuple[float, str] | None:
        if (progress := upload.latest) is None:
            return None
        embedded = f", {progress.embedded:,} passages embedded" if upload.embed else ""
        return min(progress.fraction or 0.0, 1.0), f"{progress.documents:,} documents read{embedded}… (it goes on if you leave the page)"

    if not upload.task.wait(0.2):
        _progress_bar_until_done(upload.task, f"Reading {markdown_literal(upload.file_name)}…", now)
    return upload.task.result()
