"""The reader's int8 ONNX export, built on first use into the cache and reused after.

An export lives in ``<cache>/<model name>-<key>/``, where the key hashes everything the export
depends on: the bytes of the model's files (weights, config, tokenizer, the tuned threshold in
``qa_system.json``), the export settings (opset, 7-bit or full-range weights, which this CPU
decides) and the versions of the libraries that write it. A retrained model or a new ONNX Runtime
gets a new export; a stale one is never used.

Building is atomic and one process at a time: a file lock per key, the export written into a
temporary directory beside the target and renamed into place, so a reader never sees half an
export. Under the lock, the leftovers of a build that died (``kill -9``) are removed first. An
export that is incomplete (a file missing or of the wrong size) or does not load is rebuilt.
A new export of a model leaves its previous one (a server still running it, a way back) and removes
the older ones: each is about 100 MB that nothing uses any more.

When building fails (no disk space, an architecture the exporter does not know), the reader falls
back to PyTorch with a warning rather than failing to answer; a process does not retry a failed
build (the page builds several pipelines over one reader).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qa_system.disk_cache import (
    built_folder,
    keyed_folder,
    library_versions,
    listed_files,
    mark_used,
    prune_keyed_folders,
    taking_turns,
    temporary_prefix,
)
from qa_system.errors import QAError
from qa_system.model_files import model_fingerprint
from qa_system.reading.model import ModelLoadError
from qa_system.reading.onnx import EXPORT_INFO, FP32_FILE, INT8_FILE, Report, default_reduce_range, open_export, write_export
from qa_system.stopping import interrupted

# Bump when the export recipe (write_export) changes what it writes: every cached export is rebuilt.
RECIPE = 1
OPSET = 17
LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime")
EXPORTS_PER_MODEL = 2  # the newest export of a model name and the one before it
logger = logging.getLogger(__name__)
_failed: dict[tuple[Path, str], str] = {}  # (cache, model) -> why its export failed in this process


def export_settings(reduce_range: bool) -> dict[str, Any]:
    """What an export depends on besides the model: recipe, settings and library versions."""
    return {"recipe": RECIPE, "opset": OPSET, "reduce_range": reduce_range, **library_versions(LIBRARIES)}


def export_dir(model: str | Path, cache: Path, fingerprint: str, reduce_range: bool) -> Path:
    """``<cache>/<model name>-<key>``: the key hashes the model's fingerprint and the export settings."""
    return keyed_folder(cache, model, {"model": fingerprint, **export_settings(reduce_range)}, "reader")


def is_complete(directory: Path) -> bool:
    """Whether every file that export.json lists is there with its recorded size (export.json is written last)."""
    return listed_files(directory, EXPORT_INFO) is not None


