"""Dynamic int8 quantisation of an ONNX graph's weights, shared by the reader's and the encoder's exports."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def root_logging_kept() -> Iterator[None]:
    """``quantize_dynamic`` calls ``logging.basicConfig()``, after which every library's debug logger
    prints, and logs a warning on the root logger that has no fix here (pre-processing, for CNNs)."""
    root = logging.getLogger()
    handlers = root.handlers[:]

    def advice(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    root.addFilter(advice)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.removeFilter(advice)


def quantize_int8(source: Path, target: Path, reduce_range: bool) -> None:
    """Write ``target``: ``source`` with its weights quantised to int8 per channel (activations at run time)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # DefaultTensorType: fused contrib ops carry no shape-inferred type; their outputs are float.
    with root_logging_kept():
        quantize_dynamic(
            source,
            target,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=reduce_range,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
