"""Your own text as training data: text file -> tokenizer -> token ids on disk -> batches of windows.

The data pipeline of ``companion-train`` (chapter 11), one small step per function:

1. ``read_text_file(path)``: the file's text, refusing what is not text (missing, empty, NUL bytes, not UTF-8)
   with a ``ValueError``/``FileNotFoundError`` that names the file and what is wrong.
2. ``train_tokenizer(text, kind, vocab_size)``: a ``companion.tokens`` ``CharTokenizer`` or a byte-level
   ``BPETokenizer`` (GPT-4 pre-split pattern) trained on that text; ``save_tokenizer`` / ``load_tokenizer``
   write and read it in a run folder (``tokenizer.char.json`` or ``tokenizer.bpe``). A run fine-tuned from a
   Hugging Face folder keeps that folder's ``tokenizer.json`` (``HFTokenizer``, chapter 13).
3. ``write_token_file(ids, path)`` / ``TokenData.open(path)``: the whole text as ONE flat array of ids on
   disk (``uint16`` when the vocabulary fits, else ``uint32``), read back as a ``numpy.memmap``: pages are
   loaded when a window touches them, so a corpus larger than memory trains the same way as a small one
   (the layout of karpathy/nanoGPT's ``train.bin``).
4. ``TokenData``: the first 90 % of the ids is the training split, the last 10 % the validation split
   (a contiguous cut, so no validation window overlaps a training window). ``train_batch(step)`` draws
   ``batch_size`` random windows of ``seq_len + 1`` ids from a generator seeded by ``(seed, step)`` alone:
   the batch of step 1234 is the same whether or not the run was stopped and resumed before it.
   ``val_batches()`` cuts the validation split into fixed, non-overlapping windows (no randomness at all).

Checked in tests/test_cli.py: windows come from their own split and depend only on (seed, step), the
validation windows do not overlap, the id file round-trips in both widths, and every kind of bad text file.

Left out on purpose: document boundaries / end-of-text tokens, shuffling by epochs, streaming tokenization
of files larger than memory (the text is read and encoded at once; only the ids are memory-mapped).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from companion._checks import check_choice, check_positive_int
from companion._files import atomic_write, atomic_write_text
from companion.tokens import BPETokenizer, CharTokenizer

__all__ = [
    "TOKENIZER_FILES", "Tokenizer", "HFTokenizer", "TokenData", "read_text_file", "text_sha256", "train_tokenizer",
    "save_tokenizer", "load_tokenizer", "tokenizer_kind", "write_token_file", "token_dtype", "VAL_FRACTION",
]  # fmt: skip

TOKENIZER_FILES = {"char": "tokenizer.char.json", "bpe": "tokenizer.bpe", "hf": "tokenizer.json"}  # kind -> file
VAL_FRACTION = 0.1  # the last 10 % of the token ids is the validation split
_CHAR_FORMAT = "companion-char-tokenizer-v1"


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer`` (a model folder's ``tokenizer.json``) with the course's interface:
    ``encode(text) -> list[int]`` (no special tokens added), ``decode(ids) -> str``, ``vocab_size``.

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

    def to_str(self) -> str:
        return self.tokenizer.to_str()


Tokenizer = CharTokenizer | BPETokenizer | HFTokenizer


def read_text_file(path: str | Path) -> str:
    """The text of a UTF-8 file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is a folder, is empty (or whitespace only), holds NUL bytes (a binary file)
            or is not valid UTF-8; the message names the file and the offset of the first bad byte.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"text file {str(path)!r} does not exist")
    if path.is_dir():
        raise ValueError(f"text file {str(path)!r} is a folder; expected a UTF-8 text file")
    data = path.read_bytes()
    if (nul := data.find(b"\0")) >= 0:
        raise ValueError(f"text file {str(path)!r} looks binary (a NUL byte at offset {nul}); expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"text file {str(path)!r} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); "
            "convert it to UTF-8 first"
        ) from None
    if not text.strip():
        raise ValueError(f"text file {str(path)!r} is empty; expected some text to train on")
    return text


