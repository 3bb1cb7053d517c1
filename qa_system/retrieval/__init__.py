"""Retrieval components: sparse-matrix BM25, pre-filtered FAISS search, rank fusion, filters."""

from qa_system.retrieval.bm25 import BM25sRetriever
from qa_system.retrieval.faiss_filtered import FAISSFilteredEmbeddingRetriever
from qa_system.retrieval.filters import make_filters
from qa_system.retrieval.fusion import RankFusion, reciprocal_rank_fusion

__all__ = ["BM25sRetriever", "FAISSFilteredEmbeddingRetriever", "RankFusion", "make_filters", "reciprocal_rank_fusion"]
