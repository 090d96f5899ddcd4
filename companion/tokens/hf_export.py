"""The course's tokenizers as Hugging Face ``tokenizers.Tokenizer`` objects: what ``tokenizer.json`` holds.

The inverse of :mod:`companion.tokens.bpe_import`: ``to_hf_tokenizer(tok)`` builds, from a ``BPETokenizer``
or a ``CharTokenizer``, a ``tokenizers.Tokenizer`` that gives the same ids for the same text, so that a model
saved with it (``GPT.save_pretrained``) is used by ``transformers.AutoTokenizer`` and ``pipeline`` unchanged.

- A byte-level BPE becomes ``tokenizers``' byte-level BPE: each token's bytes are written as characters of
  GPT-2's ``bytes_to_unicode`` table (space = ``Ġ``), the merges in their priority order, the pre-split
  pattern as a ``Split(pattern, "isolated")`` (text between matches stays, as ours keeps it) followed by
  ``ByteLevel`` without its own regex, and a ``ByteLevel`` decoder.
- A character tokenizer becomes a ``WordLevel`` model over single characters: the text is cut into
  characters by a one-character regex, and the decoder glues them back with nothing in between (``Fuse``).
- Special tokens (``<|endoftext|>``) become added tokens, matched before the split and never merged, at their
  own ids, also when they were registered after a gap in the ids (``{"<|endoftext|>": 300}`` after 270 tokens).

``special_token_roles(tok)`` names the beginning- and end-of-text tokens a Hugging Face folder declares:
GPT-2's convention, one ``<|endoftext|>`` for both (:data:`END_OF_TEXT`), when the tokenizer has it.

Needs the ``tokenizers`` package (imported when called). Checked in tests/test_tokens_hf.py: the same ids as
``encode`` on English, Chinese, emoji and code, and the same text back from ``decode``.
"""

from __future__ import annotations

from typing import Any

from companion.tokens.bpe import BPETokenizer
from companion.tokens.bpe_import import bytes_to_unicode
from companion.tokens.char import CharTokenizer

__all__ = ["END_OF_TEXT", "to_hf_tokenizer", "special_token_roles"]

END_OF_TEXT = "<|endoftext|>"  # GPT-2's one special token: the beginning and the end of every text


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as err:
        raise ModuleNotFoundError(f"writing tokenizer.json needs the tokenizers package ({err}): pip install "
                                  "tokenizers") from None
    return tokenizers


def _added(tokenizers: Any, specials: dict[str, int]) -> list[Any]:
    return [tokenizers.AddedToken(token, special=True, normalized=False)
            for token, _ in sorted(specials.items(), key=lambda item: item[1])]  # fmt: skip


def _bpe(tok: BPETokenizer) -> Any:
    tk = _tokenizers()
    table = bytes_to_unicode()

    def text(piece: bytes) -> str:
        return "".join(table[b] for b in piece)

    vocab = {text(piece): i for i, piece in tok.vocab.items()}
    merges = [(text(tok.vocab[a]), text(tok.vocab[b])) for (a, b) in tok.merges]  # dicts keep priority order

    def build(vocab: dict[str, int]) -> Any:
        model = tk.models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False, ignore_merges=False)
        hf = tk.Tokenizer(model)
        byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        if tok.pattern is None:
            hf.pre_tokenizer = byte_level
        else:
            split = tk.pre_tokenizers.Split(tk.Regex(tok.pattern), behavior="isolated")
            hf.pre_tokenizer = tk.pre_tokenizers.Sequence([split, byte_level])
        hf.decoder = tk.decoders.ByteLevel()
        hf.add_special_tokens(_added(tk, tok.special_tokens))
        return hf

    hf = build(vocab)
    if all(hf.token_to_id(t) == i for t, i in tok.special_tokens.items()):
        return hf
    # tokenizers numbers added tokens on from the end of the vocabulary, so ids registered after a gap (or in another
    # vocabulary's numbering) would move; an added token that the model's vocabulary holds keeps that id instead
    clash = sorted(set(vocab) & set(tok.special_tokens))
    if clash:
        raise ValueError(f"special token {clash[0]!r} is also a token of the vocabulary (id {vocab[clash[0]]}); "
                         "expected special tokens whose text no merge produces")
    return build(vocab | tok.special_tokens)


def _char(tok: CharTokenizer) -> Any:
    tk = _tokenizers()
    specials = {s: tok.stoi[s] for s in tok.specials}
    vocab = dict(tok.stoi)
    model = tk.models.WordLevel(vocab=vocab, unk_token=tok.unk_token or None)
    hf = tk.Tokenizer(model)
    hf.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"[\s\S]"), behavior="isolated")  # one character each
    hf.decoder = tk.decoders.Fuse()  # WordLevel would otherwise join the characters with spaces
    hf.add_special_tokens(_added(tk, specials))
    return hf


def to_hf_tokenizer(tok: BPETokenizer | CharTokenizer) -> Any:
    """A ``tokenizers.Tokenizer`` giving the same ids as ``tok`` (no special tokens added around the text).

    Raises ``TypeError`` for another kind of tokenizer, ``ModuleNotFoundError`` (with the command to run)
    without the ``tokenizers`` package.
    """
    if isinstance(tok, BPETokenizer):
        return _bpe(tok)
    if isinstance(tok, CharTokenizer):
        return _char(tok)
    raise TypeError(f"tok must be a companion BPETokenizer or CharTokenizer, got {type(tok).__name__}")


def special_token_roles(specials: dict[str, int]) -> dict[str, tuple[str, int] | None]:
    """``{"bos": (token, id) or None, "eos": ...}`` for a tokenizer's special tokens ``{token: id}``:
    ``<|endoftext|>`` is both when present (GPT-2's convention), else neither."""
    if END_OF_TEXT in specials:
        both = (END_OF_TEXT, specials[END_OF_TEXT])
        return {"bos": both, "eos": both}
    return {"bos": None, "eos": None}
