"""Timing and memory measurement for the benchmark.

Systems that are compared run *interleaved* (query 1 on every system, then query 2, ...), so that
whatever else the machine is doing at a moment slows them all alike and their ratio stays fair.
All stop together once one of them has spent its time budget, so every figure of a comparison is
over the same queries (latency varies a lot from one question to the next).
"""

from __future__ import annotations

import os
import platform
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Timing:
    """Wall-clock seconds of repeated calls, and what the calls returned."""

    seconds: list[float] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)

    @property
    def calls(self) -> int:
        """The number of calls timed."""
        return len(self.seconds)

    def percentile_ms(self, q: float) -> float:
        """The ``q``-th percentile of the calls' times, in milliseconds (NaN with no calls)."""
        return 1000 * float(np.percentile(self.seconds, q)) if self.seconds else float("nan")

    @property
    def p50_ms(self) -> float:
        """The median call time in milliseconds."""
        return self.percentile_ms(50)

    @property
    def p95_ms(self) -> float:
        """The 95th percentile call time in milliseconds."""
        return self.percentile_ms(95)

    @property
    def per_second(self) -> float:
        """Calls per second, one after the other (the throughput of one thread of requests)."""
        return len(self.seconds) / sum(self.seconds) if self.seconds else float("nan")


def compare(
    systems: dict[str, Callable[[Any], Any]],
    inputs: Sequence[Any],
    budget_s: float = float("inf"),
    min_calls: int = 5,
) -> dict[str, Timing]:
    """Each system called on each input in turn, interleaved, until one has used ``budget_s`` (and all ``min_calls``).

    The order of the systems rotates from one input to the next, so none is always first after a pause.
    """
    timings = {name: Timing() for name in systems}
    names = list(systems)
    for i, item in enumerate(inputs):
        if i >= min_calls and any(sum(t.seconds) >= budget_s for t in timings.values()):
            break
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            output = systems[name](item)
            timings[name].seconds.append(time.perf_counter() - start)
            timings[name].outputs.append(output)
    return timings


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    """``function()``'s result and the seconds it took."""
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def peak_rss_mb() -> float:
    """The process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """This process's resident memory now, in MiB."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def machine(device: str = "auto") -> dict[str, Any]:
    """What the figures were measured on, including how busy the machine was and which ``device`` (a QA_DEVICE
    setting) ran the models: "cpu", or "cuda:N (<GPU name>)"."""
    import psutil

    from qa_system.devices import cpuinfo_field, int8_dot_product, is_cuda, physical_cores, read_cpuinfo, resolve_device

    cpuinfo = read_cpuinfo()
    resolved = resolve_device(device)
    if is_cuda(resolved):
        import torch

        resolved = f"{resolved} ({torch.cuda.get_device_name(resolved)})"
    return {
        "device": resolved,
        "physical_cores": physical_cores(),
        "logical_cpus": os.cpu_count(),
        "cpu": cpuinfo_field(cpuinfo, "model name") or platform.processor() or "unknown",
        "int8_dot_product": int8_dot_product(cpuinfo),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


def library_versions() -> dict[str, str]:
    """The installed versions of the libraries the benchmark compares ("not installed" for a missing one)."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for package in ("haystack-ai", "transformers-haystack", "torch", "transformers", "onnxruntime", "bm25s", "faiss-cpu"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return versions


class MemorySampler:
    """The resident memory (RSS, MB) of process ``pid`` and its children, sampled every ``every_s`` in a thread
    while the ``with`` block runs: ``samples`` holds (seconds since the start, MB)."""

    def __init__(self, pid: int, every_s: float = 1.0):
        import threading

        self.pid, self.every_s = pid, every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="memory-sampler", daemon=True)
        self.began = time.monotonic()

    def _sample(self) -> None:
        import psutil

        try:
            process = psutil.Process(self.pid)
            while True:
                rss = sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
                self.samples.append((time.monotonic() - self.began, round(rss / 2**20, 1)))
                if self._stop.wait(self.every_s):
                    return
        except psutil.Error:  # the process ended: the samples so far stand
            return

    def __enter__(self) -> MemorySampler:
        self.began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
