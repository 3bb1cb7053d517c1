"""`qa-system export-pipeline`: the YAML it writes loads with plain `Pipeline.loads` and answers, and a real
Hayhooks server on loopback deploys it and answers over its own API."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError

from helpers.search_server import free_port
from helpers.selector import synthetic_records
from helpers.subjqa import SPLIT_ROWS, write_subjqa
from qa_system.cli import main
from qa_system.config import REPO_ROOT
from qa_system.ingestion.indexing import build_index
from qa_system.model_files import model_fingerprint
from qa_system.reading.selection import SELECTOR_FILE

SHIPPED_READER = REPO_ROOT / "models" / "reader-minilm-subjqa"
QUESTION = "Is it good for reading?"
KINDLE = {"field": "meta.item_id", "operator": "==", "value": "KINDLE"}


@pytest.fixture(scope="module")
def selector_for_the_shipped_reader(tmp_path_factory) -> Path:
    """An answer selector (fitted on synthetic readings) that says it was trained for the shipped reader."""
    from qa_system.training.selector import fit_selector, selector_frames

    folder = tmp_path_factory.mktemp("selector")
    questions, spans = selector_frames(synthetic_records(240))
    fit_selector(questions, spans, folder, {"reader_fingerprint": model_fingerprint(SHIPPED_READER)}, folds=3)
    assert json.loads((folder / SELECTOR_FILE).read_text())["reader_fingerprint"]
    return folder


def export(settings, tmp_path: Path, *flags: str) -> Path:
    """Run `qa-system export-pipeline` on the tiny SubjQA index; the written file's path."""
    build_index(settings, "electronics", embed=False, progress=False)
    output = tmp_path / "exported" / "extractive.yml"
    code = main(
        [
            "export-pipeline",
            "extractive",
            "--output",
            str(output),
            "--data-dir",
            str(settings.data_dir),
            "--home",
            str(settings.home),
            "--store",
            "memory",
            "--reader-model",
            str(SHIPPED_READER),
            "--reader-backend",
            "torch",
            *flags,
        ]
    )
    assert code == 0
    return output


