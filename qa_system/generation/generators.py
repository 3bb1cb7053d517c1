"""Chat generators behind one interface (Haystack's: ``run(messages) -> {"replies": [ChatMessage]}``).

* ``LocalGenerator`` runs a Hugging Face model in-process: causal LMs through their chat template,
  seq2seq models such as flan-t5 on the flattened prompt (Haystack's TransformersChatGenerator
  covers causal models only and hides the token counts that truncation needs).
* ``OpenAICompatibleGenerator`` wraps Haystack's OpenAIChatGenerator for any server that speaks
  the protocol (llama.cpp server, vLLM, hosted APIs): the key is optional and failures name the url.

Both put ``usage`` (prompt and completion tokens) in the reply's meta and stream text through a
Haystack streaming callback.
"""

from __future__ import annotations

import threading
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.components.generators.chat.openai import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage, ComponentInfo, StreamingCallbackT, StreamingChunk
from haystack.utils import Secret, deserialize_callable, serialize_callable

from qa_system.errors import Unavailable
from qa_system.generation.models import HFPromptFormat, load_generation_model, load_prompt_format

DEFAULT_GENERATION = {"max_new_tokens": 64, "temperature": 0.0, "num_beams": 1}

# One copy of a generator model per process and device, as long as its files stay the same: a service builds a pipeline
# per collection and retriever, and each held its own (a 135M model is 500 MB in float32).
_shared: dict[tuple[str, str], tuple[str | None, HFPromptFormat, Any]] = {}
_sharing = threading.Lock()


def shared_generation_model(model: str, device: str) -> tuple[HFPromptFormat, Any]:
    """The prompt format and the model ``model`` on ``device`` (resolved), loaded once per process while its files are
    unchanged; on a GPU in bfloat16 (float16 without it)."""
    from qa_system.devices import half_dtype, is_cuda
    from qa_system.model_files import model_fingerprint

    fingerprint = model_fingerprint(model)
    with _sharing:
        held = _shared.get((model, device))
        if held is None or held[0] != fingerprint or fingerprint is None:
            loaded = load_generation_model(model)
            held = _shared[model, device] = (
                fingerprint,
                load_prompt_format(model),
                loaded.to(device=device, dtype=half_dtype()) if is_cuda(device) else loaded,
            )
        return held[1], held[2]


def _streamer(tokenizer, callback: StreamingCallbackT, info: ComponentInfo):
    """A transformers streamer that hands each decoded piece of the answer to a Haystack callback."""
    from transformers import TextStreamer

    class CallbackStreamer(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if text:
                callback(StreamingChunk(content=text, component_info=info))

    return CallbackStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)


