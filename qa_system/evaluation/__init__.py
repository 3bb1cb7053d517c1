"""Evaluation of every stage: retriever recall@k / MRR / MAP, reader EM / F1, reports.

Only the answer metrics (pure functions, the SQuAD v2.0 definitions) are re-exported: the
runners (``reader``, ``answering``, ``retrieval``, ``rag``) load models and are imported by path.
"""

from qa_system.metrics.squad import best_scores, exact_match, f1, normalize_answer

__all__ = ["best_scores", "exact_match", "f1", "normalize_answer"]
