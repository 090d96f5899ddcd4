"""The tokenizer of your own text: choosing its size, training it, saving it in a run folder, reading it back.

Step 2 of ``companion-train``'s data pipeline (:mod:`companion.data.text` has the others):

- ``default_vocab_size(text)``: the BPE vocabulary a run takes when ``--vocab-size`` is left out, chosen from
  the text's script (below) and returned with the reason, which the run prints.
- ``train_tokenizer(text, kind, vocab_size, special_tokens)``: a ``companion.tokens`` ``CharTokenizer`` or a
  byte-level ``BPETokenizer`` (GPT-4 pre-split pattern) trained on the text. ``companion-train`` adds
  ``<|endoftext|>`` (GPT-2's one special token, counted in the vocabulary), which a Hugging Face folder
  declares as its beginning- and end-of-text token.
- ``save_tokenizer`` / ``load_tokenizer``: ``tokenizer.char.json`` or ``tokenizer.bpe`` in a run folder; a run
  fine-tuned from a Hugging Face folder keeps that folder's ``tokenizer.json`` (``HFTokenizer``, chapter 13).
- ``token_bytes(tok)``: the bytes each id spells, for bits per byte and for sampling only valid UTF-8
  (``companion.generation.Utf8Mask``).

**Why the default size depends on the script.** A byte-level BPE starts from the 256 byte values and learns a
merge per extra token. English needs few merges to spell its common words; a Chinese character is three bytes,
so it takes two merges to become one token, and a Chinese text uses a thousand or more distinct characters.
With 512 tokens most of them stay split into bytes, and the model spends its capacity gluing bytes together:
measured on the course's Chinese source notes (136 KB, a quarter of the characters CJK) with the default model
and 1,000 steps, BPE-512 scores worse than characters (2.52 against 2.24 bits per byte), BPE-2,048 better
(1.92). The decision counts **bytes**, not characters, because bytes are what a byte-level BPE starts from:
a text whose UTF-8 bytes are at least 25 % in three- or four-byte characters (Chinese, Japanese, Korean, emoji)
gets ``WIDE_SCRIPT_VOCAB`` tokens, other text ``DEFAULT_VOCAB``; pass ``--vocab-size`` to choose. (Counted by
characters, a text with 40 % of its bytes in Chinese is only 18 % Chinese characters, and it lost 0.6 bits per
byte with the alphabetic default; the course's Chinese notes are about half Chinese by bytes.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from companion._checks import check_choice, check_positive_int
from companion._files import atomic_write, atomic_write_text
from companion.tokens import BPETokenizer, CharTokenizer
from companion.tokens.bpe_import import bytes_to_unicode

__all__ = [
    "TOKENIZER_FILES", "DEFAULT_VOCAB", "WIDE_SCRIPT_VOCAB", "Tokenizer", "HFTokenizer", "default_vocab_size",
    "train_tokenizer", "save_tokenizer", "load_tokenizer", "tokenizer_kind", "token_bytes",
]  # fmt: skip

TOKENIZER_FILES = {"char": "tokenizer.char.json", "bpe": "tokenizer.bpe", "hf": "tokenizer.json"}  # kind -> file
DEFAULT_VOCAB = 512  # alphabetic text: 256 bytes + 256 merges spell its common words
WIDE_SCRIPT_VOCAB = 2048  # text of three-byte characters (CJK): room for its common characters as single tokens
WIDE_SHARE = 0.25  # from this share of UTF-8 bytes in three- and four-byte characters on: such a script
_CHAR_FORMAT = "companion-char-tokenizer-v1"


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer`` (a model folder's ``tokenizer.json``) with the course's interface:
    ``encode(text) -> list[int]`` (no special tokens added), ``decode(ids) -> str``, ``vocab_size``; and, for the
    chat template (``companion.finetune.encode_chat``), ``special_tokens``, ``encode_ordinary`` and
    ``register_special_tokens``.

    Needs the ``tokenizers`` package, imported only when such a tokenizer is read.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not all(hasattr(tokenizer, name) for name in ("encode", "decode", "to_str", "get_vocab_size")):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: str | Path) -> HFTokenizer:
        from tokenizers import Tokenizer as _Tokenizer  # an optional dependency, needed for this format only

        try:
            return cls(_Tokenizer.from_file(str(path)))
        except Exception as err:  # tokenizers raises its own Exception subclass for a malformed file
            raise ValueError(f"{str(path)!r} is not a readable tokenizer.json ({err})") from None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    @property
    def special_tokens(self) -> dict[str, int]:
        """The special (added) tokens, ``{token: id}``, as ``BPETokenizer.special_tokens``."""
        return {t.content: i for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special}

    def register_special_tokens(self, special_tokens: dict[str, int]) -> None:
        """Add special tokens at the ids given, which must be the next free ones (``tokenizers`` numbers them)."""
        from tokenizers import AddedToken

        for token, i in sorted(special_tokens.items(), key=lambda item: item[1]):
            if i != self.vocab_size:
                raise ValueError(f"special token {token!r} asks for id {i}; a tokenizer.json adds tokens at the next "
                                 f"free id, {self.vocab_size}")
            self.tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)])

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text`` with special tokens written in it read as plain characters (chat message contents)."""
        before = self.tokenizer.encode_special_tokens
        self.tokenizer.encode_special_tokens = True
        try:
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        finally:
            self.tokenizer.encode_special_tokens = before

    def token_to_id(self, token: str) -> int:
        i = self.tokenizer.token_to_id(token)
        if i is None:
            raise ValueError(f"token={token!r} is not in the vocabulary")
        return i

    def to_str(self) -> str:
        return self.tokenizer.to_str()


