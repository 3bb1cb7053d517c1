"""The two candidate protocols of `qa-system eval retriever | pipeline` on a toy index the tests write:
`split` (the product's reviews in the question's split) and `product` (all the product's reviews,
a review in two splits counted once), side by side in one report; the pipeline's no-answer
threshold fitted on dev for a protocol, never on test."""

import json

import pandas as pd
import pytest

from helpers.subjqa import SPLIT_ROWS, row, write_subjqa
from qa_system.cli import main
from qa_system.errors import QAError
from qa_system.evaluation.answering import at_threshold, evaluate_pipelines, fit_no_answer_threshold, reader_label
from qa_system.evaluation.retrieval import CHANCE, evaluate_retrievers
from qa_system.ingestion.indexing import open_or_build_index
from qa_system.stores import saved_manifest

# One more test question, about r-phones-1, in the words of the product's other review ("The cord
# broke ..."): its split has r-phones-1 alone, its product has both.
CORD = row("q10", "Did the cord break?", "r-phones-1", "ANSWERNOTFOUND")
# Per test question: the product's reviews in the test split, and all of them (r-kindle-3 is in dev
# and test, r-phones-1 in train and test: one document each).
SPLIT_CANDIDATES = {"q6": 1, "q7": 1, "q8": 1, "q9": 1, "q10": 1}
PRODUCT_CANDIDATES = {"q6": 3, "q7": 1, "q8": 1, "q9": 2, "q10": 2}


