"""The reader's windows of a question over its documents, each document tokenised once per process.

A question is asked of the same reviews again and again (a product's best eight), and tokenising them with the
question cost a server process 9-11 ms of CPU a question on a 2-core CPU (the tokenizer's own threads included),
where laying them out from cached tokens costs 0.2 ms (docs/experiments.md). ``WindowEncoder`` keeps each
document's tokens (ids and character offsets, without special tokens) in a cache bounded by tokens, and lays out a
question's windows from them with numpy: the tokenizer's pair template, learnt from the tokenizer itself (BERT's
``[CLS] question [SEP] review [SEP]``, token types 0 then 1), and the review cut as the tokenizer's own overflow
cuts it (``Encoding.truncate``: parts of ``room`` tokens starting every ``room - stride``). The windows are those
of ``encode_windows`` to the token (tests compare every array); a tokenizer whose template is not of that form,
whose post-processor moves offsets, or that puts the review first, is tokenised by ``encode_windows``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qa_system.errors import QAError

# A question must leave at least this many tokens of each window to the review.
MIN_CONTEXT_TOKENS = 32
# Tokens of documents kept per tokenizer and process (12 bytes each, 24 MB): some ten thousand reviews.
CACHE_TOKENS = 2_000_000


class Windows(dict):
    """A question's windows as the models read them: ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where
    the model takes them) as int64 arrays padded on the right to the longest window, ``offset_mapping`` (characters
    of each token in its text), ``overflow_to_sample_mapping`` (the document of each window), and per window where
    its review's tokens are (``context_span``)."""

    def __init__(self, arrays: dict, context_spans: list[tuple[int, int]]):
        super().__init__(arrays)
        self.context_spans = context_spans

    def context_span(self, window: int) -> tuple[int, int]:
        """(first position, count) of the review's tokens in ``window``: they are contiguous."""
        return self.context_spans[window]

    @classmethod
    def of(cls, encoding, tokenizer) -> Windows:
        """The windows of a padded ``encode_windows`` result (a ``BatchEncoding``)."""
        context_id = context_sequence_id(tokenizer)
        spans = []
        for window in range(len(encoding["input_ids"])):
            sequence_ids = encoding.sequence_ids(window)
            count = sequence_ids.count(context_id)
            spans.append((sequence_ids.index(context_id) if count else 0, count))
        return cls(dict(encoding), spans)


@dataclass(frozen=True)
class PairTemplate:
    """Where the special tokens of a (question, review) pair go, and the token type of each part."""

    prefix: tuple[tuple[int, int], ...]  # (id, type) of the special tokens before the question
    middle: tuple[tuple[int, int], ...]  # between question and review
    suffix: tuple[tuple[int, int], ...]  # after the review
    question_type: int
    review_type: int

    @property
    def specials(self) -> int:
        """How many special tokens a pair gets."""
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    @classmethod
    def learn(cls, backend) -> PairTemplate | None:
        """The template of ``backend`` (a ``tokenizers.Tokenizer``), from pairs of two lengths; None where a pair is
        not special tokens, question, special tokens, review, special tokens, each part of one token type, or where
        the post-processor moves offsets (RoBERTa's trims a token's leading space, except at the start of each part
        it cuts a review into)."""
        if type(backend.post_processor).__name__ not in ("NoneType", "BertProcessing", "TemplateProcessing"):
            return None
        templates = set()
        for question, review in (("what", "good"), ("what is it", "good and cheap and fast")):
            q, r = backend.encode(question, add_special_tokens=False), backend.encode(review, add_special_tokens=False)
            pair = backend.encode(question, review)
            ids, types, sequences = pair.ids, pair.type_ids, pair.sequence_ids
            q_at = [i for i, s in enumerate(sequences) if s == 0]
            r_at = [i for i, s in enumerate(sequences) if s == 1]
            if len(q_at) != len(q.ids) or len(r_at) != len(r.ids) or not q_at or not r_at:
                return None
            if q_at != list(range(q_at[0], q_at[-1] + 1)) or r_at != list(range(r_at[0], r_at[-1] + 1)) or q_at[-1] > r_at[0]:
                return None
            if [ids[i] for i in q_at] != q.ids or [ids[i] for i in r_at] != r.ids:
                return None
            q_types, r_types = {types[i] for i in q_at}, {types[i] for i in r_at}
            if len(q_types) != 1 or len(r_types) != 1:
                return None
            special = list(zip(ids, types))
            templates.add(
                cls(
                    tuple(special[: q_at[0]]),
                    tuple(special[q_at[-1] + 1 : r_at[0]]),
                    tuple(special[r_at[-1] + 1 :]),
                    q_types.pop(),
                    r_types.pop(),
                )
            )
        return templates.pop() if len(templates) == 1 else None


