"""Tests of companion.tokens: hand-worked BPE, round trips, equality with Hugging Face ``tokenizers``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.tokens import (
    GPT2_SPLIT_PATTERN,
    GPT4_SPLIT_PATTERN,
    BPETokenizer,
    CharTokenizer,
    Tokenizer,
    WordPieceTokenizer,
)
from companion.tokens.pretokenize import Splitter

CORPUS = (
    "The animal didn't cross the street because it was too tired. 它太累了，所以没有过马路。\n"
    "我爱NLP → I love NLP. Tokenizers turn text into tokens, and tokens into ids: 123, 4567, 89!\n"
    "Byte-pair encoding merges the most frequent pair again and again 🙂🙂 until the vocabulary is full.\n"
    "    def forward(self, x):\n        return self.proj(x)  # (B, T, D)\n"
) * 3
HELD_OUT = "An unseen sentence: the cat sat on the mat, 猫坐在垫子上 🐈; numbers 2024 and tabs\tand\r\nlines."


@pytest.fixture(scope="module")
def small_bpe() -> BPETokenizer:
    tok = BPETokenizer()
    tok.train(CORPUS, 256 + 120, pattern="gpt2")
    return tok


# Built once for the hypothesis tests (fixtures do not mix with @given's repeated calls).
_SMALL = BPETokenizer()
_SMALL.train(CORPUS, 256 + 120, pattern="gpt4")


def test_hand_worked_example() -> None:
    """The classic "aaabdaaabac" (Wikipedia's BPE article), no pre-split, three merges.

    Bytes: a=97, b=98, c=99, d=100. Pair counts: (a,a)=4 (overlaps count), (a,b)=2, the rest 1.
      merge 1: (97, 97) -> 256 "aa", count 4.   text: [aa] a b d [aa] a b a c
      counts now: ([aa],a)=2 and (a,b)=2 tie. Ties go to the smaller pair; byte tokens rank before merged
      ones, so (a,b) wins.
      merge 2: (97, 98) -> 257 "ab", count 2.   text: [aa] [ab] d [aa] [ab] a c
      merge 3: (256, 257) -> 258 "aaab", count 2. text: [aaab] d [aaab] a c
    """
    tok = BPETokenizer()
    tok.train("aaabdaaabac", 259, pattern=None)
    assert tok.merge_history == [((97, 97), 256, 4), ((97, 98), 257, 2), ((256, 257), 258, 2)]
    assert tok.merges == {(97, 97): 256, (97, 98): 257, (256, 257): 258}
    assert tok.vocab[258] == b"aaab"
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert tok.decode([258, 100, 258, 97, 99]) == "aaabdaaabac"


def test_tie_break_puts_printable_bytes_first() -> None:
    """Three pairs, each seen once: ("\\n","\\n"), ("\\n","x"), ("x","x").

    By raw byte value (10 < 120) ("\\n","\\n") would be smallest. We rank bytes as GPT-2's byte-to-unicode
    table does (printable bytes first, control bytes after), which is what ``tokenizers`` compares, so
    ("x","x") is merged first.
    """
    tok = BPETokenizer()
    tok.train("\n\nxx", 257, pattern=None)
    assert tok.merge_history == [((120, 120), 256, 1)]


def test_merges_never_cross_chunks_and_vocab_stops_when_nothing_left() -> None:
    """With the GPT-2 pre-split, "ab ab" is the chunks "ab" and " ab"; the pair ("b", " ") never exists.

    (a,b) occurs twice -> "ab"; then (" ", "ab") once -> " ab"; then every chunk is one token and training
    stops, short of vocab_size. Without the pre-split the merges run across the space to one token "ab ab".
    """
    tok = BPETokenizer()
    tok.train("ab ab", 300, pattern="gpt2")
    assert [tok.vocab[i] for i in tok.merges.values()] == [b"ab", b" ab"]
    assert len(tok.vocab) == 258
    no_split = BPETokenizer()
    no_split.train("ab ab", 300, pattern=None)
    assert no_split.encode("ab ab") == [no_split.vocab_size - 1]
    assert no_split.vocab[no_split.vocab_size - 1] == b"ab ab"


def test_pairs_formed_and_merged_away_in_one_step_are_not_merged() -> None:
    """ "abab": merging (a,b) first forms ([ab], a) at the first site, which the second site removes again.

    That pair's count is 0, so after ([ab],[ab]) training must stop: two merges, not a third with count 0.
    """
    tok = BPETokenizer()
    tok.train("abab", 300, pattern=None)
    assert tok.merge_history == [((97, 98), 256, 2), ((256, 256), 257, 1)]


def _tokenizers_bpe(text: str, vocab_size: int, pattern: str | None):
    """Train Hugging Face's byte-level BPE with the same pre-split as ours."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if pattern == "gpt2":  # ByteLevel's own regex is GPT-2's
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    return tok


def _byte_decoder() -> dict[str, int]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", None])
def test_same_merges_and_tokens_as_hugging_face_tokenizers(pattern: str | None) -> None:
    """Train both on CORPUS (English, Chinese, emoji, code) with the same pre-split and vocabulary size.

    Compared: (1) the merge list, in order, as pairs of byte strings; (2) the tokens of a held-out text,
    as byte strings. Both sides can differ: a different tie-break, pair counting (overlapping "aaa") or
    merge application order changes the merge list, and a different encode order changes the tokens.
    Ids are compared through their bytes because ``tokenizers`` numbers the 256 bytes in another order.
    """
    vocab_size = 256 + 150
    ours = BPETokenizer()
    ours.train(CORPUS, vocab_size, pattern=GPT4_SPLIT_PATTERN if pattern == "gpt4" else pattern)
    theirs = _tokenizers_bpe(CORPUS, vocab_size, GPT4_SPLIT_PATTERN if pattern == "gpt4" else pattern)

    decoder = _byte_decoder()
    to_bytes = lambda s: bytes(decoder[c] for c in s)  # noqa: E731
    their_merges = json.loads(theirs.to_str())["model"]["merges"]
    their_merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in their_merges]
    assert [(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges] == [
        (to_bytes(a), to_bytes(b)) for a, b in their_merges
    ]
    assert len(ours.vocab) == theirs.get_vocab_size()

    their_tokens = [to_bytes(t) for t in theirs.encode(HELD_OUT).tokens]
    assert [ours.vocab[i] for i in ours.encode(HELD_OUT)] == their_tokens


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_round_trip_any_unicode(text: str) -> None:
    assert _SMALL.decode(_SMALL.encode(text)) == text


@pytest.mark.parametrize("text", ["我爱NLP", "🙂🐈‍⬛ emoji + ZWJ", "", " ", "\x00\x7f\ufeff", "ab" * 500])
def test_round_trip_examples(small_bpe: BPETokenizer, text: str) -> None:
    ids = small_bpe.encode(text)
    assert small_bpe.decode(ids) == text
    assert all(i in small_bpe.vocab for i in ids)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=256 + 119)))
