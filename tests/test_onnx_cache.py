"""The reader's int8 ONNX export, built into the cache on first use: reuse, rebuilds, a damaged or
half-built export, concurrent and killed builds, the fallback to PyTorch, and the doors using it."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from haystack import Document

from helpers.models import LONG, tiny_model_dir
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.reading import MODEL_INFO_FILE, ExtractiveReader, onnx_cache
from qa_system.reading.onnx import INT8_FILE

DOCUMENTS = [Document(content=LONG), Document(content="Sound is GREAT, battery is bad."), Document(content="the price is cheap")]
QUESTIONS = ["how is the battery?", "is it cheap?", "what about the sound and the screen?"]
BUILD = "import sys\nfrom qa_system.reading.onnx_cache import cached_export\nprint(cached_export(sys.argv[1], sys.argv[2]))"
BUILDING = "building its int8 ONNX export"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-cached"))


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The models whose export this process writes (one entry per build); no failure remembered from other tests."""
    built, write = [], onnx_cache.write_export

    def counting(model, directory, *args, **kwargs):
        built.append(str(model))
        return write(model, directory, *args, **kwargs)

    monkeypatch.setattr(onnx_cache, "write_export", counting)
    monkeypatch.setattr(onnx_cache, "_failed", {})
    return built


def reader(model: Path, cache: Path, **kwargs) -> ExtractiveReader:
    return ExtractiveReader(model=str(model), onnx_cache=cache, max_seq_length=64, doc_stride=16, **kwargs)


def answers(reader: ExtractiveReader) -> list[list[tuple]]:
    return [
        [(a.data, a.document_offset.start if a.document_offset else None) for a in reader.run(q, DOCUMENTS)["answers"]] for q in QUESTIONS
    ]


def exports(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")) if cache.is_dir() else []


def leftovers(cache: Path) -> list[Path]:
    return [p for p in cache.glob(".*") if p.is_dir()]


def test_first_use_builds_the_export_and_later_readers_reuse_it(tiny, tmp_path, builds, caplog):
    cache = tmp_path / "cache"
    first = reader(tiny, cache)
    first.warm_up()
    assert first.active_backend == "onnx int8" and builds == [str(tiny)]
    assert caplog.text.count(BUILDING) == 1  # the one-line progress message
    [export] = exports(cache)
    assert first._onnx.path == export / INT8_FILE and not leftovers(cache)
    info = json.loads((export / "export.json").read_text())
    assert info["model_fingerprint"] == onnx_cache.model_fingerprint(tiny)
    assert info["export_settings"]["onnxruntime"] and info["export_settings"]["reduce_range"] == onnx_cache.default_reduce_range()
    built_at = {f.name: f.stat().st_mtime_ns for f in export.iterdir()}
    second = reader(tiny, cache)
    assert answers(second) == answers(first)
    assert builds == [str(tiny)] and {f.name: f.stat().st_mtime_ns for f in export.iterdir()} == built_at
    assert second._onnx.path == export / INT8_FILE


def test_a_changed_model_gets_a_new_export_and_a_stale_one_is_never_used(tiny, tmp_path, builds, monkeypatch):
    import torch
    from transformers import BertForQuestionAnswering

    model, cache = Path(shutil.copytree(tiny, tmp_path / "model")), tmp_path / "cache"
    first = onnx_cache.cached_export(model, cache)
    (model / MODEL_INFO_FILE).write_text(json.dumps({"no_answer_threshold": 1.25}))  # a re-tuned threshold
    retuned = reader(model, cache)
    retuned.warm_up()
    assert retuned._onnx.path.parent not in (first,) and retuned.threshold == 1.25 and len(builds) == 2
    retrained = BertForQuestionAnswering.from_pretrained(model)
    with torch.no_grad():
        retrained.qa_outputs.bias += 1.0
    retrained.save_pretrained(model)
    again = reader(model, cache)
    again.warm_up()
    assert again._onnx.path.parent not in (first, retuned._onnx.path.parent) and len(builds) == 3
    assert json.loads((again._onnx.path.parent / "export.json").read_text())["model_fingerprint"] == onnx_cache.model_fingerprint(model)
    (model / "README.md").write_text("A model card is not the model.")
    assert onnx_cache.cached_export(model, cache) == again._onnx.path.parent and len(builds) == 3
    # The CPU decides the int8 weights: full-range with int8 dot-product instructions, 7-bit without.
    built = {}
    for flags in ([], ["avx512_vnni"]):
        monkeypatch.setattr("qa_system.reading.onnx.int8_dot_product", lambda flags=flags: flags)
        built[bool(flags)] = onnx_cache.cached_export(model, cache)
    assert built[True] != built[False]
    assert [json.loads((built[vnni] / "export.json").read_text())["reduce_range"] for vnni in (False, True)] == [True, False]
    # Four exports of one model were built; the two most recently used are kept, the older ones removed.
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == sorted([built[True].name, built[False].name]) and not first.exists()


def test_the_torch_backend_builds_nothing(tiny, tmp_path, builds, monkeypatch):
    torch_reader = reader(tiny, tmp_path / "cache", backend="torch")
    torch_reader.warm_up()
    assert torch_reader.active_backend == "torch" and not builds and not (tmp_path / "cache").exists()
    monkeypatch.setenv("QA_READER_BACKEND", "torch")  # read by the settings, which a door passes in; never by the reader
    assert ExtractiveReader(model=str(tiny)).backend == "onnx"
    assert ExtractiveReader.from_settings(Settings.from_env(), model=str(tiny)).backend == "torch"


def test_a_damaged_or_half_written_export_is_found_and_rebuilt(tiny, tmp_path, builds, caplog):
    cache = tmp_path / "cache"
    export = onnx_cache.cached_export(tiny, cache)
    expected = answers(reader(tiny, cache))
    graph = export / INT8_FILE
    damages = {
        "truncated": lambda: graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2]),
        "same size, not a graph": lambda: graph.write_bytes(b"\0" * graph.stat().st_size),
        "no export.json": lambda: (export / "export.json").unlink(),
        "a file missing": lambda: (export / "tokenizer.json").unlink(),
    }
    for count, (damage, apply) in enumerate(damages.items(), 2):
        apply()
        repaired = reader(tiny, cache)
        assert answers(repaired) == expected, damage
        assert repaired.active_backend == "onnx int8" and len(builds) == count, damage
        assert exports(cache) == [export] and onnx_cache.is_complete(export) and not leftovers(cache), damage
    assert "does not load" in caplog.text  # the same-size damage is found by loading it


