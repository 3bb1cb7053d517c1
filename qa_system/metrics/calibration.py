"""Calibration of a confidence: does "0.8" mean right 8 times in 10?

``expected_calibration_error`` is the usual ECE (Guo et al. 2017): confidences cut into equal-width
bins, and the gap between each bin's mean confidence and its share of right answers, weighted by
the bin's size. ``reliability_table`` gives the bins themselves, which ``reliability_diagram`` draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

BINS = 10


def reliability_table(confidence: Sequence[float], right: Sequence[float], bins: int = BINS) -> pd.DataFrame:
    """One row per non-empty bin: its range, size, mean confidence and share right."""
    confidence, right = np.asarray(confidence, dtype=float), np.asarray(right, dtype=float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    # Bin i holds (edge i, edge i+1]; a confidence of exactly 0 goes to the first bin.
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    rows = []
    for i in range(bins):
        mask = which == i
        if mask.any():
            rows.append(
                {
                    "low": edges[i],
                    "high": edges[i + 1],
                    "questions": int(mask.sum()),
                    "confidence": float(confidence[mask].mean()),
                    "right": float(right[mask].mean()),
                }
            )
    return pd.DataFrame(rows, columns=["low", "high", "questions", "confidence", "right"])


def expected_calibration_error(confidence: Sequence[float], right: Sequence[float], bins: int = BINS) -> float:
    """Size-weighted mean |confidence - share right| over ``bins`` equal-width bins (0 = perfectly calibrated)."""
    table = reliability_table(confidence, right, bins)
    if table.empty:
        return 0.0
    return float((table["questions"] * (table["confidence"] - table["right"]).abs()).sum() / table["questions"].sum())


def reliability_diagram(tables: dict[str, pd.DataFrame], title: str = ""):
    """Share right against mean confidence per bin, one line per system; the diagonal is perfect calibration."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 5))
    axes.plot([0, 1], [0, 1], color="grey", linestyle="--", label="perfectly calibrated")
    for name, table in tables.items():
        axes.plot(table["confidence"], table["right"], marker="o", label=name)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("confidence (mean per bin)")
    axes.set_ylabel("share right")
    axes.set_title(title)
    axes.legend(fontsize="small")
    return figure
