"""Reader fine-tuning: two steps on a tiny model, the saved model reloads; threshold tuning."""

import json

import pytest
from haystack import Document

from helpers.models import tiny_model_dir, tiny_tokenizer
from helpers.training import REVIEW, tiny_training_argv
from qa_system.metrics.no_answer import DevPrediction, scores_at, tune_no_answer_threshold
from qa_system.reading import MODEL_INFO_FILE, ExtractiveReader
from qa_system.sources.squad import read_squad
from qa_system.training.reader import TrainingConfig, train_reader
from qa_system.training.reader_data import training_features


def test_two_steps_of_training_save_a_model_the_reader_loads(tmp_path, squad_files):
    base = tiny_model_dir(tmp_path / "base", question_answering=False)  # a bare encoder gets a fresh QA head
    config = TrainingConfig(epochs=3, batch_size=2, max_steps=2, max_seq_length=48, doc_stride=16)
    result = train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "reader", config=config, progress=False)
    assert result.best_epoch == 1 and len(result.history) == 1 and result.history[0]["steps"] == 2
    info = json.loads((tmp_path / "reader" / MODEL_INFO_FILE).read_text())
    assert info["no_answer_threshold"] == result.no_answer_threshold
    assert info["hyperparameters"]["max_steps"] == 2 and info["train_questions"] == 4
    assert set(info["dev_metrics"]) == {"dev.json", "pooled"} and info["training_seconds"] > 0

    from safetensors import safe_open

    with safe_open(str(tmp_path / "reader" / "model.safetensors"), "pt") as weights:
        assert {str(weights.get_tensor(k).dtype) for k in weights.keys()} == {"torch.float16"}

    reader = ExtractiveReader(model=str(tmp_path / "reader"), max_seq_length=48, doc_stride=16)
    answers = reader.run("how is the battery?", [Document(content=REVIEW)])["answers"]
    assert reader.threshold == result.no_answer_threshold
    assert any(a.data is None for a in answers) and len(answers) == 4


def test_training_is_reproducible(tmp_path, squad_files):
    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=2, max_seq_length=48, doc_stride=16)
    first = train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "a", config=config, progress=False)
    second = train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "b", config=config, progress=False)
    assert first.history[0]["train_loss"] == second.history[0]["train_loss"]
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()


def test_windows_are_labelled_with_the_answer_tokens_or_cls(tmp_path, squad_files):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    examples, _ = read_squad(squad_files[0])
    features = training_features(tokenizer, examples, max_seq_length=48, doc_stride=16)
    answerable = [f for f in features if f["start_positions"] != 0]
    assert answerable, "some window must hold the answer"
    for feature in answerable:
        tokens = feature["input_ids"][feature["start_positions"] : feature["end_positions"] + 1]
        assert tokenizer.decode(tokens) == "battery lasts"
    impossible = [f for f, e in zip(features, examples) if e.is_impossible]
    assert all(f["start_positions"] == f["end_positions"] == 0 for f in impossible)


def test_threshold_tuning_maximises_f1():
    predictions = [
        DevPrediction(gap=3.0, answer_em=1, answer_f1=1, null_em=0, null_f1=0),
        DevPrediction(gap=1.0, answer_em=0, answer_f1=0.5, null_em=0, null_f1=0),
        DevPrediction(gap=-1.0, answer_em=0, answer_f1=0, null_em=1, null_f1=1),
        DevPrediction(gap=-2.0, answer_em=0, answer_f1=0, null_em=1, null_f1=1),
    ]
    threshold, f1 = tune_no_answer_threshold(predictions)
    assert threshold == 0.0 and f1 == pytest.approx(3.5 / 4)
    assert scores_at(predictions, threshold) == {"em": 0.75, "f1": 0.875, "answered": 0.5, "questions": 4, "prior_weighted_f1": 0.875}
    always_null = [DevPrediction(1.0, 0, 0, 1, 1)]
    assert tune_no_answer_threshold(always_null)[0] > 1.0


