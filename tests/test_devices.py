"""One device setting (QA_DEVICE, --device): its spelling, what it resolves to, a GPU asked for and absent as one
line, and the device kept out of exported pipelines and said where answers and reports are made."""

from __future__ import annotations

import pytest
import yaml

from qa_system.cli import main
from qa_system.config import Settings
from qa_system.devices import check_device, component_device, cuda_count, resolve_device
from qa_system.errors import QAError
from qa_system.ingestion.indexing import build_index
from qa_system.pipelines import build_qa_pipeline


def keys(tree) -> set[str]:
    """Every mapping key anywhere in a parsed YAML tree."""
    if isinstance(tree, dict):
        return set(tree) | {k for v in tree.values() for k in keys(v)}
    return {k for v in tree for k in keys(v)} if isinstance(tree, list) else set()


def values(tree) -> list:
    """Every leaf value anywhere in a parsed YAML tree."""
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in values(v)]
    return [x for v in tree for x in values(v)] if isinstance(tree, list) else [tree]


NO_GPU = pytest.mark.skipif(cuda_count() > 0, reason="this machine has a CUDA GPU")


@pytest.mark.parametrize(
    ("given", "spelled"), [("auto", "auto"), ("CPU", "cpu"), (" cuda ", "cuda"), ("cuda:1", "cuda:1"), ("gpu", "cuda")]
)
def test_a_device_setting_has_one_spelling(given, spelled):
    assert check_device(given) == spelled
    assert Settings(device=given).device == spelled


@pytest.mark.parametrize("bad", ["tpu", "cuda:", "cuda:x", "mps:0", ""])
def test_an_unknown_device_is_one_line_naming_the_choices(bad):
    with pytest.raises(QAError, match="auto, cpu, cuda, cuda:N") as error:
        Settings(device=bad) if bad else check_device(bad)
    assert "\n" not in str(error.value)


def test_the_environment_sets_the_device(monkeypatch):
    monkeypatch.setenv("QA_DEVICE", "cpu")
    assert Settings.from_env().device == "cpu"
    assert Settings.from_env(device="auto").device == "auto"


def test_auto_is_a_gpu_when_there_is_one_else_the_cpu():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda:0" if cuda_count() else "cpu")
    assert component_device("cpu").to_torch_str() == "cpu"


@NO_GPU
@pytest.mark.parametrize("asked", ["cuda", "cuda:0", "cuda:3", "gpu"])
def test_a_gpu_asked_for_and_absent_is_one_line_naming_it_and_the_fix(asked):
    with pytest.raises(QAError) as error:
        resolve_device(asked)
    message = str(error.value)
    assert (
        f"The device {asked} (QA_DEVICE or --device) asks for" in message
        and "QA_DEVICE=cpu" in message
        and "auto" in message
        and "\n" not in message
    )


@NO_GPU
def test_the_cli_refuses_an_absent_gpu_with_exit_2_before_any_work(settings, monkeypatch, capsys):
    monkeypatch.setenv("QA_DEVICE", "cuda")
    code = main(["ask", "How is the bass?", "--item", "HEADPHONES", "--data-dir", str(settings.data_dir), "--home", str(settings.home)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "The device cuda (QA_DEVICE or --device)" in err and "QA_DEVICE=cpu" in err
    assert not (settings.home / "indexes").exists()  # refused before indexing anything
    monkeypatch.delenv("QA_DEVICE")
    code = main(["collections", "--device", "cuda:1", "--home", str(settings.home)])
    assert code == 2 and "The device cuda:1 (QA_DEVICE or --device)" in capsys.readouterr().err


def test_answers_say_which_device_ran_and_the_export_never_names_one(settings, tiny_reader, tmp_path):
    settings = settings.with_(reader_model=str(tiny_reader), reader_backend="torch", embedding_backend="torch", device="cpu")
    index = build_index(settings, progress=False)
    pipeline = build_qa_pipeline("hybrid", settings, index=index)
    result = pipeline.run("How is the bass?", item_id="HEADPHONES", top_k=2)
    assert result["device"] == "cpu"
    assert pipeline.pipeline.get_component("reader").runs_on == "cpu"
    output = tmp_path / "hybrid.yml"
    assert (
        main(
            [
                "export-pipeline",
                "extractive",
                "--retriever",
                "hybrid",
                "--output",
                str(output),
                "--data-dir",
                str(settings.data_dir),
                "--home",
                str(settings.home),
                "--reader-model",
                str(tiny_reader),
                "--reader-backend",
                "torch",
                "--embedding-backend",
                "torch",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    definition = yaml.safe_load(output.read_text(encoding="utf-8"))
    assert "device" not in keys(definition) and "cpu" not in values(definition)
    assert definition["components"]["query_embedder"]["init_parameters"] == {"model": settings.embedding_model, "backend": "torch"}


def test_processes_sharing_the_machine_size_their_thread_pools_to_their_part():
    from qa_system.devices import physical_cores, share_cores

    whole = physical_cores()
    try:
        share_cores(2)
        assert physical_cores() == max(1, whole // 2)
        share_cores(10 * whole)  # more processes than cores: one thread each, never none
        assert physical_cores() == 1
    finally:
        share_cores(1)
    assert physical_cores() == whole
