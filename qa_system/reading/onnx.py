"""ONNX Runtime backend of the extractive reader: export, dynamic int8 quantisation, bucketed batches.

On a 2-core CPU the reader's transformer is most of a query's time. This is the recipe of the
reference book's chapter on efficient transformers, plus what matters for a reader:

* export the PyTorch model to ONNX with eager attention, so that ONNX Runtime's transformer
  optimiser can fuse attention, embeddings, GELU and layer norms into single kernels;
* dynamic int8 quantisation of the weights (``quantize_dynamic``): activations are quantised on
  the fly, so no calibration data is needed; one scale per output channel rather than per tensor
  (as fast; per-tensor scales cost 1.2 F1 points on SubjQA electronics test);
* 7-bit weights (``reduce_range``) by default: without VNNI (AVX2 machines such as ours), ONNX
  Runtime multiplies uint8 activations by int8 weights with VPMADDUBSW, whose 16-bit pair sums
  saturate with full-range weights. Against the fp32 reader, full-range weights lost 0.9 EM points
  on average over seven SubjQA comparisons, 7-bit weights none (+0.1); single comparisons vary by
  up to 1.5 points either way, a few questions (README, "Speed"). Same speed. ``reduce_range=False``
  suits VNNI CPUs; loading such an export on a CPU without int8 dot-product instructions logs a warning;
* length bucketing with dynamic padding: windows of similar length run together, each batch padded
  only to its own longest window, so a short review never pays for a long one's padding;
* one intra-op thread per physical core, no inter-op parallelism, no thread spinning (spinning
  threads steal the cores that the web server and the tokenizer need on a small machine).

``export_onnx`` writes ``model.onnx`` (fp32, fused) and ``model-int8.onnx`` beside the tokenizer and
the tuned no-answer threshold, plus ``export.json`` naming the source model's fingerprint (``model_files``),
so that a reader never silently runs an export of an older model. Readers build and reuse their
export automatically (``onnx_cache.py``); ``export_onnx`` with an output directory is for a copy
to take elsewhere.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from qa_system.devices import INT8_DOT_PRODUCT_FLAGS, cpuinfo_field, int8_dot_product, physical_cores, read_cpuinfo  # noqa: F401 - also named from here
from qa_system.disk_cache import built_folder
from qa_system.errors import QAError
from qa_system.model_files import model_fingerprint
from qa_system.quantization import quantize_int8

ONNX_SUBDIR = "onnx"  # default export location inside a local model directory
FP32_FILE = "model.onnx"
INT8_FILE = "model-int8.onnx"
EXPORT_INFO = "export.json"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAMES = ("start_logits", "end_logits")
# Model types whose graph ONNX Runtime's "bert" optimiser knows how to fuse.
FUSABLE_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra")
BUCKET_TOKENS = 32  # windows whose lengths round up to the same multiple of this share a batch
logger = logging.getLogger(__name__)


def default_reduce_range() -> bool:
    """7-bit int8 weights unless the CPU has int8 dot-product instructions, where full-range ones do not saturate."""
    return not int8_dot_product()


def default_export_dir(model: str | Path) -> Path:
    """Where ``export_onnx`` writes by default, and where the ONNX reader looks: ``<model>/onnx``."""
    return Path(model).expanduser() / ONNX_SUBDIR


def onnx_file(path: str | Path, quantized: bool = True) -> Path:
    """The .onnx file that ``path`` names: the file itself, or the int8 (or fp32) model of an export directory."""
    path = Path(path).expanduser()
    return path / (INT8_FILE if quantized else FP32_FILE) if path.is_dir() else path


def _export_graph(model, tokenizer, names: list[str], target: Path, opset: int) -> None:
    import torch

    sample = tokenizer(["How is the battery?"], ["The battery lasts a week and the screen is sharp."], return_tensors="pt")
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, *OUTPUT_NAMES]}
    # The tracer warns about transformers' branch for a mask shorter than the input; the reader's
    # mask is always as long as its input (tests compare the graph with PyTorch on padded batches).
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message="Exporting aten::index")  # indices are never negative here
        torch.onnx.export(
            model,
            tuple(sample[n] for n in names),
            str(target),
            input_names=names,
            output_names=list(OUTPUT_NAMES),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )


def _fuse(source: Path, target: Path, config) -> dict[str, int]:
    """ONNX Runtime's transformer fusions (attention, embeddings, GELU, layer norm); {} when not applicable."""
    if config.model_type not in FUSABLE_MODEL_TYPES:
        shutil.copyfile(source, target)
        return {}
    from onnxruntime.transformers import optimizer

    optimized = optimizer.optimize_model(
        str(source), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
    )
    optimized.save_model_to_file(str(target))
    return {op: n for op, n in optimized.get_fused_operator_statistics().items() if n}


