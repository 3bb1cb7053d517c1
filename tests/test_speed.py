"""The fast paths return what the reference paths return, on small corpora; speed itself is `qa-system bench`.

bm25s against Haystack's in-memory BM25 (same scoring function), pre-filtered FAISS against
Haystack's in-memory embedding retriever, the ONNX reader against the PyTorch reader (fp32 exactly,
int8 approximately), and the bench command end to end on a tiny corpus with tiny models.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever

from helpers.models import LONG, tiny_model_dir
from helpers.subjqa import REVIEWS, SPLIT_ROWS, write_subjqa
from qa_system.bench.corpus import SYNTHETIC_PRODUCT_SIZE, synthetic_reviews
from qa_system.bench.retrieval import K1, haystack_store, same_scoring_bm25
from qa_system.cli import main
from qa_system.errors import QAError
from qa_system.reading.onnx import (
    FP32_FILE,
    INT8_FILE,
    check_export,
    cpuinfo_field,
    export_onnx,
    has_full_range_weights,
    int8_dot_product,
    length_buckets,
)
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.windows import encode_windows
from qa_system.retrieval import FAISSFilteredEmbeddingRetriever, make_filters
from qa_system.stores import new_faiss_store


@pytest.fixture(scope="module")
def reviews() -> list[Document]:
    """The fixture reviews plus 300 synthetic ones made of their sentences (many exact score ties)."""
    real = [Document(content=text, meta={"item_id": item, "review_id": rid}) for rid, (item, text) in REVIEWS.items()]
    return real + synthetic_reviews(real, 300, seed=1)


def test_synthetic_reviews_are_deterministic_and_grouped_in_products(reviews):
    again = synthetic_reviews(reviews[:6], 300, seed=1)
    assert [d.id for d in again] == [d.id for d in reviews[6:]]
    assert [d.id for d in synthetic_reviews(reviews[:6], 300, seed=2)] != [d.id for d in again]
    assert len({d.id for d in again}) == 300
    products = {}
    for document in again:
        products[document.meta["item_id"]] = products.get(document.meta["item_id"], 0) + 1
    assert max(products.values()) == SYNTHETIC_PRODUCT_SIZE and len(products) == -(-300 // SYNTHETIC_PRODUCT_SIZE)


@pytest.mark.parametrize(
    "query", ["battery lasts", "the sound is tinny and quiet", "great for reading at night?", "bass bass bass", "zzz unknown"]
)
def test_bm25s_ranks_exactly_like_haystack_in_memory_bm25(reviews, query):
    store = haystack_store("speed-test")
    store.write_documents(reviews)
    haystack, fast = InMemoryBM25Retriever(store, top_k=10), same_scoring_bm25(store)
    for filters in (None, make_filters(item_id="KINDLE"), make_filters(item_id="SYN000003")):
        expected = haystack.run(query, filters=filters)["documents"]
        got = fast.run(query, filters=filters)["documents"]
        assert [d.id for d in got] == [d.id for d in expected], (query, filters)
        # Lucene's BM25 in bm25s; Haystack's BM25Plus(delta=0) is the same function times k1 + 1.
        assert [d.score * (K1 + 1) for d in got] == pytest.approx([d.score for d in expected], rel=1e-5)


def dense_retrievers(index_string: str) -> tuple[InMemoryEmbeddingRetriever, FAISSFilteredEmbeddingRetriever, np.ndarray]:
    """400 unit vectors of 25 products in Haystack's in-memory store and in a FAISS store of ``index_string``:
    the reference retriever, the pre-filtered FAISS one (top 5 each), and 10 queries."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(400, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    documents = [Document(content=f"review {i}", embedding=v.tolist(), meta={"item_id": f"P{i % 25}"}) for i, v in enumerate(vectors)]
    memory = haystack_store("speed-dense")
    memory.write_documents(documents)
    faiss_store = new_faiss_store(16, index_string)
    if "IVF" in index_string:
        faiss_store.index.train(vectors)
    faiss_store.write_documents(documents)
    reference, fast = InMemoryEmbeddingRetriever(memory, top_k=5), FAISSFilteredEmbeddingRetriever(faiss_store, top_k=5)
    return reference, fast, rng.normal(size=(10, 16))