def test_a_stop_during_loading_is_no_damage_to_rebuild(tiny, tmp_path, builds, monkeypatch):
    """ONNX Runtime may catch the interrupt of a SIGTERM and fail with its own error: the export stays as it was."""
    from qa_system import stopping

    cache = tmp_path / "cache"
    export = onnx_cache.cached_export(tiny, cache)
    monkeypatch.setattr(stopping, "_asked", threading.Event())
    stopping.ask_to_stop()

    def failing(*args, **kwargs):
        raise RuntimeError("session creation failed")

    monkeypatch.setattr(onnx_cache, "open_export", failing)
    with pytest.raises(KeyboardInterrupt):
        onnx_cache.load_cached_reader(tiny, cache)
    assert len(builds) == 1 and onnx_cache.is_complete(export) and exports(cache) == [export]


def test_a_failed_export_falls_back_to_torch_with_a_warning(tiny, tmp_path, monkeypatch, caplog):
    attempts = []

    def failing(model, directory, *args, **kwargs):
        attempts.append(model)
        (directory / "model.onnx").write_bytes(b"half")
        raise RuntimeError("Exporting the operator 'aten::novel' to ONNX opset 17 is not supported.")

    monkeypatch.setattr(onnx_cache, "write_export", failing)
    monkeypatch.setattr(onnx_cache, "_failed", {})
    cache = tmp_path / "cache"
    fallback = reader(tiny, cache)
    assert answers(fallback) == answers(reader(tiny, cache, backend="torch"))
    assert fallback.active_backend == "torch"
    assert "Could not build the ONNX reader" in caplog.text and "aten::novel" in caplog.text and "PyTorch" in caplog.text
    assert not exports(cache) and not leftovers(cache)
    reader(tiny, cache).warm_up()  # this process does not try again
    assert len(attempts) == 1