EXPORT_STEPS = 4  # model loaded, graph exported and fused, weights quantised, files written
Report = Callable[[int, int], None]  # (steps done, steps in all)


def write_export(
    model: str | Path,
    directory: Path,
    opset: int = 17,
    reduce_range: bool | None = None,
    report: Report | None = None,
    extra_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the fp32 and int8 graphs, tokenizer, ``qa_system.json`` and ``export.json`` (last) into the
    empty ``directory``; returns the export.json entries. ``reduce_range`` None: the CPU decides."""
    import onnx
    import onnxruntime

    from qa_system.reading.model import MODEL_INFO_FILE, load_qa_model

    reduce_range = default_reduce_range() if reduce_range is None else reduce_range
    report = report or (lambda done, total: None)
    tokenizer, torch_model = load_qa_model(model)
    # Eager attention exports as plain MatMul/Softmax nodes, the pattern the fusion recognises.
    torch_model.set_attn_implementation("eager")
    torch_model.eval()
    names = [n for n in INPUT_NAMES if n in tokenizer.model_input_names]
    report(1, EXPORT_STEPS)
    _export_graph(torch_model, tokenizer, names, directory / "raw.onnx", opset)
    fused = _fuse(directory / "raw.onnx", directory / FP32_FILE, torch_model.config)
    (directory / "raw.onnx").unlink()
    onnx.checker.check_model(str(directory / FP32_FILE))
    report(2, EXPORT_STEPS)
    quantize_int8(directory / FP32_FILE, directory / INT8_FILE, reduce_range)
    report(3, EXPORT_STEPS)
    tokenizer.save_pretrained(directory)
    if (Path(model) / MODEL_INFO_FILE).is_file():
        shutil.copyfile(Path(model) / MODEL_INFO_FILE, directory / MODEL_INFO_FILE)
    info = {
        "source": str(model),
        "model_fingerprint": model_fingerprint(model),
        "inputs": names,
        "opset": opset,
        "fused_operators": fused,
        "reduce_range": reduce_range,
        "quantization": f"dynamic int8 (QInt8 weights{', 7-bit' if reduce_range else ''}, per output channel)",
        "onnxruntime": onnxruntime.__version__,
        "files": {"fp32": FP32_FILE, "int8": INT8_FILE},
        # Sizes of everything written, so that a truncated file is found before it is loaded.
        "sizes": {f.name: f.stat().st_size for f in sorted(directory.iterdir()) if f.is_file()},
        **(extra_info or {}),
    }
    (directory / EXPORT_INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")
    report(4, EXPORT_STEPS)
    return info


def export_onnx(model: str | Path, output: str | Path | None = None, opset: int = 17, reduce_range: bool | None = None) -> Path:
    """Export a reader model (directory or hub id) to ONNX, fp32 and dynamically int8-quantised.

    ``reduce_range``: 7-bit weights, which avoid int8 saturation on CPUs without VNNI (module doc);
    None = 7-bit unless this CPU has int8 dot-product instructions.

    Returns the export directory (default ``<model>/onnx``); it holds everything the ONNX reader
    needs (tokenizer, ``qa_system.json``), so it can be copied to a machine without PyTorch weights.
    """
    if output is None and not Path(model).expanduser().is_dir():
        raise QAError(f"'{model}' is not a local directory, so there is no default export location.", "pass --output DIR.")
    output = Path(output).expanduser() if output is not None else default_export_dir(model)
    with built_folder(output, existing="replace") as staging:  # an earlier export there serves until this one is whole
        write_export(model, staging, opset, reduce_range)
    return output


def read_export_info(export_dir: Path) -> dict[str, Any]:
    """The export's ``EXPORT_INFO`` (what it was exported from and how); empty when the directory has none."""
    path = export_dir / EXPORT_INFO
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def check_export(model: str | Path, path: str | Path) -> Path:
    """The .onnx file for ``model``: a clear error when it is missing or exported from other weights,
    a warning when its int8 weights are full-range on a CPU without int8 dot-product instructions."""
    file = onnx_file(path)
    fix = f"run `qa-system export-onnx --model {model}" + (f" --output {file.parent}`" if Path(path) != default_export_dir(model) else "`")
    if not file.is_file():
        raise QAError(f"There is no ONNX export of the reader at {file}.", f"{fix}, or use the torch reader backend.")
    info = read_export_info(file.parent)
    # Exports written before model_fingerprint (with a weights-only "weights_fingerprint") are trusted.
    recorded = info.get("model_fingerprint")
    current = model_fingerprint(model)
    if recorded and current and recorded != current:
        raise QAError(f"The ONNX export {file} was made from another version of the reader model {model}.", f"{fix} again.")
    if file.name == INT8_FILE and has_full_range_weights(info) and not int8_dot_product():
        logger.warning(
            "The ONNX reader %s has full-range int8 weights, which lose accuracy on a CPU without VNNI: %s again for 7-bit ones.", file, fix
        )
    return file


def has_full_range_weights(info: dict[str, Any]) -> bool:
    """Whether an export's int8 weights use all 8 bits (exports older than the ``reduce_range`` entry say so in words)."""
    return bool(info) and not info.get("reduce_range", "7-bit" in info.get("quantization", ""))


class OnnxQAModel:
    """An ONNX Runtime session over an exported reader: start and end logits of tokenised windows.

    :param path: the .onnx file.
    :param threads: intra-op threads; None = the machine's physical cores.
    :param profile_dir: when given, ONNX Runtime's profiler times every kernel into a JSON file there
        (``session.end_profiling()`` returns its path); for the benchmark, not for serving.
    :param providers: ONNX Runtime's execution providers (``devices.onnx_providers``); None = the CPU's.
    """

    def __init__(self, path: str | Path, threads: int | None = None, profile_dir: str | Path | None = None, providers: list | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        if profile_dir is not None:
            options.enable_profiling = True
            options.profile_file_prefix = str(Path(profile_dir) / "onnxruntime")
        options.intra_op_num_threads = threads or physical_cores()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers or ["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own untyped errors for bad files
            raise QAError(
                f"Could not load the ONNX reader {path} ({str(error).splitlines()[0]}).", "re-run `qa-system export-onnx`."
            ) from error
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.path = Path(path)

    def logits(self, encoding, batch_size: int = 32) -> tuple[np.ndarray, np.ndarray]:
        """Logits shaped like ``encoding["input_ids"]`` (-inf on padding), computed bucket by bucket."""
        return bucketed_logits(self.session, self.input_names, encoding, batch_size)


def bucketed_logits(session, input_names: list[str], encoding, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``session.run``'s (start, end) logits of every window, shaped like ``encoding["input_ids"]``, computed by length
    bucket (``length_buckets``), each padded only to its own longest window (-inf past it; padding is never read)."""
    mask = np.asarray(encoding["attention_mask"])
    lengths = mask.sum(axis=1)
    width = mask.shape[1]
    right_padded = bool(mask[:, 0].all())  # padding on the right leaves the first column all ones
    start = np.full(mask.shape, -np.inf, dtype=np.float32)
    end = np.full(mask.shape, -np.inf, dtype=np.float32)
    for rows in length_buckets(lengths, batch_size):
        longest = int(lengths[rows].max())
        columns = slice(0, longest) if right_padded else slice(width - longest, width)
        feeds = {name: np.asarray(encoding[name])[rows, columns].astype(np.int64) for name in input_names}
        start[rows, columns], end[rows, columns] = session.run(list(OUTPUT_NAMES), feeds)
    return start, end


def length_buckets(lengths: np.ndarray, batch_size: int, quantum: int = BUCKET_TOKENS) -> list[np.ndarray]:
    """Window indices grouped by length rounded up to ``quantum`` tokens, at most ``batch_size`` per group.

    Each group is padded only to its own longest window, so padding stays under ``quantum`` tokens per window.
    """
    order = np.argsort(lengths, kind="stable")
    keys = -(-lengths[order] // quantum)
    groups = np.split(order, np.flatnonzero(np.diff(keys)) + 1)
    return [chunk for group in groups for chunk in np.array_split(group, -(-len(group) // batch_size))]


def load_onnx_reader(model: str | Path, onnx_model: str | Path | None = None, threads: int | None = None, providers: list | None = None):
    """Tokenizer, ONNX session and export directory of the reader ``model`` (export default ``<model>/onnx``)."""
    path = Path(onnx_model).expanduser() if onnx_model is not None else default_export_dir(model)
    return open_export(check_export(model, path), threads, providers)


def open_export(file: Path, threads: int | None = None, providers: list | None = None):
    """Tokenizer, ONNX session and directory of an export's .onnx ``file`` (a QAError when either does not load)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent))
    except (OSError, ValueError) as error:
        raise QAError(f"The ONNX export {file.parent} has no usable tokenizer ({error}).", "re-run `qa-system export-onnx`.") from error
    return tokenizer, shared_session(file, threads, providers), file.parent


_sessions: dict[tuple[str, int, int, str], OnnxQAModel] = {}
_sessions_lock = threading.Lock()


def shared_session(file: Path, threads: int | None = None, providers: list | None = None) -> OnnxQAModel:
    """One session per .onnx file (and thread count, and providers) in a process: the pipelines of every collection and
    retriever share the reader's weights rather than loading them once each. A rewritten file gets a new one."""
    key = (str(file.resolve()), file.stat().st_mtime_ns, threads or 0, repr(providers))
    with _sessions_lock:
        if key not in _sessions:
            _sessions[key] = OnnxQAModel(file, threads, providers=providers)
        return _sessions[key]
