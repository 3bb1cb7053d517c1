"""The service every door shares (serving/service.py): one instance per process for the page and the
API, open collections kept within the memory budget (least recently used closed first), and the page
opening the collection it is told to without indexing SubjQA."""

from __future__ import annotations

import threading

import pytest
from streamlit.testing.v1 import AppTest

from helpers.subjqa import write_subjqa
from qa_system.cli import build_parser, main as cli
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion import IngestOptions, delete_collection, ingest
from qa_system.serving.api import create_app
from qa_system.serving.background import BackgroundTask
from qa_system.serving.documents import DocumentChanges
from qa_system.serving.service import QAService, ServedCollection
from qa_system.serving.shared import shared_service
from qa_system.serving.webapp import APP, settings_environment

TIMEOUT = 120


def own_collection(settings: Settings, name: str, documents: int = 100, repeat: int = 20) -> str:
    """A CSV of ``documents`` rows ingested without vectors, as `qa-system index --input` does (rows short enough
    for the tiny reader's 128 positions with a small ``repeat``)."""
    source = settings.home.parent / f"{name}.csv"
    source.parent.mkdir(parents=True, exist_ok=True)
    rows = [f"{name} row {i}: " + "the lamp is bright and the kettle is quick " * repeat for i in range(documents)]
    source.write_text("body\n" + "\n".join(rows) + "\n", encoding="utf-8")
    ingest(settings, source, name, IngestOptions(text_column="body"), embed=False, progress=False)
    return name


def test_the_memory_budget_closes_the_least_recently_used_collection(settings):
    names = [own_collection(settings, name) for name in ("aa", "bb", "cc")]
    probe = QAService(settings, [ServedCollection(name) for name in names])
    sizes = {name: probe.index(name).memory_bytes() for name in names}
    budget_mb = 1
    assert sizes["aa"] + sizes["bb"] <= budget_mb * 2**20 < sum(sizes.values())  # two fit, three do not

    service = QAService(settings.with_(collection_memory_mb=budget_mb), [ServedCollection(name) for name in names])
    service.pipeline("aa", "bm25", None)
    service.index("bb")
    service.index("aa")  # aa used last: bb is now the least recently used
    assert list(service.open_collections()) == ["bb", "aa"]
    service.index("cc")
    assert list(service.open_collections()) == ["aa", "cc"]  # bb closed, the others kept
    assert all(key[0] != "bb" for key in service._pipelines)
    again = service.index("bb")  # a closed collection is opened again when asked for
    assert again.item_counts() == {} and list(service.open_collections()) == ["cc", "bb"]
    assert [key for key in service._pipelines if key[0] == "aa"] == []  # aa's pipelines left with it


def test_a_collection_over_the_budget_alone_stays_open_and_closes_the_others(settings):
    names = [own_collection(settings, name, documents) for name, documents in (("small", 5), ("large", 400))]
    service = QAService(settings.with_(collection_memory_mb=1), [ServedCollection(name) for name in names])
    service.index("small")
    service.index("large")
    assert list(service.open_collections()) == ["large"]


