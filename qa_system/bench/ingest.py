"""`qa-system bench ingest`: how fast `qa-system index --input` reads a large CSV of reviews, and in how much memory.

The CSV is written from SubjQA's reviews, enlarged with synthetic ones made of real review
sentences (``corpus.synthetic_reviews``), under column names of its own (``opinion_id``, ``asin``,
``opinion_text``, ``stars``), so that the ingestion reads it as a user's file. Each run ingests it
into a fresh collection in a fresh Python process that imports only the ingestion, whose peak
resident memory is the figure.
"""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

from qa_system.bench.corpus import SYNTHETIC_PRODUCT_SIZE, bench_questions, real_reviews, synthetic_reviews
from qa_system.bench.measure import machine
from qa_system.config import Settings
from qa_system.errors import check_count
from qa_system.evaluation.report import write_report

COLUMNS = ("opinion_id", "asin", "opinion_text", "stars")
CHUNK = 50_000  # synthetic reviews made at a time (memory bounded while writing a million rows)


def _rows(real: list, rows: int, seed: int) -> Iterator[tuple[str, str, str, int]]:
    for number, review in enumerate(real[:rows]):
        yield f"op-{number}", review.meta["item_id"], review.content, 1 + number % 5
    made = min(rows, len(real))
    while made < rows:
        for review in synthetic_reviews(real, min(CHUNK, rows - made), seed=seed * 1_000_003 + made):
            yield f"op-{made}", f"SYN{made // SYNTHETIC_PRODUCT_SIZE:07d}", review.content, 1 + made % 5
            made += 1


