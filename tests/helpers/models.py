"""A tiny random BERT saved to disk (no download): a 2-layer, 32-wide model with a WordPiece tokenizer over a
small vocabulary, whose answers are noise and whose offsets are real; and a long review to read in windows."""

from __future__ import annotations

import string
from pathlib import Path

WORDS = "the battery lasts about hours sound is great bad and it a of screen price cheap".split()
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}  # the tiny models' shape


def tiny_tokenizer(directory: Path):
    """A BERT WordPiece tokenizer over a small vocabulary (words, then single characters), saved in directory."""
    from transformers import BertTokenizerFast

    characters = string.ascii_lowercase + string.digits + string.punctuation
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *characters, *(f"##{c}" for c in characters)]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(dict.fromkeys(tokens))}, do_lower_case=True)
    tokenizer.save_pretrained(directory)
    return tokenizer


def tiny_model_dir(directory: Path, question_answering: bool = True, max_positions: int = 128) -> Path:
    """A 2-layer, 32-wide BERT (QA head or bare encoder) saved with its tokenizer; ``max_positions``
    must cover the reader's windows (384 tokens) when reviews are long in characters."""
    import torch
    from transformers import BertConfig, BertForQuestionAnswering, BertModel

    tokenizer = tiny_tokenizer(directory)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=max_positions, **TINY)
    torch.manual_seed(0)
    model = (BertForQuestionAnswering if question_answering else BertModel)(config)
    model.save_pretrained(directory)
    return directory


# A long review: short windows (max_seq_length 48 or 64) read it in several parts.
LONG = " ".join(["it is a cheap screen and the sound is bad"] * 12) + " the battery lasts 6000 hours. " + " ".join(["great price"] * 20)


def tiny_roberta_tokenizer(directory: Path, texts: list[str]):
    """A RoBERTa-style byte-level BPE tokenizer learnt from ``texts`` (pairs as ``<s> a </s></s> b </s>``, one token
    type, offsets trimmed), saved in directory."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import RobertaProcessing
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    bpe = ByteLevelBPETokenizer(add_prefix_space=False, trim_offsets=True)
    bpe.train_from_iterator(texts, vocab_size=400, min_frequency=1, special_tokens=specials)
    bpe.post_processor = RobertaProcessing(("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>")), trim_offsets=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_input_names=["input_ids", "attention_mask"],
    )
    tokenizer.save_pretrained(directory)
    return tokenizer


def tiny_roberta_model_dir(directory: Path, texts: list[str]) -> Path:
    """A 2-layer, 32-wide RoBERTa with a QA head, saved with ``tiny_roberta_tokenizer`` learnt from ``texts``."""
    import torch
    from transformers import RobertaConfig, RobertaForQuestionAnswering

    tokenizer = tiny_roberta_tokenizer(directory, texts)
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=140,
        **TINY,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    RobertaForQuestionAnswering(config).save_pretrained(directory)
    return directory
