"""WordPiece tokenizer: greedy longest-match-first with ``##`` continuation pieces (chapter 01_tokens).

As in BERT (Devlin et al. 2019); inference only, from a given vocabulary. Checked against Hugging Face
``tokenizers`` (tests/test_tokens.py): the same pieces as ``tokenizers.models.WordPiece`` behind a BERT
pre-tokenizer. Implements the :class:`companion.tokens.base.Tokenizer` interface.

Left out on purpose: normalisation (lower-casing, accent stripping), training a WordPiece vocabulary.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from companion.tokens.base import as_id_list, check_text, check_token

__all__ = ["WordPieceTokenizer"]


def _is_punctuation(ch: str) -> bool:
    """BERT's rule: ASCII symbols count as punctuation, plus every Unicode category P*."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


class WordPieceTokenizer:
    """BERT's WordPiece: split on whitespace, punctuation and CJK characters, then cut each word greedily
    into the longest vocabulary piece from the left; later pieces carry the ``##`` prefix.

    A word that cannot be fully cut, or that is longer than ``max_chars_per_word``, becomes ``unk_token``.
    ``vocab`` is a list (token i gets id i) or a dict {token: id}; tokens must be non-empty and distinct,
    ids distinct ints >= 0.
    """

    def __init__(self, vocab: list[str] | dict[str, int], unk_token: str = "[UNK]",
                 max_chars_per_word: int = 100) -> None:
        if isinstance(vocab, dict):
            self.vocab = dict(vocab)
        elif isinstance(vocab, (list, tuple)):
            self.vocab = {tok: i for i, tok in enumerate(vocab)}
            if len(self.vocab) != len(vocab):
                dupes = sorted({t for t in vocab if vocab.count(t) > 1}, key=str)
                raise ValueError(f"vocab lists the tokens {dupes!r} more than once; expected distinct tokens")
        else:
            raise TypeError(f"vocab must be a list[str] or dict[str, int], got {type(vocab).__name__}")
        owner: dict[int, str] = {}
        for tok, i in self.vocab.items():
            check_token("vocab token", tok)
            if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                raise ValueError(f"vocab[{tok!r}]={i!r} is invalid; expected an int id >= 0")
            if i in owner:
                raise ValueError(f"vocab gives id={i} to both {owner[i]!r} and {tok!r}; expected distinct ids")
            owner[i] = tok
        check_token("unk_token", unk_token)
        if unk_token not in self.vocab:
            raise ValueError(f"unk_token={unk_token!r} is not in vocab; expected a token of the vocabulary")
        if isinstance(max_chars_per_word, bool) or not isinstance(max_chars_per_word, int) \
                or max_chars_per_word < 1:
            raise ValueError(f"max_chars_per_word={max_chars_per_word!r} is invalid; expected an int >= 1")
        self.unk_token = unk_token
        self.max_chars_per_word = max_chars_per_word
        self.ids_to_tokens = {i: tok for tok, i in self.vocab.items()}

    @staticmethod
    def pre_split(text: str) -> list[str]:
        """Whitespace separates words; each punctuation mark and each CJK character is a word of its own."""
        words, current = [], []
        for ch in text:
            if ch.isspace() or _is_punctuation(ch) or _is_cjk(ch):
                if current:
                    words.append("".join(current))
                    current = []
                if not ch.isspace():
                    words.append(ch)
            else:
                current.append(ch)
        if current:
            words.append("".join(current))
        return words

    def _split_word(self, word: str) -> list[str]:
        if len(word) > self.max_chars_per_word:
            return [self.unk_token]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):  # longest match first
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    pieces.append(piece)
                    start = end
                    break
            else:
                return [self.unk_token]  # some part of the word has no piece: the whole word is unknown
        return pieces

    @property
    def vocab_size(self) -> int:
        """One more than the largest id (the rows of an embedding table for these ids)."""
        return max(self.vocab.values()) + 1

    def token_to_id(self, token: str) -> int:
        """The id of one vocabulary piece (``"##able"`` for a continuation)."""
        check_text("token", token)
        if token not in self.vocab:
            raise ValueError(f"token={token!r} is not in the vocabulary")
        return self.vocab[token]

    def id_to_token(self, i: int) -> str:
        """The piece of id ``i``."""
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"id={i!r} must be an int, got {type(i).__name__}")
        if i not in self.ids_to_tokens:
            raise ValueError(f"id={i} is not in the vocabulary")
        return self.ids_to_tokens[i]

    def tokenize(self, text: str) -> list[str]:
        """Text -> pieces (strings)."""
        check_text("text", text)
        return [piece for word in self.pre_split(text) for piece in self._split_word(word)]

    def encode(self, text: str) -> list[int]:
        """Text -> ids."""
        return [self.vocab[piece] for piece in self.tokenize(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Join pieces: ``##`` pieces glue to the previous one, others are separated by a space.

        ``ids``: a list, or a 1-D tensor of any integer dtype. Lossy by design: spaces around punctuation
        and CJK characters are not restored (WordPiece's pre-split does not record them).
        """
        out = ""
        for i in as_id_list(ids):
            tok = self.id_to_token(i)
            out += tok[2:] if tok.startswith("##") else (" " + tok if out else tok)
        return out
