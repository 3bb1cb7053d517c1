"""Distilling a reader: the loss by hand, on a tiny model (minimum at the teacher, gradients), and a training run with a teacher."""

import json
import math

import pytest
import torch

from helpers.models import tiny_model_dir
from qa_system.errors import QAError
from qa_system.reading import MODEL_INFO_FILE
from qa_system.sources.squad import read_squad
from qa_system.training.distillation import DistillationConfig, distillation_loss
from qa_system.training.reader import TrainingConfig, train_reader
from qa_system.training.reader_data import pad_batch, training_features


def softmax(values):
    exps = [math.exp(v) for v in values]
    return [e / sum(exps) for e in exps]


def test_the_loss_against_a_hand_computed_value():
    # Row 0: teacher and student disagree on the start; position 3 is outside the mask and wild in both.
    # Row 1: they agree. The end logits agree everywhere.
    student_start = torch.tensor([[0.0, 0.0, 0.0, 5.0], [1.0, 2.0, 3.0, 0.0]])
    teacher_start = torch.tensor([[2.0, 0.0, 0.0, -7.0], [1.0, 2.0, 3.0, 9.0]])
    end = torch.tensor([[0.5, 1.0, -1.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    positions = torch.tensor([0, 2])
    temperature = 2.0

    teacher = softmax([2 / temperature, 0, 0])  # row 0 at T = 2, masked position left out
    kl = sum(p * math.log(p / (1 / 3)) for p in teacher)  # the student is uniform there
    soft = (temperature**2 * kl / 2 + 0.0) / 2  # batch mean over the 2 rows for the start; the end's KL is 0

    def ce(logits, target):
        return -math.log(softmax(logits)[target])

    hard_start = (ce([0, 0, 0, 5], 0) + ce([1, 2, 3, 0], 2)) / 2  # over every position, as transformers' QA loss
    hard_end = (ce([0.5, 1, -1, 0], 0) + ce([0, 0, 1, 0], 2)) / 2
    hard = (hard_start + hard_end) / 2

    for alpha in (0.0, 0.3, 1.0):
        loss = distillation_loss(student_start, end, teacher_start, end, positions, positions, mask, temperature, alpha)
        assert loss.soft.item() == pytest.approx(soft, rel=1e-5)
        assert loss.hard.item() == pytest.approx(hard, rel=1e-5)
        assert loss.total.item() == pytest.approx(alpha * hard + (1 - alpha) * soft, rel=1e-5)

    # T^2 scaling: at T = 1 the same row's KL is taken of softmax([2, 0, 0]) and not multiplied.
    at_one = distillation_loss(student_start, end, teacher_start, end, positions, positions, mask, 1.0, 0.0)
    kl_one = sum(p * math.log(p / (1 / 3)) for p in softmax([2, 0, 0]))
    assert at_one.soft.item() == pytest.approx(kl_one / 2 / 2, rel=1e-5)
    # Small temperatures stay finite (the mask's fill value is applied after dividing by T).
    assert math.isfinite(distillation_loss(student_start, end, teacher_start, end, positions, positions, mask, 0.05, 0.0).total.item())


@pytest.fixture()
def student_and_batch(tmp_path, squad_files):
    student_dir = tiny_model_dir(tmp_path / "student")
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(student_dir)
    examples, _ = read_squad(squad_files[0])
    features = training_features(tokenizer, examples, max_seq_length=48, doc_stride=16)
    batch = pad_batch(features[:4], tokenizer)
    return AutoModelForQuestionAnswering.from_pretrained(student_dir), batch


def logits(model, batch):
    output = model(**{k: v for k, v in batch.items() if k in ("input_ids", "token_type_ids", "attention_mask")})
    return output.start_logits, output.end_logits


def test_on_a_tiny_model_the_soft_loss_is_least_at_the_teacher_and_its_gradient_reaches_the_student(student_and_batch):
    model, batch = student_and_batch
    model.eval()  # no dropout: the same weights give the same logits
    labels = batch["start_positions"], batch["end_positions"], batch["span_mask"]
    with torch.no_grad():
        teacher = logits(model, batch)

    at_teacher = distillation_loss(*logits(model, batch), *teacher, *labels, temperature=2.0, alpha=0.0)
    at_teacher.total.backward()
    assert abs(at_teacher.total.item()) < 1e-6
    assert model.qa_outputs.weight.grad.abs().max().item() < 1e-6  # a minimum: no gradient

    model.zero_grad()
    with torch.no_grad():
        model.qa_outputs.weight.add_(0.5 * torch.randn_like(model.qa_outputs.weight))
    moved = distillation_loss(*logits(model, batch), *teacher, *labels, temperature=2.0, alpha=0.0)
    moved.total.backward()
    assert moved.total.item() > 1e-3
    assert model.qa_outputs.weight.grad.abs().max().item() > 1e-4
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().max().item() > 0  # through the whole encoder

    # alpha = 1 is plain fine-tuning: transformers' own QA loss.
    own = model(**{k: v for k, v in batch.items() if k != "span_mask"}).loss
    plain = distillation_loss(*logits(model, batch), *teacher, *labels, temperature=2.0, alpha=1.0)
    assert plain.total.item() == pytest.approx(own.item(), rel=1e-5)
    # Only [CLS] and context positions are distilled: padding and the question are left out.
    assert batch["span_mask"].sum() < batch["attention_mask"].sum()
    assert batch["span_mask"][:, 0].all() and not (batch["span_mask"] & ~batch["attention_mask"].bool()).any()


def test_a_student_trained_with_a_teacher_records_it(tmp_path, squad_files):
    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    teacher = tiny_model_dir(tmp_path / "teacher")
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=2, max_seq_length=48, doc_stride=16)
    distillation = DistillationConfig(str(teacher), temperature=3.0, alpha=0.25)
    result = train_reader(
        [squad_files[0]], [squad_files[1]], str(base), tmp_path / "student", config, progress=False, distillation=distillation
    )
    info = json.loads((tmp_path / "student" / MODEL_INFO_FILE).read_text())
    assert info["distillation"] == {"teacher": str(teacher), "temperature": 3.0, "alpha": 0.25, "teacher_training": None}
    epoch = result.history[0]
    assert epoch["train_soft_loss"] > 0 and epoch["train_hard_loss"] > 0
    assert epoch["train_loss"] == pytest.approx(0.25 * epoch["train_hard_loss"] + 0.75 * epoch["train_soft_loss"], rel=1e-5)


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path, squad_files):
    from transformers import BertTokenizerFast

    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    teacher = tiny_model_dir(tmp_path / "teacher")
    same_vocabulary = BertTokenizerFast.from_pretrained(teacher).get_vocab()
    BertTokenizerFast(vocab=same_vocabulary, do_lower_case=False).save_pretrained(teacher)  # same words, other normalisation
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=1, max_seq_length=48, doc_stride=16)
    with pytest.raises(QAError) as error:
        train_reader(
            [squad_files[0]],
            [squad_files[1]],
            str(base),
            tmp_path / "out",
            config,
            progress=False,
            distillation=DistillationConfig(str(teacher)),
        )
    assert f"The teacher '{teacher}' does not use the student's tokenizer" in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "kwargs, message",
    [({"alpha": 1.5}, "alpha must be a finite number from 0 to 1"), ({"temperature": 0}, "temperature must be a finite number above 0")],
)
def test_distillation_settings_are_checked(kwargs, message):
    with pytest.raises(QAError, match=message):
        DistillationConfig("teacher", **kwargs)