@pytest.mark.parametrize("index_string", ["Flat", "HNSW16", "IVF4,Flat"])
def test_prefiltered_faiss_matches_the_in_memory_embedding_retriever(index_string):
    reference, fast, queries = dense_retrievers(index_string)
    for i, query in enumerate(queries / np.linalg.norm(queries, axis=1, keepdims=True)):
        checks = [make_filters(item_id=f"P{i}"), make_filters(item_id=[f"P{i}", f"P{i + 1}"])]
        for filters in checks + ([None] if index_string == "Flat" else []):  # approximate indexes differ unfiltered
            expected = reference.run(query.tolist(), filters=filters)["documents"]
            got = fast.run(query.tolist(), filters=filters)["documents"]
            assert [d.id for d in got] == [d.id for d in expected], (index_string, filters)
            assert [d.score for d in got] == pytest.approx([d.score for d in expected], abs=1e-5)


def test_a_broad_filter_goes_through_faiss_selector_search_with_the_same_answers_on_an_exact_index(monkeypatch):
    reference, fast, queries = dense_retrievers("Flat")
    monkeypatch.setattr("qa_system.retrieval.faiss_filtered.EXACT_SEARCH_LIMIT", 0)
    filters = make_filters(item_id=["P1", "P2"])
    assert [d.id for d in fast.run(queries[0].tolist(), filters=filters)["documents"]] == [
        d.id for d in reference.run(queries[0].tolist(), filters=filters)["documents"]
    ]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny model and its manual export in ``<model>/onnx``, 7-bit whatever this CPU has."""
    model = tiny_model_dir(tmp_path_factory.mktemp("tiny-onnx"))
    return model, export_onnx(model, reduce_range=True)


DOCUMENTS = [Document(content=LONG), Document(content="Sound is GREAT, battery is bad."), Document(content="the price is cheap")]
QUESTIONS = ["how is the battery?", "is it cheap?", "what about the sound and the screen?"]


def answers(reader: ExtractiveReader, question: str) -> list[tuple]:
    return [(a.data, a.document_offset.start if a.document_offset else None, a.score) for a in reader.run(question, DOCUMENTS)["answers"]]


def test_onnx_fp32_reader_gives_the_torch_readers_answers(exported):
    model, export = exported
    options = dict(max_seq_length=64, doc_stride=16, top_k=5)
    torch_reader = ExtractiveReader(model=str(model), backend="torch", **options)
    onnx_reader = ExtractiveReader(model=str(model), backend="onnx", onnx_model=export / FP32_FILE, **options)
    for question in QUESTIONS:
        expected, got = answers(torch_reader, question), answers(onnx_reader, question)
        assert [a[:2] for a in got] == [a[:2] for a in expected], question
        assert [a[2] for a in got] == pytest.approx([a[2] for a in expected], abs=1e-5)


def test_onnx_int8_reader_stays_close_to_fp32(exported):
    model, export = exported
    torch_reader = ExtractiveReader(model=str(model), backend="torch", max_seq_length=64, doc_stride=16)
    int8 = ExtractiveReader(
        model=str(model), backend="onnx", onnx_model=export, max_seq_length=64, doc_stride=16
    )  # a directory: its int8 model
    for reader in (torch_reader, int8):
        reader.warm_up()
    assert int8._onnx.path.name == INT8_FILE
    for question in QUESTIONS:
        encoding = encode_windows(torch_reader._tokenizer, [question] * 3, [d.content for d in DOCUMENTS], 64, 16, padding=True)
        mask = encoding["attention_mask"].astype(bool)
        reference, quantized = torch_reader._logits(encoding)[0][mask], int8._logits(encoding)[0][mask]
        assert np.abs(quantized - reference).max() < 0.1 * (reference.max() - reference.min())
        assert np.corrcoef(reference, quantized)[0, 1] > 0.95


def int8_weight_range(file: Path) -> tuple[int, int]:
    import onnx
    from onnx import numpy_helper

    weights = [numpy_helper.to_array(t) for t in onnx.load(str(file)).graph.initializer if t.data_type == onnx.TensorProto.INT8]
    return min(int(w.min()) for w in weights), max(int(w.max()) for w in weights)


def test_int8_export_uses_7_bit_weights_unless_asked_for_the_full_range(exported, tmp_path, monkeypatch):
    model, export = exported
    # Saturation-free on CPUs without VNNI: symmetric 7-bit weights in [-64, 63].
    low, high = int8_weight_range(export / INT8_FILE)
    assert -64 <= low and high <= 64 and high - low > 100
    assert "7-bit" in json.loads((export / "export.json").read_text())["quantization"]
    full = export_onnx(model, tmp_path / "full", reduce_range=False)
    low, high = int8_weight_range(full / INT8_FILE)
    assert low < -64 or high > 64
    # Unasked, the CPU decides: full-range with int8 dot-product instructions, 7-bit without.
    for flags, reduce_range in (([], True), (["avx512_vnni"], False)):
        monkeypatch.setattr("qa_system.reading.onnx.int8_dot_product", lambda flags=flags: flags)
        decided = export_onnx(model, tmp_path / f"decided-{reduce_range}")
        assert json.loads((decided / "export.json").read_text())["reduce_range"] is reduce_range


def test_a_full_range_export_is_flagged_on_a_cpu_without_vnni(exported, tmp_path, monkeypatch, caplog):
    model, export = exported
    full = export_onnx(model, tmp_path / "full", reduce_range=False)
    for flags, path, warned in (([], full, True), (["avx512_vnni"], full, False), ([], export, False)):
        monkeypatch.setattr("qa_system.reading.onnx.int8_dot_product", lambda flags=flags: flags)
        caplog.clear()
        assert check_export(model, path) == path / INT8_FILE
        assert ("full-range int8 weights" in caplog.text) == warned, (flags, path)
        assert not warned or "qa-system export-onnx" in caplog.text
    # Exports older than the "reduce_range" entry say it in words; no export.json says nothing.
    assert has_full_range_weights({"quantization": "dynamic int8 (QInt8 weights, per output channel)"})
    assert not has_full_range_weights({"quantization": "dynamic int8 (QInt8 weights, 7-bit, per output channel)"})
    assert not has_full_range_weights({})


def test_operator_profile_splits_the_onnx_readers_kernel_time_by_operator(exported):
    from types import SimpleNamespace

    from qa_system.bench.reader import operator_profile

    model, export = exported
    options = dict(max_seq_length=64, doc_stride=16)
    readers = {
        "torch": ExtractiveReader(model=str(model), backend="torch", **options),  # not ONNX: no operator rows
        "int8": ExtractiveReader(model=str(model), backend="onnx", onnx_model=export, **options),
    }
    for reader in readers.values():
        reader.warm_up()
    questions = [SimpleNamespace(question=q) for q in QUESTIONS]
    rows = operator_profile(readers, questions, [DOCUMENTS] * len(QUESTIONS), limit=2)
    assert {r["reader"] for r in rows} == {"int8"}
    shares = {r["operator"]: r["share"] for r in rows}
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)
    assert any(op.startswith(("DynamicQuantize", "MatMulInteger", "QAttention")) for op in shares), shares
    assert all(r["ms_per_question"] > 0 for r in rows)


def test_length_buckets_pad_each_batch_to_its_own_longest_window():
    lengths = np.array([384, 40, 384, 45, 200, 384, 70])
    buckets = length_buckets(lengths, batch_size=2)
    assert sorted(np.concatenate(buckets).tolist()) == list(range(len(lengths)))
    assert all(len(b) <= 2 for b in buckets)
    assert all(lengths[b].max() - lengths[b].min() < 32 for b in buckets)


def test_a_manual_export_that_is_missing_or_stale_is_an_error(exported, tmp_path):
    """A manual export (--reader-onnx-model) was asked for: its problems are errors, not a silent fallback."""
    model, _ = exported
    bare = Path(shutil.copytree(model, tmp_path / "bare", ignore=shutil.ignore_patterns("onnx")))
    with pytest.raises(QAError, match="no ONNX export .* export-onnx --model"):
        ExtractiveReader(model=str(bare), backend="onnx", onnx_model=bare / "onnx").warm_up()
    retrained = Path(shutil.copytree(model, tmp_path / "retrained"))
    (retrained / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(QAError, match="made from another version of the reader model"):
        ExtractiveReader(model=str(retrained), backend="onnx", onnx_model=retrained / "onnx").warm_up()
    with pytest.raises(QAError, match="Unknown reader backend"):
        ExtractiveReader(model=str(model), backend="tensorrt")


def test_extractive_pipeline_runs_the_onnx_reader_from_the_settings(exported, settings):
    from qa_system.ingestion.indexing import build_index
    from qa_system.pipelines import build_qa_pipeline

    model, _ = exported
    settings = settings.with_(reader_model=str(model))
    index = build_index(settings, "electronics", embed=False, progress=False)
    results = {}
    for backend in ("torch", "onnx"):
        pipeline = build_qa_pipeline("bm25", settings.with_(reader_backend=backend), index=index)
        assert pipeline.pipeline.get_component("reader").backend == backend
        result = pipeline.run("How is the sound?", item_id="KINDLE", top_k=3)
        assert result["reader_backend"] == {"torch": "torch", "onnx": "onnx int8"}[backend]
        results[backend] = [(a.data, a.document.id if a.document else None) for a in result["answers"]]
    assert results["onnx"][0] == results["torch"][0]  # int8: the best answer is the same


def tiny_encoder(directory: Path) -> Path:
    """A sentence-transformers model around a tiny random BERT (the bench only needs vectors)."""
    from sentence_transformers import SentenceTransformer, models

    tiny_model_dir(directory / "bert", question_answering=False)
    word = models.Transformer(str(directory / "bert"))
    SentenceTransformer(modules=[word, models.Pooling(word.get_embedding_dimension())]).save(str(directory / "encoder"))
    return directory / "encoder"


def test_bench_command_writes_its_report(exported, tiny_subjqa, tmp_path, capsys):
    model, _ = exported
    encoder = tiny_encoder(tmp_path / "encoder")
    out = tmp_path / "bench"
    code = main(
        [
            "bench",
            "--data-dir",
            str(tiny_subjqa),
            "--home",
            str(tmp_path / "home"),
            "--reader-model",
            str(model),
            "--embedding-model",
            str(encoder),
            "--sizes",
            "8",
            "80",
            "--queries",
            "3",
            "--budget",
            "0.5",
            "--skip-rag",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    for name in ("report.json", "report.md", "report.csv", "latency_vs_corpus_size.png", "reader.png"):
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert {row["corpus"] for row in report["retrieval"]} == {8, 80}
    same_scoring = [row for row in report["retrieval"] if row["system"] == "bm25s, same scoring"]
    assert same_scoring and all(row["same_top10"] == 1.0 for row in same_scoring)
    assert {row["reader"] for row in report["reader"]} >= {"ONNX int8", "torch fp32", "Haystack TransformersExtractiveReader"}
    assert {row["stage"] for row in report["reader_profile"]} == {"tokenisation", "model", "post-processing (span search)"}
    assert {row["reader"] for row in report["reader_operators"]} == {"ONNX fp32", "ONNX int8"}
    # Ways of sharing the cores among questions, on the same windows: batching changes nothing in fp32, moves int8 logits.
    scheduling = {(row["reader"], row["schedule"].split(",")[0]): row for row in report["reader_scheduling"]}
    assert {"one call per question", "4 questions per call", "8 questions per call"} <= {schedule for _, schedule in scheduling}
    assert scheduling["ONNX fp32", "8 questions per call"]["max_logit_change"] < 1e-4
    assert all(row["questions_per_s"] > 0 and row["ratio_to_one_call_per_question"] > 0 for row in scheduling.values())
    assert all(
        row["ratio_to_one_call_per_question"] == 1 and row["max_logit_change"] == 0
        for (_, s), row in scheduling.items()
        if s == "one call per question"
    )
    assert report["machine"]["physical_cores"] >= 1 and "target" in capsys.readouterr().out
    assert isinstance(report["machine"]["int8_dot_product"], list)
    assert "- int8 dot-product instructions: " in (out / "report.md").read_text()


def test_int8_dot_product_units_are_read_from_cpuinfo():
    zen3 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    sapphire_rapids = "model name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_vnni amx_bf16 amx_int8 avx_vnni\n"
    graviton3 = "processor\t: 0\nFeatures\t: fp asimd asimddp sve i8mm bf16\n"
    assert cpuinfo_field(zen3, "model name") == "AMD EPYC 7B13" and cpuinfo_field(zen3, "vendor_id") == ""
    assert int8_dot_product(zen3) == []
    assert int8_dot_product(sapphire_rapids) == ["avx512_vnni", "avx_vnni", "amx_int8"]
    assert int8_dot_product(graviton3) == ["asimddp", "i8mm"]
    assert int8_dot_product("") == []


def test_bench_refuses_a_corpus_too_small_for_its_questions(tiny_subjqa, tmp_path, capsys):
    code = main(["bench", "--data-dir", str(tiny_subjqa), "--home", str(tmp_path), "--sizes", "2", "--out", str(tmp_path / "b")])
    assert code == 2 and "must hold the" in capsys.readouterr().err


def test_bench_ingest_times_index_input_on_a_csv_of_reviews(tiny_subjqa, tmp_path, capsys):
    home, out = tmp_path / "home", tmp_path / "bench-ingest"
    assert (
        main(
            [
                "bench",
                "ingest",
                "--data-dir",
                str(tiny_subjqa),
                "--home",
                str(home),
                "--store",
                "memory",
                "--rows",
                "20",
                "--embed-rows",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (run,) = json.loads((out / "report.json").read_text())["metrics"]
    assert (run["run"], run["rows"], run["added"], run["embedded"]) == (
        "BM25 only",
        20,
        20,
        0,
    )  # the 6 real reviews, then 14 synthetic ones
    assert run["documents_per_s"] > 0 and run["peak_rss_mb"] > 0 and "documents_per_s" in capsys.readouterr().out
    assert (home / "indexes" / "memory").is_dir() and not list(
        (home / "indexes" / "memory").glob("bench-ingest-*")
    )  # its collection is deleted at the end


def test_a_domain_with_only_dev_and_test_is_benched_and_what_it_lacks_named(tiny_subjqa, tmp_path, capsys):
    """A domain of dev and test only goes into the benches' corpus with those splits (rather than failing with "No 'train' split for domain 'books'"), and the report names the missing split."""
    from qa_system.bench.corpus import bench_questions, real_reviews
    from qa_system.config import Settings

    write_subjqa(tiny_subjqa, {split: [dict(r, domain="books") for r in SPLIT_ROWS[split]] for split in ("dev", "test")}, domain="books")
    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home")
    reviews, left_out = real_reviews(settings, bench_questions(settings))
    assert sorted({d.meta["domain"] for d in reviews}) == ["books", "electronics"] and left_out == ["books: no train split"]
    out = tmp_path / "bench-ingest"
    assert (
        main(
            [
                "bench",
                "ingest",
                "--data-dir",
                str(tiny_subjqa),
                "--home",
                str(tmp_path / "home"),
                "--rows",
                "20",
                "--embed-rows",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "left out of the corpus: books: no train split" in capsys.readouterr().err
    assert "left out of the corpus: books: no train split" in (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["metrics"][0]["added"] == 20


def test_bench_ingest_reuses_its_csv_only_when_made_from_the_same_data_and_seed(tiny_subjqa, tmp_path, capsys):
    """`bench ingest` reuses its CSV for the same data and seed, and writes a new one for another seed (or --data-dir) rather than timing the old one again."""
    out = tmp_path / "bench-ingest"
    argv = [
        "bench",
        "ingest",
        "--data-dir",
        str(tiny_subjqa),
        "--home",
        str(tmp_path / "home"),
        "--rows",
        "20",
        "--embed-rows",
        "0",
        "--out",
        str(out),
    ]
    written = {}
    for seed in ("0", "0", "1"):
        assert main([*argv, "--seed", seed]) == 0
        written.setdefault(seed, []).append(((out / "reviews-20.csv").read_text(), "writing" in capsys.readouterr().err))
    assert [wrote for _, wrote in written["0"]] == [True, False]  # the same data and seed: reused
    assert written["1"][0][1] and written["1"][0][0] != written["0"][0][0]  # another seed: written anew


def test_bench_ingest_stopped_midway_leaves_no_collection_behind(tiny_subjqa, tmp_path):
    """A SIGTERM during `bench ingest` left its bench-ingest-* collections in the user's store."""
    from qa_system.bench.ingest import run_ingest_bench
    from qa_system.config import Settings
    from qa_system.ingestion import list_collections

    settings = Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home")

    def stopped(line: str) -> None:
        if line.startswith("  {"):  # the first run's row: its collection is saved
            assert [c.name for c in list_collections(settings)] == ["bench-ingest-20-bm25"]
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_ingest_bench(settings, tmp_path / "out", rows=20, embed_rows=0, progress=stopped)
    assert list_collections(settings) == []


@pytest.mark.parametrize("gone", ["bench-api", "bench-ingest"])
def test_the_benchmarks_are_one_family(gone, capsys):
    from qa_system.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["bench"]).func.__name__ == "cmd_bench"
    assert {parser.parse_args(["bench", name]).func.__name__ for name in ("page", "api", "ingest")} == {
        "cmd_bench_page",
        "cmd_bench_api",
        "cmd_bench_ingest",
    }
    with pytest.raises(SystemExit):
        parser.parse_args([gone])
    assert f"invalid choice: '{gone}'" in capsys.readouterr().err


def test_the_gpu_rows_script_runs_here_on_the_cpu(tiny_subjqa, tmp_path):
    """scripts/bench_gpu.sh, the one script a GPU machine runs, works end to end on the CPU: its index row's report
    (the generated reviews left out of what it keeps) and its log, which names the device and the rows."""
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "REVIEWS": "20", "OUT": str(out), "PYTHON": sys.executable, "QA_DATA_DIR": str(tiny_subjqa)}
    env["WHEELS"] = str(tmp_path / "no-wheels")  # this machine has its packages: wheels prepared for a GPU machine are not for it
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_gpu.sh"
    done = subprocess.run(["bash", str(script), "index"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = {run["run"]: run for run in json.loads((out / "index" / "report.json").read_text())["metrics"]}
    assert runs["with embeddings, float32"]["embedded_documents"] == 20 and runs["with embeddings, float32"]["embedding"] == "torch"
    assert sorted(path.name for path in (out / "index").iterdir()) == ["report.json", "report.md"]
    assert "device cpu, rows index" in (out / "run.log").read_text()

    wrong = subprocess.run(["bash", str(script), "api", "inference"], env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines() == [
        "error: unknown row 'inference'. Fix: name api, index or train (or none for all three)."
    ]
