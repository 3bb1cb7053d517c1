"""Settings: pydantic-settings with the QA_ prefix, overrides above the environment above the defaults, frozen, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from qa_system.config import Settings
from qa_system.errors import QAError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for env in Settings.environment_variables().values():
        monkeypatch.delenv(env, raising=False)


def test_settings_are_pydantic_settings_with_the_qa_prefix():
    assert issubclass(Settings, BaseSettings)
    assert Settings.model_config["env_prefix"] == "QA_"
    names = Settings.environment_variables()
    assert names["store"] == "QA_STORE" and names["api_workers"] == "QA_API_WORKERS"
    assert names["feedback_file"] == "QA_FEEDBACK_DB"  # the one variable named otherwise


def test_keyword_overrides_beat_the_environment_which_beats_the_defaults(monkeypatch, tmp_path):
    assert Settings.from_env().store == "memory" and Settings.from_env().api_workers == 4
    monkeypatch.setenv("QA_STORE", "faiss")
    monkeypatch.setenv("QA_API_WORKERS", "2")
    monkeypatch.setenv("QA_HOME", "~/elsewhere")
    monkeypatch.setenv("QA_FEEDBACK_DB", str(tmp_path / "clicks.sqlite"))
    monkeypatch.setenv("QA_READER_MODEL", "")  # empty: not set
    settings = Settings.from_env()
    assert (settings.store, settings.api_workers) == ("faiss", 2)
    assert settings.home == Path("~/elsewhere").expanduser()
    assert settings.feedback_db == tmp_path / "clicks.sqlite"
    assert settings.reader_model.endswith("reader-minilm-subjqa")
    overridden = Settings.from_env(store="memory", api_workers=None, feedback_file=tmp_path / "other.sqlite")  # None: not given
    assert (overridden.store, overridden.api_workers, overridden.feedback_file) == ("memory", 2, tmp_path / "other.sqlite")


def test_settings_are_frozen_and_copied_with_changes():
    settings = Settings.from_env()
    with pytest.raises(Exception, match="frozen"):
        settings.store = "faiss"
    assert settings.with_(store="faiss").store == "faiss" and settings.store == "memory"
    assert settings.model_copy(update={"query_embedding_model": "q"}).query_embedding_model == "q"
    assert hash(settings) == hash(Settings.from_env()) and settings == Settings.from_env()
    assert "api_token" not in settings.with_(api_token="secret").as_dict() and "secret" not in repr(settings.with_(api_token="secret"))


@pytest.mark.parametrize(
    "source, value, expected",
    [
        (
            "QA_STORE",
            "mongo",
            "Unknown store 'mongo'. Fix: use one of: memory, elasticsearch, opensearch, faiss (QA_STORE in the environment).",
        ),
        ("QA_RETRIEVER", "magic", "Unknown retriever 'magic'."),
        ("QA_READER_BACKEND", "tpu", "Unknown reader backend 'tpu'."),
        ("QA_GENERATOR", "gpt", "Unknown generator 'gpt'."),
        ("QA_TEMPERATURE", "nan", "temperature must be a finite number of at least 0, not 'nan'."),
        ("QA_MAX_NEW_TOKENS", "lots", "max_new_tokens must be a whole number of at least 1, not 'lots'."),
        ("QA_TOP_K_RETRIEVER", "0", "top_k_retriever must be a whole number of at least 1, not 0."),
        ("QA_API_WORKERS", "abc", "QA_API_WORKERS must be a whole number of at least 1, not 'abc'."),
        ("QA_API_MAX_BODY_BYTES", "10", "QA_API_MAX_BODY_BYTES must be a whole number of at least 256, not 10."),
    ],
)
def test_a_bad_environment_value_is_one_line_naming_it(monkeypatch, source, value, expected):
    monkeypatch.setenv(source, value)
    with pytest.raises(QAError) as error:
        Settings.from_env()
    assert expected in str(error.value) and "\n" not in str(error.value) and "Fix:" in str(error.value)
    assert source in str(error.value)  # where the value came from: "pass max_new_tokens=1" alone named no variable


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"num_beams": 0}, "num_beams must be a whole number"),
        ({"home": 3}, "The setting home (QA_HOME) is not valid"),
        ({"no_such_setting": 1}, "Unknown setting 'no_such_setting'."),
    ],
)
def test_a_bad_keyword_is_one_line_too(overrides, expected):
    for make in (lambda: Settings.from_env(**overrides), lambda: Settings.from_env().with_(**overrides)):
        with pytest.raises(QAError) as error:
            make()
        assert expected in str(error.value) and "\n" not in str(error.value) and "Fix:" in str(error.value)


def test_api_rate_limit_zero_turns_the_limit_off(monkeypatch):
    monkeypatch.setenv("QA_API_RATE_LIMIT", "0")
    assert Settings.from_env().api_rate_limit == 0


# ----------------------------------------------------------------------------- components are handed their settings

COMPONENT_FOLDERS = ("retrieval", "reading", "generation")


def environment_reads(folder: Path) -> list[str]:
    """Calls of ``Settings.from_env`` and reads of ``os.environ`` / ``os.getenv`` in the modules under ``folder``."""
    import ast

    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and (node.attr in ("from_env", "getenv", "environ")):
                found.append(f"{path.relative_to(folder.parent)}:{node.lineno} {node.attr}")
    return found


def test_no_component_reads_the_environment():
    package = Path(__file__).resolve().parent.parent / "qa_system"
    assert [read for folder in COMPONENT_FOLDERS for read in environment_reads(package / folder)] == []


def test_the_reader_takes_its_backend_and_cache_from_its_arguments(monkeypatch, tmp_path):
    from qa_system.config import DEFAULT_HOME
    from qa_system.reading import ExtractiveReader, onnx_cache

    monkeypatch.setenv("QA_READER_BACKEND", "torch")
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    caches = []
    monkeypatch.setattr(onnx_cache, "load_cached_reader", lambda name, cache: caches.append(Path(cache)))
    reader = ExtractiveReader(model="some-reader")
    assert reader.backend == "onnx"  # not QA_READER_BACKEND
    reader._load_onnx("some-reader")
    assert caches == [DEFAULT_HOME / "models" / "reader-onnx"]  # not QA_HOME's
    configured = ExtractiveReader.from_settings(Settings.from_env())  # a door reads the environment and passes it in
    assert configured.backend == "torch" and Path(configured.onnx_cache) == tmp_path / "home" / "models" / "reader-onnx"


def test_the_store_flags_a_message_prints_name_the_store_and_its_server_without_its_password(tmp_path):
    """Commands printed after `--store opensearch` runs (`fit-confidence ... --reset`) ran on the memory store as printed."""
    settings = Settings.from_env(home=tmp_path)
    assert settings.store_flags == "" and settings.with_(store="faiss").store_flags == " --store faiss"
    server = settings.with_(store="opensearch", opensearch_url="http://admin:s3cret@search.local:9200")
    assert server.store_flags == " --store opensearch --opensearch-url 'http://admin:***@search.local:9200'"
    assert settings.with_(store="elasticsearch", es_url="http://es:9200").store_flags == " --store elasticsearch --es-url http://es:9200"
