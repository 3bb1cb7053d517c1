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
    in_split,
    load_subjqa,
    source_files,
    split_names,
)

__all__ = ["SPLITS", "GoldAnswer", "LabelledQuestion", "LoadReport", "SubjQA", "available_domains", "available_splits", "clean_review", "in_split", "split_names", "load_subjqa", "source_files"]