Tokenizer = CharTokenizer | BPETokenizer | HFTokenizer


def default_vocab_size(text: str) -> tuple[int, str]:
    """The BPE vocabulary size for ``text`` when none is given, and why (a phrase the run prints)."""
    n_bytes = len(text.encode("utf-8"))
    wide = sum(len(ch.encode("utf-8")) for ch in text if ord(ch) >= 0x800) / max(1, n_bytes)  # 3- or 4-byte chars
    if wide >= WIDE_SHARE:
        return WIDE_SCRIPT_VOCAB, (f"{wide:.0%} of its UTF-8 bytes are in characters of three or four bytes "
                                   f"(Chinese, Japanese, Korean...), which {DEFAULT_VOCAB} tokens cannot hold as "
                                   "whole characters")
    return DEFAULT_VOCAB, "the default for alphabetic text"


def train_tokenizer(text: str, kind: str = "bpe", vocab_size: int = DEFAULT_VOCAB,
                    special_tokens: Sequence[str] = ()) -> Tokenizer:  # fmt: skip
    """A tokenizer trained on ``text``: ``kind="char"`` (one id per character, the specials first;
    ``vocab_size`` unused) or ``kind="bpe"`` (byte-level BPE with ``vocab_size`` >= 256 tokens, specials
    included and numbered last, GPT-4 pre-split pattern)."""
    check_choice("kind", kind, tuple(TOKENIZER_FILES))
    if kind == "char":
        return CharTokenizer.from_text(text, list(special_tokens))
    check_positive_int("vocab_size", vocab_size)
    tok = BPETokenizer()
    tok.train(text, vocab_size, pattern="gpt4", special_tokens=list(special_tokens))
    return tok


def tokenizer_kind(tok: Tokenizer) -> str:
    """The kind of ``tok`` as run folders name it: "char", "bpe" or "hf" (``TypeError`` for anything else)."""
    for kind, cls in (("char", CharTokenizer), ("bpe", BPETokenizer), ("hf", HFTokenizer)):
        if isinstance(tok, cls):
            return kind
    raise TypeError(f"tok must be a CharTokenizer, a BPETokenizer or an HFTokenizer, got {type(tok).__name__}")


def token_bytes(tok: Tokenizer) -> list[bytes | None]:
    """The UTF-8 bytes each id spells, ``token_bytes(tok)[i]`` for id ``i``.

    A BPE token's own bytes (possibly part of a character), a character's or a special token's UTF-8; for a
    Hugging Face tokenizer, a byte-level token read back through GPT-2's byte table (``Ġ`` = space), a
    ``<0xNN>`` byte-fallback token as that byte, another token as its UTF-8 with ``▁`` read as a space. ``None``
    for an id that spells nothing (a gap in the numbering).
    """
    kind = tokenizer_kind(tok)
    out: list[bytes | None] = [None] * tok.vocab_size
    if kind == "char":
        for i, piece in enumerate(tok.itos):
            out[i] = piece.encode("utf-8")
    elif kind == "bpe":
        for i, piece in tok.vocab.items():
            out[i] = piece
        for token, i in tok.special_tokens.items():
            out[i] = token.encode("utf-8")
    else:
        decoder = {c: b for b, c in bytes_to_unicode().items()}
        added = {i: t.content for i, t in tok.tokenizer.get_added_tokens_decoder().items()}
        for token, i in tok.tokenizer.get_vocab(with_added_tokens=True).items():
            if i in added:
                out[i] = added[i].encode("utf-8")
            elif all(c in decoder for c in token):
                out[i] = bytes(decoder[c] for c in token)
            elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
                out[i] = bytes([int(token[3:5], 16)])
            else:
                out[i] = token.replace("\u2581", " ").encode("utf-8")
    return out


def save_tokenizer(tok: Tokenizer, folder: str | Path) -> dict[str, str]:
    """Write ``tok`` into ``folder`` (atomically); return its reference ``{"kind", "file", "sha256"}``.

    The reference goes into checkpoints: ``load_tokenizer`` refuses a file whose content has changed since.
    """
    folder = Path(folder)
    kind = tokenizer_kind(tok)
    if kind == "char":
        atomic_write_text(folder / TOKENIZER_FILES[kind], json.dumps({"format": _CHAR_FORMAT, "tokens": tok.itos}))
    elif kind == "bpe":
        with atomic_write(folder / TOKENIZER_FILES[kind]) as tmp:
            tok.save(tmp)
    else:
        atomic_write_text(folder / TOKENIZER_FILES[kind], tok.to_str())
    digest = hashlib.sha256((folder / TOKENIZER_FILES[kind]).read_bytes()).hexdigest()
    return {"kind": kind, "file": TOKENIZER_FILES[kind], "sha256": digest}


def load_tokenizer(folder: str | Path, reference: dict[str, str]) -> Tokenizer:
    """Read the tokenizer that ``reference`` (from ``save_tokenizer``) describes from ``folder``.

    Raises ``FileNotFoundError`` if the file is gone, ``ValueError`` if it changed or cannot be read.
    """
    path = Path(folder) / reference["file"]
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file {str(path)!r} is missing")
    if hashlib.sha256(path.read_bytes()).hexdigest() != reference["sha256"]:
        raise ValueError(f"tokenizer file {str(path)!r} has changed since the checkpoint was written")
    if reference["kind"] == "bpe":
        return BPETokenizer.load(path)
    if reference["kind"] == "hf":
        return HFTokenizer.from_file(path)
    state = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(state, dict) or state.get("format") != _CHAR_FORMAT:
        raise ValueError(f"{str(path)!r} is not a companion char tokenizer (expected format={_CHAR_FORMAT!r})")
    return CharTokenizer(state["tokens"])