@pytest.fixture
def toy(settings, monkeypatch):
    write_subjqa(settings.data_dir, {**SPLIT_ROWS, "test": [*SPLIT_ROWS["test"], CORD]})
    monkeypatch.setenv("QA_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("QA_HOME", str(settings.home))
    return settings


def strict_all(metrics: pd.DataFrame, retriever: str, candidates: str) -> pd.Series:
    rows = metrics[(metrics["retriever"] == retriever) & (metrics["candidates"] == candidates)]
    return rows[(rows["definition"] == "strict") & (rows["group"] == "all")].iloc[0]


def test_both_protocols_ask_the_expected_candidates_and_count_a_review_once(toy):
    result = evaluate_retrievers(toy, "electronics", "test", ["bm25"], ks=(1, 3), candidates=["split", "product"])
    records = result["records"]["bm25"]
    for protocol, expected in (("split", SPLIT_CANDIDATES), ("product", PRODUCT_CANDIDATES)):
        rows = records[records["candidates"] == protocol].set_index("question_id")
        assert rows["n_candidates"].to_dict() == expected, protocol
        assert rows["retrieved"].to_dict() == expected, protocol  # depth 3 >= every candidate list: all of them come back
        assert (rows["strict_relevant"] == 1).all(), protocol  # the gold review, once
    # The cord question: its own review alone under split; under product the other review says "cord broke" and comes first.
    product = records[records["candidates"] == "product"].set_index("question_id")
    assert product.loc["q10", "strict_ranks"] == [2] and product.loc["q6", "strict_ranks"] == [1]
    metrics = result["metrics"]
    split, whole = strict_all(metrics, "bm25", "split"), strict_all(metrics, "bm25", "product")
    assert (split["recall@1"], split["recall@3"]) == (1.0, 1.0)
    assert (whole["recall@1"], whole["recall@3"]) == (pytest.approx(4 / 5), 1.0)
    assert whole["mrr"] == pytest.approx((4 + 1 / 2) / 5)
    # Chance ranks the same candidates at random: exact from the candidate counts.
    assert strict_all(metrics, CHANCE, "split")["recall@1"] == 1.0
    assert strict_all(metrics, CHANCE, "product")["recall@1"] == pytest.approx((1 / 3 + 1 + 1 + 1 / 2 + 1 / 2) / 5)
    two_plus = metrics[(metrics["candidates"] == "product") & (metrics["group"] == "2+ candidates") & (metrics["definition"] == "strict")]
    assert set(two_plus["n"]) == {3}  # q6, q9, q10
    assert metrics[(metrics["candidates"] == "split") & (metrics["group"] == "2+ candidates")].empty


def test_the_retriever_report_shows_both_protocols_side_by_side(toy, tmp_path, capsys):
    out = tmp_path / "report"
    argv = [
        "eval",
        "retriever",
        "--split",
        "test",
        "--retriever",
        "bm25",
        "--k",
        "1",
        "3",
        "--candidates",
        "split",
        "product",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "product" in printed and "split" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["candidates"] == ["split", "product"]
    side = {row["retriever"]: row for row in report["candidates side by side"]}
    assert list(side) == ["bm25", CHANCE]
    assert side["bm25"]["recall@1 (split)"] == 1.0 and side["bm25"]["recall@1 (product)"] == pytest.approx(0.8)
    assert side["bm25"]["recall@3 (product)"] == 1.0 and side[CHANCE]["recall@1 (product)"] == pytest.approx(2 / 3)
    markdown = (out / "report.md").read_text()
    assert "## Candidates side by side" in markdown and "| recall@1 (split) | recall@1 (product) |" in markdown
    assert "product: every review of the product" in markdown and "1.8 candidate reviews per question (median 2, max 3)" in markdown
    records = pd.read_csv(out / "records.csv")
    assert sorted(records["candidates"].value_counts().items()) == [("product", 5), ("split", 5)]
    # Asked for one protocol, the report is as before: split alone, no side-by-side table.
    assert main(["eval", "retriever", "--split", "test", "--retriever", "bm25", "--k", "1", "--out", str(tmp_path / "one")]) == 0
    one = json.loads((tmp_path / "one" / "report.json").read_text())
    assert {m["candidates"] for m in one["metrics"]} == {"split"} and "candidates side by side" not in one


def test_an_unknown_protocol_is_one_line(toy, capsys):
    assert main(["eval", "retriever", "--retriever", "bm25", "--candidates", "store"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Unknown candidate protocol 'store'") and "use split or product" in err and err.count("\n") == 1
    with pytest.raises(QAError, match="Unknown candidate protocol 'store'"):
        evaluate_retrievers(toy, retrievers=["bm25"], candidates=["store"])


def test_a_threshold_fit_answers_exactly_where_it_gains():
    records = pd.DataFrame(
        {
            "gap": [2.0, 1.0, -1.0, float("-inf")],
            "best_span": ["deep bass", "tinny", "cord", ""],
            "gold": [["deep bass"], [""], ["cord broke"], [""]],
        }
    )
    fit = fit_no_answer_threshold(records, no_answer_prior=None)
    # Answering q1 gains 1, q2 loses 1, q3 gains 2/3: answer q1 only (1.0 + 1 + 0 + 1) or all three
    # (1 + 0 + 2/3 + 1): the first is better, and the threshold lies midway between the gaps 2 and 1.
    assert fit["threshold"] == 1.5 and fit["weighted_f1"] == pytest.approx(3 / 4) and fit["questions"] == 4
    decided = at_threshold(records, fit["threshold"])
    assert list(decided["prediction"]) == ["deep bass", "", "", ""] and list(decided["f1"]) == [1.0, 1.0, 0.0, 1.0]
    # Weighting answerable questions up (a prior of 10% unanswerable) makes answering q3 worth it.
    # Then everything with a span is answered: the threshold lies below the last finite gap.
    assert fit_no_answer_threshold(records, no_answer_prior=0.1)["threshold"] == -2.0


def test_pipeline_under_both_protocols_with_a_threshold_tuned_on_dev(toy, tiny_reader, tmp_path, capsys):
    reader = str(tiny_reader)
    manifest = open_or_build_index(toy, "electronics").manifest
    dev = evaluate_pipelines(
        toy,
        [reader],
        "bm25",
        split="dev",
        top_k_retriever=3,
        candidates=["split", "product"],
        tune_threshold=True,
        out_dir=tmp_path / "dev",
    )
    assert saved_manifest(toy, "subjqa-electronics") == manifest  # fitted for that run only: nothing stored
    system = f"bm25+{reader_label(reader)}"
    tuned = f"{system}, dev-tuned threshold"
    assert set(dev["records"]) == {(system, "split"), (system, "product"), (tuned, "split"), (tuned, "product")}
    # q4 asks about r-kindle-3: alone in its product's dev reviews, one of three in its product.
    split_docs = dev["records"][(system, "split")].set_index("id")["documents"]
    product_docs = dev["records"][(system, "product")].set_index("id")["documents"]
    assert split_docs["q4"] == ["electronics/r-kindle-3"]
    assert sorted(product_docs["q4"]) == ["electronics/r-kindle-1", "electronics/r-kindle-2", "electronics/r-kindle-3"]
    thresholds = dev["thresholds"].set_index("candidates")
    assert list(thresholds.index) == ["split", "product"] and set(thresholds["fitted_on"]) == {"electronics dev"}
    assert thresholds.loc["product", "no_answer_prior"] == pytest.approx(1 / 3)  # train: q3 of q1..q3 is unanswerable
    metrics = dev["metrics"]
    assert set(metrics["system"]) == {system, f"{system}, dev-tuned threshold"}
    # On the dev questions it was fitted on, the fitted threshold cannot do worse than the reader's own.
    for protocol in ("split", "product"):
        assert thresholds.loc[protocol, "f1_dev_tuned"] >= thresholds.loc[protocol, "f1_reader_threshold"] - 1e-9

    # Until `fit-threshold` stores a fit, test reports the reader's own threshold alone.
    assert (
        main(["eval", "pipeline", "--split", "test", "--reader", reader, "--candidates", "product", "--out", str(tmp_path / "before")]) == 0
    )
    assert "dev-tuned threshold" not in capsys.readouterr().out
    assert main(["fit-threshold", "--reader", reader, "--candidates", "split", "product"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("stored in the index") == 2 and "product candidates: no-answer threshold" in printed
    stored_fits = saved_manifest(toy, "subjqa-electronics")["calibration"]
    # Fitted for the depth the doors read (the settings'), where `ask` finds it.
    depth = toy.top_k_retriever
    assert {f"bm25 top-{depth}, {c} candidates" for c in ("split", "product")} == set(next(iter(stored_fits.values()))["no_answer"])
    # Test reports the dev fit beside the reader's own threshold; tuning on test is refused.
    assert (
        main(
            ["eval", "pipeline", "--split", "test", "--reader", reader, "--candidates", "split", "product", "--out", str(tmp_path / "test")]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "dev-tuned threshold" in printed and "No-answer thresholds" in printed
    report = json.loads((tmp_path / "test" / "report.json").read_text())
    assert {(m["system"], m["candidates"]) for m in report["metrics"]} == {
        (s, c) for s in (system, f"{system}, dev-tuned threshold") for c in ("split", "product")
    }
    stored = {row["candidates"]: row["dev_tuned_threshold"] for row in report["no-answer thresholds"]}
    assert stored == thresholds["dev_tuned_threshold"].to_dict()
    for name in (f"predictions-{system}-split.json", f"predictions-{system}_dev-tuned_threshold-product.json"):
        assert (tmp_path / "test" / name).is_file(), name
    # Re-deciding recorded answers at a threshold gives what the reader answers when run at it.
    rerun = evaluate_pipelines(toy, [reader], "bm25", split="test", candidates=["product"], no_answer_threshold=stored["product"])
    direct = rerun["records"][(system, "product")]
    tuned = report_rows(report, f"{system}, dev-tuned threshold", "product")
    assert tuned["em"] == pytest.approx(direct["em"].mean()) and tuned["f1"] == pytest.approx(direct["f1"].mean())
    capsys.readouterr()
    assert main(["fit-threshold", "--split", "test", "--reader", reader, "--candidates", "product"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: The no-answer threshold is tuned on dev only, never on test.") and err.count("\n") == 1
    assert "qa-system fit-threshold --split dev" in err


def report_rows(report: dict, system: str, candidates: str) -> dict:
    return next(m for m in report["metrics"] if m["system"] == system and m["candidates"] == candidates and m["group"] == "all")
