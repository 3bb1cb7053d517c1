"""Knowledge distillation of an extractive reader: a student learns a teacher's soft start/end distributions.

The recipe of "Natural Language Processing with Transformers" (chapter 8, "Making
Transformers Efficient"), applied to the start and the end logits of a QA model:

    loss = alpha * CE(student, gold positions) + (1 - alpha) * T^2 * KL(p_teacher^T || p_student^T)

with ``p^T = softmax(logits / T)``. A temperature above 1 spreads the teacher's probability over
the runner-up positions, which carry what it knows beyond the gold span; ``T^2`` keeps the soft
gradients on the same scale as the hard ones (Hinton et al., 2015). The hard term is the one
transformers' QA models compute (mean of the start and end cross-entropies over the window), so
``alpha = 1`` is plain fine-tuning. The soft term is taken over the positions the reader can
answer with only (the [CLS] no-answer and the context tokens): padding and question tokens are
no answer of either model, and with a temperature they would take probability mass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from qa_system.errors import QAError, check_number

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DistillationConfig:
    """The teacher (any QA model path or id with the student's tokenizer), the temperature and the hard-loss weight."""

    teacher: str
    temperature: float = 2.0
    alpha: float = 0.5

    def __post_init__(self) -> None:
        check_number(self.temperature, "temperature", 0, above=True)
        check_number(self.alpha, "alpha", 0, maximum=1)  # the gold-span loss's weight; 1 - alpha goes to the teacher's


class DistillationLoss(NamedTuple):
    """The training loss and its two parts: ``hard`` (against the gold span) and ``soft`` (against the teacher)."""

    total: torch.Tensor
    hard: torch.Tensor
    soft: torch.Tensor


def soft_cross_entropy(student, teacher, mask, temperature: float):
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)) over the positions where ``mask`` is true, mean over the batch."""
    import torch
    import torch.nn.functional as F

    mask = mask.bool()
    fill = torch.finfo(student.dtype).min  # after the division: min / T would overflow to -inf for T < 1
    log_student = F.log_softmax((student / temperature).masked_fill(~mask, fill), dim=-1)
    log_teacher = F.log_softmax((teacher / temperature).masked_fill(~mask, fill), dim=-1)
    pointwise = log_teacher.exp() * (log_teacher - log_student)
    return temperature**2 * torch.where(mask, pointwise, 0.0).sum(dim=-1).mean()


def distillation_loss(
    student_start, student_end, teacher_start, teacher_end, start_positions, end_positions, mask, temperature: float, alpha: float
) -> DistillationLoss:
    """alpha * hard + (1 - alpha) * soft, each the mean of its start and end terms (see the module's docstring).

    Logits are (batch, window length); ``mask`` marks the answerable positions ([CLS] and context).
    """
    import torch.nn.functional as F

    hard = (F.cross_entropy(student_start, start_positions) + F.cross_entropy(student_end, end_positions)) / 2
    soft = (
        soft_cross_entropy(student_start, teacher_start, mask, temperature)
        + soft_cross_entropy(student_end, teacher_end, mask, temperature)
    ) / 2
    return DistillationLoss(alpha * hard + (1 - alpha) * soft, hard, soft)


def check_same_tokenizer(student_tokenizer, teacher_tokenizer, teacher: str) -> None:
    """The teacher's logits are read position by position on the student's windows: both must tokenise alike."""
    if _tokenizer_state(student_tokenizer) != _tokenizer_state(teacher_tokenizer):
        raise QAError(
            f"The teacher '{teacher}' does not use the student's tokenizer (vocabulary, normalisation or special tokens differ).",
            "distil from a teacher fine-tuned from a model with the same tokenizer (e.g. both BERT uncased), or train the teacher from the student's base.",
        )


def _tokenizer_state(tokenizer) -> dict:
    """The fast tokenizer's definition without the run-time truncation / padding settings."""
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    for runtime in ("truncation", "padding"):
        state.pop(runtime, None)
    return {"tokenizer": state, "padding_side": tokenizer.padding_side, "special": tokenizer.all_special_tokens}
