"""Retrievers, fusion, filters and pipelines on a tiny corpus the tests write (real MiniLM encoder)."""

import json
import os

import pandas as pd
import pytest
from haystack import Document, Pipeline

from helpers.ingestion import COLUMNS, write_csv
from helpers.subjqa import write_subjqa
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.ingestion.indexing import build_index
from qa_system.pipelines import build_qa_pipeline, build_retrieval_pipeline, render_pipeline_yaml
from qa_system.retrieval import BM25sRetriever, make_filters, reciprocal_rank_fusion
from qa_system.retrieval.fusion import RankFusion, minmax_fusion
from qa_system.stores import Index, new_memory_store, open_index
from qa_system.tuning.bm25 import IN_FORCE, RANK_BY, STANDARD, BM25Setting, recommended, tune_bm25


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """One embedded memory index and one FAISS index of the tiny corpus, shared by this module."""
    root = tmp_path_factory.mktemp("retrieval")
    data_dir = write_subjqa(root / "subjqa")
    memory = Settings.from_env(data_dir=data_dir, home=root / "home", store="memory")
    build_index(memory, "electronics", progress=False)
    faiss = memory.with_(store="faiss")
    build_index(faiss, "electronics", progress=False)
    return {"memory": memory, "faiss": faiss}


def review_ids(result):
    return [d.meta["review_id"] for d in result["documents"]]


def test_bm25_ranks_the_matching_review_first_within_the_product(indexed):
    pipeline = build_retrieval_pipeline("bm25", indexed["memory"])
    result = pipeline.run("good for reading books?", item_id="KINDLE", split="train", top_k=3)
    # Only train reviews of KINDLE; the one sharing no term still comes back, after, with score 0.
    assert review_ids(result) == ["r-kindle-1", "r-kindle-2"]
    assert result["documents"][0].score > 0 and result["documents"][1].score == 0


def test_bm25_without_filters_returns_only_matching_reviews(indexed):
    result = build_retrieval_pipeline("bm25", indexed["memory"]).run("battery lasts", top_k=10)
    assert sorted(review_ids(result)) == ["r-kindle-1", "r-mouse-1"]
    assert all(d.score > 0 for d in result["documents"])


def test_bm25_returns_documents_without_their_vectors_as_the_embedding_retrievers_do(indexed):
    store = open_index(indexed["memory"], "electronics").store
    stored = {d.id: d for d in store.filter_documents()}
    found = BM25sRetriever(store).run("battery lasts", top_k=10)["documents"]
    assert found and all(stored[d.id].embedding is not None and d.embedding is None for d in found)
    assert all(d.content == stored[d.id].content and d.meta == stored[d.id].meta for d in found)


def test_bm25_stems_and_keeps_stopwords_by_default(indexed):
    result = build_retrieval_pipeline("bm25", indexed["memory"]).run("the speaker", top_k=1)
    assert review_ids(result) == ["r-kindle-3"]  # "speaker" matches "speakers"
    store = open_index(indexed["memory"], "electronics").store
    assert BM25sRetriever(store).run("the")["documents"]  # "the" is a term like any other (low IDF)
    assert BM25sRetriever(store, stopwords="en").run("the")["documents"] == []  # Elasticsearch's English stopwords


def test_bm25_refuses_a_bad_top_k_or_stopword_list_with_a_qa_error(indexed):
    store = open_index(indexed["memory"], "electronics").store
    for top_k in (-1, 1.5, "many"):
        with pytest.raises(QAError, match="top_k"):
            BM25sRetriever(store, top_k=top_k)
        with pytest.raises(QAError, match="top_k"):
            BM25sRetriever(store).run("battery", top_k=top_k)
    assert BM25sRetriever(store).run("battery", top_k=0)["documents"] == []  # 0 asks for none
    with pytest.raises(QAError, match="Unknown stopword list 'fr'"):
        BM25sRetriever(store, stopwords="fr")


def test_bm25_from_dict_leaves_its_input_as_it_was(indexed, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "qa_system")  # as a YAML of qa_system's components is loaded
    store = open_index(indexed["memory"], "electronics").store
    data = BM25sRetriever(store, top_k=2).to_dict()
    before = json.dumps(data, sort_keys=True)
    rebuilt = BM25sRetriever.from_dict(data)
    assert json.dumps(data, sort_keys=True) == before  # the store's serialisation is still there, not the store object
    assert rebuilt.top_k == 2 and type(rebuilt.document_store) is type(store) and BM25sRetriever.from_dict(data).top_k == 2


def test_bm25_recommendation_prefers_the_standard_among_near_ties():
    table = pd.DataFrame(
        [
            dict(stemmer_language="english", stopwords="none", k1=2.0, b=1.0, **{RANK_BY[0]: 0.9, RANK_BY[1]: 0.801}),
            dict(stemmer_language="english", stopwords="none", k1=1.2, b=1.0, **{RANK_BY[0]: 0.9, RANK_BY[1]: 0.799}),
            dict(stemmer_language="none", stopwords="none", k1=1.2, b=1.0, **{RANK_BY[0]: 0.9, RANK_BY[1]: 0.800}),
            dict(stemmer_language="english", stopwords="en", k1=1.2, b=0.75, **{RANK_BY[0]: 0.8, RANK_BY[1]: 0.900}),
        ]
    )
    # 100 questions: MRR gaps of 0.002 are noise, so the setting two changes from the standard wins.
    assert recommended(table, questions=100, reference=STANDARD).name == 1
    # 1000 questions: 0.002 is two questions' worth, so only the near-best MRRs remain (three changes each; first kept).
    assert recommended(table, questions=1000, reference=STANDARD).name == 0


