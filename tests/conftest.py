"""Shared fixtures: the tiny SubjQA corpus the tests write themselves and settings over it, homes for the
user's own collections, a tiny reader, SQuAD training files, the search page (AppTest) and a headless
browser, and a real search server for the OpenSearch tests (started once per session).

What the tests share besides fixtures is in ``tests/helpers/`` (imported as ``helpers.<module>``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.models import tiny_model_dir
from helpers.subjqa import write_subjqa
from helpers.training import REVIEW, labelled
from qa_system.config import Settings
from qa_system.sources.squad import write_squad
from qa_system.sources.subjqa import GoldAnswer


@pytest.fixture(autouse=True, scope="session")
def session_home(tmp_path_factory):
    """QA_HOME for the session: readers built without settings cache their ONNX exports there, never in ~/.cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("QA_HOME", str(tmp_path_factory.mktemp("qa-home")))
    # The encoder's int8 export is built once per home (about 10 s) and tests make a home each: they embed with
    # sentence-transformers unless they ask for the onnx backend (test_embedding.py checks it).
    patch.setenv("QA_EMBEDDING_BACKEND", "torch")
    yield
    patch.undo()


@pytest.fixture
def tiny_subjqa(tmp_path: Path) -> Path:
    return write_subjqa(tmp_path / "subjqa")


@pytest.fixture
def settings(tmp_path: Path, tiny_subjqa: Path, monkeypatch) -> Settings:
    # QA_HOME too: a pipeline exported from these settings and loaded in this process finds its index there.
    monkeypatch.setenv("QA_HOME", str(tmp_path / "home"))
    return Settings.from_env(data_dir=tiny_subjqa, home=tmp_path / "home", store="memory")


@pytest.fixture
def home(tmp_path: Path) -> Settings:
    """Settings of an empty home (memory store) for collections of the user's own documents."""
    return Settings.from_env(home=tmp_path / "home", store="memory")


@pytest.fixture
def cli_home(home: Settings, monkeypatch) -> Settings:
    """``home`` as the command line finds it: QA_HOME set, QA_STORE left to its default."""
    monkeypatch.setenv("QA_HOME", str(home.home))
    monkeypatch.delenv("QA_STORE", raising=False)
    return home


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    path = Settings().data_dir
    if not (path / "electronics" / "splits" / "test.csv").exists():
        pytest.skip(f"the real SubjQA files are not at {path} (they live in ../shared/data/subjqa)")
    return path


@pytest.fixture(scope="session")
def tiny_reader(tmp_path_factory) -> Path:
    """A tiny random extractive reader saved to disk (no download): its answers are noise, its offsets real."""
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-reader"))


@pytest.fixture
def squad_files(tmp_path: Path) -> tuple[Path, Path]:
    """SQuAD files of labelled questions over one review: train.json (three answerable questions, one not) and dev.json (one of each)."""
    start = REVIEW.index("battery lasts")
    train = [labelled(f"t{i}", [GoldAnswer("battery lasts", start)]) for i in range(3)] + [labelled("n", [])]
    dev = [labelled("d1", [GoldAnswer("battery lasts", start)]), labelled("d2", [])]
    write_squad(train, tmp_path / "train.json")
    write_squad(dev, tmp_path / "dev.json")
    return tmp_path / "train.json", tmp_path / "dev.json"


@pytest.fixture(scope="module")
def app_env(tmp_path_factory, tiny_reader) -> dict[str, str]:
    """One corpus and home for the module: the index is built once, as on a real first start."""
    root = tmp_path_factory.mktemp("ui")
    return {"QA_DATA_DIR": str(write_subjqa(root / "subjqa")), "QA_HOME": str(root / "home"), "QA_READER_MODEL": str(tiny_reader)}


@pytest.fixture
def page(app_env, monkeypatch):
    """Starts the page (with extra environment, query params) and returns the AppTest after its first run."""
    from streamlit.testing.v1 import AppTest

    from helpers.ui import TIMEOUT
    from qa_system.serving.webapp import APP

    for name in ("QA_ES_URL", "QA_OPENSEARCH_URL", "QA_STORE", "QA_EMBEDDING_MODEL", "QA_QUERY_EMBEDDING_MODEL", "QA_REPORTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in app_env.items():
        monkeypatch.setenv(name, value)

    def start(env: dict[str, str] | None = None, **query_params) -> AppTest:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.query_params.update(query_params)
        return at.run()

    return start


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One headless Chromium for a module of page tests."""
    from qa_system.bench.browser import headless_chromium

    driver = headless_chromium(tmp_path_factory.mktemp("chromium-profile"), 1400, 1400)
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def opensearch_url(request) -> str:
    """A real search server for the `opensearch` tests, started once per session and stopped at its end.

    QA_OPENSEARCH_TEST_URL names a running server (e.g. OpenSearch with k-NN, for the dense tests);
    otherwise the bundled Elasticsearch 7.9.2 OSS of tests/helpers/search_server.py starts on a free
    127.0.0.1 port (fetched first when missing). The tests skip when it cannot run here, unless
    QA_REQUIRE_TEST_SERVER is set (CI), where that is a failure.
    """
    external = os.environ.get("QA_OPENSEARCH_TEST_URL")
    if external:
        yield external
        return
    from helpers import search_server

    try:
        server = search_server.start()
    except search_server.Unavailable as error:
        if os.environ.get("QA_REQUIRE_TEST_SERVER"):
            pytest.fail(f"no test search server ({error}); QA_REQUIRE_TEST_SERVER is set")
        pytest.skip(f"no test search server: {error} (bash scripts/test_search_server.sh fetches it)")
    request.config.stash[SEARCH_SERVER_START] = server.start_s
    try:
        yield server.url
    finally:
        server.stop()


SEARCH_SERVER_START = pytest.StashKey[float]()


def pytest_terminal_summary(terminalreporter, config):
    if SEARCH_SERVER_START in config.stash:
        terminalreporter.write_line(f"test search server (Elasticsearch 7.9.2 OSS) started in {config.stash[SEARCH_SERVER_START]:.1f} s")
