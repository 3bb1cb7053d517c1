"""What the page loads once per server process: the index, the reader's ONNX export, the pipelines (models), the labelled questions."""

from __future__ import annotations

import streamlit as st

from qa_system.config import Settings
from qa_system.indexing import open_or_build_index
from qa_system.pipelines import QAPipeline, build_qa_pipeline
from qa_system.reading.onnx_cache import prepare_reader
from qa_system.serving.background import TaskRegistry
from qa_system.sources import SPLITS, LabelledQuestion, load_subjqa
from qa_system.stores import Index

DOMAIN = "electronics"


@st.cache_resource(show_spinner=False)
def _tasks() -> TaskRegistry:
    return TaskRegistry()


def _in_background(key: tuple, work, opening: str, describe) -> object:
    """``work(report)`` run once per server process for ``key``, its progress shown to every visitor while they wait.

    Not a plain ``st.cache_resource`` function: Streamlit replays the elements a cached function
    drew, which would show a finished progress bar on every later run.
    """
    task = _tasks().get_or_start(key, work, name=key[0])
    if not task.wait(0.2):
        with st.spinner(opening):
            bar = st.progress(0.0, text=opening)
            while not task.wait(0.5):
                done, total = task.progress
                if total:
                    bar.progress(done / total, text=describe(done, total))
            bar.empty()
    return task.result()


def open_index(settings: Settings) -> Index:
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


@st.cache_resource(show_spinner="Loading the models (once per server)…")
def qa_pipeline(settings: Settings, retriever: str, answer_stage: str | None, _index: Index) -> QAPipeline:
    """One pipeline per (settings, retriever, answer stage); ``_index`` is the one ``settings`` names."""
    return build_qa_pipeline(retriever, settings, index=_index, answer_stage=answer_stage)


@st.cache_resource(show_spinner="Loading the labelled questions…")
def labelled_questions(data_dir: str) -> list[LabelledQuestion]:
    return load_subjqa(DOMAIN, SPLITS, data_dir).questions
