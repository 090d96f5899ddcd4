"""The course's tokenizers as Hugging Face ``tokenizers.Tokenizer`` objects (``companion.tokens.to_hf_tokenizer``):
the same ids on English, Chinese, emoji, code and whitespace, and the same text back."""

from __future__ import annotations

import pytest
from test_tokens import CORPUS, HELD_OUT

from companion.tokens import END_OF_TEXT, BPETokenizer, CharTokenizer, WordPieceTokenizer, to_hf_tokenizer
from companion.tokens.hf_export import special_token_roles

pytest.importorskip("tokenizers")
MIXED = ["我爱NLP → I love NLP.", "  two spaces, a\ttab and\r\nWindows lines\n\n", "🙂🚀 注意力机制 café",
         "def f(x):\n    return x ** 2  # (B, T, D)", "numbers 1234567 and 'quotes' don't", HELD_OUT]  # fmt: skip


@pytest.mark.parametrize("pattern", ["gpt4", "gpt2", None])
def test_a_byte_level_bpe_gives_the_same_ids(pattern: str | None) -> None:
    ours = BPETokenizer()
    ours.train(CORPUS, 256 + 80, pattern=pattern, special_tokens=[END_OF_TEXT])
    theirs = to_hf_tokenizer(ours)
    for text in [*MIXED, CORPUS]:
        ids = ours.encode(text)
        assert theirs.encode(text).ids == ids, text
        assert theirs.decode(ids, skip_special_tokens=False) == text
    with_special = f"end{END_OF_TEXT}start"
    assert theirs.encode(with_special).ids == ours.encode(with_special, allowed_special="all")


def test_gpt2s_own_numbering_is_kept() -> None:
    """A tokenizer with another vocabulary's ids (from_merges with vocab=...) keeps them in tokenizer.json."""
    merges = [(b" ", b"t"), (b"h", b"e"), (b" t", b"he")]
    vocab = {bytes([b]): 255 - b for b in range(256)} | {b" t": 300, b"he": 301, b" the": 302}
    ours = BPETokenizer.from_merges(merges, vocab, special_tokens=[END_OF_TEXT], pattern="gpt2")
    theirs = to_hf_tokenizer(ours)
    for text in ("the theme of the thesis", "中文 the"):
        assert theirs.encode(text).ids == ours.encode(text)


def test_a_character_tokenizer_gives_the_same_ids() -> None:
    text = "".join(MIXED) + CORPUS
    ours = CharTokenizer.from_text(text, [END_OF_TEXT])
    theirs = to_hf_tokenizer(ours)
    for sample in [*MIXED, f"a{END_OF_TEXT}b"]:
        ids = ours.encode(sample)
        assert theirs.encode(sample).ids == ids, sample
        assert theirs.decode(ids, skip_special_tokens=False) == sample  # no spaces put between characters


def test_roles_and_refusals() -> None:
    assert special_token_roles({END_OF_TEXT: 511}) == {"bos": (END_OF_TEXT, 511), "eos": (END_OF_TEXT, 511)}
    assert special_token_roles({}) == {"bos": None, "eos": None}
    with pytest.raises(TypeError, match="BPETokenizer or CharTokenizer"):
        to_hf_tokenizer(WordPieceTokenizer(["[UNK]", "a"]))


def test_special_tokens_after_a_gap_keep_their_ids(tmp_path) -> None:
    """Registered at 300 and 305 after a vocabulary of 256 + 14 tokens: tokenizers would number them 270 and 271."""
    transformers = pytest.importorskip("transformers")
    ours = BPETokenizer()
    ours.train(CORPUS, 256 + 14)
    ours.register_special_tokens({END_OF_TEXT: 300, "<|im_start|>": 305})
    theirs = to_hf_tokenizer(ours)
    text = f"<|im_start|>我爱NLP{END_OF_TEXT}the cat"
    expected = ours.encode(text, allowed_special="all")
    assert 300 in expected and 305 in expected
    assert theirs.encode(text).ids == expected
    assert theirs.decode(expected, skip_special_tokens=False) == text
    theirs.save(str(tmp_path / "tokenizer.json"))
    auto = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert auto(text)["input_ids"] == expected