def test_where_the_grid_ties_the_recommendation_is_the_setting_in_force():
    """Every row tied on a user's labels, and it recommended b 0.75 where BM25sRetriever uses b 1.0."""
    import inspect

    defaults = inspect.signature(BM25sRetriever.__init__).parameters
    assert IN_FORCE == BM25Setting(*(defaults[name].default for name in ("stemmer_language", "stopwords", "k1", "b")))
    grid = [dict(stemmer_language=stem, stopwords=stop, k1=k1, b=b) for stem in ("english", "none") for stop in ("en", "none")
            for k1 in (0.9, 1.2) for b in (0.75, 1.0)]  # fmt: skip
    table = pd.DataFrame([{**row, RANK_BY[0]: 0.9, RANK_BY[1]: 0.8} for row in grid])
    best = recommended(table, questions=30)
    assert (best["stemmer_language"], best["stopwords"], best["k1"], best["b"]) == ("english", "none", 1.2, 1.0)


def test_tune_bm25_scores_each_setting_and_writes_a_report(settings, tmp_path):
    grid = [BM25Setting("english", None, 1.2, 1.0), BM25Setting(None, "en", 1.5, 0.75)]
    table = tune_bm25(settings, "electronics", "test", out_dir=tmp_path / "grid", grid=grid)
    assert len(table) == 2 and table["recommended"].sum() == 1
    # One test review per product in the tiny corpus: every setting ranks the gold review first; under the
    # chapter's definition q8 ("battery months", words dropped by the annotator) is found in no review.
    assert (table["strict recall@1"] == 1.0).all() and (table["chapter recall@3"] == 0.75).all()
    assert {"report.json", "report.csv", "report.md"} <= {p.name for p in (tmp_path / "grid").iterdir()}
    with pytest.raises(QAError, match="Unknown split"):
        tune_bm25(settings, "electronics", "validation", grid=grid)


