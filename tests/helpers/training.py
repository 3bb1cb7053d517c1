"""One review with a known answer ("battery lasts") and the labelled questions over it that reader training reads."""

from __future__ import annotations

from qa_system.sources.subjqa import LabelledQuestion

REVIEW = "it is a cheap screen and the sound is bad. " * 6 + "the battery lasts 6000 hours."


def labelled(qid, answers):
    return LabelledQuestion(qid, "how is the battery?", "B1", "r1", "d/r1", "electronics", "train", answers, False, context=REVIEW)