def write_reviews_csv(settings: Settings, path: str | Path, rows: int, seed: int = 0) -> list[str]:
    """A CSV of ``rows`` reviews (real ones first, then synthetic), deterministic for ``seed``; returns what
    SubjQA parts were left out (``corpus.real_reviews``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    real, left_out = real_reviews(settings, bench_questions(settings))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows(_rows(real, check_count(rows, "rows"), seed))
    return left_out


# The worker: `qa-system index --input` as a program of its own, which prints its report and its peak
# resident memory (/proc's VmHWM: ru_maxrss would carry the parent's across fork and exec).
_WORKER = """
import json, sys
from pathlib import Path
from qa_system.config import Settings
from qa_system.ingestion import IngestOptions, ingest
settings, path, collection, embed = Settings.from_env(**json.loads(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
options = IngestOptions(text_column="opinion_text", id_column="opinion_id", item_column="asin")
report = ingest(settings, path, collection, options, embed=embed, progress=False)
peak = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
print(json.dumps({**report.as_dict(), "peak_rss_mb": peak / 1024}))
"""


def measure_ingest(settings: Settings, path: str | Path, collection: str, embed: bool) -> dict:
    """Ingest ``path`` into ``collection`` in a fresh Python process: its report and peak memory (Linux)."""
    overrides = json.dumps(
        {
            "home": str(settings.home),
            "store": settings.store,
            "embedding_model": settings.embedding_model,
            "es_url": settings.es_url,
            "opensearch_url": settings.opensearch_url,
            "embedding_backend": settings.embedding_backend,
            "device": settings.device,
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, overrides, str(path), collection, "1" if embed else "0"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"the ingestion worker failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _prepare_encoders(settings: Settings) -> None:
    """The encoder's int8 export built before the runs, so that no run's time includes building it."""
    from qa_system.ingestion.embedding import load_encoder

    load_encoder(settings.embedding_model, "onnx", "cpu", settings.embedding_onnx_cache)


def _change_one_row(source: Path, target: Path) -> None:
    """A copy of ``source`` whose first review has one more sentence."""
    with source.open(newline="", encoding="utf-8") as inp, target.open("w", newline="", encoding="utf-8") as out:
        rows, writer = csv.reader(inp), csv.writer(out)
        writer.writerow(next(rows))
        first = next(rows)
        writer.writerow([*first[:2], first[2] + " Edited: it broke a week later.", *first[3:]])
        writer.writerows(rows)


def run_ingest_bench(
    settings: Settings,
    out_dir: str | Path,
    rows: int = 100_000,
    embed_rows: int | None = None,
    seed: int = 0,
    keep: bool = False,
    progress: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Index a ``rows``-row CSV BM25-only, its first ``embed_rows`` rows with embeddings (0: none) by each embedding
    backend (float32 PyTorch, then int8 ONNX: documents/s side by side), then re-run the int8 one unchanged and with
    one row changed; each run in a fresh process. Writes report.json / .md / .csv."""
    from qa_system.ingestion import delete_collection, list_collections
    from qa_system.ingestion.embedding import indexing_backend

    rows = check_count(rows, "rows")
    embed_rows = rows if embed_rows is None else check_count(embed_rows, "embed_rows", 0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data, about = out / f"reviews-{rows}.csv", out / f"reviews-{rows}.json"
    # The CSV of an earlier run is reused only when it was made from the same data and seed.
    made_from = {"data_dir": str(settings.data_dir.resolve()), "seed": seed}
    if not data.exists() or not about.exists() or json.loads(about.read_text(encoding="utf-8")).get("made_from") != made_from:
        progress(f"writing {data} ({rows} reviews)")
        about.write_text(json.dumps({"made_from": made_from, "left_out": write_reviews_csv(settings, data, rows, seed)}), encoding="utf-8")
    left_out = json.loads(about.read_text(encoding="utf-8"))["left_out"]
    if left_out:
        progress(f"left out of the corpus: {'; '.join(left_out)}")
    runs = [("BM25 only", data, f"bench-ingest-{rows}-bm25", False, settings.embedding_backend)]
    if embed_rows:
        embedded = data if embed_rows == rows else out / f"reviews-{embed_rows}.csv"
        if embedded != data:  # cut anew: the CSV may have been rewritten
            with data.open(encoding="utf-8") as source, embedded.open("w", encoding="utf-8") as target:
                target.writelines(itertools.islice(source, embed_rows + 1))  # one review per line: no review holds a line break
        changed = out / f"reviews-{embed_rows}-changed.csv"
        _change_one_row(embedded, changed)
        name = f"bench-ingest-{embed_rows}-dense"
        # On a GPU both backends embed with PyTorch there (int8 is a CPU's shortcut): the float32 run is not repeated.
        updated, backend = (name, "onnx") if indexing_backend("onnx", settings.device) == "onnx" else (f"{name}-float32", "torch")
        runs += [
            ("with embeddings, float32", embedded, f"{name}-float32", True, "torch"),
            *([("with embeddings, int8", embedded, name, True, "onnx")] if backend == "onnx" else []),
            ("unchanged re-run", embedded, updated, True, backend),
            ("one row changed", changed, updated, True, backend),
        ]
        if backend == "onnx":
            _prepare_encoders(settings)
    results = []
    try:
        for label, path, collection, embed, backend in runs:
            if (
                not label.endswith("re-run")
                and label != "one row changed"
                and any(c.name == collection for c in list_collections(settings))
            ):
                delete_collection(settings, collection)
            progress(f"{label}: indexing {path.name} into '{collection}'")
            run_settings = settings.with_(embedding_backend=backend)
            result = measure_ingest(run_settings, path, collection, embed)
            results.append(
                {
                    "run": label,
                    "store": settings.store,
                    "embedding": indexing_backend(backend, settings.device) if embed else "-",
                    "rows": result["read"],
                    **{
                        k: result[k]
                        for k in (
                            "added",
                            "changed",
                            "unchanged",
                            "embedded_documents",
                            "embedded",
                            "passages",
                            "seconds",
                            "embedding_s",
                            "documents_per_s",
                            "peak_rss_mb",
                        )
                    },
                    "embedded_documents_per_s": result["embedded_documents"] / result["embedding_s"]
                    if result["embedding_s"]
                    else float("nan"),
                }
            )
            progress(f"  {results[-1]}")
    finally:  # a run stopped midway (Ctrl+C, SIGTERM) leaves no benchmark collection in the user's store either
        if not keep:
            made = {c.name for c in list_collections(settings)}
            for collection in {collection for _, _, collection, _, _ in runs} & made:
                delete_collection(settings, collection)
    table = pd.DataFrame(results)
    speeds = dict(zip(table["run"], table["embedded_documents_per_s"]))
    int8_speedup = speeds.get("with embeddings, int8", float("nan")) / speeds.get("with embeddings, float32", float("nan"))
    progress(
        f"embedding documents/s: float32 {speeds.get('with embeddings, float32', float('nan')):.1f}, int8 {speeds.get('with embeddings, int8', float('nan')):.1f} ({int8_speedup:.2f}x)"
    )
    write_report(
        out,
        f"Ingestion speed and memory: {rows} rows",
        table,
        summary={
            "machine": machine(settings.device),
            "seed": seed,
            "rows": rows,
            "embed_rows": embed_rows,
            "embedding_int8_speedup": int8_speedup,
        },
        notes=[
            f"A CSV of SubjQA reviews enlarged with synthetic ones made of real review sentences, columns {', '.join(COLUMNS)}; "
            "`qa-system index --input` reads it with --text-column opinion_text --id-column opinion_id --item-column asin.",
            "Each run is a fresh Python process importing only the ingestion: peak_rss_mb is its peak resident memory (VmHWM); seconds include loading the encoder.",
            "embedded_documents_per_s: documents embedded per second of embedding (embedding_s, the encoder loaded and its int8 export built before): "
            "sentence-transformers float32 (QA_EMBEDDING_BACKEND=torch) against the int8 ONNX export (onnx), on the same rows; on a GPU both would be PyTorch there, so only the float32 run is made.",
            "The re-runs update the embedded collection: unchanged (nothing embedded or written), then with one row edited.",
            *([f"SubjQA left out of the corpus: {'; '.join(left_out)}."] if left_out else []),
        ],
    )
    return table