def test_threshold_tuning_corrects_for_the_no_answer_prior():
    # Dev is 3/4 unanswerable; the question with gap 0.5 is answerable and answered right,
    # the one with gap 1.0 is unanswerable (answering it costs 1).
    predictions = [
        DevPrediction(gap=1.0, answer_em=0, answer_f1=0, null_em=1, null_f1=1),
        DevPrediction(gap=0.5, answer_em=1, answer_f1=1, null_em=0, null_f1=0),
        DevPrediction(gap=-1.0, answer_em=0, answer_f1=0, null_em=1, null_f1=1),
        DevPrediction(gap=-2.0, answer_em=0, answer_f1=0, null_em=1, null_f1=1),
    ]
    # Unweighted, answering both top questions gains 1 and loses 1: abstaining everywhere wins ties.
    assert tune_no_answer_threshold(predictions)[0] > 1.0
    # Weighted to a 50% prior, the answerable question counts 2, each unanswerable 2/3: answer both.
    threshold, f1 = tune_no_answer_threshold(predictions, no_answer_prior=0.5)
    assert threshold == pytest.approx(-0.25)  # midway between the gaps 0.5 and -1.0
    assert scores_at(predictions, threshold)["answered"] == 0.5
    assert f1 == pytest.approx((2 + 2 / 3 + 2 / 3) / 4)
    # What selects epochs and interpolation weights: the same reweighted F1 (the plain one is 0.75).
    scores = scores_at(predictions, threshold, no_answer_prior=0.5)
    assert scores["prior_weighted_f1"] == pytest.approx(f1) and scores["f1"] == 0.75


def test_unloadable_base_model_is_a_clear_error(tmp_path, squad_files):
    from qa_system.errors import QAError

    with pytest.raises(QAError, match="base model directory .* has no config.json"):
        train_reader([squad_files[0]], [squad_files[1]], str(tmp_path / "none"), tmp_path / "out", progress=False)


def test_a_given_no_answer_prior_replaces_the_training_share(tmp_path, squad_files):
    """Rehearsal data (all answerable) must not move the threshold: it is tuned for the prior given."""
    from qa_system.errors import QAError
    from qa_system.sources.qa_files import read_qa_file
    from qa_system.training.reader_data import dev_predictions

    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=1, max_seq_length=48, doc_stride=16)
    own = train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "own", config, progress=False)
    given = train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "given", config, progress=False, no_answer_prior=0.9)
    assert json.loads((tmp_path / "own" / MODEL_INFO_FILE).read_text())["no_answer_prior"] == 0.25  # 1 of 4 training questions
    assert json.loads((tmp_path / "given" / MODEL_INFO_FILE).read_text())["no_answer_prior"] == 0.9
    assert own.history[0]["train_loss"] == given.history[0]["train_loss"]  # the same weights: only the prior differs
    # Saved in float16, so the reloaded reader's margins differ from training's in the 4th decimal.
    reader = ExtractiveReader(model=str(tmp_path / "given"), backend="torch", max_seq_length=48, doc_stride=16)
    predictions = dev_predictions(reader, read_qa_file(squad_files[1])[0])
    assert given.no_answer_threshold == pytest.approx(tune_no_answer_threshold(predictions, 0.9)[0], abs=1e-3)
    assert own.no_answer_threshold == pytest.approx(tune_no_answer_threshold(predictions, 0.25)[0], abs=1e-3)
    with pytest.raises(QAError, match="no_answer_prior must be a finite number from 0 to 1"):
        train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "bad", config, progress=False, no_answer_prior=1.5)


def mrqa_file(path, qids=("m1", "m2")):
    """MRQA JSON lines over REVIEW (inclusive span ends), contexts joined MRQA-style with [PAR]."""
    context = "[TLE] kindle [PAR] " + REVIEW
    start = context.index("battery lasts")
    qas = [
        {
            "qid": qid,
            "question": "how is the battery?",
            "detected_answers": [{"text": "battery lasts", "char_spans": [[start, start + 12]]}],
        }
        for qid in qids
    ]
    path.write_text(
        json.dumps({"header": {"dataset": "Toy", "split": "train"}}) + "\n" + json.dumps({"context": context, "qas": qas}) + "\n"
    )
    return path