def cached_export(model: str | Path, cache: str | Path, report: Report | None = None, rebuild: bool = False) -> Path:
    """The directory of ``model``'s int8 export under ``cache``, built there first when it is missing,
    incomplete, or (``rebuild``) found not to load. Raises what the build raises."""
    cache = Path(cache).expanduser()
    reduce_range = default_reduce_range()
    fingerprint = model_fingerprint(model)
    if fingerprint is None:  # a hub id not downloaded yet: its files are on disk once the export has loaded it
        return _build(model, cache, None, reduce_range, report)
    target = export_dir(model, cache, fingerprint, reduce_range)
    if not rebuild and is_complete(target):
        mark_used(target)
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with taking_turns(f"{target}.lock", f"Waiting for another process building the ONNX reader {target}."):
        if not rebuild and is_complete(target):
            mark_used(target)
            return target  # built by another process while this one waited
        # Holding the lock, this process is the only one building this export: what is left of
        # earlier builds of it was left by a process that died (built_folder removes its own kind;
        # these are the ".<name>.<random>" folders of releases before it).
        for leftover in cache.glob(f".{target.name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)
        return _build(model, cache, target, reduce_range, report)


def _build(model: str | Path, cache: Path, target: Path | None, reduce_range: bool, report: Report | None) -> Path:
    """Write the export beside ``target`` and rename it into place (``target`` None: named once the model is on disk)."""
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if target is not None:  # under the lock: an export there is incomplete or does not load
        with built_folder(target, existing="replace", complete=is_complete) as staging:
            _write(model, cache, staging, reduce_range, report)
    else:  # a hub id, downloaded by the export itself: built aside, then named; another process's whole export is kept
        with tempfile.TemporaryDirectory(prefix=temporary_prefix("download"), dir=cache) as aside:
            fingerprint = _write(model, cache, Path(aside), reduce_range, report)
            target = export_dir(model, cache, fingerprint, reduce_range)
            with built_folder(target, existing="keep", complete=is_complete) as staging:
                for file in Path(aside).iterdir():
                    file.rename(staging / file.name)
    logger.info("ONNX reader %s built in %.0f s.", target, time.perf_counter() - started)
    _remove_older_exports(target)
    return target


def _write(model: str | Path, cache: Path, directory: Path, reduce_range: bool, report: Report | None) -> str:
    """The export written into ``directory``, its export.json naming the model's fingerprint (returned)."""

    def progress(done: int, total: int) -> None:
        if done == 1:  # the model loaded: a model that does not load is its own error, said once
            logger.warning(
                "First use of the reader %s: building its int8 ONNX export (%s weights) in %s, once per model version.",
                model,
                "7-bit" if reduce_range else "full-range",
                cache,
            )
        if report is not None:
            report(done, total)

    info = write_export(model, directory, OPSET, reduce_range, progress, extra_info={"export_settings": export_settings(reduce_range)})
    if info["model_fingerprint"] is None:
        raise QAError(f"The files of the reader '{model}' are not on disk after loading it.", "pass a local model directory.")
    return info["model_fingerprint"]


def _remove_older_exports(target: Path) -> None:
    """Keep the EXPORTS_PER_MODEL most recently used exports of ``target``'s model name (``target`` first)."""
    for removed in prune_keyed_folders(target, EXPORTS_PER_MODEL, EXPORT_INFO):
        logger.info("Removed the older ONNX export %s.", removed)


def _or_torch(model: str | Path, cache: Path, work: Callable[[], Any]) -> Any:
    """``work()``, or None after a warning when it fails: a failed export must not stop answering,
    PyTorch reads the same weights. A failure is remembered, so the process does not retry it.
    A model that does not load at all is the user's error, raised as it is (PyTorch would fail the same way)."""
    key = (cache, str(model))
    if key in _failed:
        return None
    try:
        return work()
    except ModelLoadError:
        raise
    except Exception as error:  # the exporter, ONNX Runtime and tokenizers raise untyped errors
        reason = _first_line(error)
        _failed[key] = reason
        logger.warning("Could not build the ONNX reader for %s (%s): answering with the PyTorch reader.", model, reason)
        return None


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_cached_reader(
    model: str | Path, cache: str | Path, threads: int | None = None, report: Report | None = None, providers: list | None = None
):
    """Tokenizer, ONNX session and export directory of ``model``'s cached int8 export, built or
    rebuilt as needed; None, after a warning, when it cannot be built (the reader then uses PyTorch).
    With CUDA's ``providers`` the export's fp32 graph runs instead (int8 is a CPU's shortcut)."""
    cache = Path(cache).expanduser()
    file = FP32_FILE if providers and "CUDAExecutionProvider" in str(providers[0]) else INT8_FILE

    def load():
        directory = cached_export(model, cache, report)
        try:
            return open_export(directory / file, threads, providers)
        except Exception as error:  # a damaged file of the right size
            if interrupted(error):
                raise KeyboardInterrupt from error
            logger.warning("The cached ONNX reader %s does not load (%s): rebuilding it.", directory, _first_line(error))
            return open_export(cached_export(model, cache, report, rebuild=True) / file, threads, providers)

    return _or_torch(model, cache, load)


def prepare_reader(settings, report: Report | None = None) -> Path | None:
    """Build the reader's cached export ahead of the pipelines (the page shows its progress);
    None when the settings do not use it or it cannot be built (the reader warns and uses PyTorch)."""
    if settings.reader_backend != "onnx" or settings.reader_onnx_model is not None:
        return None
    cache = Path(settings.reader_onnx_cache)
    return _or_torch(settings.reader_model, cache, lambda: cached_export(settings.reader_model, cache, report))