def test_after_a_change_is_done_the_new_version_is_served_whatever_the_budget_closed_meanwhile(settings):
    armed, holding, release = threading.Event(), threading.Event(), threading.Event()

    class HeldOpen(ServedCollection):
        """Its next open, once armed, waits after reading the collection: a question opening it while a change commits."""

        def open(self, settings, on_progress=None):
            index = super().open(settings, on_progress)
            if armed.is_set():
                armed.clear()
                holding.set()
                release.wait(TIMEOUT)
            return index

    def added(*texts: str) -> dict:
        rows = "".join(f'{{"id": "{text.split()[1]}", "text": "{text}"}}\n' for text in texts)
        change = changes.add("mine", rows.encode(), IngestOptions(format="jsonl"), "documents.jsonl")
        change.task.wait(TIMEOUT)
        assert change.status()["status"] == "done", change.status()["error"]
        return change.status()["report"]

    own_collection(settings, "big", 400)
    service = QAService(settings.with_(collection_memory_mb=1), [ServedCollection("big"), HeldOpen("mine")])
    changes = DocumentChanges(settings, service)
    changes.create("mine")
    added("The red lamp is bright.", "The blue lamp is warm.")
    assert service.index("mine").store.count_documents() == 2
    service.index("big")
    assert list(service.open_collections()) == ["big"]  # the budget closed 'mine'
    armed.set()
    asking = BackgroundTask(lambda report: service.index("mine"))  # a question opens it again, reading the old version
    assert holding.wait(TIMEOUT)
    assert added("The green lamp is dim.")["documents"] == 3
    release.set()
    asking.wait(TIMEOUT)
    assert service.index("mine").store.count_documents() == 3
    found = service.pipeline("mine", "bm25", None).run("Is the lamp dim?", top_k=10)["documents"]
    assert "The green lamp is dim." in [document.content for document in found]


@pytest.mark.parametrize("store", ["memory", "faiss"])
def test_a_collection_another_process_changed_is_served_as_saved_now(settings, store):
    settings = settings.with_(store=store)
    own = own_collection if store == "memory" else own_faiss_collection
    own(settings, "shared", documents=5)
    service = QAService(settings, [ServedCollection("shared")])
    assert service.index("shared").store.count_documents() == 5
    own(settings, "shared", documents=8)  # `qa-system index` in another process: three rows added
    # Served as saved now, by the next question (it was the old version until a restart).
    assert service.index("shared").store.count_documents() == 8
    assert {c["name"]: c["documents"] for c in service.collections()} == {"shared": 8}
    delete_collection(settings, "shared")  # `qa-system collections --delete` in another process
    with pytest.raises(QAError, match=f"^No {store} collection named 'shared'"):
        service.index("shared")  # it answered from the deleted collection


def test_the_default_collection_deleted_elsewhere_is_left_out_of_the_list(settings, caplog):
    """GET /collections was a 404 for every collection once the server's default one was deleted by the CLI."""
    for name in ("first", "second"):
        own_collection(settings, name, documents=3)
    service = QAService(settings, [ServedCollection("first"), ServedCollection("second")])
    service.serve_own = True  # a server with document routes: the store's collections as they are now
    assert [c["name"] for c in service.collections()] == ["first", "second"]
    delete_collection(settings, "first")  # `qa-system collections --delete first` in another shell
    service.catalogue.changed()  # the store listed again, as the next listing finds it
    assert [c["name"] for c in service.collections()] == ["second"]
    assert [c["name"] for c in service.collections()] == ["second"]
    said = [r for r in caplog.records if "'first' is left out of the list" in r.getMessage()]
    assert len(said) == 1  # said once, not at every listing


def own_faiss_collection(settings: Settings, name: str, documents: int) -> str:
    source = settings.home.parent / f"{name}.csv"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("body\n" + "\n".join(f"{name} row {i}: the lamp is bright" for i in range(documents)) + "\n", encoding="utf-8")
    ingest(settings, source, name, IngestOptions(text_column="body"), progress=False)  # FAISS holds vectors
    return name


def test_the_budget_is_a_setting_and_its_environment_variable(monkeypatch):
    monkeypatch.setenv("QA_COLLECTION_MEMORY_MB", "512")
    assert Settings.from_env().collection_memory_mb == 512
    monkeypatch.setenv("QA_COLLECTION_MEMORY_MB", "0")
    with pytest.raises(Exception, match="QA_COLLECTION_MEMORY_MB"):
        Settings.from_env()