def test_two_stage_training_from_a_trained_reader_records_both_steps(tmp_path, squad_files):
    """Step 1 on MRQA from a bare encoder, step 2 on SQuAD from step 1's model; the result reloads and answers."""
    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=2, max_seq_length=48, doc_stride=16)
    stage1 = tmp_path / "stage1"
    train_reader([mrqa_file(tmp_path / "toy.jsonl")], [squad_files[1]], str(base), stage1, config, progress=False)
    result = train_reader([squad_files[0]], [squad_files[1]], str(stage1), tmp_path / "stage2", config, progress=False)

    info = json.loads((tmp_path / "stage2" / MODEL_INFO_FILE).read_text())
    assert info["base_model"] == str(stage1) and info["train_data"][0]["format"] == "SQuAD v2.0"
    first = info["base_model_training"]
    assert first["base_model"] == str(base) and first["base_model_training"] is None  # the bare encoder: not ours
    assert first["train_files"] == ["toy.jsonl"] and first["train_data"][0] | {"format": "MRQA", "used": 2} == first["train_data"][0]
    assert "history" not in first and first["best_epoch"] == 1 and first["hyperparameters"]["max_steps"] == 2

    reader = ExtractiveReader(model=str(tmp_path / "stage2"), max_seq_length=48, doc_stride=16)
    answers = reader.run("how is the battery?", [Document(content=REVIEW)])["answers"]
    assert reader.threshold == result.no_answer_threshold
    spans = [a for a in answers if a.data is not None]
    assert spans and sum(a.data is None for a in answers) == 1
    assert all(REVIEW[a.document_offset.start : a.document_offset.end] == a.data for a in spans)


def test_a_window_without_the_first_answer_is_labelled_with_another_occurrence(tmp_path):
    from qa_system.sources.squad import SquadExample

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    context = "the battery lasts 6000 hours. " + "it is a cheap screen and the sound is bad. " * 6 + "the battery lasts."
    example = SquadExample(
        "q", "t", "how is the battery?", context, [("battery lasts", context.rindex("battery lasts")), ("battery lasts", 4)], False
    )
    features = training_features(tokenizer, [example], max_seq_length=48, doc_stride=16)
    labelled = [
        tokenizer.decode(f["input_ids"][f["start_positions"] : f["end_positions"] + 1]) for f in features if f["start_positions"] != 0
    ]
    # The first window holds only the second-listed occurrence: labelled with it rather than "no answer".
    assert features[0]["start_positions"] != 0 and len(labelled) >= 2 and set(labelled) == {"battery lasts"}


def test_training_files_report_what_they_gave(tmp_path, squad_files, capsys):
    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=1, max_seq_length=48, doc_stride=16)
    # The MRQA file repeats question m1 of the first; one of the SQuAD training questions is a dev question (dropped).
    first, second = mrqa_file(tmp_path / "a.jsonl"), mrqa_file(tmp_path / "b.json", qids=("m1", "m3"))
    dev = tmp_path / "dev.json"
    dev.write_text(squad_files[1].read_text().replace('"d1"', '"t0"'))
    train_reader([first, second, squad_files[0]], [dev], str(base), tmp_path / "out", config, progress=False, drop_dev_questions=True)
    out = capsys.readouterr().out
    assert f"train {second} (MRQA): used 1 questions (1 answerable, 0 unanswerable); dropped 1 duplicate(s) of earlier files" in out
    assert (
        f"train {squad_files[0]} (SQuAD v2.0): used 3 questions (2 answerable, 1 unanswerable)" in out
        and "1 dev question(s) dropped" in out
    )
    info = json.loads((tmp_path / "out" / MODEL_INFO_FILE).read_text())
    assert info["train_questions"] == 6 and [d["used"] for d in info["train_data"]] == [2, 1, 3]
    assert info["train_data"][2]["dev_questions"] == 1 and info["train_data"][2]["dev_dropped"] is True
    assert info["dev_data"][0]["used"] == 2


