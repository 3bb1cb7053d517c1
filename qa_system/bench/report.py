"""The benchmark report: the speed targets checked first, every table, and latency-vs-size plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from qa_system.bench.endtoend import PROJECT_ONNX, PROJECT_SELECTOR
from qa_system.bench.reader import HAYSTACK_READER, ONNX_INT8, TORCH
from qa_system.bench.retrieval import HAYSTACK
from qa_system.evaluation.report import write_report

FAST_BM25 = "bm25s, same scoring"


def _check(criterion: str, measured: float, target: str, passed: bool, unit: str = "") -> dict[str, Any]:
    return {"criterion": criterion, "measured": f"{measured:.3g}{unit}", "target": target, "pass": "yes" if passed else "NO"}


def acceptance(reader: pd.DataFrame, retrieval: pd.DataFrame, end_to_end: pd.DataFrame) -> pd.DataFrame:
    """The speed targets, each measured figure against its bound.

    The int8 reader at a third of Haystack's reader's latency with EM / F1 within a point of PyTorch's;
    BM25 top-3 + int8 reader answering in 200 ms at every corpus size, and at most 1.2 times that with
    the answer selector; BM25 at 100 times the
    throughput of Haystack's with the same top 10; a filtered BM25 query in 5 ms.
    """
    checks = []
    fast = reader.set_index("reader").loc[ONNX_INT8]
    checks.append(_check(f"reader p50, {ONNX_INT8} / {HAYSTACK_READER}", fast["p50_ratio"], "<= 0.33", fast["p50_ratio"] <= 0.33))
    for metric in ("em", "f1"):
        delta = fast[f"{metric}_minus_torch_fp32"]
        checks.append(_check(f"reader {metric.upper()}, {ONNX_INT8} minus {TORCH} (points)", delta, "within +-1", abs(delta) <= 1.0))
    for _, row in end_to_end[end_to_end["pipeline"] == PROJECT_ONNX].iterrows():
        checks.append(
            _check(
                f"end-to-end p50, BM25 top-3 + {ONNX_INT8}, {row['corpus']} reviews",
                row["p50_ms"],
                "<= 200 ms",
                row["p50_ms"] <= 200,
                " ms",
            )
        )
    for _, row in end_to_end[end_to_end["pipeline"] == PROJECT_SELECTOR].iterrows():
        checks.append(
            _check(
                f"end-to-end p50 with the answer selector / without, {row['corpus']} reviews",
                row["p50_ratio"],
                "<= 1.2",
                row["p50_ratio"] <= 1.2,
                "x",
            )
        )
    largest = retrieval["corpus"].max()
    bm25 = retrieval[(retrieval["retriever"] == "BM25") & (retrieval["corpus"] == largest) & (retrieval["system"] == FAST_BM25)].set_index(
        "filter"
    )
    if "none" in bm25.index:
        row = bm25.loc["none"]
        checks.append(
            _check(
                f"BM25 queries/s at {largest} reviews, {FAST_BM25} / {HAYSTACK}", row["qps_ratio"], ">= 100", row["qps_ratio"] >= 100, "x"
            )
        )
        checks.append(
            _check(
                f"BM25 same top-10 as {HAYSTACK} at {largest} reviews (share of queries)",
                row["same_top10"],
                "= 1",
                row["same_top10"] == 1.0,
            )
        )
    for kind in ("product", "synthetic product"):
        if kind in bm25.index:
            row = bm25.loc[kind]
            checks.append(
                _check(f"BM25 p50 with a {kind} filter at {largest} reviews", row["p50_ms"], "<= 5 ms", row["p50_ms"] <= 5, " ms")
            )
    return pd.DataFrame(checks)


def latency_plot(retrieval: pd.DataFrame, end_to_end: pd.DataFrame) -> plt.Figure:
    """Retrieval and end-to-end p50 latency against corpus size (log-log)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    styles = {"none": "-", "product": "--", "synthetic product": ":"}
    for (retriever, system, kind), rows in retrieval.groupby(["retriever", "system", "filter"]):
        rows = rows.sort_values("corpus")
        left.plot(rows["corpus"], rows["p50_ms"], styles.get(kind, "-"), marker="o", label=f"{retriever}: {system} ({kind})")
    left.set(
        xscale="log",
        yscale="log",
        xlabel="reviews in the corpus",
        ylabel="p50 latency (ms)",
        title="Retrieval, top-10 (filter in brackets)",
    )
    left.legend(fontsize=6)
    for pipeline, rows in end_to_end.groupby("pipeline"):
        rows = rows.sort_values("corpus")
        right.plot(rows["corpus"], rows["p50_ms"], marker="o", label=pipeline)
    right.axhline(200, color="grey", linestyle="--", label="200 ms")
    right.set(
        xscale="log",
        yscale="log",
        xlabel="reviews in the corpus",
        ylabel="p50 latency (ms)",
        title="End to end, top-3 reviews of the product",
    )
    right.legend(fontsize=7)
    return figure


def reader_plot(reader: pd.DataFrame, profile: pd.DataFrame) -> plt.Figure:
    """Reader p50 latency per reader, and where the project readers' time goes."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    left.barh(reader["reader"], reader["p50_ms"])
    left.set(xlabel="p50 latency per question (ms), top-3 reviews", title="Reader latency")
    shares = profile.pivot(index="reader", columns="stage", values="mean_ms")
    shares.plot.barh(stacked=True, ax=right)
    right.set(xlabel="mean ms per question", title="Where the reader's time goes")
    right.legend(fontsize=7)
    return figure


def write(out_dir: Path, tables: dict[str, pd.DataFrame], summary: dict[str, Any], notes: list[str]) -> Path:
    """Write the benchmark report to ``out_dir``: the acceptance checks first, then ``tables``, the plots, ``summary`` and ``notes``."""
    checks = acceptance(tables["reader"], tables["retrieval"], tables["end_to_end"])
    figures = {
        "latency_vs_corpus_size.png": latency_plot(tables["retrieval"], tables["end_to_end"]),
        "reader.png": reader_plot(tables["reader"], tables["reader_profile"]),
    }
    return write_report(
        out_dir, "Benchmark: indexing, retrieval, reader and end-to-end latency", checks, summary, figures, tables, notes=notes
    )