def test_decode_any_ids_never_raises(ids: list[int]) -> None:
    """Arbitrary ids may split a UTF-8 character; decode puts U+FFFD there instead of failing."""
    assert isinstance(_SMALL.decode(ids), str)


def test_decode_invalid_utf8_replaces() -> None:
    tok = BPETokenizer()
    assert tok.decode([0xE7]) == "\ufffd"  # first byte of a 3-byte character, alone
    assert tok.decode(list("我".encode())) == "我"


def test_save_load_round_trip(tmp_path) -> None:
    tok = BPETokenizer()
    tok.train(CORPUS, 256 + 120, pattern="gpt2")
    tok.register_special_tokens({"<|endoftext|>": 1000, "<pad>": 1001})
    path = tmp_path / "tok.bpe"
    tok.save(path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("companion-bpe v1\npattern ")
    assert len(text.splitlines()) == 4 + 2 + len(tok.merges)  # one merge per line
    loaded = BPETokenizer.load(path)
    assert loaded.merges == tok.merges and list(loaded.merges) == list(tok.merges)
    assert loaded.vocab == tok.vocab
    assert loaded.special_tokens == tok.special_tokens and loaded.pattern == tok.pattern
    sample = HELD_OUT + "<|endoftext|>" + CORPUS[:200]
    assert loaded.encode(sample, allowed_special="all") == tok.encode(sample, allowed_special="all")


def test_load_rejects_other_files(tmp_path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("hello\n")
    with pytest.raises(ValueError, match="companion-bpe v1"):
        BPETokenizer.load(path)


def test_special_tokens() -> None:
    tok = BPETokenizer()
    tok.train(CORPUS, 256 + 40, pattern="gpt2")
    eot = tok.vocab_size
    tok.register_special_tokens({"<|endoftext|>": eot})
    text = "hello<|endoftext|>world"
    with_special = tok.encode(text, allowed_special="all")
    assert with_special == tok.encode("hello") + [eot] + tok.encode("world")
    assert tok.encode(text, allowed_special={"<|endoftext|>"}) == with_special
    plain = tok.encode(text)  # default "none": the special's text is ordinary text
    assert eot not in plain and tok.decode(plain) == text
    assert tok.decode(with_special) == text
    with pytest.raises(ValueError, match="already taken"):
        tok.register_special_tokens({"<x>": 65})
    with pytest.raises(ValueError, match="unregistered"):
        tok.encode(text, allowed_special={"<nope>"})
    with pytest.raises(ValueError, match="allowed_special='some'"):
        tok.encode(text, allowed_special="some")


def test_bpe_bad_input() -> None:
    tok = BPETokenizer()
    with pytest.raises(ValueError, match="vocab_size=100"):
        tok.train("abc", 100)
    with pytest.raises(TypeError, match="vocab_size"):
        tok.train("abc", 300.0)
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        tok.train(b"abc", 300)
    with pytest.raises(TypeError, match="text must be a str, got list"):
        tok.encode(["abc"])
    with pytest.raises(ValueError, match="id=999"):
        tok.decode([999])


def test_merge_history_counts_are_the_pair_counts_at_merge_time(small_bpe: BPETokenizer) -> None:
    """Replaying the merges naively (recount everything each step) gives the recorded counts."""
    import regex

    chunks = [list(c.encode()) for c in regex.findall(small_bpe.pattern, CORPUS)]
    for (a, b), new_id, count in small_bpe.merge_history[:25]:
        naive = sum(1 for w in chunks for p in zip(w, w[1:]) if p == (a, b))
        assert naive == count
        chunks = [_naive_merge(w, a, b, new_id) for w in chunks]


def _naive_merge(w: list[int], a: int, b: int, new_id: int) -> list[int]:
    out, i = [], 0
    while i < len(w):
        if i + 1 < len(w) and (w[i], w[i + 1]) == (a, b):
            out.append(new_id)
            i += 2
        else:
            out.append(w[i])
            i += 1
    return out


# ---------------------------------------------------------------- CharTokenizer
def test_char_tokenizer_round_trip_and_ids() -> None:
    tok = CharTokenizer.from_text("我爱NLP hello", specials=["<pad>"])
    assert tok.itos[0] == "<pad>" and tok.itos[1:] == sorted(set("我爱NLP hello"))
    assert tok.vocab_size == 1 + len(set("我爱NLP hello"))
    ids = tok.encode("hello 我爱NLP")
    assert tok.decode(ids) == "hello 我爱NLP"
    assert tok.encode("<pad>h") == [0, tok.stoi["h"]]


def test_char_tokenizer_unknown_character() -> None:
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("abz")
    with_unk = CharTokenizer.from_text("abc", unk_token="<unk>")
    assert with_unk.encode("az") == [with_unk.stoi["a"], with_unk.stoi["<unk>"]]
    with pytest.raises(TypeError, match="text must be a str"):
        CharTokenizer.from_text(123)


# ---------------------------------------------------------------- WordPiece
WP_VOCAB = ["[UNK]", "[CLS]", "un", "##believ", "##able", "believ", "able", "the", "cat", "##s", ",", "!",
            "我", "爱", "NL", "##P", "u", "##n", "##b"]


def test_wordpiece_unbelievable() -> None:
    tok = WordPieceTokenizer(WP_VOCAB)
    assert tok.tokenize("unbelievable") == ["un", "##believ", "##able"]
    expected = ["the", "cat", "##s", ",", "un", "##believ", "##able", "!"]
    assert tok.tokenize("the cats, unbelievable!") == expected
    assert tok.tokenize("我爱NLP") == ["我", "爱", "NL", "##P"]
    assert tok.decode(tok.encode("the cats unbelievable")) == "the cats unbelievable"


def test_wordpiece_unknown_words() -> None:
    tok = WordPieceTokenizer(WP_VOCAB, max_chars_per_word=8)
    assert tok.tokenize("dog cat") == ["[UNK]", "cat"]
    assert tok.tokenize("unbex") == ["[UNK]"]  # "un" "##b" match, "##e..." does not: whole word unknown
    assert tok.tokenize("unbelievable") == ["[UNK]"]  # 12 characters > max_chars_per_word
    with pytest.raises(ValueError, match="unk_token='<unk>'"):
        WordPieceTokenizer(WP_VOCAB, unk_token="<unk>")


def test_wordpiece_matches_hugging_face_tokenizers() -> None:
    """Same vocabulary behind ``tokenizers``' WordPiece model with BERT pre-tokenizer and CJK splitting."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {t: i for i, t in enumerate(WP_VOCAB)}
    theirs = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    theirs.normalizer = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                                   strip_accents=False, lowercase=False)
    theirs.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    ours = WordPieceTokenizer(vocab)
    texts = ["the cats, unbelievable!", "unbex un-believable", "我爱NLP!!", "cat\tthe\n dogs", "uns ¿un?"]
    for text in texts:
        assert ours.tokenize(text) == theirs.encode(text, add_special_tokens=False).tokens
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------- the shared interface (issue 13, item 6)
def _three_tokenizers() -> list:
    char = CharTokenizer.from_text("hello world 我爱NLP", specials=["<pad>"])
    bpe = BPETokenizer()
    bpe.train(CORPUS, 256 + 40)
    return [char, bpe, WordPieceTokenizer(WP_VOCAB)]


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
def test_every_tokenizer_fits_the_protocol_and_decodes_tensors(dtype) -> None:
    """``tok.decode(generate(...)[0])``: a 1-D tensor of any integer dtype decodes like the list of its ids."""
    for tok in _three_tokenizers():
        assert isinstance(tok, Tokenizer), type(tok).__name__
        ids = tok.encode("hello")[:6]
        assert tok.decode(torch.tensor(ids, dtype=dtype)) == tok.decode(ids)
        assert tok.decode(np.array(ids)) == tok.decode(ids)
        assert tok.vocab_size > max(ids)
        for i in ids:
            assert tok.token_to_id(tok.id_to_token(i)) == i
        with pytest.raises(ValueError, match=r"ids must be 1-D.*ids\[0\]"):
            tok.decode(torch.tensor([ids]))
        with pytest.raises(TypeError, match="ids must hold integers"):
            tok.decode(torch.tensor(ids, dtype=torch.float32))
        with pytest.raises(TypeError, match="ids must hold ints"):
            tok.decode([True])
        with pytest.raises(ValueError, match="token='not-a-token-xyz' is not in the vocabulary"):
            tok.token_to_id("not-a-token-xyz")
        with pytest.raises(ValueError, match=f"id={tok.vocab_size + 5}"):
            tok.id_to_token(tok.vocab_size + 5)


def test_small_integer_dtypes_decode_too() -> None:
    tok = CharTokenizer.from_text("hello")
    ids = tok.encode("hello")
    for dtype in (torch.uint8, torch.int8):
        assert tok.decode(torch.tensor(ids, dtype=dtype)) == "hello"


def test_wordpiece_vocab_size_is_one_more_than_the_largest_id() -> None:
    assert WordPieceTokenizer(WP_VOCAB).vocab_size == len(WP_VOCAB)
    assert WordPieceTokenizer({"[UNK]": 0, "a": 7}).vocab_size == 8


# ---------------------------------------------------------------- bad tokens (issue 13, item 7)
def test_special_token_ids_must_be_ints_at_least_zero_and_unique() -> None:
    tok = BPETokenizer()
    with pytest.raises(TypeError, match=r"special token '<a>' has id='300' \(str\); expected an int"):
        tok.register_special_tokens({"<a>": "300"})
    with pytest.raises(TypeError, match="expected an int"):
        tok.register_special_tokens({"<a>": 300.0})
    with pytest.raises(TypeError, match="expected an int"):
        tok.register_special_tokens({"<a>": True})
    with pytest.raises(ValueError, match="id=-1; expected an id >= 0"):
        tok.register_special_tokens({"<a>": -1})
    with pytest.raises(ValueError, match="'<a>' and '<b>' both have id=300"):
        tok.register_special_tokens({"<a>": 300, "<b>": 300})
    tok.register_special_tokens({"<a>": 300})
    with pytest.raises(ValueError, match="'<a>' and '<b>' both have id=300"):
        tok.register_special_tokens({"<b>": 300})
    with pytest.raises(ValueError, match=r"special token='' is the empty string"):
        tok.register_special_tokens({"": 301})
    with pytest.raises(TypeError, match="special_tokens must be a dict"):
        tok.register_special_tokens([("<c>", 302)])
    assert tok.special_tokens == {"<a>": 300}, "nothing is registered when an entry is invalid"
    tok.register_special_tokens({"<a>": 301, "<b>": 300})  # moving a token frees its old id
    assert tok.special_tokens == {"<a>": 301, "<b>": 300}


def test_the_empty_string_is_not_a_token() -> None:
    with pytest.raises(ValueError, match=r"tokens\[1\]='' is the empty string"):
        CharTokenizer(["<pad>", "", "a"])
    with pytest.raises(ValueError, match=r"specials\[0\]='' is the empty string"):
        CharTokenizer.from_text("abc", specials=[""])
    with pytest.raises(TypeError, match="specials must be a list of str"):
        CharTokenizer.from_text("abc", specials="<pad>")
    with pytest.raises(ValueError, match="vocab token='' is the empty string"):
        WordPieceTokenizer(["[UNK]", "", "a"])
    with pytest.raises(ValueError, match="unk_token='' is the empty string"):
        WordPieceTokenizer(["[UNK]", "a"], unk_token="")


def test_wordpiece_rejects_duplicate_ids_and_tokens() -> None:
    with pytest.raises(ValueError, match="vocab gives id=1 to both 'a' and 'b'; expected distinct ids"):
        WordPieceTokenizer({"[UNK]": 0, "a": 1, "b": 1})
    with pytest.raises(ValueError, match=r"vocab lists the tokens \['a'\] more than once"):
        WordPieceTokenizer(["[UNK]", "a", "a"])
    with pytest.raises(ValueError, match=r"vocab\['a'\]=-2 is invalid; expected an int id >= 0"):
        WordPieceTokenizer({"[UNK]": 0, "a": -2})


# ---------------------------------------------------------------- pre-split patterns (issue 13, item 9)
def test_default_pattern_is_gpt4_and_names_are_case_insensitive() -> None:
    default, named, shouted = BPETokenizer(), BPETokenizer(), BPETokenizer()
    default.train(CORPUS, 256 + 30)
    named.train(CORPUS, 256 + 30, pattern="gpt4")
    shouted.train(CORPUS, 256 + 30, pattern="GPT4")
    assert default.pattern == named.pattern == shouted.pattern == GPT4_SPLIT_PATTERN
    assert default.merges == named.merges == shouted.merges
    gpt2 = BPETokenizer()
    gpt2.train("hello world", 260, pattern="GPT2")  # not the literal regex "GPT2", which would match nothing
    assert gpt2.pattern == GPT2_SPLIT_PATTERN
    assert Splitter(gpt2.pattern).chunks("hello world") == ["hello", " world"]


@pytest.mark.parametrize("pattern", [r"\w+", r"[a-z]+", r"\p{Han}", r"x*", r"(\w)(\w)"])
def test_a_pattern_that_skips_text_never_drops_it(pattern: str) -> None:
    """Gaps between matches become chunks of their own: decode(encode(text)) == text for any pattern."""
    tok = BPETokenizer()
    tok.train(CORPUS, 256 + 60, pattern=pattern)
    for text in (HELD_OUT, CORPUS[:300], "  two  spaces  ", ""):
        assert tok.decode(tok.encode(text)) == text
    assert "".join(Splitter(tok.pattern).chunks(HELD_OUT)) == HELD_OUT


def test_words_only_pattern_matches_tokenizers_split_isolated() -> None:
    """``\\w+`` leaves spaces and punctuation between matches; ``tokenizers``' Split(behavior="isolated") keeps
    those gaps as pieces, and so do we: the same merges and the same held-out tokens."""
    pattern = r"\w+"
    ours = BPETokenizer()
    ours.train(CORPUS, 256 + 100, pattern=pattern)
    theirs = _tokenizers_bpe(CORPUS, 256 + 100, pattern)
    decoder = _byte_decoder()
    to_bytes = lambda s: bytes(decoder[c] for c in s)  # noqa: E731
    their_merges = json.loads(theirs.to_str())["model"]["merges"]
    their_merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in their_merges]
    assert [(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges] == [
        (to_bytes(a), to_bytes(b)) for a, b in their_merges
    ]
    their_tokens = [to_bytes(t) for t in theirs.encode(HELD_OUT).tokens]
    assert [ours.vocab[i] for i in ours.encode(HELD_OUT)] == their_tokens


@pytest.mark.parametrize(("pattern", "error", "match"), [
    ("(unclosed", ValueError, r"pattern='\(unclosed' is not a valid regular expression"),
    ("", ValueError, "pattern='' matches nothing"),
    (3, TypeError, "pattern must be None, 'gpt2', 'gpt4' or a regex str, got 3"),
])
def test_bad_patterns_are_named(pattern, error, match) -> None:
    with pytest.raises(error, match=match):
        BPETokenizer().train("abc", 260, pattern=pattern)


# ---------------------------------------------------------------- files (issue 13, item 10)
def _saved(tmp_path) -> tuple:
    tok = BPETokenizer()
    tok.train(CORPUS, 256 + 20, pattern="gpt2")
    tok.register_special_tokens({"<|endoftext|>": 276})
    path = tmp_path / "tok.bpe"
    tok.save(path)
    return tok, path, path.read_text(encoding="utf-8").splitlines()


def _write(path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_save_is_atomic_and_leaves_no_temporary_file(tmp_path, monkeypatch) -> None:
    tok, path, _ = _saved(tmp_path)
    before = path.read_bytes()
    import companion._files as files

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    tok.register_special_tokens({"<pad>": 277})
    with pytest.raises(OSError, match="No space left"):
        tok.save(path)
    assert path.read_bytes() == before, "a failed save keeps the old file whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok.bpe"]
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tok.save(tmp_path / "no-such-folder" / "tok.bpe")


def test_load_names_the_file_and_line_of_each_defect(tmp_path) -> None:
    _, path, lines = _saved(tmp_path)
    # lines: 1 header, 2 pattern, 3 "specials 1", 4 the special, 5 "merges 20", 6.. the merges
    bad = tmp_path / "bad.bpe"
    cases = [
        (lines[:10], r"line 11: the file ends here, but merge 6 of 20 was expected \(truncated\?\)"),
        (lines[:3], r"line 4: the file ends here, but special token 1 of 1 was expected"),
        (lines[:1] + ["pattern {not json"] + lines[2:], r"line 2: expected \"pattern <json>\"; bad JSON"),
        (lines[:3] + ['"<|endoftext|> 276'] + lines[4:], r"line 4: expected special token 1 of 1 .*bad JSON"),
        (lines[:2] + ["specials 2"] + lines[3:], r"line 5: expected special token 2 of 2"),
        (lines[:4] + ["merges 21"] + lines[5:], r"line 26: the file ends here, but merge 21 of 21"),
        (lines + ["surplus"], r"line 26: unexpected line after the last of 20 merges"),
        (lines[:5] + ["97 999 256"] + lines[6:], r"line 6: the merge names id=999, which no earlier line defines"),
        (lines[:5] + ["garbage here"] + lines[6:], r"line 6: expected merge 1 of 20 as \"a b new_id\""),
        (lines[:5] + [lines[5], lines[5]] + lines[7:], r"line 7: the pair .* is merged twice"),
        (lines[:3] + ['"<|endoftext|>" 65'] + lines[4:], r"line 4: special token '<\|endoftext\|>' has id=65"),
        (lines[:1] + ['pattern "(bad"'] + lines[2:], r"line 2: pattern='\(bad' is not a valid regular"),
        (["hello"], r"line 1: not a companion BPE file; expected the header 'companion-bpe v1'"),
    ]
    for content, match in cases:
        _write(bad, content)
        with pytest.raises(ValueError, match=match) as info:
            BPETokenizer.load(bad)
        assert "bad.bpe" in str(info.value), "the message names the file"
    bad.write_bytes(b"companion-bpe v1\n\xff\xfe garbage")
    with pytest.raises(ValueError, match=r"bad.bpe', line 2: not UTF-8 text"):
        BPETokenizer.load(bad)
    with pytest.raises(ValueError, match="is a folder"):
        BPETokenizer.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        BPETokenizer.load(tmp_path / "missing.bpe")


def test_load_rejects_a_merge_whose_new_id_skips_ahead(tmp_path) -> None:
    _, path, lines = _saved(tmp_path)
    a, b, new_id = lines[5].split("#")[0].split()
    lines[5] = f"{a} {b} {int(new_id) + 7}"
    _write(path, lines)
    with pytest.raises(ValueError, match=rf"line 6: the merge \({a}, {b}\) gives id={int(new_id) + 7}; expected "
                                         rf"id={new_id}"):
        BPETokenizer.load(path)