@component
class LocalGenerator:
    """Generates a reply with a local Hugging Face model (causal LM with chat template, or seq2seq).

    :param model: model directory or hub id.
    :param generation_kwargs: ``max_new_tokens``, ``temperature`` (0 = greedy), ``num_beams``, and any
        other ``generate()`` argument.
    :param streaming_callback: called with each new piece of text (greedy or sampling, not beams).
    The device (QA_DEVICE) is the machine's, not the pipeline's: ``use_runtime`` sets it; on a GPU the model
    generates in bfloat16 (float16 without it).

    Usage::

        generator = LocalGenerator(model="google/flan-t5-base", generation_kwargs={"max_new_tokens": 64})
        messages = ReviewPromptBuilder(tokenizer="google/flan-t5-base").run(query=question, documents=docs)["messages"]
        reply = generator.run(messages=messages)["replies"][0].text
    """

    def __init__(self, model: str, generation_kwargs: dict[str, Any] | None = None, streaming_callback: StreamingCallbackT | None = None):
        self.model = str(model)
        self.generation_kwargs = {**DEFAULT_GENERATION, **(generation_kwargs or {})}
        self.streaming_callback = streaming_callback
        self.device = "auto"
        self._format: HFPromptFormat | None = None
        self._model = None

    def use_runtime(self, device: str, home: str | None = None) -> None:
        """Generate on ``device`` (a QA_DEVICE setting)."""
        if self._model is None:
            self.device = device

    def warm_up(self) -> None:
        """Load the model and its tokenizer (once per process: ``shared_generation_model``), on the device."""
        if self._model is None:
            from qa_system.devices import resolve_device

            self._format, self._model = shared_generation_model(self.model, resolve_device(self.device))

    def to_dict(self) -> dict[str, Any]:
        """The component's settings (a streaming callback by its import path), serialised for a pipeline YAML."""
        callback = serialize_callable(self.streaming_callback) if self.streaming_callback else None
        return default_to_dict(self, model=self.model, generation_kwargs=self.generation_kwargs, streaming_callback=callback)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalGenerator:
        """The component from ``to_dict``'s data, the streaming callback imported back."""
        parameters = data.get("init_parameters", {})
        if parameters.get("streaming_callback"):
            parameters["streaming_callback"] = deserialize_callable(parameters["streaming_callback"])
        return default_from_dict(cls, data)

    def _generate_kwargs(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        kwargs = {**self.generation_kwargs, **(overrides or {})}
        temperature = float(kwargs.pop("temperature", 0.0))
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kwargs

    @component.output_types(replies=list[ChatMessage])
    def run(
        self,
        messages: list[ChatMessage],
        streaming_callback: StreamingCallbackT | None = None,
        generation_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """The model's reply to ``messages``.

        :param messages: the prompt (system and user messages).
        :param streaming_callback: called with each new piece of text; overrides the component's own.
        :param generation_kwargs: ``generate()`` arguments for this call, over the component's.
        :returns: ``{"replies": [ChatMessage]}``, with the token usage and finish reason in its meta.
        """
        import torch

        self.warm_up()
        assert self._format is not None
        tokenizer = self._format.tokenizer
        kwargs = self._generate_kwargs(generation_kwargs)
        callback = streaming_callback or self.streaming_callback
        if callback is not None and kwargs.get("num_beams", 1) == 1:
            kwargs["streamer"] = _streamer(tokenizer, callback, ComponentInfo.from_component(self))
        inputs = self._format.encode(messages)
        inputs = {name: value.to(self._model.device) for name, value in inputs.items()}
        pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        with torch.inference_mode():
            output = self._model.generate(**inputs, pad_token_id=pad_token_id, **kwargs)
        prompt_tokens = int(inputs["input_ids"].shape[1])
        # A causal LM returns the prompt followed by the answer; a seq2seq decoder only the answer.
        answer_ids = output[0] if self._format.seq2seq else output[0, prompt_tokens:]
        special = set(tokenizer.all_special_ids)
        completion_tokens = sum(1 for token in answer_ids.tolist() if token not in special)
        text = tokenizer.decode(answer_ids, skip_special_tokens=True).strip()
        finish_reason = "stop" if len(answer_ids) and answer_ids[-1].item() == tokenizer.eos_token_id else "length"
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
        meta = {"model": self.model, "finish_reason": finish_reason, "usage": usage}
        return {"replies": [ChatMessage.from_assistant(text, meta=meta)]}


@component
class OpenAICompatibleGenerator:
    """Haystack's OpenAIChatGenerator, set up for any OpenAI-compatible server.

    Local servers need no key: without ``OPENAI_API_KEY`` a placeholder is sent. Connection and
    HTTP errors become one-line ``QAError``s naming ``api_base_url``; retries are few so that a dead
    endpoint fails in seconds, not minutes.

    :param model: the model name the server serves.
    :param api_base_url: e.g. ``http://127.0.0.1:8080/v1`` (llama.cpp server, vLLM) or a hosted API.
    :param generation_kwargs: request fields such as ``max_tokens`` and ``temperature``.
    :param api_key: the key sent to the server (default: ``OPENAI_API_KEY``, optional; a placeholder without it).
    :param timeout: seconds a request may take before it fails.
    :param max_retries: retries of a failed request (few, so that a dead endpoint fails fast).

    Usage::

        generator = OpenAICompatibleGenerator(model="smollm2", api_base_url="http://127.0.0.1:8080/v1")
        replies = generator.run(messages=[ChatMessage.from_user("Is the battery good?")])["replies"]
    """

    def __init__(
        self,
        model: str,
        api_base_url: str,
        generation_kwargs: dict[str, Any] | None = None,
        api_key: Secret = Secret.from_env_var("OPENAI_API_KEY", strict=False),
        timeout: float = 120.0,
        max_retries: int = 1,
    ):
        self.model = model
        self.api_base_url = api_base_url
        self.generation_kwargs = generation_kwargs or {}
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: OpenAIChatGenerator | None = None

    def warm_up(self) -> None:
        """Create the client of the endpoint (once)."""
        if self._client is None:
            key = self.api_key.resolve_value() or "not-needed"  # the client insists on a key; local servers ignore it
            self._client = OpenAIChatGenerator(
                api_key=Secret.from_token(key),
                model=self.model,
                api_base_url=self.api_base_url,
                generation_kwargs=self.generation_kwargs,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
            self._client.warm_up()

    def to_dict(self) -> dict[str, Any]:
        """The component's settings (the API key as a secret reference, never its value), serialised for a pipeline YAML."""
        return default_to_dict(
            self,
            model=self.model,
            api_base_url=self.api_base_url,
            generation_kwargs=self.generation_kwargs,
            api_key=self.api_key,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )

    @component.output_types(replies=list[ChatMessage])
    def run(
        self,
        messages: list[ChatMessage],
        streaming_callback: StreamingCallbackT | None = None,
        generation_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """The endpoint's reply to ``messages``; a connection or HTTP error is one QAError naming the endpoint.

        :param messages: the prompt (system and user messages).
        :param streaming_callback: called with each new piece of text.
        :param generation_kwargs: request fields for this call, over the component's.
        :returns: ``{"replies": [ChatMessage]}``.
        """
        import openai

        self.warm_up()
        assert self._client is not None
        try:
            return self._client.run(messages, streaming_callback=streaming_callback, generation_kwargs=generation_kwargs)
        except openai.APIConnectionError as error:  # includes timeouts
            raise Unavailable(
                f"Cannot reach the generator endpoint {self.api_base_url} ({error}).",
                "start the server, or pass the right --base-url (e.g. http://127.0.0.1:8080/v1).",
            ) from error
        except openai.APIStatusError as error:
            raise Unavailable(
                f"The generator endpoint {self.api_base_url} answered HTTP {error.status_code}: {error.message}",
                "check --model (the name the server serves) and OPENAI_API_KEY.",
            ) from error
