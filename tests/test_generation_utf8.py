"""Sampling that spells valid UTF-8 (issue 23.10): ``companion.generation.Utf8Mask`` and ``generate(valid_utf8=)``.

The automaton is checked against Python's own UTF-8 decoder, byte by byte from every state and on random byte
strings; the mask against a brute-force check of every token; and sampling on a byte-level BPE model of Chinese
and emoji text: 100 samples, not one replacement character, where the same draws without the mask break
characters (so the test can fail).
"""

from __future__ import annotations

import codecs
import random

import pytest
import torch

from companion.data import token_bytes
from companion.generation import Utf8Mask, generate
from companion.generation.utf8 import ACCEPT, PENDING, REJECT, feed_bytes
from companion.models import GPT, ModelConfig
from companion.tokens import BPETokenizer

# Chinese, emoji (four bytes; one with a joiner), a few two-byte letters and ASCII
TEXT = ("注意力机制让每个位置直接关注所有其他位置。我爱自然语言处理🙂！模型学会了预测下一个词元🚀。"
        "Transformer 的核心是自注意力；café naïve 👩‍💻 编码器和解码器。") * 6
# one prefix per state of the automaton (and a few more): the bytes that lead there
PREFIXES = [b"", b"a", b"\xc3", b"\xe4", b"\xe4\xbd", b"\xe0", b"\xed", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98",
            b"\xf4", b"\xf4\x8f", b"\xf1\x80\x80", b"\xe4\xbd\xa0"]  # fmt: skip


# Every proper prefix of the UTF-8 encoding of every Unicode scalar value (surrogates have none): the bytes a
# text may end with while its last character is still unfinished.
UNFINISHED = {chr(c).encode()[:k] for c in (*range(0xD800), *range(0xE000, 0x110000))
              for k in range(1, len(chr(c).encode()))}  # fmt: skip


def python_reads(data: bytes) -> tuple[bool, bool]:
    """(``data`` is the start of some valid UTF-8 text, its last character is unfinished), from Python's decoder:
    its incremental mode decodes what it can and holds back the bytes at the end that may still become a
    character; whether they can is the question ``UNFINISHED`` answers (Python holds back ED A0, a surrogate's
    start, though nothing can complete it)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return False, False
    held = decoder.getstate()[0]
    return (not held or held in UNFINISHED), bool(held)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_automaton_agrees_with_pythons_decoder_on_every_byte(prefix: bytes) -> None:
    state = feed_bytes(ACCEPT, prefix)
    assert state != REJECT
    for b in range(256):
        data = prefix + bytes([b])
        after = feed_bytes(state, bytes([b]))
        valid, unfinished = python_reads(data)
        assert (after != REJECT) == valid, data
        if valid:
            assert (after != ACCEPT) == unfinished, data


def test_the_automaton_agrees_with_pythons_decoder_on_random_bytes() -> None:
    rng = random.Random(0)
    pieces = [bytes([b]) for b in range(256)] + [c.encode() for c in "é中🙂\U0010ffff\u0800\ud7ff"]
    for _ in range(3000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        state = feed_bytes(ACCEPT, data)
        assert (state != REJECT) == python_reads(data)[0], data
        try:
            data.decode("utf-8")
            whole = True
        except UnicodeDecodeError:
            whole = False
        assert (state == ACCEPT) == whole, data


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    tok = BPETokenizer()
    tok.train(TEXT, 256 + 60, special_tokens=["<|endoftext|>"])
    return tok


def test_the_mask_allows_exactly_the_tokens_that_keep_the_bytes_valid(bpe: BPETokenizer) -> None:
    pieces = token_bytes(bpe)
    mask = Utf8Mask(pieces)
    for prefix in PREFIXES:
        state = torch.tensor([feed_bytes(ACCEPT, prefix)])
        for steps_left in (1, 2, 4):
            allowed = mask.allowed(state, steps_left, len(pieces))[0].tolist()
            for i, piece in enumerate(pieces):
                after = feed_bytes(int(state), piece)
                expected = after != REJECT and PENDING[after] <= steps_left - 1
                assert allowed[i] == expected, (prefix, steps_left, piece)


def model_for(tok: BPETokenizer, seed: int = 0) -> GPT:
    """A freshly initialised model: its next-token distribution is near uniform, so without the mask it takes
    byte tokens that break characters in nearly every sample."""
    torch.manual_seed(seed)
    model = GPT(ModelConfig.gpt2_small(vocab_size=tok.vocab_size, d_model=32, n_heads=2, n_layers=1, d_ff=64,
                                       max_seq_len=64, dropout=0.0))  # fmt: skip
    return model.eval()


@pytest.mark.parametrize("settings", [{}, {"top_k": 20}, {"top_p": 0.9, "temperature": 1.3}, {"greedy": True}])
def test_a_hundred_samples_of_chinese_and_emoji_decode_without_replacement_characters(
    bpe: BPETokenizer, settings: dict
) -> None:
    model = model_for(bpe)
    prompt = torch.tensor([bpe.encode("注意力")] * 100)  # (100, T)
    n = 64 - prompt.size(1)
    mask = Utf8Mask(token_bytes(bpe))
    out = generate(model, prompt, n, generator=0, valid_utf8=mask, **settings)
    texts = [bytes(b"".join(bpe.vocab.get(i, b"") for i in row.tolist())) for row in out]
    assert all(t.decode("utf-8") for t in texts)  # strict: raises on any invalid or unfinished character
    assert sum("\ufffd" in bpe.decode(row) for row in out) == 0
    if not settings.get("greedy"):
        free = generate(model, prompt, n, generator=0, **settings)  # the same draws without the mask
        assert sum("\ufffd" in bpe.decode(row) for row in free) >= 90  # what the mask prevents


def test_a_prompt_that_ends_inside_a_character_is_completed(bpe: BPETokenizer) -> None:
    """The prompt's last character is unfinished (its first byte only): the first tokens must complete it."""
    first_byte = bpe.encode("我")[:1] if len(bpe.encode("我")) > 1 else [bpe._byte_ids["我".encode()[0]]]
    prompt = torch.tensor([bpe.encode("注意") + first_byte] * 50)
    out = generate(model_for(bpe, seed=1), prompt, 20, generator=3, valid_utf8=Utf8Mask(token_bytes(bpe)))
    for row in out:
        assert "\ufffd" not in bpe.decode(row), bpe.decode(row)


def test_one_step_left_forbids_starting_a_character(bpe: BPETokenizer) -> None:
    """With one step left from between characters, only tokens of whole characters may come."""
    pieces = token_bytes(bpe)
    allowed = Utf8Mask(pieces).allowed(torch.tensor([ACCEPT]), 1, len(pieces))[0]
    for i, piece in enumerate(pieces):
        assert bool(allowed[i]) == (piece is not None and feed_bytes(ACCEPT, piece) == ACCEPT), piece


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="token_bytes"):
        Utf8Mask(b"abc")
    with pytest.raises(TypeError, match=r"token_bytes\[1\]"):
        Utf8Mask([b"a", "b"])
    with pytest.raises(ValueError, match="empty"):
        Utf8Mask([])
    model = GPT(ModelConfig.gpt2_small(vocab_size=300, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=8))
    with pytest.raises(TypeError, match="valid_utf8"):
        generate(model, torch.tensor([[1]]), 2, valid_utf8=[b"a"])
