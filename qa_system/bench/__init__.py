"""Benchmarks (`qa-system bench`): indexing, retrieval, reader and end-to-end speed, each beside its baseline (``run.py``).

Also: ingestion (``ingest.py``), the REST API under load (``api.py``), many real browsers on one
search page (``page_load.py``, driving headless Chromium with ``browser.py``).
"""

from qa_system.bench.run import DEFAULT_SIZES, run_bench

__all__ = ["DEFAULT_SIZES", "run_bench"]