def run_build(tiny: Path, cache: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILD, str(tiny), str(cache)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_first_uses_build_one_export(tiny, tmp_path):
    cache = tmp_path / "cache"
    processes = [run_build(tiny, cache) for _ in range(2)]
    outputs = [process.communicate(timeout=300) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    [export] = {out.strip() for out, _ in outputs}
    assert sum(BUILDING in err for _, err in outputs) == 1  # the other waited for it, then used it
    assert exports(cache) == [Path(export)] and onnx_cache.is_complete(Path(export)) and not leftovers(cache)


def test_a_build_killed_midway_leaves_nothing_in_place_and_its_leftovers_are_removed(tiny, tmp_path, builds):
    cache = tmp_path / "cache"
    process = run_build(tiny, cache)
    deadline = time.monotonic() + 120
    while not leftovers(cache) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.kill()  # kill -9 while it writes its temporary directory (holding the build lock)
    process.wait()
    assert leftovers(cache) and not exports(cache), "the build finished before it could be killed"
    export = onnx_cache.cached_export(tiny, cache)  # the dead process's lock does not block
    assert exports(cache) == [export] and onnx_cache.is_complete(export) and not leftovers(cache) and len(builds) == 1


def test_ask_on_a_fresh_home_answers_with_the_onnx_reader(settings, tiny, builds, capsys, caplog):
    argv = [
        "ask",
        "How is the sound?",
        "--item",
        "KINDLE",
        "--data-dir",
        str(settings.data_dir),
        "--home",
        str(settings.home),
        "--reader-model",
        str(tiny),
    ]
    assert main(argv) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert first_line.endswith(", onnx int8)") and builds == [str(tiny)] and caplog.text.count(BUILDING) == 1
    assert len(exports(settings.reader_onnx_cache)) == 1
    assert main(argv) == 0 and builds == [str(tiny)]  # the second run reuses it
    capsys.readouterr()
    assert main([*argv, "--reader-backend", "torch"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(", torch)")


def test_the_page_builds_the_export_before_its_first_answer(settings, tiny, builds):
    """What the page calls (with a progress callback) before building its pipelines; nothing for torch."""
    settings = settings.with_(reader_model=str(tiny))
    steps = []
    export = onnx_cache.prepare_reader(settings, lambda done, total: steps.append((done, total)))
    assert export is not None and exports(settings.reader_onnx_cache) == [export]
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert onnx_cache.prepare_reader(settings) == export and len(builds) == 1
    assert onnx_cache.prepare_reader(settings.with_(reader_backend="torch")) is None and len(builds) == 1


def test_the_onnx_reader_keeps_the_models_threshold_and_decides_like_torch(tiny, tmp_path):
    model, cache = Path(shutil.copytree(tiny, tmp_path / "model")), tmp_path / "cache"
    (model / MODEL_INFO_FILE).write_text(json.dumps({"no_answer_threshold": 0.02}))
    torch_reader, onnx_reader = reader(model, cache, backend="torch", top_k=5), reader(model, cache, top_k=5)
    for question in QUESTIONS:
        expected, got = torch_reader.predict(question, DOCUMENTS), onnx_reader.predict(question, DOCUMENTS)
        spread = max(s.logit for s in expected.spans) - min(s.logit for s in expected.spans)
        assert got.null_logit == pytest.approx(expected.null_logit, abs=0.1 * spread)
        assert got.best_gap == pytest.approx(expected.best_gap, abs=0.2 * spread)
    assert onnx_reader.threshold == torch_reader.threshold == 0.02
    for question in QUESTIONS:
        for a_reader in (torch_reader, onnx_reader):
            output, answered = a_reader.predict(question, DOCUMENTS), a_reader.run(question, DOCUMENTS)["answers"]
            no_answer = next(i for i, a in enumerate(answered) if a.data is None)
            # The no-answer sits below exactly the spans that beat it by the threshold, by the reader's own logits.
            assert answered[no_answer].meta["threshold"] == 0.02
            assert no_answer == sum(s.logit - output.null_logit >= 0.02 for s in output.spans[:5])


@pytest.mark.slow
def test_the_int8_reader_gives_the_torch_readers_answers_on_real_questions(real_data_dir, tmp_path):
    """The shipped reader on electronics dev, each question's own review: the same top answer up to quantisation."""
    from qa_system.evaluation.reader import gold_document
    from qa_system.reading import read_model_info
    from qa_system.sources import load_subjqa

    questions = load_subjqa("electronics", "dev", real_data_dir).questions[:120]
    torch_reader = ExtractiveReader(backend="torch")
    onnx_reader = ExtractiveReader(backend="onnx", onnx_cache=tmp_path / "cache")
    for a_reader in (torch_reader, onnx_reader):
        a_reader.warm_up()
    assert onnx_reader.active_backend == "onnx int8"
    tuned = read_model_info(torch_reader.model_name)["no_answer_threshold"]
    assert onnx_reader.threshold == torch_reader.threshold == tuned != 0
    same_top, same_decision = 0, 0
    for question in questions:
        documents = [gold_document(question)]
        top = [r.run(question.question, documents)["answers"][0] for r in (torch_reader, onnx_reader)]
        same_decision += (top[0].data is None) == (top[1].data is None)
        same_top += (top[0].data, top[0].document_offset and top[0].document_offset.start) == (
            top[1].data,
            top[1].document_offset and top[1].document_offset.start,
        )
    assert same_decision / len(questions) >= 0.9 and same_top / len(questions) >= 0.85, (same_decision, same_top, len(questions))
    print(
        f"int8 against torch on {len(questions)} electronics dev questions: same top answer {same_top}, same answer/no-answer decision {same_decision}"
    )


def test_evaluation_reads_with_the_onnx_reader_and_says_so(settings, tiny, tmp_path, capsys):
    common = ["--data-dir", str(settings.data_dir), "--home", str(settings.home), "--reader-model", str(tiny), "--split", "dev"]
    assert main(["eval", "reader", *common, "--out", str(tmp_path / "reader")]) == 0
    assert f"Read with: {tiny.name} onnx int8" in capsys.readouterr().out
    assert json.loads((tmp_path / "reader" / "report.json").read_text())["reader_backends"] == {tiny.name: "onnx int8"}
    assert main(["eval", "pipeline", *common, "--reader-backend", "torch", "--out", str(tmp_path / "pipeline")]) == 0
    assert f"Read with: bm25+{tiny.name} torch" in capsys.readouterr().out


def test_export_onnx_prebuilds_the_cached_export_or_writes_a_copy_elsewhere(settings, tiny, tmp_path, builds, capsys):
    common = ["--home", str(settings.home), "--reader-model", str(tiny)]
    assert main(["export-onnx", *common]) == 0
    [export] = exports(settings.reader_onnx_cache)
    assert "The reader uses it by default." in capsys.readouterr().out and builds == [str(tiny)]
    reader(tiny, settings.reader_onnx_cache).warm_up()
    assert builds == [str(tiny)]  # the first answer finds it built
    assert main(["export-onnx", *common, "--full-range"]) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith("error: The cached export's int8 weights are chosen by this CPU")
        and "--output DIR" in error
        and len(error.strip().splitlines()) == 1
    )
    assert main(["export-onnx", *common, "--output", str(tmp_path / "copy"), "--seven-bit"]) == 0
    assert f"--reader-onnx-model {tmp_path / 'copy'}" in capsys.readouterr().out
    assert json.loads((tmp_path / "copy" / "export.json").read_text())["reduce_range"] is True


def test_pruning_removes_only_exports_it_wrote_never_a_folder_that_shares_their_name(tmp_path):
    """A cache folder named in a pipeline YAML may hold the user's folders: one named like an export, without
    an export's listing of its own files, is never removed, while the oldest real export is."""

    def export(name: str, age: float) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.onnx").write_text("m", encoding="utf-8")
        (folder / "export.json").write_text('{"sizes": {"model.onnx": 1}}', encoding="utf-8")
        os.utime(folder, (time.time() - age,) * 2)
        return folder

    users = tmp_path / "reader-minilm-subjqa-0123456789abcdef"
    users.mkdir()
    (users / "thesis.txt").write_text("years of work", encoding="utf-8")
    os.utime(users, (time.time() - 5000,) * 2)
    oldest, newer = export("reader-minilm-subjqa-aaaaaaaaaaaaaaaa", 2000), export("reader-minilm-subjqa-cccccccccccccccc", 500)
    current = tmp_path / "reader-minilm-subjqa-bbbbbbbbbbbbbbbb"
    current.mkdir()
    onnx_cache._remove_older_exports(current)
    assert (users / "thesis.txt").read_text(encoding="utf-8") == "years of work"
    assert not oldest.exists() and newer.exists() and current.exists()
