"""Special tokens and streams in BPETokenizer: longest special wins, ``encode_iterable`` equals ``encode`` of the
whole text in bounded memory, and ``train(..., special_tokens=...)`` never merges across a special."""

from __future__ import annotations

import json
import operator
import random
import re
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokens import CORPUS, HELD_OUT, _byte_decoder

from companion.tokens import BPETokenizer
from companion.tokens.pretokenize import Splitter, pieces, stream_pieces

EOT, EOT2 = "<|endoftext|>", "<|endoftext|><|endoftext|>"
SPECIALS = [EOT, EOT2, "<s>"]


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    t = BPETokenizer()
    t.train(CORPUS, 256 + 120 + len(SPECIALS), pattern="gpt2", special_tokens=SPECIALS)
    return t


def test_the_longest_special_wins_and_specials_are_never_merged(tok: BPETokenizer) -> None:
    """Leftmost-longest: at each place the longest special that starts there, then scanning goes on after it.

    "<|endoftext|>" x 3 is EOT2 then EOT (not EOT then EOT2: the first match starts leftmost and is the
    longest there). "<s" is not "<s>", so it stays ordinary text.
    """
    eot, eot2, s = (tok.special_tokens[t] for t in SPECIALS)
    assert tok.encode(EOT * 3, allowed_special="all") == [eot2, eot]
    assert tok.encode("a" + EOT + "b", allowed_special="all") == tok.encode("a") + [eot] + tok.encode("b")
    assert tok.encode("<s><s" + EOT2, allowed_special="all") == [s, *tok.encode("<s"), eot2]
    assert tok.encode(EOT * 3, allowed_special={EOT}) == [eot] * 3  # only the allowed ones are cut out
    assert eot not in tok.encode(EOT) and tok.decode(tok.encode(EOT)) == EOT  # default: plain text
    text = HELD_OUT + EOT2 + EOT + "<s>" + CORPUS[:100]
    assert tok.decode(tok.encode(text, allowed_special="all")) == text


# Texts full of the places where a stream is hard to cut: specials and pieces of them, contractions, whitespace
# runs, digit runs; cut into parts at random places.
_ALPHABET = "abls' \n\r\t1!我🙂<|>"
_SNIPPETS = [EOT, EOT2, "<|endof", "<s>", "'ll", "'s", "   ", "\n\n", " \n ", "  \n  \n", "1234567", "我爱NLP", "!!\n",
             " " * 12, "\n" * 10, "\t \n" * 5]  # whitespace runs longer than the 8 characters held at the end


@st.composite
def _cut_texts(draw) -> list[str]:
    parts = draw(st.lists(st.one_of(st.text(_ALPHABET, max_size=8), st.sampled_from(_SNIPPETS)), max_size=14))
    text = "".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    return [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", None, r"\w+", r"[a-z]+|\s+"])
@settings(max_examples=150, deadline=None)
@given(parts=_cut_texts())
def test_stream_pieces_equal_the_pieces_of_the_whole_text(pattern: str | None, parts: list[str]) -> None:
    """Chunk for chunk: what ``stream_pieces`` gives out line by line is what ``pieces`` cuts from the whole."""
    splitter = Splitter(pattern, SPECIALS)
    assert list(stream_pieces(parts, splitter)) == pieces("".join(parts), splitter)


@settings(max_examples=100, deadline=None)
@given(parts=_cut_texts())
def test_encode_iterable_equals_encode(parts: list[str]) -> None:
    text = "".join(parts)
    for allowed in ("all", "none", {EOT}):
        assert list(_TOK.encode_iterable(parts, allowed_special=allowed)) == _TOK.encode(text, allowed_special=allowed)


_TOK = BPETokenizer()  # for the hypothesis test (fixtures do not mix with @given's repeated calls)
_TOK.train(CORPUS, 256 + 120 + len(SPECIALS), pattern="gpt4", special_tokens=SPECIALS)


@pytest.mark.parametrize(("parts", "pattern"), [
    (["x'l", "l"], "gpt2"),                 # x ' l  would be wrong: the whole is x 'll
    (["a\n", "  b"], "gpt2"),               # a \n| | b would be wrong: the whole is a "\n " " b"
    (["a  \n  ", "\nb"], "gpt4"),           # GPT-4's \s*[\r\n] reads the whole whitespace run
    (["a  \n" + " " * 20, "\nb"], "gpt4"),  # ... however long it is
    (["a<|endof", "text|>b"], "gpt2"),      # a special cut in two
    ([EOT, EOT, EOT], "gpt2"),              # EOT2 then EOT, as in the whole text
])
def test_stream_cuts_that_a_line_by_line_encoder_gets_wrong(parts: list[str], pattern: str) -> None:
    splitter = Splitter(pattern, SPECIALS)
    whole = pieces("".join(parts), splitter)
    assert list(stream_pieces(parts, splitter)) == whole
    naive = [p for part in parts for p in pieces(part, splitter)]  # each line on its own
    assert naive != whole, "this case would not catch a line-by-line encoder"


@pytest.mark.slow
def test_encode_iterable_reads_a_file_in_bounded_memory(tmp_path, tok: BPETokenizer) -> None:
    """Peak Python memory (tracemalloc) while streaming a file 20 times the bound stays under the bound.

    BOUND = 192 KiB, about twice what streaming holds here (~100 KiB with CPython 3.11): the file object's
    buffers (8 KiB of bytes and the same decoded, 2 bytes a character for Chinese text: ~45 KiB at peak), the
    regex engine's work space, one line and the short tail held back, and the chunk cache (one entry per
    distinct chunk, a few hundred here). Reading the whole file, or collecting the ids in a list before giving
    them out, needs more than the file's size (>= 20 x BOUND). No emoji in this text: one would make Python
    store each decoded buffer with 4 bytes a character. The ids are compared with ``encode`` of the whole text,
    computed before tracing starts, without allocating per id (``sum`` of booleans counts in C).
    """
    bound = 192 * 1024
    rng = random.Random(0)
    words = ["transformers", "tokenization", "unbelievable", "the", "cat,", "don't", "we'll", "2024", "我爱NLP",
             "它太累了所以没有过马路", "语言模型读的是词元", EOT, EOT2, "<s>", "      ", "\t\t", "(B, T, D)", "x.proj"]
    lines, size = [], 0
    while size < 20 * bound:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) + rng.choice(["\n", "\n\n", "  \n"])
        lines.append(line)
        size += len(line.encode("utf-8"))
    path = tmp_path / "big.txt"
    path.write_text("".join(lines), encoding="utf-8")
    expected = tok.encode(path.read_text(encoding="utf-8"), allowed_special="all")
    tok._cache.clear()  # count the cache's growth too

    with open(path, encoding="utf-8") as f:
        tracemalloc.start()
        try:
            stream = tok.encode_iterable(f, allowed_special="all")
            same = sum(map(operator.eq, expected, stream))  # stops at the end of the shorter
            left = next(stream, None)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert path.stat().st_size >= 20 * bound
    assert same == len(expected) and left is None, "encode_iterable differs from encode"
    assert peak < bound, f"peak {peak:,} bytes while streaming a {path.stat().st_size:,}-byte file"


