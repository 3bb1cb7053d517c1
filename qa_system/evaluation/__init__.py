"""Evaluation of every stage: retriever recall@k / MRR / MAP, reader EM / F1, reports."""