@pytest.fixture
def exported(settings, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("QA_SELECTOR_MODEL", "none")
    return export(settings, tmp_path)


def test_the_exported_yaml_loads_with_pipeline_loads_and_answers(exported):
    text = exported.read_text(encoding="utf-8")
    assert "${" not in text and "$$" not in text  # no placeholder left: every setting resolved
    pipeline = Pipeline.loads(text, allowed_modules=["qa_system"])  # plain Haystack, nothing of qa_system.pipelines' loader
    assert set(pipeline.graph.nodes) == {"sparse_retriever", "reader"}  # no selector fits this reader: left out, as ask does
    result = pipeline.run(
        {"sparse_retriever": {"query": QUESTION, "filters": KINDLE}, "reader": {"query": QUESTION}},
        include_outputs_from={"sparse_retriever"},
    )
    documents = result["sparse_retriever"]["documents"]
    assert len(documents) == 3 and {d.meta["item_id"] for d in documents} == {"KINDLE"}  # --top-k 3, the filter applied
    assert documents[0].meta["review_id"] == "r-kindle-1"
    best = result["reader"]["answers"][0]
    assert best.document.meta["review_id"] == "r-kindle-1"
    assert best.document.content[best.document_offset.start : best.document_offset.end] == best.data
    assert "reading" in best.data or "screen" in best.data


def test_use_runtime_gives_a_loaded_pipeline_this_machines_caches_and_backends(exported, settings):
    """Loaded with plain Pipeline.loads, the reader built its ONNX export under ~/.cache/qa_system, not QA_HOME."""
    from qa_system.config import DEFAULT_HOME
    from qa_system.pipelines import use_runtime

    pipeline = Pipeline.loads(exported.read_text(encoding="utf-8"), allowed_modules=["qa_system"])
    reader = pipeline.get_component("reader")
    assert reader.onnx_cache is None  # the component's default: DEFAULT_HOME's cache
    runtime = settings.model_copy(update={"reader_backend": "torch"})
    assert use_runtime(pipeline, runtime) is pipeline
    assert Path(reader.onnx_cache) == settings.home / "models" / "reader-onnx" != DEFAULT_HOME / "models" / "reader-onnx"
    assert reader.backend == "torch"


def test_hayhooks_sees_inputs_and_outputs_and_the_selector_stays_when_it_fits(
    settings, tmp_path, monkeypatch, selector_for_the_shipped_reader
):
    monkeypatch.setenv("QA_SELECTOR_MODEL", str(selector_for_the_shipped_reader))
    definition = yaml.safe_load(export(settings, tmp_path, "--answers", "2").read_text(encoding="utf-8"))
    assert definition["inputs"] == {
        "query": ["sparse_retriever.query", "reader.query", "selector.query"],
        "filters": ["sparse_retriever.filters"],
    }
    assert definition["outputs"] == {"documents": "sparse_retriever.documents", "answers": "selector.answers"}
    assert definition["components"]["selector"]["init_parameters"]["top_k"] == 2
    pipeline = Pipeline.from_dict(definition, allowed_modules=["qa_system"])
    answers = pipeline.run(
        {"sparse_retriever": {"query": QUESTION, "filters": KINDLE}, "reader": {"query": QUESTION}, "selector": {"query": QUESTION}}
    )["selector"]["answers"]
    assert answers and all(0 <= a.meta["probability"] <= 1 for a in answers)


def test_export_refuses_a_directory_as_output_in_one_line(settings, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QA_SELECTOR_MODEL", "none")
    build_index(settings, "electronics", embed=False, progress=False)
    code = main(
        ["export-pipeline", "extractive", "--output", str(tmp_path), "--data-dir", str(settings.data_dir), "--home", str(settings.home)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a directory" in err and "Fix: name a file" in err and err.count("\n") == 1


def _request(url: str, body: dict | None = None, timeout: float = 10) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _wait_until_up(server: subprocess.Popen, url: str, log: Path) -> None:
    """Until the server answers, or its process exits (then its log says why): a slow start is still a start."""
    while True:
        assert server.poll() is None, f"hayhooks exited: {log.read_text()[-2000:]}"
        try:
            if _request(f"{url}/status", timeout=2)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)


def test_a_hayhooks_server_deploys_the_exported_pipeline_and_answers_on_loopback(exported, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "hayhooks.log"
    env = {**os.environ, "HAYSTACK_DESERIALIZATION_ALLOWLIST": "qa_system", "PYTHONPATH": str(REPO_ROOT)}
    command = [
        sys.executable,
        "-c",
        "from hayhooks.cli import hayhooks_cli; hayhooks_cli()",
        "run",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--pipelines-dir",
        str(tmp_path / "served"),
        "--without-monitoring",
        "--without-tracing",
    ]
    (tmp_path / "served").mkdir()
    with log.open("w") as output:
        server = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_until_up(server, url, log)
        status, body = _request(
            f"{url}/deploy-yaml", {"name": "reviews", "source_code": exported.read_text(encoding="utf-8"), "save_file": False}, 120
        )
        assert status == 200, body
        status, body = _request(f"{url}/reviews/run", {"query": QUESTION, "filters": KINDLE}, 180)
        assert status == 200, body
        documents = body["result"]["sparse_retriever"]["documents"]
        assert [d["meta"]["item_id"] for d in documents] == ["KINDLE"] * 3 and documents[0]["meta"]["review_id"] == "r-kindle-1"
        best = body["result"]["reader"]["answers"][0]
        assert best["document"]["meta"]["review_id"] == "r-kindle-1"
        offset = best["document_offset"]
        assert best["document"]["content"][offset["start"] : offset["end"]] == best["data"]
        assert _request(f"{url}/status")[1]["pipelines"] == ["reviews"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def documented_commands(page: str, heading: str) -> list[str]:
    """The shell commands of the section ``heading`` of a documentation page (its ```bash blocks), one per line, comments and continuations joined."""
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                commands.append(line.split("   #", 1)[0].strip())
    return commands


READING = "It is very good for reading: I read books on it every night."


def test_the_documented_hayhooks_commands_answer_through_the_selector(settings, tmp_path):
    """The docs' export, `hayhooks run`, `deploy-yaml` and curl as written (on a free port): the selector's numpy
    `chosen` made every answer a 500 there."""
    export_line, run_line, deploy_line, curl_line = documented_commands("docs/pipelines-and-stores.md", "Haystack YAML and Hayhooks")
    assert export_line.startswith("qa-system export-pipeline ") and run_line.endswith(" &") and curl_line.startswith("curl ")
    # The tiny corpus, its e-reader under the product id the docs ask about, with a review that answers its question.
    answering = {"review": f"{READING} ANSWERNOTFOUND", "human_ans_spans": READING[:27], "human_ans_indices": "(0, 27)"}
    splits = {
        split: [
            {**row, "item_id": row["item_id"].replace("KINDLE", "B0074BW614"), **(answering if row["review_id"] == "r-kindle-1" else {})}
            for row in rows
        ]
        for split, rows in SPLIT_ROWS.items()
    }
    settings = settings.model_copy(update={"data_dir": write_subjqa(tmp_path / "subjqa-readme", splits)})
    build_index(settings, "electronics", embed=False, progress=False)
    port = str(free_port())
    bin_dir = str(Path(sys.executable).parent)  # the venv's qa-system and hayhooks
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT),
        "HAYHOOKS_PORT": port,
        "QA_DATA_DIR": str(settings.data_dir),
        "QA_HOME": str(settings.home),
        "QA_READER_BACKEND": "torch",
    }
    env.pop("QA_SELECTOR_MODEL", None)

    def shell(line: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", line.replace("1416", port)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )

    exported = shell(export_line, 300)
    assert exported.returncode == 0, exported.stderr
    assert (
        "selector" in yaml.safe_load((tmp_path / "served" / "reviews.yml").read_text(encoding="utf-8"))["components"]
    )  # the shipped selector fits
    log = tmp_path / "hayhooks.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            ["bash", "-c", run_line.removesuffix("&").replace("1416", port)], cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        _wait_until_up(server, f"http://127.0.0.1:{port}", log)
        deployed = shell(deploy_line, 300)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        answered = shell(curl_line.replace("curl -s ", "curl -s --max-time 300 "), 330)
        assert answered.stdout.startswith("{"), answered.stdout[-2000:]
        body = json.loads(answered.stdout)
        answers = body["result"]["selector"]["answers"]
        assert [a["meta"]["chosen"] for a in answers].count(True) == 1 and all(0 <= a["meta"]["probability"] <= 1 for a in answers)
        assert answers[0]["meta"]["chosen"] and answers[0]["data"].startswith(
            "It is very good for reading"
        )  # the selector answers, with the whole phrase
        assert answers[0]["document"]["meta"]["item_id"] == "B0074BW614"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_hybrid_retrieval_pipeline_exports_with_the_saved_embeddings_and_ranks_as_search_does(settings, tmp_path):
    from qa_system.pipelines import build_retrieval_pipeline

    build_index(settings, "electronics", embed=True, progress=False)
    output = tmp_path / "hybrid.yml"
    assert (
        main(
            [
                "export-pipeline",
                "retrieval",
                "--retriever",
                "hybrid",
                "--top-k",
                "3",
                "--output",
                str(output),
                "--data-dir",
                str(settings.data_dir),
                "--home",
                str(settings.home),
                "--store",
                "memory",
            ]
        )
        == 0
    )
    definition = yaml.safe_load(output.read_text(encoding="utf-8"))
    assert definition["inputs"] == {
        "query": ["sparse_retriever.query", "query_embedder.text"],
        "filters": ["sparse_retriever.filters", "dense_retriever.filters"],
    }
    assert definition["outputs"] == {"documents": "fusion.documents"}
    pipeline = Pipeline.loads(output.read_text(encoding="utf-8"), allowed_modules=["qa_system"])
    question = "How is the bass?"
    exported = pipeline.run({"sparse_retriever": {"query": question}, "query_embedder": {"text": question}})["fusion"]["documents"]
    searched = build_retrieval_pipeline("hybrid", settings).run(question, top_k=3)["documents"]
    assert [d.id for d in exported] == [d.id for d in searched] and exported[0].meta["review_id"] == "r-phones-1"
    assert [d.score for d in exported] == pytest.approx([d.score for d in searched])


def test_a_cache_dir_named_in_the_yaml_keeps_everything_the_retriever_did_not_save(settings, tmp_path, monkeypatch):
    """The BM25 retriever's pruning kept the two newest folders of its cache_dir, whatever they were: a YAML naming a
    user's folder as cache_dir deleted all but two of its folders (and the hidden files of any 'writer' it took for dead)."""
    from qa_system.retrieval import bm25

    monkeypatch.setattr(bm25, "CACHED_INDEXES", 1)  # the retriever keeps only its newest index: nothing else may go
    build_index(settings, "electronics", embed=False, progress=False)
    output = tmp_path / "bm25.yml"
    assert (
        main(
            [
                "export-pipeline",
                "retrieval",
                "--retriever",
                "bm25",
                "--top-k",
                "3",
                "--output",
                str(output),
                "--data-dir",
                str(settings.data_dir),
                "--home",
                str(settings.home),
                "--store",
                "memory",
            ]
        )
        == 0
    )
    definition = yaml.safe_load(output.read_text(encoding="utf-8"))
    mine = tmp_path / "my-files"
    definition["components"]["sparse_retriever"]["init_parameters"]["cache_dir"] = str(mine)
    kept = {
        "photos/cat.jpg": "jpeg",
        "thesis/chapter1.tex": "tex",
        "taxes/2023.csv": "csv",
        "notes.txt": "notes",
        "0123456789abcdef0123456789abcdef/params.index.json": "mine, named like a digest",  # an md5-named folder of the user's
        ".partial-20240101/draft.txt": "draft",
        ".notes~999999~backup": "a hidden file named like a dead writer's",
    }
    for name, text in kept.items():
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text(text, encoding="utf-8")
    hour_ago = time.time() - 7200
    for folder in mine.iterdir():
        os.utime(folder, (hour_ago, hour_ago))  # older than the retriever's own index, and than an hour

    pipeline = Pipeline.loads(yaml.safe_dump(definition), allowed_modules=["qa_system"])
    for question in ("How is the bass?", "Is it good for reading?", "Does the battery last?"):
        documents = pipeline.run({"sparse_retriever": {"query": question, "filters": KINDLE}})["sparse_retriever"]["documents"]
        assert documents and {d.meta["item_id"] for d in documents} == {"KINDLE"}
    assert {name: (mine / name).read_text(encoding="utf-8") for name in kept if (mine / name).exists()} == kept
    (entry,) = {p.name for p in mine.iterdir()} - {name.split("/")[0] for name in kept}  # the retriever's own index, saved beside them
    assert (mine / entry / bm25.CACHE_MARKER).is_file() and (mine / entry / "params.index.json").is_file()


def test_a_pipeline_serialises_no_deployment_setting_and_no_machine_path(settings, monkeypatch):
    """Device, backend, exports, caches and the scheduler are the machine's: handed over at load time
    (``use_runtime``, ``use_cache_dir``), never in the pipeline's YAML, so the YAML names no folder of this machine."""
    from qa_system.pipelines import PIPELINES_DIR, build_qa_pipeline
    from qa_system.reading.reader import ExtractiveReader

    monkeypatch.chdir(REPO_ROOT)  # the reader named relatively, as a hub id would be
    served = settings.with_(
        reader_model="models/reader-minilm-subjqa", selector_model="none", reader_backend="torch", reader_batch_windows=8
    )
    build_index(served, "electronics", embed=False, progress=False)
    pipeline = build_qa_pipeline("bm25", served, answer_stage="extractive")
    reader = pipeline.pipeline.get_component("reader")
    assert (reader.backend, reader.batch_windows, reader.onnx_cache) == ("torch", 8, str(served.reader_onnx_cache))  # handed over
    definition = yaml.safe_load(pipeline.pipeline.dumps())
    deployment = {*ExtractiveReader.RUNTIME_SETTINGS, "device", "cache_dir"}
    assert {name: sorted(deployment & set(c["init_parameters"])) for name, c in definition["components"].items()} == {
        "sparse_retriever": ["cache_dir"],
        "reader": [],
    }
    assert definition["components"]["sparse_retriever"]["init_parameters"]["cache_dir"] is None  # the collection's own is the machine's

    def strings(value):
        if isinstance(value, dict):
            return [s for item in value.values() for s in strings(item)]
        if isinstance(value, list):
            return [s for item in value for s in strings(item)]
        return [value] if isinstance(value, str) else []

    machine = [s for s in strings(definition) if s.startswith(("/", "~")) or str(served.home) in s or str(Path.home()) in s]
    assert machine == []
    assert answers_of(pipeline)  # and it still reads with what was handed over
    for template in PIPELINES_DIR.glob("*.yml"):
        assert not re.search(
            r"onnx_cache|onnx_model|batch_wait_ms|batch_windows|reader_backend|device:|cache_dir", template.read_text(encoding="utf-8")
        ), template.name


def answers_of(pipeline) -> list:
    return pipeline.run(QUESTION, item_id="KINDLE", top_k=2)["answers"]


def test_an_exported_pipeline_names_no_path_of_this_machine_and_loads_under_another_home(settings, tmp_path, monkeypatch):
    """The saved index is named relative to the qa_system home (QA_HOME where the file is loaded), the shipped
    models as null (each component's default): the exported YAML holds no absolute path."""
    from qa_system.pipelines import export_pipeline

    index = build_index(settings, "electronics", embed=False, progress=False)
    text = export_pipeline("bm25", index, settings, answer_stage="extractive")
    definition = yaml.safe_load(text)
    values = json.dumps(definition)
    assert not re.search(r'"(/|~)', values) and str(settings.home) not in values and str(REPO_ROOT) not in values
    store = definition["components"]["sparse_retriever"]["init_parameters"]["document_store"]["init_parameters"]
    assert store["path"] == "indexes/memory/subjqa-electronics.json"
    assert definition["components"]["reader"]["init_parameters"]["model"] is None
    moved = tmp_path / "other-home"
    (moved / "indexes").mkdir(parents=True)
    os.rename(settings.home / "indexes" / "memory", moved / "indexes" / "memory")  # the home moved, the YAML did not change
    # Loaded under the old home, the fix is the home to load it under (exporting again writes the same relative path).
    monkeypatch.setenv("QA_HOME", str(settings.home))
    with pytest.raises(DeserializationError, match="Fix: set QA_HOME to the qa_system home the pipeline was exported from"):
        Pipeline.loads(text, allowed_modules=["qa_system"])  # Haystack's error about the component ends with ours
    monkeypatch.setenv("QA_HOME", str(moved))
    loaded = Pipeline.loads(text, allowed_modules=["qa_system"])
    item = {"field": "meta.item_id", "operator": "==", "value": "KINDLE"}
    outputs = loaded.run(
        {"sparse_retriever": {"query": QUESTION, "filters": item}, "reader": {"query": QUESTION}, "selector": {"query": QUESTION}},
        include_outputs_from={"sparse_retriever"},
    )
    found = outputs["sparse_retriever"]["documents"]
    assert found and all(d.meta["item_id"] == "KINDLE" for d in found)


def test_the_documented_python_that_loads_an_export_runs_as_written(settings, tmp_path, monkeypatch, selector_for_the_shipped_reader):
    """The docs' Python block under "Haystack YAML and Hayhooks", run as written on an export with an answer selector
    (the shipped reader always gets one): it passed no query to the selector, and failed."""
    monkeypatch.setenv("QA_SELECTOR_MODEL", str(selector_for_the_shipped_reader))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    monkeypatch.setenv("QA_READER_BACKEND", "torch")
    served = tmp_path / "served"
    served.mkdir()
    (served / "reviews.yml").write_text(export(settings, tmp_path).read_text(encoding="utf-8"), encoding="utf-8")
    section = (REPO_ROOT / "docs" / "pipelines-and-stores.md").read_text(encoding="utf-8").split("## Haystack YAML and Hayhooks")[1]
    code = section.split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "pipelines-and-stores.md", "exec"), namespace)
    answers = namespace["result"]["selector"]["answers"]
    assert answers and all(0 <= a.meta["probability"] <= 1 for a in answers)


def test_a_dense_pipeline_over_a_collection_without_vectors_is_not_exported(settings, tmp_path, capsys):
    """`ask --retriever hybrid` refused the collection; `export-pipeline` wrote a pipeline that would find nothing."""
    from helpers.ingestion import COLUMNS, write_csv
    from qa_system.ingestion import ingest

    ingest(settings, write_csv(tmp_path / "r.csv"), "plain", COLUMNS, embed=False, progress=False)
    output = tmp_path / "hybrid.yml"
    flags = ["--collection", "plain", "--data-dir", str(settings.data_dir), "--home", str(settings.home), "--output", str(output)]
    assert main(["export-pipeline", "retrieval", "--retriever", "hybrid", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Index 'plain' has no embeddings, so hybrid retrieval cannot run.") and not output.exists()
    assert main(["export-pipeline", "retrieval", "--retriever", "bm25", *flags]) == 0 and output.exists()
