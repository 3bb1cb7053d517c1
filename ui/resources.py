"""What the page loads once per server process: the collections' indexes, the reader's ONNX export, the
pipelines (models), the labelled questions; and what it writes: uploads into collections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import streamlit as st

from qa_system.config import Settings
from qa_system.ingestion import CollectionInfo, IngestOptions, IngestProgress, IngestReport, collection_manifest, ingest, list_collections, open_collection
from qa_system.ingestion.indexing import open_or_build_index
from qa_system.pipelines import QAPipeline, build_qa_pipeline
from qa_system.reading.onnx_cache import prepare_reader
from qa_system.safe_text import markdown_literal
from qa_system.serving.background import BackgroundTask, TaskRegistry
from qa_system.sources import SPLITS, LabelledQuestion, load_subjqa
from qa_system.stores import Index, index_name

DOMAIN = "electronics"
DEFAULT_COLLECTION = index_name(DOMAIN)  # the page's own, built from SubjQA on first start


@st.cache_resource(show_spinner=False)
def _tasks() -> TaskRegistry:
    return TaskRegistry()


def _in_background(key: tuple, work, opening: str, describe) -> object:
    """``work(report)`` run once per server process for ``key``, its progress shown to every visitor while they wait.

    Not a plain ``st.cache_resource`` function: Streamlit replays the elements a cached function
    drew, which would show a finished progress bar on every later run.
    """
    task = _tasks().get_or_start(key, work, name=key[0])

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


@st.cache_data(ttl=10, show_spinner=False)
def collections(settings: Settings) -> dict[str, CollectionInfo]:
    """The collections the page offers, by name: its own SubjQA one first (even before it is built),
    then every other readable one of the store (not the encoder-comparison copies ``eval retriever`` makes)."""
    found = {info.name: info for info in list_collections(settings) if info.kind != "unreadable" and "@" not in info.name}
    return {DEFAULT_COLLECTION: found.pop(DEFAULT_COLLECTION, None), **found}


def open_index(settings: Settings, collection: str = DEFAULT_COLLECTION) -> Index:
    """The collection's index: the page's own is built on first start (``_open_default_index``), any
    other is opened as saved, once per version (an upload into it makes a new one)."""
    if collection == DEFAULT_COLLECTION:
        return _open_default_index(settings)
    manifest = collection_manifest(settings, collection)
    return _open_saved_collection(settings, collection, manifest.get("updated", manifest.get("created")))


@st.cache_resource(show_spinner="Opening the collection…", max_entries=4)
def _open_saved_collection(settings: Settings, collection: str, version: str | None) -> Index:
    return open_collection(settings, collection, progress=False)


@dataclass
class Upload:
    """A file being indexed into ``collection`` in the background: the work goes on when its visitor
    leaves or the page reruns, and the visitor's next run follows it again."""

    collection: str
    file_name: str
    embed: bool
    task: BackgroundTask[IngestReport] | None = None
    latest: IngestProgress | None = None


def start_upload(settings: Settings, file, collection: str, options: IngestOptions, embed: bool) -> Upload | None:
    """An uploaded CSV / JSON lines file into ``collection`` (new, or updated incrementally), indexed
    outside the visitor's script; None while another upload into that collection runs. The collection
    is left as it was when it fails (``ingest`` swaps it in at the end)."""
    upload = Upload(collection, file.name, embed)

    def work(report) -> IngestReport:
        def progressed(progress: IngestProgress) -> None:
            upload.latest = progress

        return ingest(settings, file, collection, options, name=file.name, embed=embed, progress=False, on_progress=progressed)

    key = ("upload", settings.store, settings.es_url, settings.opensearch_url, str(settings.home), collection)
    upload.task = _tasks().start_unless_running(key, work, name=f"upload-{collection}")
    return upload if upload.task is not None else None


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
    collections.clear()
    return upload.task.result()


def _open_default_index(settings: Settings) -> Index:
    """The domain's index, built on first start in a background task that every visitor shares.

    Indexing runs outside the visitor's script (``serving.background``): a visitor who closes the
    browser does not stop it, and the next one sees its progress rather than starting again.
    """
    key = ("first-start-indexing", settings.store, settings.es_url, settings.opensearch_url, str(settings.home), str(settings.data_dir), settings.embedding_model)
    return _in_background(
        key, lambda report: open_or_build_index(settings, DOMAIN, embeddings=True, progress=False, on_progress=report), "Opening the review index…",
        lambda done, total: f"First start: embedding {total} reviews for search ({done}/{total}). Later starts load the saved index in seconds.",
    )


def prepare_fast_reader(settings: Settings) -> None:
    """The reader's int8 ONNX export, built into the cache on the first question (about half a minute,
    once per model version), with its progress; when it cannot be built the reader warns and uses PyTorch."""
    key = ("reader-onnx-export", settings.reader_backend, settings.reader_model, settings.reader_onnx_model, str(settings.reader_onnx_cache))
    _in_background(
        key, lambda report: prepare_reader(settings, report), "Preparing the fast reader…",
        lambda done, total: f"First question: building the int8 ONNX reader, once per model version (step {done} of {total}).",
    )


def qa_pipeline(settings: Settings, retriever: str, answer_stage: str | None, index: Index) -> QAPipeline:
    """One pipeline per (settings, retriever, answer stage, index version)."""
    return _pipeline(settings, retriever, answer_stage, index.name, index.manifest.get("updated", index.manifest.get("created")), index)


@st.cache_resource(show_spinner="Loading the models (once per server)…", max_entries=16)
def _pipeline(settings: Settings, retriever: str, answer_stage: str | None, name: str, version: str | None, _index: Index) -> QAPipeline:
    return build_qa_pipeline(retriever, settings, index=_index, answer_stage=answer_stage)


@st.cache_resource(show_spinner="Loading the labelled questions…")
def labelled_questions(data_dir: str) -> list[LabelledQuestion]:
    return load_subjqa(DOMAIN, SPLITS, data_dir).questions
