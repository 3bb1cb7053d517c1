"""Sources: files in -> Documents, Records and LabelledQuestions: SubjQA CSVs, SQuAD / MRQA JSON, your CSV / TSV / JSON lines and .txt / .md / .html / .pdf files."""

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

__all__ = [
    "SPLITS",
    "GoldAnswer",
    "LabelledQuestion",
    "LoadReport",
    "SubjQA",
    "available_domains",
    "available_splits",
    "clean_review",
    "in_split",
    "split_names",
    "load_subjqa",
    "source_files",
]
