"""Evaluation of every stage: retriever recall@k / MRR / MAP, reader EM / F1, reports."""

from qa_system.evaluation.answers import best_scores, exact_match, f1, normalize_answer
from qa_system.evaluation.reader import evaluate_pipeline, evaluate_reader, squad_predictions, summarize_answers
