"""Time `qa-system ask` on a fresh QA_HOME (index, and for onnx the reader's export, built first) and warm,
with the int8 ONNX reader and the PyTorch reader side by side.

The two backends alternate run by run (and which goes first alternates round by round), so a
machine shared with other jobs slows both alike: compare the ratios. Every run is a new process, as
a user's command is; its wall clock includes Python's start and the model loads.

    python scripts/time_first_answer.py --rounds 2 --warm 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTION, ITEM = "Is it good for reading?", "B0074BW614"
BACKENDS = ("onnx", "torch")


def ask(backend: str, home: Path) -> tuple[float, float, str]:
    """(wall seconds, the reader's own milliseconds, the backend ask reports) of one `qa-system ask`."""
    command = [
        sys.executable,
        "-c",
        "import sys; from qa_system.cli import main; sys.exit(main())",
        "ask",
        QUESTION,
        "--item",
        ITEM,
        "--home",
        str(home),
        "--reader-backend",
        backend,
    ]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "QA_READER_ONNX_MODEL": ""})
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    match = re.search(r"reader (\d+) ms, ([^)]+)\)", done.stdout.splitlines()[0])
    return seconds, float(match.group(1)), match.group(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="fresh homes per backend")
    parser.add_argument("--warm", type=int, default=3, help="warm runs per backend and round")
    args = parser.parse_args()
    fresh: dict[str, list[float]] = {b: [] for b in BACKENDS}
    warm: dict[str, list[float]] = {b: [] for b in BACKENDS}
    reader_ms: dict[str, list[float]] = {b: [] for b in BACKENDS}
    with tempfile.TemporaryDirectory(prefix="qa-first-answer-") as root:
        for round_ in range(args.rounds):
            order = BACKENDS if round_ % 2 == 0 else BACKENDS[::-1]
            homes = {b: Path(root) / f"{b}-{round_}" for b in BACKENDS}
            for backend in order:
                seconds, _, used = ask(backend, homes[backend])
                fresh[backend].append(seconds)
                print(f"round {round_ + 1}: {backend} on a fresh home: {seconds:.1f} s (read with {used})", flush=True)
            for _ in range(args.warm):
                for backend in order:
                    seconds, ms, used = ask(backend, homes[backend])
                    warm[backend].append(seconds)
                    reader_ms[backend].append(ms)
                    assert used.startswith(backend), used
            print(
                f"round {round_ + 1}: warm " + ", ".join(f"{b} {statistics.median(warm[b][-args.warm :]):.1f} s" for b in order), flush=True
            )
    load = os.getloadavg()[0]
    print(
        f"\n| qa-system ask (median, {args.rounds} fresh homes, {args.rounds * args.warm} warm runs each) | onnx int8 | torch | onnx / torch |"
    )
    print("|---|---|---|---|")
    for label, values, unit in (
        ("fresh QA_HOME, wall clock", fresh, "s"),
        ("warm, wall clock", warm, "s"),
        ("warm, the reader's own time", reader_ms, "ms"),
    ):
        onnx, torch = statistics.median(values["onnx"]), statistics.median(values["torch"])
        print(f"| {label} | {onnx:.1f} {unit} | {torch:.1f} {unit} | {onnx / torch:.2f} |")
    print(f"(load average at the end: {load:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
