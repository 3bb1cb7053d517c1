"""Data loaders: SubjQA CSVs (or the hub dataset) -> Haystack Documents + labelled questions."""

from qa_system.data.subjqa import (
    SPLITS,
    GoldAnswer,
    LabelledQuestion,
    LoadReport,
    SubjQA,
    available_domains,
    clean_review,
    load_subjqa,
)

__all__ = ["SPLITS", "GoldAnswer", "LabelledQuestion", "LoadReport", "SubjQA", "available_domains", "clean_review", "load_subjqa"]
