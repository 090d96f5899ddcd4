"""Byte-level byte-pair encoding (BPE) tokenizer (chapter 01_tokens).

Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units"; byte-level as in
GPT-2 (Radford et al. 2019). Written in the style of karpathy/minbpe. Three ways to get one:

* ``tok.train(text, vocab_size, pattern="gpt4", special_tokens=[...])`` learns merges from a text
  (:mod:`companion.tokens.bpe_train`); the text is cut at special tokens first, so no merge crosses one,
  and the specials take the ids after the merges (``vocab_size`` counts them);
* ``BPETokenizer.from_merges(merges, vocab=None, special_tokens=(), pattern="gpt4")`` takes merges (and a
  vocabulary) given as bytes, as tiktoken and Hugging Face keep them; given a ``vocab``, ids are that
  vocabulary's own; ``BPETokenizer.from_gpt2_files(vocab_json, merges_txt)`` reads GPT-2's published files
  (:mod:`companion.tokens.bpe_import`);
* ``BPETokenizer.load(path)`` reads a file written by ``save`` (:mod:`companion.tokens.bpe_files`).

Encoding (:mod:`companion.tokens.pretokenize` has the cutting rules): the allowed special tokens are cut out
first (leftmost, longest wins) and are never split by merges; the rest is pre-split by ``pattern``; each chunk
starts as its bytes and the earliest-learned merge present is applied until none is. ``encode_iterable``
gives the same ids for a stream of strings (a file object), holding only a short tail of it.

Implements :class:`companion.tokens.base.Tokenizer`. Checked against Hugging Face ``tokenizers`` (the trainer
learns the same merges, tests/test_tokens.py) and against tiktoken's ``gpt2`` encoding and ``tokenizers``
with GPT-2's own files (the same ids, tests/test_tokens_gpt2.py).

Left out on purpose: normalisation (NFC, lower-casing), BPE dropout, SentencePiece.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from companion.tokens.base import as_id_list, check_text, check_token, check_token_list
from companion.tokens.bpe_files import read_bpe_file, write_bpe_file
from companion.tokens.bpe_import import read_gpt2_files, tables_from_merges
from companion.tokens.bpe_train import learn_merges
from companion.tokens.pretokenize import GPT2_SPLIT_PATTERN, GPT4_SPLIT_PATTERN, Splitter, pieces, stream_pieces

__all__ = ["GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "BPETokenizer", "merge_pair"]

AllowedSpecial = Literal["none", "all"] | set[str] | frozenset[str]


def merge_pair(ids: list[int], a: int, b: int, new_id: int) -> list[int]:
    """Replace every non-overlapping (a, b), left to right, by ``new_id``: [a, a, a] -> [new, a]."""
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if ids[i] == a and i + 1 < n and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class BPETokenizer:
    """Byte-level BPE: each byte is a token, and each merge adds one token made of two earlier ones.

    Attributes: ``merges`` {(id, id): new_id} in priority (training) order, ``vocab`` {id: bytes},
    ``merge_history`` [((id, id), new_id, count)] (empty unless trained), ``special_tokens`` {str: id},
    ``pattern`` (str or None). A trained tokenizer numbers the bytes 0..255 and each merge the next id;
    ``from_merges(..., vocab=...)`` keeps that vocabulary's numbering.
    """

    def __init__(self) -> None:
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
        self.merge_history: list[tuple[tuple[int, int], int, int]] = []
        self.special_tokens: dict[str, int] = {}
        self.pattern: str | None = None
        self._ranks: dict[tuple[int, int], int] = {}
        self._byte_ids = list(range(256))  # the id of each byte
        self._splitters: dict[frozenset[str], Splitter] = {}
        self._cache: dict[str, list[int]] = {}

    def _set_pattern(self, pattern: str | None) -> None:
        self.pattern = Splitter(pattern).pattern  # checks it; "gpt2"/"gpt4" become their regexes
        self._splitters.clear()

    def _set_tables(self, merges: dict[tuple[int, int], int], vocab: dict[int, bytes],
                    history: list[tuple[tuple[int, int], int, int]] | None = None) -> None:
        self.merges, self.vocab, self.merge_history = merges, vocab, history or []
        self._ranks = {pair: r for r, pair in enumerate(merges)}
        id_of_bytes = {piece: i for i, piece in vocab.items() if len(piece) == 1}
        self._byte_ids = [id_of_bytes[bytes([b])] for b in range(256)]
        self._cache.clear()

    # ------------------------------------------------------------------ three ways to build one
    def train(self, text: str, vocab_size: int, pattern: str | None = "gpt4", *,
              special_tokens: Iterable[str] = (), verbose: bool = False) -> None:
        """Learn merges from ``text`` until the vocabulary holds ``vocab_size`` tokens, special tokens included.

        ``pattern``: "gpt4" (default, GPT-4's split), "gpt2" (names are case-insensitive), a regex
        (``regex`` module syntax; unmatched gaps become chunks of their own), or None (no pre-split).
        ``special_tokens``: cut out of ``text`` before counting (no merge crosses one, and they are not
        counted); they get the ids after the merges, in the order given. Starts again from the 256 bytes,
        forgetting earlier training and specials. Training stops early if no pair is left. The algorithm
        and its tie-break (the same as ``tokenizers``' BpeTrainer) are in :mod:`companion.tokens.bpe_train`.
        """
        check_text("text", text)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {vocab_size!r} ({type(vocab_size).__name__})")
        specials = check_token_list("special_tokens", special_tokens)
        if vocab_size < 256 + len(specials):
            raise ValueError(f"vocab_size={vocab_size} is too small; expected >= {256 + len(specials)} (the 256 "
                             f"bytes and {len(specials)} special tokens)")
        self.__init__()
        self._set_pattern(pattern)
        chunk_counts = Counter(p for p, special in pieces(text, Splitter(self.pattern, specials)) if not special)
        merges, vocab, history = learn_merges(chunk_counts, vocab_size - len(specials), verbose=verbose)
        self._set_tables(merges, vocab, history)
        self.register_special_tokens({token: len(vocab) + k for k, token in enumerate(specials)})

    @classmethod
    def from_merges(cls, merges: Iterable[tuple[bytes, bytes]], vocab: dict[bytes, int] | None = None,
                    special_tokens: Iterable[str] = (), pattern: str | None = "gpt4") -> BPETokenizer:
        """A tokenizer from merges given as bytes, e.g. ``[(b" ", b"t"), (b"h", b"e"), (b" t", b"he")]``.

        Args:
            merges: pairs of byte strings, highest priority (earliest learned) first; each piece is one
                byte or made by an earlier merge.
            vocab: {bytes: id} holding every byte and every merge's result (e.g. GPT-2's ``vocab.json``,
                decoded to bytes); ids are then this vocabulary's own. None: the bytes are 0..255 and each
                merge's result the next id, as ``train`` numbers them.
            special_tokens: e.g. ``["<|endoftext|>"]``; one that ``vocab`` holds (and no merge makes) keeps
                its id there, the others get the ids after the largest, in the order given.
            pattern: the pre-split the merges were learned with ("gpt4", "gpt2", a regex or None).

        Raises:
            TypeError / ValueError: merges that are not pairs of bytes or use a piece neither a byte nor made
            by an earlier merge; a vocab whose ids collide or that misses a byte or a merge's result; an empty
            special token (:func:`companion.tokens.bpe_import.tables_from_merges` lists them all).
        """
        tok = cls()
        tok._set_pattern(pattern)
        merge_ids, vocab_ids, special_ids = tables_from_merges(merges, vocab, special_tokens)
        tok._set_tables(merge_ids, vocab_ids)
        tok.register_special_tokens(special_ids)
        return tok

    @classmethod
    def from_gpt2_files(cls, vocab_json: str | Path, merges_txt: str | Path,
                        special_tokens: Iterable[str] = ()) -> BPETokenizer:
        """GPT-2's tokenizer from its published ``vocab.json`` (``encoder.json``) and ``merges.txt``
        (``vocab.bpe``), with GPT-2's ids and pre-split; the same ids as tiktoken's ``gpt2`` encoding.

        ``vocab.json``'s entries that no merge makes (GPT-2: ``<|endoftext|>``, id 50256) are its special
        tokens; ``special_tokens`` adds more, with ids from 50257 on. Any byte-level BPE folder in this
        format (Hugging Face's GPT-2, RoBERTa...) loads the same way; list its specials if it has others.
        """
        merges, vocab, found = read_gpt2_files(vocab_json, merges_txt)
        extra = [t for t in check_token_list("special_tokens", special_tokens) if t not in found]
        return cls.from_merges(merges, vocab, found + extra, pattern="gpt2")

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a file written by ``save``; the vocabulary is rebuilt from the merges.

        The file is verified as it is read; any defect raises a ``ValueError`` naming the file and the line:
        a wrong header, bad JSON, a count that does not match the lines that follow (a truncated file), a
        merge naming an id no earlier line defined, a special token whose id is taken, trailing garbage.
        """
        pattern, specials, merges, vocab = read_bpe_file(path)
        tok = cls()
        tok._set_pattern(pattern)
        tok._set_tables(merges, vocab)
        for lineno, token, i in specials:
            try:
                tok.register_special_tokens({token: i})
            except (TypeError, ValueError) as err:
                raise ValueError(f"{str(path)!r}, line {lineno}: {err}") from err
        return tok

    def save(self, path: str | Path) -> None:
        """Write a text file: a header, the pattern, the specials, then one merge per line "a b new_id".

        Atomic (:func:`companion._files.atomic_write`): if writing fails, an existing file at ``path`` keeps
        its old content. Raises ``ValueError`` for a tokenizer that keeps another vocabulary's numbering
        (``from_merges(..., vocab=...)``, GPT-2's files): the file holds ids 0..255 for the bytes.
        """
        expected = {piece: i for i, piece in enumerate(bytes([b]) for b in range(256))}
        for new_id in self.merges.values():
            expected.setdefault(self.vocab[new_id], len(expected))
        if any(expected[self.vocab[i]] != i for i in self.vocab) or len(expected) != len(self.vocab):
            raise ValueError("this tokenizer keeps its source vocabulary's ids (from_merges with vocab=..., or GPT-2's "
                             "files), which a companion-bpe file cannot hold (bytes are ids 0..255 there, each merge "
                             "the next id); keep the source files and build it again with from_merges")
        write_bpe_file(path, self.pattern, self.special_tokens, self.merges, self.vocab)

    # ------------------------------------------------------------------ special tokens
    def register_special_tokens(self, special_tokens: dict[str, int]) -> None:
        """Declare special tokens, e.g. ``{"<|endoftext|>": 4096}``.

        Tokens are non-empty strings; ids are ints >= 0, distinct from each other and from the vocabulary's
        ids (usually ``vocab_size``, ``vocab_size + 1``...). Registering a token again with a new id moves it.
        Nothing is registered if any entry is invalid.
        """
        if not isinstance(special_tokens, dict):
            raise TypeError(f"special_tokens must be a dict {{str: int}}, got {type(special_tokens).__name__}")
        merged = dict(self.special_tokens)
        for token, i in special_tokens.items():
            check_token("special token", token)
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise TypeError(f"special token {token!r} has id={i!r} ({type(i).__name__}); expected an int")
            if i < 0:
                raise ValueError(f"special token {token!r} has id={i}; expected an id >= 0")
            if i in self.vocab:
                raise ValueError(f"special token {token!r} has id={i}, which is already taken by the vocabulary "
                                 f"token {self.vocab[i]!r}; expected an id >= {max(self.vocab) + 1}")
            merged[token] = int(i)
        owners: dict[int, str] = {}
        for token, i in merged.items():
            if i in owners:
                raise ValueError(f"special tokens {owners[i]!r} and {token!r} both have id={i}, which is already "
                                 "taken; expected distinct ids")
            owners[i] = token
        self.special_tokens = merged
        self._splitters.clear()

    @property
    def vocab_size(self) -> int:
        """One more than the largest id (the size of an embedding table for these ids)."""
        return max([*self.vocab, *self.special_tokens.values()]) + 1

    def token_to_id(self, token: str) -> int:
        """The id of a special token, or of the vocabulary token whose bytes are ``token.encode()``."""
        check_text("token", token)
        if token in self.special_tokens:
            return self.special_tokens[token]
        wanted = token.encode("utf-8")
        for i, piece in self.vocab.items():
            if piece == wanted:
                return i
        raise ValueError(f"token={token!r} is not in the vocabulary")

    def id_to_token(self, i: int) -> str:
        """The text of id ``i``; a token that is part of a UTF-8 character shows U+FFFD (``vocab[i]`` has
        its exact bytes)."""
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"id={i!r} must be an int, got {type(i).__name__}")
        for token, j in self.special_tokens.items():
            if j == i:
                return token
        if i not in self.vocab:
            raise ValueError(f"id={i} is not in the vocabulary (size {self.vocab_size})")
        return self.vocab[i].decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ encode / decode
    def _splitter(self, allowed_special: AllowedSpecial) -> Splitter:
        """The splitter for ``allowed_special``: "none" (specials are plain text), "all", or a set of specials."""
        if isinstance(allowed_special, str) and allowed_special in ("none", "all"):
            allowed = frozenset(self.special_tokens if allowed_special == "all" else ())
        elif isinstance(allowed_special, (set, frozenset)):
            unknown = allowed_special - set(self.special_tokens)
            if unknown:
                raise ValueError(f"allowed_special contains unregistered tokens {sorted(unknown)!r}")
            allowed = frozenset(allowed_special)
        else:
            raise ValueError(f"allowed_special={allowed_special!r} : expected 'none', 'all' or a set")
        if allowed not in self._splitters:
            self._splitters[allowed] = Splitter(self.pattern, allowed)
        return self._splitters[allowed]

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = self._cache.get(chunk)
        if ids is not None:
            return ids
        byte_ids = self._byte_ids
        ids = [byte_ids[b] for b in chunk.encode("utf-8")]
        while len(ids) >= 2:  # apply the earliest-learned merge present, as in training order
            pair = min(zip(ids, ids[1:]), key=lambda p: self._ranks.get(p, float("inf")))
            if pair not in self._ranks:
                break
            ids = merge_pair(ids, pair[0], pair[1], self.merges[pair])
        if len(self._cache) < 100_000:  # bounded: memory does not grow with the text encoded
            self._cache[chunk] = ids
        return ids

    def _ids(self, parts: Iterable[tuple[str, bool]]) -> Iterator[int]:
        for piece, special in parts:
            if special:
                yield self.special_tokens[piece]
            else:
                yield from self._encode_chunk(piece)

    def encode(self, text: str, allowed_special: AllowedSpecial = "none") -> list[int]:
        """Text -> ids. ``allowed_special``: "none" (specials are plain text), "all", or a set of specials."""
        check_text("text", text)
        return list(self._ids(pieces(text, self._splitter(allowed_special))))

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ignoring special tokens (their text is encoded like any other text)."""
        return self.encode(text, "none")

    def encode_iterable(self, texts: Iterable[str], allowed_special: AllowedSpecial = "none") -> Iterator[int]:
        """The ids of ``"".join(texts)`` one by one, equal to ``encode`` of the whole, without reading it whole.

        ``texts``: any iterable of str, e.g. an open text file (its lines). Memory holds one line and a short
        tail (what the next line could still change: a special token cut in two, a whitespace run), plus the
        bounded cache of chunks already encoded; it does not grow with the file. Raises ``TypeError`` for a
        lone str (``encode`` it, or pass ``[text]``).
        """
        return self._ids(stream_pieces(texts, self._splitter(allowed_special)))

    def decode(self, ids: Iterable[int]) -> str:
        """Ids (a list, or a 1-D tensor of any integer dtype) -> text.

        Byte sequences that are not valid UTF-8 decode to U+FFFD (errors="replace").
        """
        inverse_special = {i: s.encode("utf-8") for s, i in self.special_tokens.items()}
        parts = []
        for i in as_id_list(ids):
            if i in self.vocab:
                parts.append(self.vocab[i])
            elif i in inverse_special:
                parts.append(inverse_special[i])
            else:
                raise ValueError(f"id={i} is not in the vocabulary (size {self.vocab_size})")
        return b"".join(parts).decode("utf-8", errors="replace")