def test_interpolating_two_stages_keeps_the_weight_best_on_dev_and_records_every_trial(tmp_path, squad_files):
    """WiSE-FT: the saved reader is (1 - w) * general + w * specialised for the w with the best pooled dev F1."""
    from safetensors.torch import load_file

    from qa_system.training.interpolation import interpolate_readers

    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=1, batch_size=2, max_steps=2, max_seq_length=48, doc_stride=16, learning_rate=1e-2)
    general, specialised = tmp_path / "general", tmp_path / "specialised"
    train_reader([mrqa_file(tmp_path / "toy.jsonl")], [squad_files[1]], str(base), general, config, progress=False)
    train_reader([squad_files[0]], [squad_files[1]], str(general), specialised, config, progress=False)

    out = tmp_path / "mixed"
    result = interpolate_readers(
        general,
        specialised,
        out,
        [squad_files[1]],
        weights=(0.0, 0.5, 1.0),
        report_files=[squad_files[0]],
        max_seq_length=48,
        doc_stride=16,
    )
    f1s = [trial["prior_weighted_f1"] for trial in result.trials]
    assert [trial["weight"] for trial in result.trials] == [0.0, 0.5, 1.0]
    assert result.weight == (0.0, 0.5, 1.0)[f1s.index(max(f1s))]  # the first of the best
    # Weight 1, after two other mixes, is the specialised reader as saved: the same threshold and dev scores.
    from qa_system.sources.qa_files import read_qa_file
    from qa_system.training.reader_data import dev_predictions

    saved = ExtractiveReader(model=str(specialised), backend="torch", max_seq_length=48, doc_stride=16)
    predictions = dev_predictions(saved, read_qa_file(squad_files[1])[0])
    threshold, _ = tune_no_answer_threshold(predictions, json.loads((specialised / MODEL_INFO_FILE).read_text())["no_answer_prior"])
    assert result.trials[-1]["no_answer_threshold"] == threshold
    assert result.trials[-1]["dev"]["pooled"] == scores_at(
        predictions, threshold, json.loads((specialised / MODEL_INFO_FILE).read_text())["no_answer_prior"]
    )
    assert all(set(trial["reported"]) == {"train.json"} for trial in result.trials)

    g, s, mixed = (load_file(str(d / "model.safetensors")) for d in (general, specialised, out))
    changed = [k for k in s if not (g[k] == s[k]).all()]
    assert changed  # the two stages differ, so the mix is a real test
    for key in changed:
        expected = ((1 - result.weight) * g[key].float() + result.weight * s[key].float()).half()
        assert (mixed[key].float() - expected.float()).abs().max() <= 1e-3
    info = json.loads((out / MODEL_INFO_FILE).read_text())
    assert info["interpolation"]["weight"] == result.weight and len(info["interpolation"]["trials"]) == 3
    assert info["interpolation"]["general_training"]["train_files"] == ["toy.jsonl"]
    reader = ExtractiveReader(model=str(out), max_seq_length=48, doc_stride=16)
    assert any(a.data is None for a in reader.run("how is the battery?", [Document(content=REVIEW)])["answers"])
    assert reader.threshold == result.no_answer_threshold


def test_interpolation_refuses_bad_weights_and_unrelated_readers(tmp_path, squad_files):
    from transformers import BertConfig, BertForQuestionAnswering

    from qa_system.errors import QAError
    from qa_system.training.interpolation import interpolate_readers

    first = tiny_model_dir(tmp_path / "first")
    with pytest.raises(QAError, match="interpolation weight must be a finite number from 0 to 1"):
        interpolate_readers(first, first, tmp_path / "out", [squad_files[1]], weights=(0.5, 1.5))
    other = tiny_model_dir(tmp_path / "other")
    wider = BertConfig.from_pretrained(other)
    wider.intermediate_size = 128
    BertForQuestionAnswering(wider).save_pretrained(other)
    with pytest.raises(QAError, match="differ in shape"):
        interpolate_readers(first, other, tmp_path / "out", [squad_files[1]])
    assert not (tmp_path / "out").exists()


