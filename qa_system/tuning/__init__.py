"""Tuning: a labelled dev split in -> fitted values: fusion, re-ranking and no-answer threshold fits written to the index manifest (``fusion.py``), the BM25 grid (``bm25.py``).

Each module is imported by path: they build and run pipelines.
"""
