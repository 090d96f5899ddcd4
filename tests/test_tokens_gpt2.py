"""BPETokenizer from outside: merges and vocabularies given as bytes (``from_merges``) and GPT-2's published
files (``from_gpt2_files``), checked against tiktoken's ``gpt2`` encoding and Hugging Face ``tokenizers``.

GPT-2's real ``vocab.json`` and ``merges.txt`` ship with the tests, xz-compressed, under their original names
``encoder.json`` and ``vocab.bpe`` (tests/data/gpt2/). tiktoken reads the same two files, offline,
from a cache folder that a fixture fills, and checks their SHA-256 against the hashes it keeps for GPT-2's
files (a mismatch makes it download again, which the fixture turns into a failure): a test that gets past it
runs on GPT-2's real files. ``tokenizers`` reads them with its own parser (``models.BPE.from_file``).
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokens import CORPUS, HELD_OUT, _byte_decoder, _tokenizers_bpe

from companion.tokens import BPETokenizer
from companion.tokens.bpe_import import bytes_to_unicode

EOT, EOT2 = "<|endoftext|>", "<|endoftext|><|endoftext|>"
GPT2_DATA = Path(__file__).parent / "data" / "gpt2"

# A mixed corpus: English prose and code, contractions, numbers, Chinese, Japanese, Korean, Greek, accents, emoji
# (with a ZWJ sequence and a skin tone), whitespace runs of every kind, and special tokens inside the text,
# back to back, overlapping, and cut short.
MIXED = (
    CORPUS + HELD_OUT + "\n"
    "It's 3:45pm; we'll've done 1,234,567.89 things, haven't we?? I'M SHOUTING. don't   stop\n"
    "我爱自然语言处理。東京は日本の首都です。한국어 텍스트도 있습니다. Ελληνικά κείμενα. naïve café Straße Ørsted\n"
    "emoji 🙂🙂🙂 👩‍👩‍👧 👍🏽 🐈‍⬛ ✔️ ★\n"
    "spaces:     five, tabs:\t\t\ttwo, trailing   \n\n\n\nblank lines, \r\nCRLF, lone\rCR, nbsp:\u00a0\u00a0x, "
    "ideographic:\u3000\u3000y, zero-width:\u200bz, \x0bvt\x0cff\n"
    f"doc one{EOT}doc two{EOT2}doc three{EOT * 3}four {EOT} five<|endoftext| six <|endof{EOT}text|>\n"
    f"{EOT}starts and ends{EOT}"
)

# The addresses tiktoken_ext/openai_public.py reads GPT-2's files from; tiktoken caches each under the SHA-1
# of its address.
_TIKTOKEN_URLS = {
    "encoder.json": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
    "vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
}


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory) -> tuple[Path, Path]:
    """GPT-2's ``vocab.json`` and ``merges.txt`` (``encoder.json``, ``vocab.bpe``), decompressed into a temporary
    folder from tests/data/gpt2/."""
    folder = tmp_path_factory.mktemp("gpt2")
    for name in ("encoder.json", "vocab.bpe"):
        (folder / name).write_bytes(lzma.decompress((GPT2_DATA / f"{name}.xz").read_bytes()))
    return folder / "encoder.json", folder / "vocab.bpe"


@pytest.fixture(scope="module")
def tiktoken_gpt2(gpt2_files, tmp_path_factory):
    """``tiktoken.get_encoding("gpt2")`` from GPT-2's files, offline."""
    pytest.importorskip("tiktoken")
    import tiktoken
    import tiktoken.load

    cache = tmp_path_factory.mktemp("tiktoken-cache")
    for path in gpt2_files:
        shutil.copy(path, cache / hashlib.sha1(_TIKTOKEN_URLS[path.name].encode()).hexdigest())

    def no_download(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken tried to download {blobpath}: its cached copy is missing or is not GPT-2's")

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        patch.setattr(tiktoken.load, "read_file", no_download)
        return tiktoken.get_encoding("gpt2")


@pytest.fixture(scope="module")
def gpt2(gpt2_files) -> BPETokenizer:
    return BPETokenizer.from_gpt2_files(*gpt2_files)


@pytest.fixture(scope="module")
def gpt2_eot2(gpt2_files) -> BPETokenizer:
    return BPETokenizer.from_gpt2_files(*gpt2_files, special_tokens=[EOT2])


def test_gpt2_files_give_tiktokens_ids(gpt2: BPETokenizer, tiktoken_gpt2) -> None:
    enc = tiktoken_gpt2
    assert gpt2.vocab_size == enc.n_vocab == 50257
    assert gpt2.special_tokens == {EOT: enc.eot_token} == {EOT: 50256}
    ids = gpt2.encode(MIXED, allowed_special="all")
    assert ids == enc.encode(MIXED, allowed_special="all")
    assert gpt2.encode(MIXED) == enc.encode_ordinary(MIXED)  # specials as plain text
    assert gpt2.decode(ids) == enc.decode(ids) == MIXED
    assert list(gpt2.encode_iterable(io.StringIO(MIXED), allowed_special="all")) == ids  # a file, line by line


_ALPHABET = st.sampled_from(list("aAzZ019 '’sltrvem.,!?-_\n\r\t\u00a0\u3000我爱語言éßøΩ🙂👍🏽\u200d<|>"))


@settings(max_examples=200, deadline=None)
@given(text=st.text(_ALPHABET, max_size=40))
def test_gpt2_files_give_tiktokens_ids_on_random_text(gpt2: BPETokenizer, tiktoken_gpt2, text: str) -> None:
    """Characters chosen to be letters, digits and spaces in every Unicode version both regex engines know."""
    assert gpt2.encode(text) == tiktoken_gpt2.encode_ordinary(text)


def test_gpt2_files_give_tokenizers_ids_with_overlapping_specials(gpt2_eot2: BPETokenizer, gpt2_files) -> None:
    """``tokenizers`` matches added tokens leftmost-longest too: EOT x 3 is EOT2 then EOT."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    theirs = Tokenizer(models.BPE.from_file(*map(str, gpt2_files)))
    theirs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's split regex
    theirs.decoder = decoders.ByteLevel()
    theirs.add_special_tokens([AddedToken(EOT, special=True), AddedToken(EOT2, special=True)])
    assert gpt2_eot2.special_tokens == {EOT: 50256, EOT2: 50257} == {t: theirs.token_to_id(t) for t in (EOT, EOT2)}
    ids = gpt2_eot2.encode(MIXED, allowed_special="all")
    assert ids == theirs.encode(MIXED).ids
    assert gpt2_eot2.encode(EOT * 3, allowed_special="all") == theirs.encode(EOT * 3).ids == [50257, 50256]
    assert gpt2_eot2.decode(ids) == theirs.decode(ids, skip_special_tokens=False) == MIXED


def test_gpt2_ids_are_the_files_own(gpt2: BPETokenizer, gpt2_files, tmp_path) -> None:
    """Every entry of vocab.json has its id: the 256 bytes, the 50,000 merges' results, and <|endoftext|>."""
    decoder = _byte_decoder()
    entries = json.loads(gpt2_files[0].read_text(encoding="utf-8"))
    assert len(entries) == len(gpt2.vocab) + len(gpt2.special_tokens) == 50257
    for text, i in entries.items():
        if text == EOT:
            assert gpt2.special_tokens[EOT] == i
        else:
            assert gpt2.vocab[i] == bytes(decoder[c] for c in text), (text, i)
    assert len(gpt2.merges) == 50000 and gpt2.encode(" the") == [entries["Ġthe"]]
    with pytest.raises(ValueError, match="keeps its source vocabulary's ids"):
        gpt2.save(tmp_path / "gpt2.bpe")


# ---------------------------------------------------------------- from_merges without outside files
def test_from_merges_hand_worked() -> None:
    """Five merges as bytes; no vocab, so ids follow ``train``'s numbering: 256, 257, ... in merge order.

    " t"=256, "he"=257, " the"=258, "aa"=259, "aaa"=260; the special token comes after them, 261.
      " the": bytes 32 116 104 101 -> (32,116) first -> 256 104 101 -> (104,101) -> 256 257 -> 258.
      "aaaa": (97,97) merges left to right without overlap -> 259 259; (259,259) is no merge: stays.
      "aaa":  259 97 -> (259,97) -> 260.
    """
    merges = [(b" ", b"t"), (b"h", b"e"), (b" t", b"he"), (b"a", b"a"), (b"aa", b"a")]
    tok = BPETokenizer.from_merges(merges, special_tokens=[EOT], pattern="gpt2")
    assert tok.merges == {(32, 116): 256, (104, 101): 257, (256, 257): 258, (97, 97): 259, (259, 97): 260}
    assert tok.encode(" the") == [258]
    assert tok.encode("aaaa") == [259, 259]
    assert tok.encode("aaa") == [260]
    assert tok.encode(f"aaa{EOT} the", allowed_special="all") == [260, 261, 258]
    assert tok.vocab_size == 262 and tok.merge_history == []


def test_from_merges_keeps_the_vocabularys_ids() -> None:
    """Renumbering every token changes the ids and nothing else: ids(vocab) == renumbered default ids."""
    trained = BPETokenizer()
    trained.train(CORPUS, 256 + 80, pattern="gpt2")
    merges = [(trained.vocab[a], trained.vocab[b]) for a, b in trained.merges]
    number = {piece: 1000 + 3 * (len(trained.vocab) - i) for i, piece in trained.vocab.items()}  # reversed, spaced
    tok = BPETokenizer.from_merges(merges, vocab=number, pattern="gpt2")
    assert tok.encode(HELD_OUT) == [number[trained.vocab[i]] for i in trained.encode(HELD_OUT)]
    assert tok.decode(tok.encode(HELD_OUT)) == HELD_OUT


def test_from_merges_gives_tokenizers_ids() -> None:
    """A BPE trained by ``tokenizers`` (its own numbering: specials, then its 256-character alphabet, then the
    merges), handed over as bytes: the same ids on held-out text."""
    theirs = _tokenizers_bpe(CORPUS, 256 + 120, "gpt2")
    model = json.loads(theirs.to_str())["model"]
    decoder = _byte_decoder()
    to_bytes = lambda s: bytes(decoder[c] for c in s)  # noqa: E731
    merges = [tuple(map(to_bytes, m if isinstance(m, list) else m.split(" "))) for m in model["merges"]]
    vocab = {to_bytes(t): i for t, i in model["vocab"].items()}
    ours = BPETokenizer.from_merges(merges, vocab=vocab, pattern="gpt2")
    assert ours.encode(HELD_OUT + CORPUS) == theirs.encode(HELD_OUT + CORPUS).ids


def test_from_merges_rebuilds_a_trained_tokenizer(tmp_path) -> None:
    trained = BPETokenizer()
    trained.train(CORPUS, 256 + 100 + 1, special_tokens=[EOT])
    merges = [(trained.vocab[a], trained.vocab[b]) for a, b in trained.merges]
    rebuilt = BPETokenizer.from_merges(merges, special_tokens=[EOT], pattern=trained.pattern)
    assert list(rebuilt.merges.items()) == list(trained.merges.items()) and rebuilt.vocab == trained.vocab
    assert rebuilt.special_tokens == trained.special_tokens
    rebuilt.save(tmp_path / "t.bpe")  # train's numbering: the companion file can hold it
    assert BPETokenizer.load(tmp_path / "t.bpe").encode(MIXED, "all") == trained.encode(MIXED, "all")


def _bytes_vocab(*extra: bytes) -> dict[bytes, int]:
    vocab = {bytes([b]): b for b in range(256)}
    for piece in extra:
        vocab[piece] = len(vocab)
    return vocab


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(merges=[(b"a", b"bc")]), ValueError,
     r"merges\[0\]=\(b'a', b'bc'\) uses b'bc', which is neither one byte nor made by an earlier merge"),
    (dict(merges=[(b"ab", b"c"), (b"a", b"b")]), ValueError, r"merges\[0\]=\(b'ab', b'c'\) uses b'ab'"),
    (dict(merges=[(b"a", b"b"), (b"a", b"b")]), ValueError, r"merges\[1\]=\(b'a', b'b'\) repeats merges\[0\]"),
    (dict(merges=[("a", "b")]), TypeError, r"merges\[0\]\[0\]='a' must be non-empty bytes"),
    (dict(merges=[(b"a", b"")]), TypeError, r"merges\[0\]\[1\]=b'' must be non-empty bytes"),
    (dict(merges=[(b"a",)]), TypeError, r"merges\[0\]=\(b'a',\) must be a pair of bytes"),
    (dict(merges="a b"), TypeError, "merges must be a list of pairs of bytes"),
    (dict(merges=[(b"a", b"b")], vocab={**_bytes_vocab(), b"ab": 5}), ValueError,
     r"vocab gives id=5 to both b'\\x05' and b'ab'; expected distinct ids"),
    (dict(merges=[], vocab={bytes([b]): b for b in range(255)}), ValueError,
     r"vocab has no id for the byte b'\\xff' \(1 of the 256 single bytes are missing\)"),
    (dict(merges=[(b"a", b"b")], vocab=_bytes_vocab()), ValueError,
     r"merges\[0\]=\(b'a', b'b'\) makes b'ab', which vocab has no id for"),
    (dict(merges=[], vocab=_bytes_vocab(b"<s>")), ValueError,
     r"vocab\[b'<s>'\]=256 is neither one byte nor made by a merge; if it is a special token, list it"),
    (dict(merges=[], vocab={**_bytes_vocab(), b"a": -1}), ValueError, r"vocab\[b'a'\]=-1 is invalid"),
    (dict(merges=[], vocab=[b"a"]), TypeError, "vocab must be a dict"),
    (dict(merges=[], special_tokens=[""]), ValueError, r"special_tokens\[0\]='' is the empty string"),
    (dict(merges=[], special_tokens={"<s>": 5}), TypeError, "special_tokens must be a list of str, got dict"),
    (dict(merges=[(b"a", b"b")], special_tokens=["ab"]), ValueError,
     "special token 'ab' is also an ordinary token"),
    (dict(merges=[], pattern="(bad"), ValueError, r"pattern='\(bad' is not a valid regular expression"),
])  # fmt: skip
def test_from_merges_bad_input_is_named(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        BPETokenizer.from_merges(**kwargs)


# ---------------------------------------------------------------- GPT-2's file format, on small files
def _write_gpt2_files(folder: Path, merges_lines: list[str]) -> tuple[Path, Path]:
    """A tiny vocab.json/merges.txt in GPT-2's format: the bytes in GPT-2's order, three merges, <|endoftext|>."""
    table = bytes_to_unicode()
    order = sorted(range(256), key=lambda b: table[b])  # GPT-2 numbers the bytes in this order
    vocab = {table[b]: i for i, b in enumerate(order)} | {"Ġt": 256, "he": 257, "Ġthe": 258, EOT: 259}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("\n".join(["#version: 0.2", *merges_lines]) + "\n", encoding="utf-8")
    return folder / "vocab.json", folder / "merges.txt"


def test_gpt2_format_on_a_small_file(tmp_path) -> None:
    """Space is "Ġ" in GPT-2's files; ``<|endoftext|>``, which no merge makes, becomes the special token."""
    tok = BPETokenizer.from_gpt2_files(*_write_gpt2_files(tmp_path, ["Ġ t", "h e", "Ġt he"]))
    assert tok.special_tokens == {EOT: 259}
    assert tok.encode(f" the{EOT}", allowed_special="all") == [258, 259]
    assert tok.encode("!") == [0]  # "!" is the first printable byte: id 0 in GPT-2's numbering


@pytest.mark.parametrize(("merges_lines", "match"), [
    (["Ġ t", "h e e"], r"merges.txt', line 3: expected two pieces separated by one space"),
    (["Ġ t", "a中 b"], r"merges.txt', line 3: 'a中' has the character '中', which is not one of GPT-2's 256 byte"),
    (["h e", "Ġ t", "Ġt he", "x y"], r"merges\[3\]=\(b'x', b'y'\) makes b'xy', which vocab has no id for"),
])  # fmt: skip
def test_gpt2_format_errors_name_the_file_and_line(tmp_path, merges_lines, match) -> None:
    with pytest.raises(ValueError, match=match):
        BPETokenizer.from_gpt2_files(*_write_gpt2_files(tmp_path, merges_lines))


def test_gpt2_format_rejects_a_vocab_that_is_not_a_json_object(tmp_path) -> None:
    vocab_json, merges_txt = _write_gpt2_files(tmp_path, ["Ġ t"])
    vocab_json.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab.json' holds a list; expected a JSON object"):
        BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
    vocab_json.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab.json' is not JSON text"):
        BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