def test_tune_bm25_on_a_collection_with_your_own_labels(tmp_path, monkeypatch, capsys):
    from qa_system.cli import main
    from qa_system.ingestion import ingest

    home = Settings.from_env(home=tmp_path / "home", store="memory", data_dir=tmp_path / "no-subjqa")  # the collection's documents only
    ingest(home, write_csv(tmp_path / "reviews.csv"), "labelled", COLUMNS, embed=False, progress=False)
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "question,answer,document_id\nHow long does the battery last?,a whole week,r1\nIs the screen dim in sunlight?,,r2\n"
        "What broke?,The cable broke,r4\nHow is the bass?,deep bass,r3\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("QA_HOME", str(home.home))
    monkeypatch.setenv("QA_DATA_DIR", str(home.data_dir))
    monkeypatch.delenv("QA_STORE", raising=False)
    out = tmp_path / "grid"
    assert main(["tune-bm25", "--collection", "labelled", "--labels", str(labels), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["collection"], report["format"], report["questions"]) == ("labelled", "CSV", 4)
    assert report["title"] == "BM25 settings on labels.csv (CSV) on collection 'labelled'"
    table = pd.DataFrame(report["metrics"])
    assert len(table) == 64 and table["recommended"].sum() == 1
    # Each question's words are in its own review only, within its product's two: ranked first whatever the setting,
    # so every setting ties and the one in force is recommended.
    assert (table["strict mrr"] == 1.0).all() and (table["answerable strict recall@1"] == 1.0).all()
    best = report["best"]
    assert (best["stemmer_language"], best["stopwords"], best["k1"], best["b"]) == ("english", "none", 1.2, 1.0)
    assert "over the 4 passages of collection 'labelled'" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(["tune-bm25", "--labels", str(labels)]) == 2
    assert "Retrieval is evaluated on a collection" in capsys.readouterr().err

    # The Python API opens the labels' collection itself, and refuses labels read without one.
    from qa_system.ingestion.labels import load_labels

    same = tune_bm25(home, "electronics", labels=load_labels(labels, home, "labelled"))
    assert len(same) == 64 and same.loc[same["recommended"], ["k1", "b"]].values.tolist() == [[1.2, 1.0]]
    squad = tmp_path / "own.json"
    squad.write_text(
        json.dumps(
            {
                "version": "v2.0",
                "data": [
                    {
                        "title": "T",
                        "paragraphs": [
                            {
                                "context": "It lasts a whole week.",
                                "qas": [
                                    {
                                        "id": "q1",
                                        "question": "How long?",
                                        "is_impossible": False,
                                        "answers": [{"text": "a whole week", "answer_start": 9}],
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    with pytest.raises(QAError, match="read without a collection"):
        tune_bm25(home, "electronics", labels=load_labels(squad))
    # So does the retriever evaluation (it searched the SubjQA domain's index, which this home does not even have).
    from qa_system.evaluation.retrieval import evaluate_retrievers

    result = evaluate_retrievers(home, "electronics", retrievers=["bm25"], ks=(1,), labels=load_labels(labels, home, "labelled"))
    metrics = result["metrics"]
    strict = metrics[(metrics["retriever"] == "bm25") & (metrics["definition"] == "strict") & (metrics["group"] == "all")]
    assert strict["n"].tolist() == [4] and strict["recall@1"].tolist() == [1.0]
    with pytest.raises(QAError, match="read without a collection"):
        evaluate_retrievers(home, "electronics", retrievers=["bm25"], labels=load_labels(squad))


def test_tune_bm25_apply_stores_the_setting_every_pipeline_of_the_collection_then_reads(tmp_path, monkeypatch, capsys):
    """tune-bm25 named a setting and stored nothing: the pipelines kept the defaults, with no command to change them."""
    from qa_system.cli import main
    from qa_system.ingestion import ingest, open_collection
    from qa_system.ingestion.labels import load_labels
    from qa_system.retrieval.fitted import bm25_defaults, bm25_parameters, fits_for_other_bm25
    from qa_system.stores import save_index
    from qa_system.tuning.bm25 import apply_bm25, check_applies, reset_bm25

    home = Settings.from_env(home=tmp_path / "home", store="memory", data_dir=tmp_path / "no-subjqa")
    ingest(home, write_csv(tmp_path / "reviews.csv"), "labelled", COLUMNS, embed=False, progress=False)
    labels = tmp_path / "labels.csv"
    labels.write_text("question,answer,document_id\nHow long does the battery last?,a whole week,r1\n", encoding="utf-8")

    def stopwords_only():  # "the": in r2 and r4, a stopword under the English list
        index = open_collection(home, "labelled", embeddings=False, progress=False)
        return [d.id for d in build_retrieval_pipeline("bm25", home, index=index).run("the", top_k=5)["documents"]]

    assert sorted(stopwords_only()) == ["r2", "r4"]
    index = open_collection(home, "labelled", embeddings=False, progress=False)
    stored = apply_bm25(home, index, tune_bm25(home, "electronics", labels=load_labels(labels, home, "labelled"), grid=[STANDARD]))
    assert (stored["stopwords"], stored["k1"], stored["b"], stored["fitted_on"], stored["questions"]) == ("en", 1.2, 0.75, "labels.csv", 1)
    retriever = build_retrieval_pipeline("bm25", home, index=open_collection(home, "labelled", embeddings=False)).pipeline
    assert (retriever.get_component("sparse_retriever").stopwords, retriever.get_component("sparse_retriever").b) == ("en", 0.75)
    assert stopwords_only() == []  # the English stopwords dropped: "the" matches nothing
    # a fusion fitted with the defaults no longer matches; back at the defaults, it does again
    index = open_collection(home, "labelled", embeddings=False, progress=False)
    index.manifest["calibration"]["encoder#"] = {"fusion": {"sparse": {**bm25_defaults(), "top_k": 10}}}
    assert fits_for_other_bm25(index, bm25_parameters(index)) == ["the hybrid's fusion"]
    assert reset_bm25(home, index)
    assert sorted(stopwords_only()) == ["r2", "r4"] and fits_for_other_bm25(index, bm25_defaults()) == []
    index.manifest["calibration"]["encoder#"]["fusion"]["sparse"]["k1"] = 2.0  # made with another setting: said at --apply
    save_index(index, home)

    monkeypatch.setenv("QA_HOME", str(home.home))
    monkeypatch.setenv("QA_DATA_DIR", str(home.data_dir))
    monkeypatch.delenv("QA_STORE", raising=False)
    run = ["tune-bm25", "--collection", "labelled", "--labels", str(labels), "--out", str(tmp_path / "grid")]
    capsys.readouterr()
    assert main([*run, "--apply", "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert (
        "Applied to collection 'labelled': its questions now use stemmer english, stopwords none, k1 1.2, b 1 "
        "(`qa-system tune-bm25 --collection labelled --reset` goes back to the defaults).\n"
        "Fitted with the BM25 setting before, and read until fitted again: the hybrid's fusion "
        "(`qa-system fit-fusion --collection labelled --labels FILE`)." in out
    )
    # every setting ties here: the best one shown is the grid's first, and the recommended one follows it
    header, first, chosen = out.splitlines()[:3]
    assert header.split()[:4] == ["stemmer_language", "stopwords", "k1", "b"] and first.split()[-1] == "False"
    assert chosen.split()[:4] == ["english", "none", "1.200", "1.000"] and chosen.split()[-1] == "True"
    assert (
        main(
            ["eval", "retriever", "--collection", "labelled", "--labels", str(labels), "--retriever", "bm25", "--out", str(tmp_path / "r")]
        )
        == 0
    )
    assert "bm25: BM25 stemmer english, stopwords none, k1 1.2, b 1: stored by tune-bm25 --apply, fitted on labels.csv (1 question)." in (
        capsys.readouterr().out
    )
    assert main(["tune-bm25", "--collection", "labelled", "--reset"]) == 0
    assert capsys.readouterr().out.startswith(
        "BM25 of collection 'labelled' now uses the defaults (stemmer english, stopwords none, k1 1.2, b 1).\nFitted with the BM25"
    )
    assert main([*run, "--apply", "--reset"]) == 2
    assert "--apply stores a setting; --reset removes it. Fix: pass one of them." in capsys.readouterr().err
    with pytest.raises(
        QAError,
        match=r"^Collection 'mine' is on the opensearch store, where BM25 runs in the search server with the settings every index "
        r"of it is made with \(stemmer english, stopwords none, k1 1\.2, b 1\); --apply sets the BM25 of the memory and FAISS stores\. "
        r"Fix: leave out --apply, or index the collection into the memory or FAISS store \(--store\) to use another setting\.$",
    ):
        check_applies("opensearch", "mine")
    for flag in ("--apply", "--reset"):  # before reaching the server: --reset built the domain's index there first
        assert main(["tune-bm25", "--domain", "electronics", flag, "--store", "opensearch", "--opensearch-url", "http://127.0.0.1:9"]) == 2
        assert "Collection 'subjqa-electronics' is on the opensearch store" in capsys.readouterr().err


def test_a_subjqa_domain_rebuilt_keeps_its_applied_bm25_setting(settings):
    """`index --domain` after `tune-bm25 --domain ... --apply` dropped the setting, unsaid."""
    from qa_system.retrieval.fitted import bm25_fit
    from qa_system.tuning.bm25 import apply_bm25

    index = build_index(settings, "electronics", embed=False, progress=False)
    apply_bm25(settings, index, tune_bm25(settings, "electronics", "test", grid=[STANDARD]))
    rebuilt = build_index(settings, "electronics", embed=False, progress=False)
    assert (bm25_fit(rebuilt)["stopwords"], bm25_fit(rebuilt)["b"]) == ("en", 0.75)
    assert build_retrieval_pipeline("bm25", settings, index=rebuilt).pipeline.get_component("sparse_retriever").b == 0.75


def test_filters_restrict_every_retriever(indexed):
    for backend in ("memory", "faiss"):
        for retriever in ("bm25", "dense", "hybrid"):
            pipeline = build_retrieval_pipeline(retriever, indexed[backend])
            result = pipeline.run("How is the sound?", item_id="KINDLE", split="dev", top_k=5)
            assert review_ids(result) == ["r-kindle-3"], (backend, retriever)
            domain_filter = make_filters(domain="electronics", item_id=["MOUSE", "HEADPHONES"])
            result = pipeline.run("battery", filters=domain_filter, top_k=10)
            assert {d.meta["item_id"] for d in result["documents"]} <= {"MOUSE", "HEADPHONES"}, (backend, retriever)
            assert result["documents"], (backend, retriever)


def test_a_review_in_two_splits_is_found_once_under_either_split_by_every_retriever(indexed):
    # r-kindle-3 is in dev and test: one document, so it fills one top-k slot whatever the filter.
    for backend in ("memory", "faiss"):
        for retriever in ("bm25", "dense", "hybrid"):
            pipeline = build_retrieval_pipeline(retriever, indexed[backend])
            for split in ("dev", "test"):
                found = pipeline.run("How is the sound?", item_id="KINDLE", split=split, top_k=5)["documents"]
                assert [(d.id, d.meta["split"]) for d in found] == [("electronics/r-kindle-3", ["dev", "test"])], (
                    backend,
                    retriever,
                    split,
                )
            # No split filter: the product's three reviews, each once.
            product = pipeline.run("How is the sound?", item_id="KINDLE", top_k=5)["documents"]
            assert sorted(d.meta["review_id"] for d in product) == ["r-kindle-1", "r-kindle-2", "r-kindle-3"], (backend, retriever)
            # Other operators go through the same matcher: "in" finds a review by any of its splits.
            in_dev = pipeline.run("sound", filters=make_filters(item_id="KINDLE", split=["dev"]), top_k=5)["documents"]
            assert [d.meta["review_id"] for d in in_dev] == ["r-kindle-3"], (backend, retriever)
            assert pipeline.run("sound", filters=make_filters(item_id="MOUSE", split="dev"), top_k=5)["documents"] == [], (
                backend,
                retriever,
            )


def test_list_valued_meta_matches_by_element_where_haystack_compares_whole_lists():
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils.filters import document_matches_filter

    from qa_system.stores.meta_filters import MultiValueInMemoryDocumentStore, document_matches

    review = Document(id="r", content="sound", meta={"split": ["dev", "test"], "item_id": "K"}, embedding=[1.0, 0.0])
    other = Document(id="o", content="sound", meta={"split": ["train"], "item_id": "K"}, embedding=[0.0, 1.0])
    test = {"field": "meta.split", "operator": "==", "value": "test"}
    # What the installed Haystack does: the list is compared as a whole, so a split filter misses the review.
    assert not document_matches_filter(test, review)
    assert not document_matches_filter({"field": "meta.split", "operator": "in", "value": ["test"]}, review)
    stock = InMemoryDocumentStore()
    stock.write_documents([review, other])
    assert stock.filter_documents(test) == []
    # Ours: by element, as Elasticsearch matches an array field.
    cases = [
        ("==", "test", True),
        ("==", "train", False),
        ("in", ["train", "dev"], True),
        ("in", ["train"], False),
        ("!=", "test", False),
        ("!=", "train", True),
        ("not in", ["dev"], False),
        ("not in", ["train"], True),
        ("==", ["dev", "test"], True),  # the whole list, as Haystack reads it
    ]
    for operator, value, expected in cases:
        assert document_matches({"field": "meta.split", "operator": operator, "value": value}, review) is expected, (operator, value)
    both = {"operator": "AND", "conditions": [test, {"field": "meta.item_id", "operator": "==", "value": "K"}]}
    assert document_matches(both, review) and not document_matches({"operator": "NOT", "conditions": [both]}, review)
    assert document_matches({"operator": "OR", "conditions": [{"field": "meta.split", "operator": "==", "value": "x"}, test]}, review)
    store = MultiValueInMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents([review, other])
    assert [d.id for d in store.filter_documents(test)] == ["r"]
    assert [d.id for d in store.embedding_retrieval([0.0, 1.0], filters=test, top_k=2)] == ["r"]  # the nearer "o" is filtered out
    assert [d.id for d in store.bm25_retrieval("sound", filters=test, top_k=2)] == ["r"]
    assert store.embedding_retrieval([0.0, 1.0], filters={"field": "meta.split", "operator": "==", "value": "nope"}) == []
    assert len(store.embedding_retrieval([0.0, 1.0], top_k=2)) == 2


def test_a_filtered_vector_search_ranks_as_haystacks_own_store_does():
    # the allowed documents are scored directly (they were an id filter Haystack checked id by id: seconds a question)
    import random

    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from qa_system.stores.meta_filters import MultiValueInMemoryDocumentStore

    rng = random.Random(7)
    documents = [
        Document(
            id=f"d{n}",
            content=f"review {n}",
            embedding=[rng.uniform(-1, 1) for _ in range(8)],
            meta={"item_id": f"P{n % 5}", "stars": n % 5},
        )
        for n in range(400)
    ]
    ours, haystacks = (
        MultiValueInMemoryDocumentStore(embedding_similarity_function="cosine"),
        InMemoryDocumentStore(embedding_similarity_function="cosine"),
    )
    ours.write_documents(documents)
    haystacks.write_documents(documents)
    query = [rng.uniform(-1, 1) for _ in range(8)]
    for filters in ({"field": "meta.item_id", "operator": "==", "value": "P2"}, {"field": "meta.stars", "operator": ">=", "value": 3}):
        for keep in (False, True):
            found = ours.embedding_retrieval(query, filters=filters, top_k=10, return_embedding=keep)
            expected = haystacks.embedding_retrieval(query, filters=filters, top_k=10, return_embedding=keep)
            assert [(d.id, d.score, d.embedding) for d in found] == [(d.id, d.score, d.embedding) for d in expected]


def test_top_k_is_respected(indexed):
    for retriever in ("bm25", "dense", "hybrid"):
        result = build_retrieval_pipeline(retriever, indexed["memory"]).run("quality", top_k=2)
        assert len(result["documents"]) <= 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top_k": 0}, "top_k must be a whole number of at least 1, not 0"),  # read nothing: "no answer, score 1.00"
        ({"top_k": -1}, "top_k must be a whole number of at least 1, not -1"),  # hybrid returned 30 reviews
        ({"top_k": 2.5}, "top_k must be a whole number"),
        ({"top_k_reader": -1}, "top_k_reader must be a whole number of at least 1, not -1"),  # 18 answers
        ({"top_k_reader": 0}, "top_k_reader must be a whole number"),
        ({"no_answer_threshold": float("nan")}, "no_answer_threshold must be a finite number, not nan"),
        ({"no_answer_threshold": float("-inf")}, "no_answer_threshold must be a finite number"),
    ],
)
def test_counts_and_thresholds_are_checked_at_the_python_door(indexed, tiny_reader, kwargs, message):
    settings = indexed["memory"].with_(reader_model=str(tiny_reader))
    pipeline = build_qa_pipeline("hybrid", settings)
    with pytest.raises(QAError, match=message) as error:
        pipeline.run("How is the bass?", **kwargs)
    assert "Fix:" in str(error.value) and "\n" not in str(error.value)
    assert len(pipeline.run("How is the bass?", top_k=1, top_k_reader=1, no_answer_threshold=0.0)["documents"]) == 1  # still usable


def test_arguments_of_the_wrong_kind_at_the_python_door_are_one_line_naming_them(indexed):
    settings = indexed["memory"]
    calls = {
        "index=a collection's name": (
            lambda: build_qa_pipeline("bm25", settings, index="electronics"),
            'index must be an opened index, not str. Fix: pass index=qa_system.open_collection(settings, "electronics").',
        ),
        "retriever and settings swapped": (
            lambda: build_retrieval_pipeline(settings, "bm25"),
            "retriever must be a retriever's name (bm25, dense, hybrid), not Settings. Fix: pass the name first, then the settings",
        ),
        "item_id a list": (
            lambda: build_retrieval_pipeline("bm25", settings).run("Is it good for reading?", item_id=["KINDLE"]),
            "item_id must be one product's id (a str), not list.",
        ),
        "question a number": (
            lambda: build_retrieval_pipeline("bm25", settings).run(123, item_id="KINDLE"),
            "The question must be text (a str), not int.",
        ),
    }
    for name, (call, message) in calls.items():
        with pytest.raises(QAError) as error:
            call()
        assert str(error.value).startswith(message) and "\n" not in str(error.value), name


def test_open_index_of_a_collections_name_points_to_open_collection(home, tmp_path):
    from qa_system.ingestion import ingest

    ingest(home, write_csv(tmp_path / "reviews.csv"), "shop", COLUMNS)
    with pytest.raises(QAError) as error:
        open_index(home, "shop")
    assert str(error.value) == (
        "No memory index named 'subjqa-shop': 'shop' is a collection of your own documents, not a SubjQA domain. "
        'Fix: open it with qa_system.open_collection(settings, "shop").'
    )
    with pytest.raises(QAError, match="build it with `qa-system index --domain books"):  # no collection of that name: as before
        open_index(home, "books")


def _library_calls():
    from qa_system.bench import run_bench
    from qa_system.evaluation.answering import evaluate_pipelines, evaluate_readers
    from qa_system.evaluation.rag import evaluate_rag
    from qa_system.evaluation.retrieval import evaluate_retrievers
    from qa_system.reading.reader import ExtractiveReader
    from qa_system.retrieval.rerank import AnswerabilityRanker
    from qa_system.training.reader import TrainingConfig
    from qa_system.training.retriever import RetrieverTrainingConfig
    from qa_system.tuning.fusion import dev_questions

    return {
        # limit=-1 sliced off the last question ([:-1]) and evaluated the rest as if nothing were wrong.
        "eval-retriever-limit": (lambda s: evaluate_retrievers(s, retrievers=["bm25"], limit=-1), "limit must be a whole number"),
        "eval-retriever-k": (lambda s: evaluate_retrievers(s, retrievers=["bm25"], ks=[1, 0]), "k must be a whole number"),
        "eval-reader-top-k": (lambda s: evaluate_readers(s, [s.reader_model], top_k=0), "top_k must be a whole number"),
        "eval-pipeline-threshold": (
            lambda s: evaluate_pipelines(s, [s.reader_model], no_answer_threshold=float("nan")),
            "no_answer_threshold must be a finite",
        ),
        "eval-rag-limit": (lambda s: evaluate_rag(s, limit=0, progress=False), "limit must be a whole number"),
        "tune-bm25-limit": (lambda s: tune_bm25(s, "electronics", limit=-1), "limit must be a whole number"),
        "fit-limit": (lambda s: dev_questions(s, "electronics", "dev", limit=-1), "limit must be a whole number"),
        "bench-sizes": (lambda s: run_bench(s, sizes=[0]), "sizes must be a whole number"),
        "reader-top-k": (lambda s: ExtractiveReader(s.reader_model, top_k=-1), "top_k must be a whole number"),
        "reader-config": (lambda s: TrainingConfig(epochs=0), "epochs must be a whole number"),
        "retriever-config": (
            lambda s: RetrieverTrainingConfig(learning_rate=float("inf")),
            "learning_rate must be a finite number above 0",
        ),
        "reranker-weight": (lambda s: AnswerabilityRanker(retriever_weight=1.5), "retriever_weight must be a finite number from 0 to 1"),
        "reader-warmup": (lambda s: TrainingConfig(warmup_ratio=1.5), "warmup_ratio must be a finite number from 0 to 1"),
        "settings": (lambda s: s.with_(num_beams=0), "num_beams must be a whole number"),
        "settings-env": (lambda s: Settings.from_env(temperature="nan"), "temperature must be a finite number of at least 0"),
    }


@pytest.mark.parametrize("call", list(_library_calls()))
def test_counts_are_checked_by_every_library_entry_point(settings, call):
    function, message = _library_calls()[call]
    with pytest.raises(QAError, match=message) as error:
        function(settings)
    assert "Fix:" in str(error.value) and "\n" not in str(error.value)


def test_dense_and_hybrid_find_the_semantic_match(indexed):
    # No shared word with the gold review: BM25 cannot tell, the encoder can.
    for retriever in ("dense", "hybrid"):
        result = build_retrieval_pipeline(retriever, indexed["memory"]).run("Did the cable break?", item_id="HEADPHONES", top_k=2)
        assert review_ids(result)[0] == "r-phones-2", retriever
    hybrid = build_retrieval_pipeline("hybrid", indexed["memory"]).run("Did the cable break?", item_id="HEADPHONES")
    assert all(len(d.meta["retriever_scores"]) == 2 for d in hybrid["documents"])


def test_faiss_index_reopens_from_disk(indexed):
    index = open_index(indexed["faiss"], "electronics")
    assert index.store.count_documents() == 6
    assert index.manifest["embedding_dim"] == 384
    result = build_retrieval_pipeline("dense", indexed["faiss"], index=index).run("bass", item_id="HEADPHONES", top_k=1)
    assert review_ids(result) == ["r-phones-1"]
    assert 0 < result["documents"][0].score <= 1


def test_pipelines_are_haystack_yaml_that_round_trips(indexed):
    index = open_index(indexed["memory"], "electronics")
    text = render_pipeline_yaml("hybrid", index, indexed["memory"])
    pipeline = Pipeline.loads(text, allowed_modules=["qa_system"])
    assert set(pipeline.graph.nodes) == {"sparse_retriever", "query_embedder", "dense_retriever", "fusion"}
    again = Pipeline.loads(pipeline.dumps(), allowed_modules=["qa_system"])
    assert again.get_component("fusion").to_dict() == pipeline.get_component("fusion").to_dict()


def _docs(*ids_scores):
    return [Document(id=i, content=i, score=s) for i, s in ids_scores]


def test_reciprocal_rank_fusion_order():
    first, second = _docs(("A", 3), ("B", 2), ("C", 1)), _docs(("C", 9), ("B", 8), ("D", 7))
    # k=60: C = 1/63 + 1/61 = 0.03227 > B = 2/62 = 0.03226 > A = 1/61 > D = 1/63
    fused = reciprocal_rank_fusion([first, second], k=60)
    assert [d.id for d in fused] == ["C", "B", "A", "D"]
    assert fused[0].score == pytest.approx(1 / 63 + 1 / 61)
    assert fused[0].meta["retriever_scores"] == [1, 9]
    assert fused[2].meta["retriever_scores"] == [3, None]
    # Weighting the first list twice flips B and C: B = 3/62, C = 2/63 + 1/61.
    assert [d.id for d in reciprocal_rank_fusion([first, second], k=60, weights=[2, 1])] == ["B", "C", "A", "D"]


def test_minmax_fusion_keeps_confidence():
    sparse = _docs(("A", 10.0), ("B", 9.9), ("C", 0.0))
    dense = _docs(("B", 0.9), ("A", 0.2), ("C", 0.1))
    fused = minmax_fusion([sparse, dense], weights=[0.5, 0.5])
    # A: 0.5*1 + 0.5*(0.1/0.8); B: 0.5*0.99 + 0.5*1 -> BM25 barely prefers A, dense strongly prefers B.
    assert [d.id for d in fused] == ["B", "A", "C"]
    assert fused[0].score == pytest.approx(0.5 * 0.99 + 0.5)
    component = RankFusion(mode="rrf")
    assert [d.id for d in component.run(sparse=sparse, dense=dense, top_k=2)["documents"]] == ["A", "B"]
    with pytest.raises(ValueError, match="Unknown fusion mode"):
        RankFusion(mode="max")


def test_bm25_finds_a_word_written_with_or_without_its_hyphen():
    """ "Is there free wifi?" missed the hotel's "complimentary wi-fi"; "Is the keyboard backlit?" its "not back-lit"."""
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents(
        [Document(content=text) for text in ("The complimentary wi-fi was a plus.", "It is not backlit.", "Free parking.")]
    )
    retriever = BM25sRetriever(store, return_unmatched=False)
    assert [d.content for d in retriever.run("wifi")["documents"]] == ["The complimentary wi-fi was a plus."]
    assert [d.content for d in retriever.run("back-lit keyboard")["documents"]] == ["It is not backlit."]
    from qa_system.retrieval.bm25 import Analyzer

    joined = Analyzer(stopwords=None)("Check-in takes 2-3 minutes, open 9-5 since 2024-01-31; COVID-19 rules, e-mail us")
    assert {"checkin", "email"} <= set(joined) and not {"23", "95", "202401", "covid19"} & set(joined)  # words only
    plain = BM25sRetriever(store, return_unmatched=False, join_hyphenated=False)  # Haystack's own tokens
    assert plain.run("wifi")["documents"] == [] and BM25sRetriever.from_dict(plain.to_dict()).join_hyphenated is False


def test_bm25s_retriever_rebuilds_when_the_store_changes():
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents([Document(content="red apples", meta={"item_id": "X"})])
    retriever = BM25sRetriever(store)
    assert retriever.run("pears")["documents"] == []
    store.write_documents([Document(content="green pears", meta={"item_id": "X"})])
    assert [d.content for d in retriever.run("pears")["documents"]] == ["green pears"]
    assert retriever.run("pears", filters=make_filters(item_id="Y"))["documents"] == []


# bm25s runs a JAX top-k as it is imported: this JAX records the JAX_PLATFORMS that it ran under.
FAKE_JAX = {
    "__init__.py": "import os\nimported_under = os.environ.get('JAX_PLATFORMS')\n",
    "lax.py": "import os\nimport jax\n\ndef top_k(scores, k):\n    jax.top_k_under = os.environ.get('JAX_PLATFORMS')\n    return scores[:k], list(range(k))\n",
}
REPORT_JAX = (
    "import json, os\n"
    "from haystack import Document\n"
    "from haystack.document_stores.in_memory import InMemoryDocumentStore\n"
    "from qa_system.retrieval import BM25sRetriever\n"
    "store = InMemoryDocumentStore()\n"
    "store.write_documents([Document(content='the battery lasts two days')])\n"
    "found = [d.content for d in BM25sRetriever(store).run('battery')['documents']]\n"
    "import jax\n"
    "print(json.dumps([found, jax.imported_under, jax.top_k_under, os.environ.get('JAX_PLATFORMS')]))\n"
)


@pytest.mark.parametrize("users_platforms", [None, "cuda"])
def test_bm25s_keeps_jax_off_the_gpu_unless_the_user_chose_its_platforms(tmp_path, users_platforms):
    """On a GPU, JAX's first use takes 75% of the GPU's memory: the reader and the encoders would find none left."""
    import subprocess
    import sys

    (tmp_path / "jax").mkdir()
    for name, text in FAKE_JAX.items():
        (tmp_path / "jax" / name).write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [env.get("PYTHONPATH")])])
    if users_platforms:
        env["JAX_PLATFORMS"] = users_platforms
    done = subprocess.run([sys.executable, "-c", REPORT_JAX], env=env, capture_output=True, text=True, check=True)
    found, imported_under, top_k_under, left_set = json.loads(done.stdout.splitlines()[-1])
    assert found == ["the battery lasts two days"]
    assert imported_under == top_k_under == (users_platforms or "cpu")
    assert left_set == users_platforms  # the process's environment as it was: its children choose for themselves


def _store(*texts):
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents([Document(id=f"d{i}", content=text, meta={"item_id": "X"}) for i, text in enumerate(texts)])
    return store


REVIEWS = ("The screen is sharp and great for reading.", "Battery lasts two days.", "The case feels cheap but the screen is fine.")


def _ranked(retriever, query="screen reading"):
    return [(d.id, round(d.score, 6)) for d in retriever.run(query)["documents"]]


def test_a_cached_bm25_index_is_loaded_instead_of_built_and_ranks_the_same(tmp_path, monkeypatch):
    import bm25s

    built = BM25sRetriever(_store(*REVIEWS), cache_dir=tmp_path)
    expected = _ranked(built)
    assert expected == _ranked(BM25sRetriever(_store(*REVIEWS)))  # the cache changes nothing about the ranking
    [entry] = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]

    def no_indexing(*args, **kwargs):
        raise AssertionError("indexed again although the same documents are cached")

    monkeypatch.setattr(bm25s.BM25, "index", no_indexing)
    reopened = BM25sRetriever(_store(*REVIEWS), cache_dir=tmp_path)  # a new process: new store, same documents
    assert _ranked(reopened) == expected
    # Other settings or other text are another index: built, never served from the stale one.
    with pytest.raises(AssertionError, match="indexed again"):
        BM25sRetriever(_store(*REVIEWS), cache_dir=tmp_path, k1=2.0).warm_up()
    with pytest.raises(AssertionError, match="indexed again"):
        BM25sRetriever(_store(REVIEWS[0], REVIEWS[1], "The case is sturdy."), cache_dir=tmp_path).warm_up()
    assert [p for p in tmp_path.iterdir() if not p.name.startswith(".")] == [entry]


def test_a_damaged_cached_index_is_rebuilt_and_old_ones_are_pruned(tmp_path, monkeypatch, caplog):
    from qa_system.retrieval import bm25

    expected = _ranked(BM25sRetriever(_store(*REVIEWS), cache_dir=tmp_path))
    [entry] = list(tmp_path.iterdir())
    (entry / "params.index.json").write_text("{not json")
    assert _ranked(BM25sRetriever(_store(*REVIEWS), cache_dir=tmp_path)) == expected
    assert "Ignoring the cached BM25 index" in caplog.text
    assert (entry / "params.index.json").read_text().startswith("{") and json.loads((entry / "params.index.json").read_text())

    monkeypatch.setattr(bm25, "CACHED_INDEXES", 2)
    os.utime(entry, (entry.stat().st_atime, entry.stat().st_mtime - 3600))  # used an hour ago: the oldest, whatever the clock's grain
    for extra in ("one", "two", "three"):
        BM25sRetriever(_store(*REVIEWS, extra), cache_dir=tmp_path).warm_up()
    assert len(list(tmp_path.iterdir())) == 2 and not entry.exists()  # the two most recent are kept


def test_an_index_saved_before_the_marker_is_still_pruned_and_a_lookalike_is_not(tmp_path, monkeypatch):
    from qa_system.retrieval import bm25

    BM25sRetriever(_store(*REVIEWS), cache_dir=tmp_path).warm_up()
    [older] = list(tmp_path.iterdir())
    (older / bm25.CACHE_MARKER).unlink()  # as a release before the marker saved it: bm25s's files only
    lookalike = tmp_path / ("f" * 32)
    lookalike.mkdir()
    (lookalike / "params.index.json").write_text("{}")  # a digest's name, but not bm25s's files
    for folder in (older, lookalike):
        os.utime(folder, (folder.stat().st_atime, folder.stat().st_mtime - 3600))
    monkeypatch.setattr(bm25, "CACHED_INDEXES", 1)
    BM25sRetriever(_store(*REVIEWS, "another"), cache_dir=tmp_path).warm_up()
    assert not older.exists() and (lookalike / "params.index.json").read_text() == "{}" and len(list(tmp_path.iterdir())) == 2


def test_an_unwritable_cache_still_answers(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    assert _ranked(BM25sRetriever(_store(*REVIEWS), cache_dir=blocked / "bm25")) == _ranked(BM25sRetriever(_store(*REVIEWS)))


def test_pipelines_of_the_embedded_stores_cache_their_bm25_index_per_collection(indexed):
    settings = indexed["memory"]
    pipeline = build_retrieval_pipeline("bm25", settings, index=open_index(settings, "electronics"))
    assert review_ids(pipeline.run("bass", item_id="HEADPHONES", top_k=1)) == ["r-phones-1"]
    [electronics] = [
        p for p in settings.bm25_cache_of("subjqa-electronics").iterdir() if not p.name.startswith(".")
    ]  # for the next process
    # Another collection re-indexed again and again keeps its own two newest and never pushes this one out.
    shop_cache = settings.bm25_cache_of("shop")
    for version in range(4):
        store = new_memory_store("shop")
        store.write_documents([Document(id=f"r{n}", content=f"Review {n} of version {version}.", meta={"item_id": "P1"}) for n in range(3)])
        build_retrieval_pipeline("bm25", settings, index=Index("memory", "shop", store, {})).run("review", top_k=1)
    assert electronics.exists() and len([p for p in shop_cache.iterdir() if not p.name.startswith(".")]) == 2
    assert settings.bm25_cache_of("../../x").parent == settings.bm25_cache  # a name never leaves the cache folder


def test_a_loaded_store_counts_terms_for_haystacks_bm25_only_when_it_is_used_and_scores_alike(indexed):
    from qa_system.stores.meta_filters import MultiValueInMemoryDocumentStore

    documents = [Document(id=f"d{i}", content=text, meta={"item_id": "X"}) for i, text in enumerate(REVIEWS)]
    written, loaded = MultiValueInMemoryDocumentStore(shared=False), MultiValueInMemoryDocumentStore(shared=False)
    written.write_documents(documents)
    loaded.load_documents(documents)
    assert loaded.count_documents() == 3 and not loaded._bm25_attr  # nothing counted on load
    for store in (written, loaded):  # changes after the load are counted too
        store.write_documents([Document(id="d9", content="Great screen for reading at night.")])
        store.delete_documents(["d1"])

    def ranked(store):
        return [(d.id, d.score) for d in store.bm25_retrieval("screen reading", top_k=5)]

    assert ranked(loaded) == ranked(written) and [i for i, _ in ranked(written)] == ["d9", "d0", "d2"]
    with pytest.raises(ValueError, match="empty store"):
        loaded.load_documents(documents)
    opened = open_index(indexed["memory"], "electronics").store  # a saved index opens without counting
    assert opened.count_documents() > 0 and not opened._bm25_attr
    assert opened.bm25_retrieval("bass", filters=make_filters(item_id="HEADPHONES"), top_k=1)[0].meta["review_id"] == "r-phones-1"


def test_a_document_split_into_passages_is_one_hit_at_its_best_passage():
    """A long document of one's own is indexed as passages that share its document_id: found first, with two more of
    its passages further down, it scores MAP 1 (it counted three hits, MAP 0.81); chance still counts every passage."""
    from qa_system.evaluation.retrieval import relevant_ranks
    from qa_system.metrics.ranking import average_precision
    from qa_system.sources import GoldAnswer, LabelledQuestion

    question = LabelledQuestion(
        "q1", "How long is the cable?", "LAMP", "manual", "manual", "own", "test", [GoldAnswer("two metres", 10)], False
    )
    passages = [
        Document(id="manual#0", content="The cable is two metres long.", meta={"document_id": "manual"}),
        Document(id="other", content="The lamp is bright.", meta={"document_id": "other"}),
        Document(id="manual#3", content="Wipe it with a dry cloth.", meta={"document_id": "manual"}),
        Document(id="manual#5", content="The warranty lasts a year.", meta={"document_id": "manual"}),
    ]
    ranks = relevant_ranks(question, passages, pooled={"manual", "other"})
    assert ranks["strict"] == [1] and average_precision(ranks["strict"]) == 1.0
    assert ranks["pooled"] == [1, 2] and ranks["chapter"] == [1]
    every = relevant_ranks(question, passages, pooled={"manual"}, once_per_document=False)
    assert every["strict"] == [1, 3, 4] and every["pooled"] == [1, 3, 4]
    assert average_precision(every["strict"]) == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)