def overflow_parts(length: int, room: int, stride: int) -> list[tuple[int, int]]:
    """(start, stop) of the parts a review of ``length`` tokens is cut into, as ``tokenizers.Encoding.truncate(room,
    stride)`` cuts it: the whole review when it fits, else ``room`` tokens starting every ``room - stride``, the
    last one ending at the review's end."""
    if length <= room:
        return [(0, length)]
    parts, step = [], room - stride
    for start in range(0, length, step):
        stop = min(start + room, length)
        parts.append((start, stop))
        if stop == length:
            break
    return parts


class WindowEncoder:
    """``encode_windows(tokenizer, [question] * n, reviews, max_seq_length, doc_stride, padding=True)``, the reviews'
    tokens cached (module doc). Thread-safe: the API's worker threads share one.

    :param tokenizer: the reader's (a transformers fast tokenizer).
    :param cache_tokens: how many tokens of reviews to keep, the least recently used dropped first.
    """

    def __init__(self, tokenizer, max_seq_length: int, doc_stride: int, cache_tokens: int = CACHE_TOKENS):
        self.tokenizer, self.max_seq_length, self.doc_stride, self.cache_tokens = tokenizer, max_seq_length, doc_stride, cache_tokens
        self._lock = threading.Lock()  # the cache; and the tokenizer's settings, which its __call__ sets on each call
        self._cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cached_tokens = 0
        self._backend = None
        self.template = None
        if tokenizer.is_fast and tokenizer.padding_side == "right" and tokenizer.truncation_side == "right":
            from tokenizers import Tokenizer

            # A copy of its own, without truncation or padding: the tokenizer's own settings change on every call.
            self._backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
            self._backend.no_truncation()
            self._backend.no_padding()
            self.template = PairTemplate.learn(self._backend)
        self.names = [name for name in ("input_ids", "token_type_ids", "attention_mask") if name in tokenizer.model_input_names]

    def __call__(self, question: str, reviews: Sequence[str]) -> Windows:
        """The windows of ``question`` over each of ``reviews`` (non-empty), in order."""
        if self.template is None:
            with self._lock:
                encoding = encode_windows(
                    self.tokenizer, [question] * len(reviews), list(reviews), self.max_seq_length, self.doc_stride, True
                )
            return Windows.of(encoding, self.tokenizer)
        question_tokens = self._backend.encode(question.lstrip(), add_special_tokens=False)
        room = self.max_seq_length - len(question_tokens.ids) - self.template.specials
        check_room(len(question_tokens.ids), self.max_seq_length, room)
        stride = min(self.doc_stride, room // 2)
        tokens = self._tokens(reviews)
        cuts = [
            (document, start, stop) for document, (ids, _) in enumerate(tokens) for start, stop in overflow_parts(len(ids), room, stride)
        ]
        return self._lay_out(question_tokens, tokens, cuts)

    def _tokens(self, reviews: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each review's (ids, offsets), from the cache or tokenised now (those missing, in one call)."""
        with self._lock:
            found = {review: self._cache.get(review) for review in dict.fromkeys(reviews)}
            for review, tokens in found.items():
                if tokens is not None:
                    self._cache.move_to_end(review)
        missing = [review for review, tokens in found.items() if tokens is None]
        if missing:
            for review, encoding in zip(missing, self._backend.encode_batch(missing, add_special_tokens=False)):
                found[review] = (np.asarray(encoding.ids, dtype=np.int32), np.asarray(encoding.offsets, dtype=np.int32).reshape(-1, 2))
            with self._lock:
                for review in missing:
                    if review not in self._cache and len(found[review][0]) <= self.cache_tokens:
                        self._cache[review] = found[review]
                        self._cached_tokens += len(found[review][0])
                while self._cached_tokens > self.cache_tokens and self._cache:
                    self._cached_tokens -= len(self._cache.popitem(last=False)[1][0])
        return [found[review] for review in reviews]

    def _lay_out(self, question, tokens: list[tuple[np.ndarray, np.ndarray]], cuts: list[tuple[int, int, int]]) -> Windows:
        """The padded arrays of the windows ``cuts`` ((document, start, stop) of each): prefix, question, middle, the
        review's part, suffix."""
        template, tokenizer = self.template, self.tokenizer
        head = [*template.prefix, *((i, template.question_type) for i in question.ids), *template.middle]
        first = len(head)
        lengths = [first + stop - start + len(template.suffix) for _, start, stop in cuts]
        shape = (len(cuts), max(lengths))
        ids = np.full(shape, tokenizer.pad_token_id, dtype=np.int64)
        types = np.full(shape, tokenizer.pad_token_type_id, dtype=np.int64)
        mask = np.zeros(shape, dtype=np.int64)
        offsets = np.zeros((*shape, 2), dtype=np.int64)
        ids[:, :first] = [i for i, _ in head]
        types[:, :first] = [t for _, t in head]
        offsets[:, len(template.prefix) : len(template.prefix) + len(question.ids)] = question.offsets
        spans = []
        for row, ((document, start, stop), length) in enumerate(zip(cuts, lengths)):
            review_ids, review_offsets = tokens[document]
            end = first + stop - start
            ids[row, first:end] = review_ids[start:stop]
            offsets[row, first:end] = review_offsets[start:stop]
            types[row, first:length] = template.review_type
            for position, (token, token_type) in enumerate(template.suffix, start=end):
                ids[row, position], types[row, position] = token, token_type
            mask[row, :length] = 1
            spans.append((first, stop - start))
        arrays = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
        windows = {name: arrays[name] for name in self.names}
        windows["offset_mapping"] = offsets
        windows["overflow_to_sample_mapping"] = np.asarray([document for document, _, _ in cuts], dtype=np.int64)
        return Windows(windows, spans)


def encode_windows(tokenizer, questions: list[str], contexts: list[str], max_seq_length: int, doc_stride: int, padding: bool):
    """Question+context pairs cut into overlapping windows (run_qa's tokenisation), with offsets.

    The context is what gets truncated and windowed; a question so long that it leaves the
    context fewer than MIN_CONTEXT_TOKENS tokens is a QAError. With ``padding`` all windows are
    padded to the longest one (numpy arrays, one forward pass); without, lists (training).
    """
    question_first = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in questions]
    longest = max((len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]), default=0)
    room = max_seq_length - longest - tokenizer.num_special_tokens_to_add(pair=True)
    check_room(longest, max_seq_length, room)
    pair = (questions, contexts) if question_first else (contexts, questions)
    # A right-padding tokenizer's windows are padded here: the same arrays as its own padding, without its per-window
    # Python. A left-padding one pads them itself: that shifts every position, in its encodings' sequence ids too.
    pad_here = padding and tokenizer.padding_side == "right"
    tokenizer_pads = padding and not pad_here
    encoding = tokenizer(
        *pair,
        truncation="only_second" if question_first else "only_first",
        max_length=max_seq_length,
        stride=min(doc_stride, room // 2),
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="longest" if tokenizer_pads else False,
        return_tensors="np" if tokenizer_pads else None,
    )
    if pad_here:
        pad_right(encoding, tokenizer)
    return encoding


def check_room(question_tokens: int, max_seq_length: int, room: int) -> None:
    """A QAError when a question of ``question_tokens`` leaves fewer than MIN_CONTEXT_TOKENS of a window to the review."""
    if room < MIN_CONTEXT_TOKENS:
        raise QAError(
            f"A question is {question_tokens} tokens long; a {max_seq_length}-token reader window has no room left for the review.",
            "ask a shorter question, or use a reader with a larger max_seq_length.",
        )


def pad_right(encoding, tokenizer) -> None:
    """The model inputs of ``encoding``'s windows as int64 arrays, each window padded on the right to the longest one."""
    longest = max(len(ids) for ids in encoding["input_ids"])
    pads = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0, "token_type_ids": tokenizer.pad_token_type_id}
    for name, pad in pads.items():
        if name in encoding:
            padded = np.full((len(encoding[name]), longest), pad, dtype=np.int64)
            for row, values in zip(padded, encoding[name]):
                row[: len(values)] = values
            encoding[name] = padded
    encoding["overflow_to_sample_mapping"] = np.asarray(encoding["overflow_to_sample_mapping"], dtype=np.int64)


def context_sequence_id(tokenizer) -> int:
    """Which sequence of the pair is the context (question first for right-padding models)."""
    return 1 if tokenizer.padding_side == "right" else 0


_shared: dict[tuple, WindowEncoder] = {}
_sharing = threading.Lock()


def shared_window_encoder(tokenizer, max_seq_length: int, doc_stride: int) -> WindowEncoder:
    """The process's encoder for this tokenizer (by its content and settings) and window: the readers of several
    pipelines (each collection, each retriever) share one cache of review tokens."""
    if not tokenizer.is_fast:  # tokenised by encode_windows: no cache to share
        return WindowEncoder(tokenizer, max_seq_length, doc_stride)
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    for setting in ("truncation", "padding"):  # what each call of the tokenizer sets anew
        state.pop(setting, None)
    content = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()
    settings = (
        tokenizer.padding_side,
        tokenizer.truncation_side,
        tuple(tokenizer.model_input_names),
        tokenizer.pad_token_id,
        tokenizer.pad_token_type_id,
    )
    key = (content, settings, max_seq_length, doc_stride)
    with _sharing:
        if key not in _shared:
            _shared[key] = WindowEncoder(tokenizer, max_seq_length, doc_stride)
        return _shared[key]
