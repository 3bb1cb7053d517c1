"""A small evaluation report written to disk, and PNG files of any size (large ones are decompression bombs)."""

from __future__ import annotations

import struct
import zlib

import pandas as pd

from qa_system.evaluation.report import write_report


def write(directory, title="Retriever evaluation"):
    """A report titled ``title`` in ``directory``: metrics of two groups, a figure, a latency section and a note."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.plot([1, 3], [0.5, 0.9])
    metrics = pd.DataFrame(
        [{"retriever": "bm25", "group": "all", "recall@1": 0.5}, {"retriever": "bm25", "group": "answerable", "recall@1": 0.6}]
    )
    latency = pd.DataFrame([{"retriever": "bm25", "p50_ms": 3.0}])
    return write_report(
        directory,
        title,
        metrics,
        summary={"split": "test", "questions": 4, "index": {"name": "x"}},
        figures={"recall_at_k.png": figure},
        sections={"latency": latency},
        notes=["strict: the question's own review."],
    )


def png(width: int, height: int) -> bytes:
    """A black 1-bit PNG of ``width`` x ``height``: tens of KB whatever its size, so a decompression bomb when large."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row, compressor = b"\0" * (1 + (width + 7) // 8), zlib.compressobj(9)
    pixels = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