@pytest.fixture
def page_env(tmp_path, tiny_reader, monkeypatch) -> Settings:
    """A fresh home holding one collection of the user's own, 'mine', and SubjQA files that nothing indexed yet."""
    for name in ("QA_ES_URL", "QA_OPENSEARCH_URL", "QA_STORE", "QA_EMBEDDING_MODEL", "QA_QUERY_EMBEDDING_MODEL", "QA_PAGE_COLLECTION"):
        monkeypatch.delenv(name, raising=False)
    env = {"QA_DATA_DIR": str(write_subjqa(tmp_path / "subjqa")), "QA_HOME": str(tmp_path / "home"), "QA_READER_MODEL": str(tiny_reader)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    own_collection(settings, "mine", 3, repeat=1)
    return settings


def test_ui_collection_opens_that_collection_and_indexes_nothing_of_subjqa(page_env, monkeypatch):
    args = build_parser().parse_args(["ui", "--collection", "mine"])
    env = settings_environment(vars(args))
    assert env == {"QA_PAGE_COLLECTION": "mine"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not at.exception and not at.error
    assert at.selectbox(key="collection").value == "mine" and "collection" not in at.query_params  # the default needs no link
    at.text_input(key="question").input("Is the lamp bright?")
    [b for b in at.button if b.label == "Ask"][0].click().run()
    assert not at.exception and not at.error and at.session_state["asked"].documents
    saved = sorted(p.name for p in (page_env.home / "indexes" / "memory").iterdir())
    assert saved == ["mine.json"]  # SubjQA electronics neither embedded nor indexed
    assert at.selectbox(key="collection").options[1].startswith("subjqa-electronics")  # still offered: indexed when picked
    at.selectbox(key="collection").select("subjqa-electronics").run()
    assert not at.exception and not at.error and at.query_params["collection"] == "subjqa-electronics"
    assert (page_env.home / "indexes" / "memory" / "subjqa-electronics.json").is_file()


def test_ui_collection_refuses_a_collection_that_does_not_exist(page_env, capsys):
    assert cli(["ui", "--collection", "nope", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "No memory collection named 'nope'" in err and len(err.strip().splitlines()) == 1


def test_the_page_and_the_api_share_one_service(page_env, monkeypatch):
    monkeypatch.setenv("QA_PAGE_COLLECTION", "mine")
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    at.text_input(key="question").input("Is the kettle quick?")
    [b for b in at.button if b.label == "Ask"][0].click().run()
    assert not at.exception and not at.error
    settings = Settings.from_env(store="memory")  # what the page read from the same environment
    app = create_app(settings, [ServedCollection("mine")])
    service = app.state.service
    assert service is shared_service(settings, [ServedCollection("mine")])
    assert "mine" in service.open_collections()  # opened by the page, ready for the API
    assert ("mine", "bm25", "extractive") in service._pipelines  # the page's pipeline, models loaded once for both
    assert service.feedback is not None and service.any_collection  # the page may open any collection of the store


def test_the_shell_answers_line_after_line_and_a_bad_question_is_one_line(tmp_path, tiny_reader, monkeypatch, capsys):
    import io

    data = write_subjqa(tmp_path / "subjqa")
    lines = "Is it good for reading?\n:item NOPE\nIs it good?\n:item HEADPHONES\nHow is the bass?\n:quit\nnever read\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    flags = ["--home", str(tmp_path / "home"), "--data-dir", str(data), "--reader-model", str(tiny_reader), "--reader-backend", "torch"]
    assert cli(["shell", "--item", "KINDLE", *flags]) == 0
    captured = capsys.readouterr()
    asked = [line for line in captured.out.splitlines() if line.startswith("Q: ")]
    assert [line.split("  (")[0] for line in asked] == ["Q: Is it good for reading?", "Q: Is it good?", "Q: How is the bass?"]
    # An unknown product is refused at once, and the shell goes on with the one before it.
    assert [line.split("  (")[1].split(";")[0] for line in asked] == ["KINDLE", "KINDLE", "HEADPHONES"]
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Product 'NOPE' has no reviews" in errors[0]
