"""The bi-encoder's int8 ONNX export: the reader's recipe (``reading/onnx.py``) for sentence embeddings on a CPU.

A sentence-transformers encoder (Transformer -> mean or CLS pooling -> normalisation) is exported
as one graph that returns the unit-length sentence vector, so that ONNX Runtime computes exactly
what ``SentenceTransformer.encode(normalize_embeddings=True)`` does: the transformer exported with
eager attention and fused by ONNX Runtime's optimiser (all but attention and the residual
LayerNorm, see ``fusion_options``), pooling and normalisation inside the graph,
then dynamic int8 quantisation of the weights, one scale per output channel, 7-bit weights on
CPUs without int8 dot-product units (``devices.int8_dot_product``; full-range ones saturate there).

The export is built on first use into ``<home>/models/embedding-onnx/<model name>-<key>/``, the key
hashing the model's fingerprint (``model_files``), the recipe and the library versions, so a
retrained encoder or a new ONNX Runtime gets a new export, never a stale one. Built into a temporary
folder renamed into place under a file lock, as the reader's export is (``reading/onnx_cache.py``).
Texts are encoded longest-similar together, each batch padded to its own longest text.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qa_system.devices import int8_dot_product, physical_cores
from qa_system.disk_cache import built_folder, keyed_folder, library_versions, listed_files, mark_used, prune_keyed_folders, taking_turns
from qa_system.errors import QAError
from qa_system.hub import quiet_local_load
from qa_system.model_files import model_files_dir, model_fingerprint
from qa_system.quantization import quantize_int8
from qa_system.stopping import interrupted

# Bump when write_encoder_export changes what it writes: every cached export is rebuilt.
RECIPE = 2
OPSET = 17
INT8_FILE = "encoder-int8.onnx"
EXPORT_INFO = "export.json"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "sentence_embedding"
LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime")
EXPORTS_PER_MODEL = 2
FUSABLE_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra")
# A batch's tokens, padding included: 8 passages of 256 tokens, while a question and its dozen candidate phrases
# still share one batch. Smaller batches of long texts pad less: reviews of mixed length embed about 10% faster on
# 2 cores in batches of 8 than of 32.
TOKENS_PER_BATCH = 2048
logger = logging.getLogger(__name__)


def encoder_layout(model_dir: Path) -> dict[str, Any]:
    """What the sentence-transformers folder computes: {"pooling": "mean" | "cls", "normalize", "max_seq_length"};
    a QAError for a layout this export does not reproduce (max pooling, dense layers after pooling)."""
    modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8")) if (model_dir / "modules.json").is_file() else []
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        raise QAError(
            f"The encoder {model_dir} is not Transformer + Pooling (+ Normalize) ({', '.join(kinds) or 'no modules.json'}).",
            "use QA_EMBEDDING_BACKEND=torch for this encoder.",
        )
    pooling = json.loads((model_dir / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    if "pooling_mode" in pooling:  # sentence-transformers 5.4+ writes one key: "mean", "cls", ... or a list of them
        named = pooling["pooling_mode"]
        named = [named] if isinstance(named, str) else list(named or [])
        modes = [{"mean": "mean_tokens", "cls": "cls_token"}[mode] for mode in named if mode in ("mean", "cls")]
        others = [str(mode) for mode in named if mode not in ("mean", "cls")]
    else:  # the older layout: one boolean per mode
        modes = [name for name in ("cls_token", "mean_tokens") if pooling.get(f"pooling_mode_{name}")]
        others = [
            k
            for k, v in pooling.items()
            if k.startswith("pooling_mode_") and v and k.removeprefix("pooling_mode_") not in ("cls_token", "mean_tokens")
        ]
    if len(modes) != 1 or others:
        raise QAError(
            f"The encoder {model_dir} pools by {', '.join(modes + others) or 'nothing'}.",
            "use QA_EMBEDDING_BACKEND=torch for this encoder.",
        )
    config = model_dir / "sentence_bert_config.json"
    max_length = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length") if config.is_file() else None
    return {"pooling": "mean" if modes == ["mean_tokens"] else "cls", "normalize": "Normalize" in kinds, "max_seq_length": max_length}


def fusion_options():
    """ONNX Runtime's BERT fusions except the attention and the residual add + LayerNorm: once the matrix products
    are int8, the fused Attention (QAttention) and SkipLayerNormalization kernels take most of the time on long texts;
    left as plain operators, reviews embed about 10% faster on 2 cores, while a short question takes about 0.2 ms
    longer and a question with its dozen candidate phrases about 3 ms."""
    from onnxruntime.transformers.fusion_options import FusionOptions

    options = FusionOptions("bert")
    options.enable_attention = False
    options.enable_skip_layer_norm = False
    return options


def export_settings(reduce_range: bool) -> dict[str, Any]:
    """What an export depends on besides the model: recipe, weights' range and library versions."""
    return {"recipe": RECIPE, "opset": OPSET, "reduce_range": reduce_range, **library_versions(LIBRARIES)}