def test_encode_iterable_bad_input(tok: BPETokenizer) -> None:
    with pytest.raises(TypeError, match="texts must be an iterable of str .*got str"):
        tok.encode_iterable("one text")
    with pytest.raises(ValueError, match="allowed_special='some'"):
        tok.encode_iterable(["a"], allowed_special="some")  # raised at once, not at the first id
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str, got bytes"):
        list(tok.encode_iterable(["a", b"b"]))


# ---------------------------------------------------------------- training with special tokens
def test_train_with_specials_equals_tokenizers_trained_on_the_text_between_them() -> None:
    """Cutting at the specials before counting is training on the pieces between them: ``tokenizers``' trainer
    given those pieces as separate texts (it never merges across texts) learns the same merges in the same
    order. Its ``vocab_size`` counts the specials, as ours does. Specials get the ids after the merges."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    lines = CORPUS.splitlines(keepends=True)
    text = EOT.join(lines[:6]) + "<pad>" + EOT.join(lines[6:])  # "...street.<|endoftext|>我爱..."
    vocab_size = 256 + 150 + 2
    ours = BPETokenizer()
    ours.train(text, vocab_size, pattern="gpt2", special_tokens=[EOT, "<pad>"])
    theirs = Tokenizer(models.BPE())
    theirs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[EOT, "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    theirs.train_from_iterator(re.split(r"<\|endoftext\|>|<pad>", text), trainer)

    decoder = _byte_decoder()
    to_bytes = lambda s: bytes(decoder[c] for c in s)  # noqa: E731
    their_merges = [m if isinstance(m, list) else m.split(" ") for m in json.loads(theirs.to_str())["model"]["merges"]]
    assert [(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges] == [(to_bytes(a), to_bytes(b)) for a, b in
                                                                        their_merges]
    assert ours.special_tokens == {EOT: len(ours.vocab), "<pad>": len(ours.vocab) + 1}
    assert ours.vocab_size == vocab_size == theirs.get_vocab_size()
    sample = HELD_OUT + EOT + "street<pad>"
    their_tokens = [t if t in (EOT, "<pad>") else to_bytes(t) for t in theirs.encode(sample).tokens]
    assert [ours.decode([i]) if i in ours.special_tokens.values() else ours.vocab[i]
            for i in ours.encode(sample, allowed_special="all")] == their_tokens


def test_no_merge_crosses_a_special_token() -> None:
    """Hand-worked: "ab<|x|>ab<|x|>ab", no pre-split. As plain text, merges run across "<|x|>".

    With "<|x|>" cut out the text is three chunks "ab": one merge (a, b) and nothing else is left, so
    training stops at 257 tokens + 1 special = 258 even though 300 were asked for.
    """
    text = "ab<|x|>ab<|x|>ab"
    plain = BPETokenizer()
    plain.train(text, 270, pattern=None)
    assert any(b"|" in plain.vocab[i] and b"ab" in plain.vocab[i] for i in plain.merges.values())
    tok = BPETokenizer()
    tok.train(text, 300, pattern=None, special_tokens=["<|x|>"])
    assert tok.merge_history == [((97, 98), 256, 3)]
    assert tok.special_tokens == {"<|x|>": 257} and tok.vocab_size == 258
    assert tok.encode(text, allowed_special="all") == [256, 257, 256, 257, 256]


def test_train_special_tokens_bad_input() -> None:
    tok = BPETokenizer()
    with pytest.raises(ValueError, match=r"special_tokens\[1\]='' is the empty string"):
        tok.train("abc", 300, special_tokens=[EOT, ""])
    with pytest.raises(ValueError, match=r"special_tokens\[1\]='<s>' repeats special_tokens\[0\]"):
        tok.train("abc", 300, special_tokens=["<s>", "<s>"])
    with pytest.raises(TypeError, match="special_tokens must be a list of str, got the str '<s>'"):
        tok.train("abc", 300, special_tokens="<s>")
    with pytest.raises(ValueError, match=r"vocab_size=257 is too small; expected >= 258 \(the 256 bytes and 2"):
        tok.train("abc", 257, special_tokens=["<s>", "</s>"])
