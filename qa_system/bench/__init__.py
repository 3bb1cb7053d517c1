"""`qa-system bench`: indexing, retrieval, reader and end-to-end speed, each beside its baseline (``run.py``)."""

from qa_system.bench.run import DEFAULT_SIZES, run_bench

__all__ = ["DEFAULT_SIZES", "run_bench"]