def export_dir(model: str | Path, cache: Path, fingerprint: str, reduce_range: bool) -> Path:
    """``<cache>/<model name>-<key>``: the key hashes the model's fingerprint and the export settings."""
    return keyed_folder(cache, model, {"model": fingerprint, **export_settings(reduce_range)}, "encoder")


def is_complete(directory: Path) -> bool:
    """Whether every file that export.json lists is there with its recorded size (export.json is written last)."""
    return listed_files(directory, EXPORT_INFO) is not None


def _pooled_module(transformer, pooling: str, normalize: bool):
    """The transformer with the sentence-transformers pooling and normalisation on top, as one module to export."""
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            tokens = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            if pooling == "cls":
                vector = tokens[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
                vector = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(vector, p=2, dim=1) if normalize else vector

    return Pooled().eval()


def write_encoder_export(model: str | Path, directory: Path, reduce_range: bool | None = None) -> dict[str, Any]:
    """Export, fuse and int8-quantise the encoder into the empty ``directory``, with its tokenizer; export.json last."""
    import onnx
    import torch
    from transformers import AutoModel, AutoTokenizer

    reduce_range = not int8_dot_product() if reduce_range is None else reduce_range
    model_dir = model_files_dir(model)
    if model_dir is None:
        raise QAError(f"The encoder '{model}' is not on disk.", "pass a local model directory, or download it first.")
    layout = encoder_layout(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    with quiet_local_load(model_dir):
        transformer = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32)
    transformer.set_attn_implementation("eager")  # plain MatMul/Softmax, which ONNX Runtime runs well on a CPU
    names = [n for n in INPUT_NAMES if n in tokenizer.model_input_names]
    sample = tokenizer(["How is the battery?", "The battery lasts a week and the screen is sharp."], padding=True, return_tensors="pt")
    raw, fused, int8 = directory / "raw.onnx", directory / "fused.onnx", directory / INT8_FILE
    axes = {**{n: {0: "batch", 1: "sequence"} for n in names}, OUTPUT_NAME: {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message="Exporting aten::index")  # indices are never negative here
        torch.onnx.export(
            _pooled_module(transformer, layout["pooling"], layout["normalize"]),
            tuple(sample[n] for n in names),
            str(raw),
            input_names=names,
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    config = transformer.config
    if config.model_type in FUSABLE_MODEL_TYPES:
        from onnxruntime.transformers import optimizer

        optimizer.optimize_model(
            str(raw),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
            optimization_options=fusion_options(),
        ).save_model_to_file(str(fused))
    else:
        raw.rename(fused)
    onnx.checker.check_model(str(fused))
    quantize_int8(fused, int8, reduce_range)
    raw.unlink(missing_ok=True)
    fused.unlink()
    tokenizer.save_pretrained(directory)
    info = {
        "source": str(model),
        "model_fingerprint": model_fingerprint(model),
        "inputs": names,
        "layout": layout,
        "quantization": f"dynamic int8 (QInt8 weights{', 7-bit' if reduce_range else ''}, per output channel)",
        "export_settings": export_settings(reduce_range),
        "sizes": {f.name: f.stat().st_size for f in sorted(directory.iterdir()) if f.is_file()},
    }
    (directory / EXPORT_INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info


def cached_encoder_export(model: str | Path, cache: str | Path) -> Path:
    """The directory of ``model``'s int8 export under ``cache``, built there first when missing or incomplete."""
    cache = Path(cache).expanduser()
    reduce_range = not int8_dot_product()
    fingerprint = model_fingerprint(model)
    if fingerprint is None:
        raise QAError(f"The files of the encoder '{model}' are not on disk.", "pass a local model directory, or download it first.")
    target = export_dir(model, cache, fingerprint, reduce_range)
    if is_complete(target):
        mark_used(target)
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with taking_turns(f"{target}.lock", f"Waiting for another process building the ONNX encoder {target}."):
        if not is_complete(target):
            logger.warning(
                "First use of the encoder %s with the onnx backend (it embeds documents and questions, and the answer selector "
                "weighs each answer by its closeness in meaning to the question): building its int8 ONNX export in %s, once per "
                "model version.",
                model,
                cache,
            )
            with built_folder(target, existing="replace", complete=is_complete) as staging:
                write_encoder_export(model, staging, reduce_range)
    prune_keyed_folders(target, EXPORTS_PER_MODEL, EXPORT_INFO)
    return target


class OnnxSentenceEncoder:
    """Unit-length sentence vectors from an export's int8 graph on ONNX Runtime (CPU).

    :param directory: the export (``cached_encoder_export``).
    :param threads: intra-op threads; None = the machine's physical cores.
    """

    backend = "onnx"
    precision = "int8"
    device = "cpu"

    def __init__(self, directory: Path, threads: int | None = None):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        info = json.loads((directory / EXPORT_INFO).read_text(encoding="utf-8"))
        self.max_length = info["layout"].get("max_seq_length")
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or physical_cores()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(directory / INT8_FILE), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.directory = directory

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """One float32 row per text; texts of similar length share a batch, padded to its own longest, of at most
        ``batch_size`` texts and ``TOKENS_PER_BATCH`` tokens padding included."""
        texts = [str(t).strip() for t in texts]  # as sentence-transformers tokenises
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length)
        lengths = np.array([len(ids) for ids in encoded["input_ids"]])
        rows: list[np.ndarray] = [np.empty(0)] * len(texts)
        for chosen in token_batches(lengths, batch_size):
            padded = self.tokenizer.pad({name: [encoded[name][i] for i in chosen] for name in self.input_names}, return_tensors="np")
            feeds = {name: padded[name].astype(np.int64) for name in self.input_names}
            for i, vector in zip(chosen, self.session.run([OUTPUT_NAME], feeds)[0]):
                rows[i] = vector
        return np.stack(rows).astype(np.float32, copy=False)


def token_batches(lengths: np.ndarray, batch_size: int) -> list[list[int]]:
    """Indexes of texts, longest first, in batches of at most ``batch_size`` texts whose padded size (texts times
    the longest's tokens) stays within ``TOKENS_PER_BATCH``."""
    batches: list[list[int]] = []
    for i in np.argsort(-lengths, kind="stable").tolist():
        if not batches or len(batches[-1]) == batch_size or (len(batches[-1]) + 1) * lengths[batches[-1][0]] > TOKENS_PER_BATCH:
            batches.append([])
        batches[-1].append(i)
    return batches


def load_onnx_encoder(model: str | Path, cache: str | Path, threads: int | None = None) -> OnnxSentenceEncoder:
    """The encoder's int8 export under ``cache`` (built on first use), loaded; rebuilt once when it does not load."""
    directory = cached_encoder_export(model, cache)
    try:
        return OnnxSentenceEncoder(directory, threads)
    except Exception as error:  # noqa: BLE001 - a damaged file of the right size: built again
        if interrupted(error):
            raise KeyboardInterrupt from error
        logger.warning(
            "The cached ONNX encoder %s does not load (%s): rebuilding it.", directory, str(error).splitlines()[0] if str(error) else error
        )
        (directory / EXPORT_INFO).unlink(missing_ok=True)
        return OnnxSentenceEncoder(cached_encoder_export(model, cache), threads)
