"""Generative QA (RAG): a prompt of numbered reviews, a generator, and the answer with its citations.

``pipelines/rag.yml`` chains ``ReviewPromptBuilder`` -> a generator (``LocalGenerator`` or
``OpenAICompatibleGenerator``) -> ``CitedAnswerBuilder`` after any retrieval pipeline; build it
with ``qa_system.pipelines.build_qa_pipeline(retriever, settings, answer_stage="rag")``.
"""

from qa_system.generation.answers import CitedAnswerBuilder, parse_citations, says_no_answer, strip_citations
from qa_system.generation.backends import generator_model, rag_pipeline_values
from qa_system.generation.generators import LocalGenerator, OpenAICompatibleGenerator
from qa_system.generation.models import default_generator_dir, find_smollm2_gguf
from qa_system.generation.prompt import NO_ANSWER_REPLY, ReviewPromptBuilder

__all__ = [
    "NO_ANSWER_REPLY",
    "CitedAnswerBuilder",
    "LocalGenerator",
    "OpenAICompatibleGenerator",
    "ReviewPromptBuilder",
    "default_generator_dir",
    "find_smollm2_gguf",
    "generator_model",
    "parse_citations",
    "rag_pipeline_values",
    "says_no_answer",
    "strip_citations",
]
