"""Options every command shares, and the Settings they make."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from qa_system.config import EMBEDDING_BACKENDS, GENERATORS, READER_BACKENDS, STORE_BACKENDS, Settings
from qa_system.errors import QAError, check_count, check_number

DEFAULT_ITEM = "B0074BW614"
# Most reviews a command retrieves per question: FAISS sets aside room for k results per question up
# front, and --top-k 2147483648 took 16 GB before the kernel killed the process (the page and API allow 50).
MAX_RETRIEVED = 1000


@dataclass(frozen=True)
class Options:
    """The parent parsers a command's parser inherits from."""

    common: argparse.ArgumentParser
    generation: argparse.ArgumentParser

    @staticmethod
    def domain(p: argparse.ArgumentParser) -> None:
        """Add ``--domain`` (repeatable) to a command's parser."""
        p.add_argument("--domain", action="append", help="SubjQA domain, repeatable (default electronics)")

    @staticmethod
    def collection(p: argparse.ArgumentParser) -> None:
        """Add ``--collection`` to a command's parser."""
        p.add_argument("--collection", help="a collection that `qa-system collections` lists (instead of --domain)")


def open_index_for(args: argparse.Namespace, settings: Settings, embeddings: bool):
    """The index a command works on: ``--collection``, else the SubjQA ``--domain`` index (built on first use)."""
    if getattr(args, "collection", None) is not None:
        from qa_system.ingestion import open_collection
        from qa_system.ingestion.freshness import source_notice
        from qa_system.safe_text import terminal_text

        if args.domain:
            raise QAError("--domain and --collection both name what to work on.", "pass one of them.")
        index = open_collection(settings, args.collection, embeddings=embeddings)
        if notice := source_notice(index.name, index.backend, index.manifest, settings.server_url):
            print(terminal_text(f"note: {notice}", newlines=False), file=sys.stderr)
        return index
    from qa_system.ingestion.indexing import open_or_build_index

    return open_or_build_index(settings, args.domain, embeddings=embeddings)


def count(flag: str, minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """argparse type of a count flag: the library's check, whose QAError ``main`` prints as one line (exit 2).

    A QAError is not one of the errors argparse turns into its own usage message, so it reaches ``main``.
    """
    return lambda text: check_count(text, flag, minimum, maximum)


def depth(flag: str) -> Callable[[str], int]:
    """argparse type of a retrieval depth (reviews per question): a count up to ``MAX_RETRIEVED``."""
    return count(flag, 1, MAX_RETRIEVED)


def number(flag: str, minimum: float | None = None, above: bool = False, maximum: float | None = None) -> Callable[[str], float]:
    """argparse type of a threshold, rate or share: a finite number (no nan / inf), checked by the library."""
    return lambda text: check_number(text, flag, minimum, above=above, maximum=maximum)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The ``Settings`` of a command: its flags over the ``QA_*`` environment variables over the defaults.
    A GPU asked for (``--device cuda``, ``QA_DEVICE=cuda:1``) that the machine lacks is a QAError here, before any work."""
    settings = _settings_from_args(args)
    if settings.device not in ("auto", "cpu"):
        from qa_system.devices import resolve_device

        resolve_device(settings.device)
    return settings


def _settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings.from_env(
        data_dir=args.data_dir,
        home=args.home,
        store=args.store,
        es_url=args.es_url,
        opensearch_url=args.opensearch_url,
        embedding_model=args.embedding_model,
        query_embedding_model=args.query_embedding_model,
        embedding_backend=getattr(args, "embedding_backend", None),
        device=getattr(args, "device", None),
        reader_model=args.reader_model,
        reader_backend=args.reader_backend,
        reader_onnx_model=args.reader_onnx_model,
        # Generation flags exist only on the commands that generate (ask, eval rag).
        generator=getattr(args, "generator", None),
        generator_model=getattr(args, "model", None),
        generator_base_url=getattr(args, "base_url", None),
        max_new_tokens=getattr(args, "max_new_tokens", None),
        temperature=getattr(args, "temperature", None),
        num_beams=getattr(args, "num_beams", None),
    )


def common_options() -> argparse.ArgumentParser:
    """The parent parser of the settings every command takes (data, home, store, encoders, reader)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("settings (also QA_* environment variables)")
    group.add_argument("--data-dir", help="SubjQA root holding <domain>/splits/<split>.csv (default ../shared/data/subjqa)")
    group.add_argument("--home", help="where indexes and caches live (QA_HOME, default ~/.cache/qa_system)")
    group.add_argument("--store", choices=STORE_BACKENDS, help="document store backend (default memory)")
    group.add_argument("--es-url", help="Elasticsearch url (QA_ES_URL, default http://localhost:9200)")
    group.add_argument("--opensearch-url", help="OpenSearch url (QA_OPENSEARCH_URL, default http://localhost:9200)")
    group.add_argument("--embedding-model", help="passage encoder: hub id or local path (default all-MiniLM-L6-v2 from its PyPI wheel)")
    group.add_argument("--query-embedding-model", help="separate question encoder for DPR-style models")
    group.add_argument(
        "--embedding-backend",
        choices=EMBEDDING_BACKENDS,
        help="onnx (default): the encoder's int8 ONNX export on the CPU, built into the cache on first use; torch: sentence-transformers float32 (QA_EMBEDDING_BACKEND)",
    )
    group.add_argument(
        "--device", help="where the models run: auto (default: a CUDA GPU when there is one, else the CPU), cpu, cuda, cuda:N (QA_DEVICE)"
    )
    group.add_argument("--reader-model", help="extractive QA model: hub id or local path (default models/reader-minilm-subjqa)")
    group.add_argument(
        "--reader-backend",
        choices=READER_BACKENDS,
        help="onnx (default): ONNX Runtime int8, exported into the cache on first use; torch: PyTorch fp32 (QA_READER_BACKEND)",
    )
    group.add_argument(
        "--reader-onnx-model",
        help="a manual export to use (`export-onnx --output DIR`: its .onnx file or directory) instead of the cached one",
    )
    return common


def generator_options() -> argparse.ArgumentParser:
    """The parent parser of the generation settings (the commands that generate: ``ask``, ``eval rag``, ``api``)."""
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("generation (RAG; also QA_* environment variables)")
    group.add_argument(
        "--generator", choices=GENERATORS, help="smollm2 (default, offline), hf (local model), openai (any OpenAI-compatible server)"
    )
    group.add_argument("--model", help="hf: model id or path (causal chat LM or seq2seq); openai: the served model name")
    group.add_argument("--base-url", help="openai: the server's url, e.g. http://127.0.0.1:8080/v1")
    group.add_argument("--max-new-tokens", type=count("--max-new-tokens"), help="longest answer in tokens (default 64)")
    group.add_argument("--temperature", type=number("--temperature", 0), help="0 = greedy (default); above 0 samples")
    group.add_argument("--num-beams", type=count("--num-beams"), help="beam search width, local generators (default 1)")
    return options
