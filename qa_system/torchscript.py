"""PyTorch models that serve questions, run as TorchScript graphs traced from them.

A lane (the reader's, an encoder's) launches every question's model calls from one Python thread, and on a GPU
the arithmetic costs little: what bounds it is the Python that runs each layer's modules, a few milliseconds of
CPU a call, with the GIL held, while the calls of every other question wait. A graph traced from the model runs
the same operators from C++, without the GIL (a call of a 6-layer BERT at a small shape on a CPU: 3.9 -> 1.2 ms).

A trace records the operators one call ran, so it is kept only where it gives the model's own outputs on inputs of
other shapes than the one traced (``traced``): to the bit on a CPU, within rounding where a GPU picks another
attention kernel for an input without padding, which the module reads without a mask and the graph with one. It runs
without the graph executor's optimisations, which could fuse operators into kernels that round otherwise. Where
tracing fails or the outputs differ, the model runs as it is, and the log says why.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence

logger = logging.getLogger(__name__)


def traced(forward, example: Sequence, checks: Sequence[Sequence], name: str, tolerance: float = 0.0) -> Callable | None:
    """``forward`` (a ``torch.nn.Module`` taking tensors, returning a tensor or a tuple of them) as a function
    running its traced graph, or None where it cannot be traced or any of its outputs moves by more than ``tolerance``
    from ``forward``'s on one of ``checks`` (argument tuples of other shapes than ``example``, the one it is traced
    on). ``name`` is for the log."""
    import torch

    try:
        with warnings.catch_warnings(), torch.no_grad():
            # The tracer warns of every shape it records as a constant; the checks below are what tells.
            warnings.simplefilter("ignore")
            graph = torch.jit.trace(forward, tuple(example), check_trace=False)
        run = _runner(graph)
        with torch.inference_mode():
            for arguments in checks:
                if not _within(forward(*arguments), run(*arguments), tolerance):
                    logger.info("%s runs as a PyTorch module: its traced graph gave other outputs.", name)
                    return None
    except Exception as error:  # a model the tracer cannot follow runs as it is
        logger.info("%s runs as a PyTorch module: it could not be traced (%s: %s).", name, type(error).__name__, error)
        return None
    logger.info("%s runs as a traced TorchScript graph.", name)
    return run


def as_module(model, forward: Callable):
    """``forward`` (tensors in, a tensor or a tuple of them out), a function of ``model``, as a module holding ``model``,
    for the tracer: the graph then holds the model's parameters rather than copies of them as constants."""
    import torch

    class Traceable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return forward(*tensors)

    return Traceable()


def _runner(graph) -> Callable:
    import torch

    def run(*arguments):
        with torch.jit.optimized_execution(False):
            return graph(*arguments)

    return run


def _within(expected, actual, tolerance: float) -> bool:
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    return len(expected) == len(actual) and all(
        e.shape == a.shape and float((e.float() - a.float()).abs().max()) <= tolerance for e, a in zip(expected, actual)
    )
