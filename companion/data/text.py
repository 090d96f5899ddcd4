"""Your own text as training data: text file -> tokenizer -> token ids on disk -> batches of windows.

The data pipeline of ``companion-train`` (chapter 11), one small step per function:

1. ``read_text_file(path)``: the file's text, refusing what is not text (missing, empty, NUL bytes, not UTF-8)
   with a ``ValueError``/``FileNotFoundError`` that names the file and what is wrong. A byte-order mark at the
   start (``EF BB BF``, which Windows editors write) is not text and is dropped.
2. The tokenizer trained on that text, saved and read back in a run folder: :mod:`companion.data.text_tokenizer`.
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from companion._checks import check_positive_int, plural
from companion._files import atomic_write

__all__ = ["TokenData", "read_text_file", "text_sha256", "write_token_file", "token_dtype", "VAL_FRACTION"]

VAL_FRACTION = 0.1  # the last 10 % of the token ids is the validation split
BOM = "\ufeff"  # U+FEFF at the start of a file: a byte-order mark, not part of the text


def read_text_file(path: str | Path) -> str:
    """The text of a UTF-8 file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is a folder, is empty (or whitespace only), holds NUL bytes (a binary file)
            or is not valid UTF-8; the message names the file and the offset of the first bad byte.

    A byte-order mark at the start is dropped (it would otherwise become a character, or a token, of the text).
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
    text = text.removeprefix(BOM)
    if not text.strip():
        raise ValueError(f"text file {str(path)!r} is empty; expected some text to train on")
    return text


def text_sha256(text: str) -> str:
    """Fingerprint of a text (hex SHA-256 of its UTF-8 bytes): tells a run which text it was trained on."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
                f"the text has {plural(n, 'token')}, so its 10 % validation split ({plural(self.n_val, 'token')}) "
                f"is shorter than one training window of seq_len + 1 = {window} tokens; use a text of at least "
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
