"""What the page loads once per server process: the index, the pipelines (models), the labelled questions."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import streamlit as st

from qa_system.config import Settings
from qa_system.data import SPLITS, LabelledQuestion, load_subjqa
from qa_system.indexing import open_or_build_index
from qa_system.pipelines import QAPipeline, build_qa_pipeline
from qa_system.stores import Index

DOMAIN = "electronics"


@dataclass
class _Indexes:
    lock: threading.Lock = field(default_factory=threading.Lock)
    by_settings: dict[tuple, Index] = field(default_factory=dict)


@st.cache_resource(show_spinner=False)
def _indexes() -> _Indexes:
    return _Indexes()


def open_index(settings: Settings) -> Index:
    """The domain's index, built on first start with a progress bar, then kept for the process.

    Not a plain ``st.cache_resource`` function: Streamlit replays the elements a cached function
    drew, which would show a finished progress bar on every later run. The lock makes concurrent
    first visitors wait for one build instead of starting their own.
    """
    registry = _indexes()
    key = (settings.store, settings.es_url, settings.opensearch_url, str(settings.home), str(settings.data_dir), settings.embedding_model)
    with registry.lock:
        if key not in registry.by_settings:
            with st.spinner("Opening the review index…"):
                bar = st.empty()

                def report(done: int, total: int) -> None:
                    bar.progress(done / total, text=f"First start: embedding {total} reviews for search ({done}/{total}). Later starts load the saved index in seconds.")

                registry.by_settings[key] = open_or_build_index(settings, DOMAIN, embeddings=True, progress=False, on_progress=report)
                bar.empty()
    return registry.by_settings[key]


@st.cache_resource(show_spinner="Loading the models (once per server)…")
def qa_pipeline(settings: Settings, retriever: str, answer_stage: str | None, _index: Index) -> QAPipeline:
    """One pipeline per (settings, retriever, answer stage); ``_index`` is the one ``settings`` names."""
    return build_qa_pipeline(retriever, settings, index=_index, answer_stage=answer_stage)


@st.cache_resource(show_spinner="Loading the labelled questions…")
def labelled_questions(data_dir: str) -> list[LabelledQuestion]:
    return load_subjqa(DOMAIN, SPLITS, data_dir).questions