def test_train_reader_interpolate_mixes_with_the_base_model(tmp_path, squad_files, capsys):
    from qa_system.cli.main import main

    base = tiny_model_dir(tmp_path / "base")
    argv = [
        *tiny_training_argv([squad_files[0]], squad_files[1], base, tmp_path / "reader"),
        "--home",
        str(tmp_path / "home"),
        "--interpolate",
        "0.5",
        "1",
        "--no-answer-prior",
        "0.4",
    ]
    assert main(argv) == 0
    assert "Saved its mix with" in capsys.readouterr().out
    info = json.loads((tmp_path / "reader" / MODEL_INFO_FILE).read_text())
    assert [t["weight"] for t in info["interpolation"]["trials"]] == [0.5, 1.0] and info["interpolation"]["general"] == str(base)
    assert info["interpolation"]["specialised"] == str(tmp_path / "reader-finetuned")
    finetuned = json.loads((tmp_path / "reader-finetuned" / MODEL_INFO_FILE).read_text())
    assert finetuned["train_questions"] == 4 and finetuned["no_answer_prior"] == 0.4  # the training share would be 0.25


class Crash(Exception):
    """What the test's callback raises to stop a run the way a killed process does: mid-epoch, without cleaning up."""


def crash_at(step):
    from transformers import TrainerCallback

    class CrashAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                raise Crash(step)

    return CrashAt()


def test_an_interrupted_run_resumed_from_its_checkpoint_ends_as_an_uninterrupted_one(tmp_path, squad_files):
    import torch
    from safetensors.torch import load_file

    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=2, batch_size=1, max_seq_length=48, doc_stride=16, checkpoint_steps=2)
    whole = train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "whole", config, progress=False)
    with pytest.raises(Crash):
        train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "resumed", config, progress=False, callbacks=[crash_at(15)])
    checkpoints = {p.name for p in (tmp_path / "resumed" / "checkpoints").iterdir()}
    assert checkpoints == {"checkpoint-12", "checkpoint-14"}  # the last two kept; epoch 1 (12 windows, one a step) was read and selected on
    resumed = train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "resumed", config, progress=False, resume_from="last")
    assert [r["steps"] for r in resumed.history] == [r["steps"] for r in whole.history] == [12, 24]
    assert [r["no_answer_threshold"] for r in resumed.history] == pytest.approx([r["no_answer_threshold"] for r in whole.history])
    assert resumed.best_epoch == whole.best_epoch
    weights = [load_file(str(tmp_path / name / "model.safetensors")) for name in ("whole", "resumed")]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not (tmp_path / "resumed" / "checkpoints").exists()  # a finished run leaves only its model


def test_resuming_names_what_is_wrong(tmp_path, squad_files):
    from qa_system.errors import QAError

    base = tiny_model_dir(tmp_path / "base", question_answering=False)
    config = TrainingConfig(epochs=1, batch_size=2, max_seq_length=48, doc_stride=16)
    with pytest.raises(QAError, match="No checkpoint to resume from"):
        train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "fresh", config, progress=False, resume_from="last")
    with pytest.raises(QAError, match="is not a training checkpoint"):
        train_reader([squad_files[0]], [squad_files[1]], str(base), tmp_path / "fresh", config, progress=False, resume_from=tmp_path)


def test_auto_device_trains_on_the_cpu_here_and_an_absent_gpu_is_refused_in_one_line(tmp_path, squad_files, capsys, monkeypatch):
    import os

    import torch

    from qa_system.cli.main import main
    from qa_system.training.reader import training_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a CI machine that has a GPU
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert training_device("auto") == training_device("cpu") == "cpu"
    base = tiny_model_dir(tmp_path / "base")
    argv = [*tiny_training_argv([squad_files[0]], squad_files[1], base, tmp_path / "reader"), "--home", str(tmp_path / "home")]
    capsys.readouterr()  # the tiny model's save progress
    for device in ("cuda", "cuda:1"):
        assert main([*argv, "--device", device]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and "asks for a CUDA GPU" in error and "--device cpu" in error
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # a refused cuda:N leaves the environment as it was
    assert not (tmp_path / "reader").exists()
    assert main([*argv, "--device", "tpu"]) == 2 and "Unknown device 'tpu'" in capsys.readouterr().err
    assert main([*argv, "--device", "auto"]) == 0
    info = json.loads((tmp_path / "reader" / MODEL_INFO_FILE).read_text())
    assert info["machine"]["device"] == "cpu"
