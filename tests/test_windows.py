"""The reader's windows laid out from cached review tokens are the tokenizer's own windows, array for array."""

import threading

import numpy as np
import pytest

from helpers.models import LONG, WORDS, tiny_model_dir, tiny_roberta_tokenizer, tiny_tokenizer
from qa_system.config import default_reader_model
from qa_system.errors import QAError
from qa_system.reading.reader import ExtractiveReader
from qa_system.reading.windows import WindowEncoder, Windows, encode_windows, overflow_parts, shared_window_encoder

REVIEWS = [LONG, "Sound is GREAT, battery is bad.", "x", "  the   screen\tis cheap  ", " ".join(WORDS * 30), "ünïcode café 1/2"]
QUESTIONS = ["how is the battery?", "  and the sound?", "a", "is the screen of this cheap thing about as bad as the price is?"]


def assert_same_windows(ours: Windows, theirs: Windows) -> None:
    assert set(ours) == set(theirs)
    for name in ("input_ids", "attention_mask", "token_type_ids", "overflow_to_sample_mapping"):
        if name in theirs:
            assert ours[name].dtype == theirs[name].dtype and np.array_equal(ours[name], theirs[name]), name
    assert ours.context_spans == theirs.context_spans
    for window in range(len(theirs["input_ids"])):
        length = int(theirs["attention_mask"][window].sum())
        assert np.asarray(ours["offset_mapping"][window][:length]).tolist() == [list(o) for o in theirs["offset_mapping"][window][:length]]


def tokenizers_windows(tokenizer, question: str, reviews: list[str], max_seq_length: int, stride: int) -> Windows:
    return Windows.of(encode_windows(tokenizer, [question] * len(reviews), reviews, max_seq_length, stride, padding=True), tokenizer)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.mark.parametrize("max_seq_length, stride", [(384, 128), (64, 20), (48, 16)])
def test_windows_from_cached_tokens_are_the_tokenizers_own(tokenizer, max_seq_length, stride):
    encoder = WindowEncoder(tokenizer, max_seq_length, stride)
    assert encoder.template is not None  # BERT's template, learnt: the fast path
    for question in QUESTIONS:
        for _ in range(2):  # tokenised, then from the cache
            try:
                theirs = tokenizers_windows(tokenizer, question, REVIEWS, max_seq_length, stride)
            except QAError as error:  # a question too long for the window: the same error
                with pytest.raises(QAError, match="tokens long") as ours:
                    encoder(question, REVIEWS)
                assert str(ours.value) == str(error)
                break
            assert_same_windows(encoder(question, REVIEWS), theirs)
    assert len(encoder._cache) == len(REVIEWS)


def test_a_small_cache_drops_the_least_recently_used_reviews_and_stays_exact(tokenizer):
    encoder = WindowEncoder(tokenizer, 64, 20, cache_tokens=40)
    for review in REVIEWS:
        assert_same_windows(
            encoder("battery?", [review, REVIEWS[1]]), tokenizers_windows(tokenizer, "battery?", [review, REVIEWS[1]], 64, 20)
        )
        assert 0 < encoder._cached_tokens <= 40  # a review longer than the whole cache is not kept, nor empties it
    assert "Sound is GREAT, battery is bad." in encoder._cache  # asked every time: the most recently used


def test_overflow_parts_cut_a_review_as_the_tokenizer_does(tokenizer):
    """Parts of ``room`` tokens every ``room - stride``, the last ending at the review's end, as
    ``tokenizers.Encoding.truncate`` cuts them."""
    from tokenizers import Encoding

    backend = WindowEncoder(tokenizer, 64, 20)._backend
    review = backend.encode(LONG, add_special_tokens=False)
    for room, stride in [(30, 10), (31, 15), (len(review.ids) - 1, 3), (len(review.ids), 5), (300, 100)]:
        copy = Encoding.merge([review], growing_offsets=False)
        copy.truncate(room, stride)
        expected = [part.ids for part in [copy, *copy.overflowing]]
        assert [review.ids[start:stop] for start, stop in overflow_parts(len(review.ids), room, stride)] == expected


def test_the_shipped_readers_windows_over_real_reviews_are_its_tokenizers_own(real_data_dir):
    """Every review of SubjQA electronics test, three questions, the shipped reader's window and stride."""
    from transformers import AutoTokenizer

    from qa_system.sources import load_subjqa

    tokenizer = AutoTokenizer.from_pretrained(default_reader_model())
    encoder = WindowEncoder(tokenizer, 384, 128)
    reviews = list(dict.fromkeys(q.context for q in load_subjqa("electronics", ["test"], real_data_dir).questions))
    windows = 0
    for question in ["Is the sound good?", "How is the battery life compared to the old one?", "  What's the quality of the ﬁnish?"]:
        for first in range(0, len(reviews), 40):
            theirs = tokenizers_windows(tokenizer, question, reviews[first : first + 40], 384, 128)
            assert_same_windows(encoder(question, reviews[first : first + 40]), theirs)
            windows += len(theirs["input_ids"])
    assert len(reviews) > 300 and windows > len(reviews) * 3  # long reviews cut into several windows too


def test_a_tokenizer_whose_post_processor_moves_offsets_is_tokenised_as_before(tmp_path):
    """RoBERTa's post-processor trims a token's leading space from its offsets, except at the start of each part it cuts a
    review into: that tokenizer goes the tokenizer's own way, with the same windows."""
    roberta = tiny_roberta_tokenizer(tmp_path, [*REVIEWS, *QUESTIONS])
    encoder = WindowEncoder(roberta, 48, 16)
    assert encoder.template is None
    assert "token_type_ids" not in encoder("how is the battery?", REVIEWS)
    assert_same_windows(encoder("how is the battery?", REVIEWS), tokenizers_windows(roberta, "how is the battery?", REVIEWS, 48, 16))


def test_threads_sharing_an_encoder_get_their_own_windows(tokenizer):
    encoder = WindowEncoder(tokenizer, 64, 20, cache_tokens=200)  # a cache that keeps dropping reviews meanwhile
    reviews = REVIEWS[::-1][:4] + REVIEWS  # some twice in one question
    expected = {q: tokenizers_windows(tokenizer, q, reviews, 64, 20) for q in QUESTIONS[:3]}
    failures = []

    def ask(question: str) -> None:
        for _ in range(30):
            try:
                assert_same_windows(encoder(question, reviews), expected[question])
            except AssertionError as error:
                failures.append(error)

    threads = [threading.Thread(target=ask, args=(q,)) for q in QUESTIONS[:3] * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_readers_of_one_model_share_one_cache_of_review_tokens(tmp_path):
    """The readers of several pipelines (a collection's, each retriever's) tokenise a review once between them."""
    from haystack import Document
    from transformers import AutoTokenizer

    model = tiny_model_dir(tmp_path / "reader")
    readers = [ExtractiveReader(model=str(model), backend="torch", max_seq_length=64, doc_stride=20) for _ in range(2)]
    readers[0].warm_up()
    readers[0]._tokenizer("a", "b", truncation="only_second", max_length=20)  # its truncation setting now differs
    for reader in readers:
        reader.run("how is the battery?", [Document(content=LONG)])
    assert readers[0]._windows is readers[1]._windows and LONG in readers[0]._windows._cache
    fresh = AutoTokenizer.from_pretrained(model)
    assert shared_window_encoder(fresh, 64, 20) is readers[0]._windows  # the same files, never called yet
    assert shared_window_encoder(fresh, 128, 20) is not readers[0]._windows  # another window
    fresh.padding_side = "left"
    assert shared_window_encoder(fresh, 64, 20) is not readers[0]._windows  # another layout
