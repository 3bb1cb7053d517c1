"""Models that serve questions from a lane run as traced TorchScript graphs (qa_system/torchscript.py): the model's
own outputs to the bit, on shapes other than the one traced; a model the tracer cannot follow, or whose trace
gives other outputs, runs as it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.models import tiny_model_dir
from qa_system.config import default_embedding_model
from qa_system.ingestion.embedding import TorchSentenceEncoder
from qa_system.reading.batching import TorchQAModel
from qa_system.reading.model import load_qa_model
from qa_system.torchscript import as_module, traced


@pytest.fixture(scope="module")
def tiny_reader(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-reader"), max_positions=512)


def _windows(rows: int, length: int, padded_from: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(rows * length).integers(5, 60, (rows, length))
    mask = np.ones_like(ids)
    mask[-1, padded_from:] = 0
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _module_logits(model: TorchQAModel, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.inference_mode():
        output = model.model(**{name: torch.as_tensor(feeds[name]) for name in model.input_names})
    return [output.start_logits.numpy(), output.end_logits.numpy()]


def test_a_readers_lane_runs_its_traced_graph_which_gives_the_models_own_logits(tiny_reader, caplog):
    with caplog.at_level("INFO", logger="qa_system.torchscript"):
        model = TorchQAModel(load_qa_model(tiny_reader)[1].eval(), Path(tiny_reader) / "torch", tiny_reader, rows=8)
    assert model._graph is not None and "runs as a traced TorchScript graph" in caplog.text
    for rows, length, padded_from in [(1, 9, 9), (3, 50, 20), (8, 384, 100)]:  # traced on 2 windows of 64 tokens
        feeds = _windows(rows, length, padded_from)
        for got, expected in zip(model.run(["start_logits", "end_logits"], feeds), _module_logits(model, feeds)):
            np.testing.assert_array_equal(got, expected)


def test_a_reader_read_in_float32_again_is_traced_again(tiny_reader):
    # A lane whose 16-bit windows move beside others reads in float32 (reading/batching.py): the graph traced with the
    # 16-bit weights would keep them.
    model = TorchQAModel(load_qa_model(tiny_reader)[1].eval().to(torch.bfloat16), Path(tiny_reader) / "torch", tiny_reader)
    model.to_float32()
    feeds = _windows(2, 40, 30)
    for got, expected in zip(model.run(["start_logits", "end_logits"], feeds), _module_logits(model, feeds)):
        assert model.precision == "float32" and got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)


def test_an_encoders_traced_graph_gives_its_own_vectors_for_texts_of_other_numbers_and_lengths(caplog):
    encoder = TorchSentenceEncoder(default_embedding_model(), "cpu")
    texts = ["Is it good for reading?", "battery", "a long phrase about the case, the strap and the box it came in " * 3]
    expected = [encoder.encode(texts), encoder.encode(texts[1:2])]  # a text alone is padded less: other roundings
    with caplog.at_level("INFO", logger="qa_system.torchscript"):
        encoder.trace([["Does it fit in a pocket?", "the screen"], ["one text alone"]])
    graph = encoder._graph
    assert graph is not None and "runs as a traced TorchScript graph" in caplog.text
    encoder.trace()  # once: a lane and the process's encoders may both ask
    assert encoder._graph is graph
    np.testing.assert_array_equal(encoder.encode(texts), expected[0])
    np.testing.assert_array_equal(encoder.encode(texts[1:2]), expected[1])


class _Branching(torch.nn.Module):
    """Doubles positive sums, halves the rest: a branch on its input's values that a trace records as taken."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x / 2


def test_a_model_whose_trace_gives_other_outputs_runs_as_a_module(caplog):
    with caplog.at_level("INFO", logger="qa_system.torchscript"):
        assert traced(_Branching(), [torch.ones(2, 3)], [[-torch.ones(4, 3)]], "The branching model") is None
    assert "The branching model runs as a PyTorch module: its traced graph gave other outputs." in caplog.text


class _Rounding(torch.nn.Module):
    """Doubles positive sums; adds a rounding's worth to the rest: a graph traced on the first moves the rest by it."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x * 2 + 1e-7


def test_a_trace_within_the_tolerance_of_the_models_outputs_is_kept():
    # A GPU reads an input without padding with another attention kernel than the graph, which applies the mask.
    example, check = [torch.ones(2, 3)], [-torch.ones(4, 3)]
    assert traced(_Rounding(), example, [check], "The rounding model") is None
    run = traced(_Rounding(), example, [check], "The rounding model", tolerance=1e-6)
    assert run is not None and torch.equal(run(*check), -2 * torch.ones(4, 3))


def test_a_model_the_tracer_cannot_follow_runs_as_a_module(caplog):
    # A model whose output is no tensor: the tracer refuses it.
    model = as_module(torch.nn.Linear(3, 2), lambda x: {"text": "not a tensor", "sum": float(x.sum())})
    with caplog.at_level("INFO", logger="qa_system.torchscript"):
        assert traced(model, [torch.ones(2, 3)], [[torch.ones(1, 3)]], "The odd model") is None
    assert "The odd model runs as a PyTorch module: it could not be traced" in caplog.text
