"""An MRQA-style file of questions over one context (title and paragraph tokens kept in its text)."""

from __future__ import annotations

import json

# An MRQA context as the shared task joins passages: title and paragraph tokens stay in the text.
CONTEXT = "[TLE] Kindle Paperwhite [PAR] The battery lasts 6000 hours. [SEP] The Battery is great, the battery lasts."
HEADER = {"header": {"dataset": "ToyQA", "split": "dev"}}


def span(text, occurrence=0):
    """MRQA's [start, end] of a text in CONTEXT: the end is inclusive."""
    start = -1
    for _ in range(occurrence + 1):
        start = CONTEXT.index(text, start + 1)
    return [start, start + len(text) - 1]


def mrqa_lines(qas, context=CONTEXT, header=True):
    lines = [json.dumps(HEADER)] if header else []
    return "\n".join([*lines, json.dumps({"context": context, "qas": qas, "context_tokens": []})]) + "\n"


MRQA_QAS = [
    # Two occurrences of one answer: both become answers, in the file's order.
    {
        "qid": "m1",
        "question": "how long does the battery last?",
        "detected_answers": [{"text": "battery lasts", "char_spans": [span("battery lasts"), span("battery lasts", 1)]}],
    },
    # MRQA matched normalised tokens: the answer text has an article and other case than the span.
    {"qid": "m2", "question": "what is great?", "detected_answers": [{"text": "the battery", "char_spans": [span("Battery")]}]},
    # A span that points at other words: dropped and reported; the question has no other span, so it is skipped.
    {"qid": "m3", "question": "what is it?", "detected_answers": [{"text": "Paperwhite", "char_spans": [span("6000 hours")]}]},
]
