"""What the page loads once per server process: the index, the pipelines (models), the labelled questions."""

from __future__ import annotations

import streamlit as st

from qa_system.config import Settings
from qa_system.indexing import open_or_build_index
from qa_system.pipelines import QAPipeline, build_qa_pipeline
from qa_system.serving.background import TaskRegistry
from qa_system.sources import SPLITS, LabelledQuestion, load_subjqa
from qa_system.stores import Index

DOMAIN = "electronics"


@st.cache_resource(show_spinner=False)
def _index_tasks() -> TaskRegistry:
    return TaskRegistry()


def open_index(settings: Settings) -> Index:
    """The domain's index, built on first start in a background task that every visitor shares.

    Indexing runs outside the visitor's script (``serving.background``): a visitor who closes the
    browser does not stop it, and the next one sees its progress rather than starting again.
    Not a plain ``st.cache_resource`` function: Streamlit replays the elements a cached function
    drew, which would show a finished progress bar on every later run.
    """
    key = (settings.store, settings.es_url, settings.opensearch_url, str(settings.home), str(settings.data_dir), settings.embedding_model)
    task = _index_tasks().get_or_start(
        key, lambda report: open_or_build_index(settings, DOMAIN, embeddings=True, progress=False, on_progress=report), name="first-start-indexing"
    )
    if not task.wait(0.2):
        with st.spinner("Opening the review index…"):
            bar = st.progress(0.0, text="Opening the review index…")
            while not task.wait(0.5):
                done, total = task.progress
                if total:
                    bar.progress(done / total, text=f"First start: embedding {total} reviews for search ({done}/{total}). Later starts load the saved index in seconds.")
            bar.empty()
    return task.result()


@st.cache_resource(show_spinner="Loading the models (once per server)…")
def qa_pipeline(settings: Settings, retriever: str, answer_stage: str | None, _index: Index) -> QAPipeline:
    """One pipeline per (settings, retriever, answer stage); ``_index`` is the one ``settings`` names."""
    return build_qa_pipeline(retriever, settings, index=_index, answer_stage=answer_stage)


@st.cache_resource(show_spinner="Loading the labelled questions…")
def labelled_questions(data_dir: str) -> list[LabelledQuestion]:
    return load_subjqa(DOMAIN, SPLITS, data_dir).questions