def text_sha256(text: str) -> str:
    """Fingerprint of a text (hex SHA-256 of its UTF-8 bytes): tells a run which text it was trained on."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def train_tokenizer(text: str, kind: str = "bpe", vocab_size: int = 512) -> Tokenizer:
    """A tokenizer trained on ``text``: ``kind="char"`` (one id per character; ``vocab_size`` unused) or
    ``kind="bpe"`` (byte-level BPE with ``vocab_size`` >= 256 tokens, GPT-4 pre-split pattern)."""
    check_choice("kind", kind, tuple(TOKENIZER_FILES))
    if kind == "char":
        return CharTokenizer.from_text(text)
    check_positive_int("vocab_size", vocab_size)
    tok = BPETokenizer()
    tok.train(text, vocab_size, pattern="gpt4")
    return tok


def tokenizer_kind(tok: Tokenizer) -> str:
    """The kind of ``tok`` as run folders name it: "char", "bpe" or "hf" (``TypeError`` for anything else)."""
    for kind, cls in (("char", CharTokenizer), ("bpe", BPETokenizer), ("hf", HFTokenizer)):
        if isinstance(tok, cls):
            return kind
    raise TypeError(f"tok must be a CharTokenizer, a BPETokenizer or an HFTokenizer, got {type(tok).__name__}")


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


def token_dtype(vocab_size: int) -> type[np.unsignedinteger]:
    """The smallest array type that holds every id: ``uint16`` if ``vocab_size`` <= 65536, else ``uint32``."""
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def write_token_file(ids: list[int] | np.ndarray, path: str | Path, vocab_size: int) -> None:
    """Write token ids as one flat binary array of ``token_dtype(vocab_size)`` (atomically)."""
    arr = np.asarray(ids, dtype=token_dtype(vocab_size))
    with atomic_write(path) as tmp:
        arr.tofile(tmp)


@dataclass
class TokenData:
    """A flat array of token ids (memory-mapped), split 90/10, served as windows of ``seq_len + 1`` ids."""

    ids: np.ndarray  # (N,) every token of the text, in order (a numpy.memmap when opened from disk)
    seq_len: int  # T: tokens the model reads per window (each window holds T + 1 ids: inputs and targets)
    batch_size: int  # B: windows per training batch
    seed: int = 0  # with the step number, decides which windows each training batch holds

    def __post_init__(self) -> None:
        check_positive_int("seq_len", self.seq_len)
        check_positive_int("batch_size", self.batch_size)
        n = len(self.ids)
        self.n_val = int(n * VAL_FRACTION)
        self.n_train = n - self.n_val
        window = self.seq_len + 1
        if self.n_val < window:
            raise ValueError(
                f"the text has {n} tokens, so its 10 % validation split ({self.n_val} tokens) is shorter than "
                f"one training window of seq_len + 1 = {window} tokens; use a text of at least "
                f"{window * 10} tokens or a smaller --seq-len"
            )

    @classmethod
    def open(cls, path: str | Path, vocab_size: int, seq_len: int, batch_size: int, seed: int = 0) -> TokenData:
        """Memory-map a file written by ``write_token_file`` (read-only)."""
        return cls(np.memmap(path, dtype=token_dtype(vocab_size), mode="r"), seq_len, batch_size, seed)

    def _windows(self, starts: np.ndarray) -> Tensor:
        rows = [np.asarray(self.ids[s : s + self.seq_len + 1], dtype=np.int64) for s in starts]
        return torch.from_numpy(np.stack(rows))  # (B, T + 1)

    def train_batch(self, step: int) -> Tensor:
        """The training batch of optimiser step ``step``: ``batch_size`` random windows of the training split.

        Depends only on ``(seed, step)``, never on earlier calls: a resumed run sees the same batches.
        Shapes: -> (B, T + 1) int64.
        """
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        starts = torch.randint(self.n_train - self.seq_len, (self.batch_size,), generator=g)  # window fits
        return self._windows(starts.numpy())

    def val_batches(self, max_windows: int = 64) -> list[Tensor]:
        """The validation split cut into non-overlapping windows (at most ``max_windows``, evenly spread),
        grouped into batches of ``batch_size``. The same windows every call: no randomness.

        Shapes: -> a list of (B, T + 1) int64 tensors (the last one may hold fewer rows).
        """
        check_positive_int("max_windows", max_windows)
        first, span = self.n_train, self.n_val - (self.seq_len + 1)  # window starts lie in [first, first + span]
        starts = np.arange(first, first + span + 1, self.seq_len)
        if len(starts) > max_windows:
            starts = starts[np.linspace(0, len(starts) - 1, max_windows).round().astype(int)]
        return [self._windows(starts[i : i + self.batch_size]) for i in range(0, len(starts), self.batch_size)]
