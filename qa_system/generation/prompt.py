"""The RAG prompt: the question and the retrieved reviews, numbered so that the answer can cite them,
fitted into the generator's context.

The budget is the context (the smaller of the configured one and the model's own) minus the tokens
reserved for the answer. When the reviews do not fit, they are shortened, never the question: each
review gets an equal share of what is left, short reviews keep their full text and hand their
unused share to the long ones; if a review would be cut below ``min_review_tokens``, the
lowest-ranked reviews are dropped instead. The prompt meta says what was cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from haystack import Document, component, default_to_dict
from haystack.dataclasses import ChatMessage

from qa_system.errors import QAError
from qa_system.generation.models import EstimatedFormat, PromptFormat, load_prompt_format

NO_ANSWER_REPLY = "I don't know."
SYSTEM_PROMPT = (
    "You answer questions about a product using only the customer reviews you are given. "
    "Answer in one or two short sentences and cite the reviews you used by their numbers, like [1]. "
    f'If the reviews do not answer the question, reply only "{NO_ANSWER_REPLY}"'
)
USER_TEMPLATE = "Reviews:\n{reviews}\n\nQuestion: {question}"
TRUNCATION_MARK = " ..."


def format_reviews(texts: Sequence[str]) -> str:
    """The reviews as the prompt lists them, one per line, numbered from 1 as ``[n] text`` (the numbers citations refer to)."""
    return "\n".join(f"[{number}] {text}" for number, text in enumerate(texts, 1))


def share_budget(lengths: Sequence[int], available: int) -> list[int]:
    """Tokens each review may keep: equal shares of ``available``, short reviews' leftovers going to long ones."""
    allotted = [0] * len(lengths)
    remaining = available
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for position, index in enumerate(order):
        allotted[index] = min(lengths[index], remaining // (len(order) - position))
        remaining -= allotted[index]
    return allotted


@component
class ReviewPromptBuilder:
    """Chat messages asking for a cited answer from numbered reviews, truncated to the context.

    :param tokenizer: model directory or id whose tokenizer counts the tokens (and, for chat models,
        whose template frames the prompt); None estimates tokens from characters (HTTP endpoints).
    :param context_length: prompt + answer budget in tokens; capped by the model's own context.
    :param max_new_tokens: tokens kept free for the answer.
    :param min_review_tokens: a review shortened below this is dropped instead.
    :param system_prompt: the instructions, including how to say that the reviews hold no answer.

    Usage::

        builder = ReviewPromptBuilder(tokenizer="google/flan-t5-base", context_length=1024, max_new_tokens=64)
        result = builder.run(query="Is the battery good?", documents=docs)
        messages, prompted, meta = result["messages"], result["documents"], result["prompt"]
    """

    def __init__(
        self,
        tokenizer: str | None = None,
        context_length: int = 2048,
        max_new_tokens: int = 64,
        min_review_tokens: int = 32,
        system_prompt: str = SYSTEM_PROMPT,
    ):
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.max_new_tokens = max_new_tokens
        self.min_review_tokens = min_review_tokens
        self.system_prompt = system_prompt
        self._format: PromptFormat | None = None

    def warm_up(self) -> None:
        """Load the tokenizer that counts the prompt's tokens (or, without one, the character estimate)."""
        if self._format is None:
            self._format = load_prompt_format(self.tokenizer) if self.tokenizer else EstimatedFormat()

    def to_dict(self) -> dict[str, Any]:
        """The component's settings, serialised for a pipeline YAML."""
        return default_to_dict(
            self,
            tokenizer=self.tokenizer,
            context_length=self.context_length,
            max_new_tokens=self.max_new_tokens,
            min_review_tokens=self.min_review_tokens,
            system_prompt=self.system_prompt,
        )

    @property
    def budget(self) -> int:
        """Prompt tokens allowed: the context (the smaller of ours and the model's) minus the answer's share."""
        assert self._format is not None
        model_context = self._format.context_length or self.context_length
        return min(self.context_length, model_context) - self.max_new_tokens

    def messages(self, question: str, texts: Sequence[str]) -> list[ChatMessage]:
        """The system and user messages asking ``question`` about the numbered ``texts``, not truncated."""
        user = USER_TEMPLATE.format(reviews=format_reviews(texts), question=question)
        return [ChatMessage.from_system(self.system_prompt), ChatMessage.from_user(user)]

    @component.output_types(messages=list[ChatMessage], documents=list[Document], prompt=dict[str, Any])
    def run(self, query: str, documents: list[Document]) -> dict[str, Any]:
        """``documents`` out are the reviews in the prompt, in their numbered order; ``prompt`` is the
        meta: token counts and what was truncated or dropped to fit."""
        self.warm_up()
        assert self._format is not None
        given, full_texts = [], []
        for document in documents:
            text = " ".join((document.content or "").split())
            # Empty reviews say nothing; a review indexed in several splits must not take two numbers.
            if text and text not in full_texts:
                given.append(document)
                full_texts.append(text)
        texts, truncated = full_texts, []
        messages = self.messages(query, texts)
        tokens = self._format.count_messages(messages)
        margin = 0
        while tokens > self.budget:
            texts, truncated = self._fit(query, full_texts, margin)
            messages = self.messages(query, texts)
            tokens = self._format.count_messages(messages)
            # Reviews are counted one by one; joined, their tokens can differ a little: refit leaving the excess.
            margin += tokens - self.budget
        meta = {
            "prompt_tokens": tokens,
            "budget_tokens": self.budget,
            "truncated": len(texts) < len(given) or bool(truncated),
            "truncated_reviews": truncated,
            "dropped_document_ids": [d.id for d in given[len(texts) :]],
        }
        return {"messages": messages, "documents": given[: len(texts)], "prompt": meta}

    def _fit(self, question: str, texts: list[str], margin: int) -> tuple[list[str], list[int]]:
        """Reviews cut (and, if need be, the lowest-ranked dropped) to fit the budget less ``margin``;
        never the question. Returns the texts and the numbers of the reviews that were cut."""
        assert self._format is not None
        fmt = self._format
        budget = self.budget - margin
        bare = fmt.count_messages(self.messages(question, []))
        if bare >= budget:
            raise QAError(
                f"The question does not fit the generator's context ({bare} prompt tokens, budget {self.budget} = context minus {self.max_new_tokens} answer tokens).",
                "shorten the question, lower max_new_tokens, or raise QA_GENERATOR_CONTEXT for a model with a longer context.",
            )
        lengths = [fmt.count(text) for text in texts]
        mark = fmt.count(TRUNCATION_MARK)
        for keep in range(len(texts), 0, -1):
            empty = fmt.count_messages(self.messages(question, [""] * keep))
            allotted = share_budget(lengths[:keep], budget - empty - keep * mark)
            if keep == 1 or all(share >= min(length, self.min_review_tokens) for share, length in zip(allotted, lengths)):
                break
        if allotted[0] <= 0:
            raise QAError(
                f"No room is left for any review in the generator's context (budget {self.budget} tokens).",
                "lower max_new_tokens or raise QA_GENERATOR_CONTEXT.",
            )
        fitted = [
            text if share >= length else fmt.truncate(text, share) + TRUNCATION_MARK
            for text, share, length in zip(texts, allotted, lengths)
        ]
        return fitted, [number for number, (share, length) in enumerate(zip(allotted, lengths), 1) if share < length]
