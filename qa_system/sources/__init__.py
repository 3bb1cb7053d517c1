"""Sources: readers of documents and labelled questions (SubjQA CSVs, SQuAD v2 JSON) -> Haystack Documents + LabelledQuestion."""

from qa_system.sources.subjqa import (
    SPLITS,
    GoldAnswer,
    LabelledQuestion,
    LoadReport,
    SubjQA,
    available_domains,
    available_splits,
    clean_review,
    load_subjqa,
    source_files,
)

__all__ = ["SPLITS", "GoldAnswer", "LabelledQuestion", "LoadReport", "SubjQA", "available_domains", "available_splits", "clean_review", "load_subjqa", "source_files"]
