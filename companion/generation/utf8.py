"""Sampling that always spells valid UTF-8: a mask over the next token from the partial character pending.

A byte-level tokenizer (chapter 1) has tokens that are pieces of a character: a Chinese character is three
bytes, often three tokens, and an emoji four. Sampled freely, a model may follow the first byte of a
character with a token that cannot continue it, or stop in the middle of one; the bytes then do not decode,
and ``decode`` shows U+FFFD (the replacement character) in their place. This module keeps every step valid:

- UTF-8 as a **finite automaton**: the well-formed byte sequences of the Unicode Standard (Table 3-7, as in
  RFC 3629) read left to right need nine states: ``ACCEPT`` (between characters), six states "inside a
  character, so many bytes still to come" (three of them remember a lead byte that narrows the next byte's
  range: E0, ED, F0, F4), and ``REJECT``. :data:`TRANSITIONS` is the table; ``feed_bytes`` runs it.
- ``Utf8Mask(token_bytes)`` runs every token's bytes from every state once, ahead of time, into a
  (states, V) table of the state each token leads to. A decoding step then only looks up its rows: a token is
  allowed if it does not lead to ``REJECT`` and leaves no more bytes pending than steps remain, so the output
  also ends on a whole character. Tokens of one byte always exist in a byte-level vocabulary, so an allowed
  token always exists too.

Masking renormalises the model's distribution over the allowed tokens: the text is sampled from the model
conditioned on being valid UTF-8, which it nearly always is for a trained model, and the only change is
where it was about to break a character. ``generate(..., valid_utf8=Utf8Mask(...))`` applies it before
temperature, top-k and top-p, which then choose among valid tokens only.

Checked in tests/test_generation_utf8.py against Python's own incremental UTF-8 decoder (every byte from every
state, random byte strings) and on a byte-level BPE model sampled 100 times on Chinese and emoji text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from companion._checks import check_positive_int

__all__ = ["ACCEPT", "REJECT", "TRANSITIONS", "PENDING", "Utf8Mask", "feed_bytes"]

ACCEPT, REJECT = 0, 8  # between two characters; a byte sequence that no continuation can make valid
# States 1-3: inside a character, 1, 2 or 3 continuation bytes (0x80-0xBF) still to come. States 4-7: just
# after the lead bytes E0, ED, F0, F4, whose next byte has a narrower range (no overlong forms, no
# surrogates U+D800-U+DFFF, nothing past U+10FFFF).
PENDING = np.array([0, 1, 2, 3, 2, 2, 3, 3, 0])  # continuation bytes still to come in each state


def _table() -> np.ndarray:
    t = np.full((9, 256), REJECT, dtype=np.int64)  # (state, byte) -> next state
    t[ACCEPT, 0x00:0x80] = ACCEPT  # ASCII
    t[ACCEPT, 0xC2:0xE0] = 1  # two-byte characters (C0, C1 would be overlong)
    t[ACCEPT, 0xE1:0xED] = t[ACCEPT, 0xEE:0xF0] = 2  # three bytes
    t[ACCEPT, 0xE0], t[ACCEPT, 0xED] = 4, 5
    t[ACCEPT, 0xF1:0xF4] = 3  # four bytes
    t[ACCEPT, 0xF0], t[ACCEPT, 0xF4] = 6, 7
    t[1, 0x80:0xC0], t[2, 0x80:0xC0], t[3, 0x80:0xC0] = ACCEPT, 1, 2
    t[4, 0xA0:0xC0] = 1  # E0 A0..BF: U+0800 and up
    t[5, 0x80:0xA0] = 1  # ED 80..9F: below the surrogates
    t[6, 0x90:0xC0] = 2  # F0 90..BF: U+10000 and up
    t[7, 0x80:0x90] = 2  # F4 80..8F: up to U+10FFFF
    return t  # REJECT stays REJECT


TRANSITIONS = _table()


def feed_bytes(state: int, data: bytes) -> int:
    """The state after reading ``data`` from ``state`` (``REJECT`` once a byte cannot follow)."""
    for b in data:
        state = int(TRANSITIONS[state, b])
    return state


def _trailing_state(data: bytes) -> int:
    """The state at the end of ``data`` when what went wrong before is left behind, as a decoder that
    replaces bad bytes does: a byte that cannot follow starts over from ``ACCEPT``."""
    state = ACCEPT
    for b in data:
        state = int(TRANSITIONS[state, b])
        if state == REJECT:
            state = int(TRANSITIONS[ACCEPT, b])
            state = ACCEPT if state == REJECT else state
    return state


class Utf8Mask:
    """Which tokens may come next so that the bytes stay valid UTF-8, for a vocabulary of byte strings.

    Args:
        token_bytes: the bytes each id spells, ``token_bytes[i]`` for id ``i`` (a byte-level BPE's
            ``vocab[i]``; a special token's UTF-8 text). ``None`` marks an id that is never allowed.

    Attributes:
        next_state: (9, V) int64 tensor, the state after each token from each state (``REJECT`` if invalid).
    """

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        if isinstance(token_bytes, (bytes, str)) or not isinstance(token_bytes, Sequence):
            raise TypeError(f"token_bytes must be a list of bytes (one per id), got {type(token_bytes).__name__}")
        if not token_bytes:
            raise ValueError("token_bytes is empty; expected the bytes of every token id")
        for i, piece in enumerate(token_bytes):
            if piece is not None and not isinstance(piece, bytes):
                raise TypeError(f"token_bytes[{i}]={piece!r} must be bytes or None, got {type(piece).__name__}")
        self.token_bytes = list(token_bytes)
        width = max(len(p) for p in self.token_bytes if p is not None) if any(self.token_bytes) else 1
        padded = np.full((len(self.token_bytes), width), -1, dtype=np.int64)  # (V, L): -1 after a token ends
        for i, piece in enumerate(self.token_bytes):
            padded[i, : len(piece or b"")] = list(piece or b"")
        never = np.array([p is None or p == b"" for p in self.token_bytes])  # (V,)
        rows = []
        for start in range(len(PENDING)):  # every token from every state, one byte column at a time
            state = np.full(len(self.token_bytes), start, dtype=np.int64)  # (V,)
            for j in range(width):
                byte = padded[:, j]
                live = byte >= 0
                state[live] = TRANSITIONS[state[live], byte[live]]
            state[never] = REJECT
            rows.append(state)
        self.next_state = torch.from_numpy(np.stack(rows))  # (9, V)
        # where a token leaves a row that was already broken (only a cornered row gets there): start over
        self.restart_state = torch.tensor([_trailing_state(p or b"") for p in self.token_bytes])  # (V,)
        self._pending = torch.from_numpy(PENDING.copy())  # (9,)
        self._pending[REJECT] = 1 << 30  # never within any budget

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes)

    def check_fits(self, vocab_size: int | None, eos_id: int | None = None) -> None:
        """``ValueError`` unless this mask can serve a model of ``vocab_size`` ids (a model may have more, e.g.
        padding rows, never allowed; fewer means another vocabulary) and can allow ``eos_id`` between two
        characters (an id whose bytes are None or not whole characters would never be chosen: no early stop)."""
        if vocab_size is not None and self.vocab_size > vocab_size:
            raise ValueError(f"valid_utf8 describes {self.vocab_size} token ids but the model has vocab_size="
                             f"{vocab_size}; expected the Utf8Mask of the model's own tokenizer")
        if eos_id is not None and (eos_id >= self.vocab_size or int(self.next_state[ACCEPT, eos_id]) != ACCEPT):
            spelled = self.token_bytes[eos_id] if eos_id < self.vocab_size else "beyond the mask's table"
            raise ValueError(f"eos_id={eos_id} can never be chosen under valid_utf8 (its bytes: {spelled!r}); "
                             "expected an id that spells whole UTF-8 characters (give a special token its text's "
                             "bytes)")

    def start_states(self, ids: Tensor) -> Tensor:
        """The state at the end of each prompt row: what the row's last, possibly unfinished, character needs.

        Shapes: ids (B, T) -> (B,) int64.
        """
        rows = []
        for row in ids.tolist():
            data = b"".join(self.token_bytes[i] or b"" if 0 <= i < self.vocab_size else b"" for i in row)
            rows.append(_trailing_state(data))
        return torch.tensor(rows, dtype=torch.long, device=ids.device)

    def allowed(self, states: Tensor, steps_left: int, vocab: int) -> Tensor:
        """Tokens each row may take now: valid after its state, and leaving at most ``steps_left - 1``
        continuation bytes pending (one byte per later step at least, so the output ends on a whole
        character). Ids beyond the table (``vocab`` > ``vocab_size``) are never allowed.

        Shapes: states (B,) -> (B, V) bool.
        """
        check_positive_int("steps_left", steps_left)
        table, pending = self.next_state.to(states.device), self._pending.to(states.device)
        ok = pending[table[states]] <= steps_left - 1  # (B, V_table)
        if vocab != ok.size(1):
            pad = ok.new_zeros(ok.size(0), max(0, vocab - ok.size(1)))
            ok = torch.cat([ok, pad], dim=1)[:, :vocab]  # (B, V)
        return ok

    def mask_logits(self, logits: Tensor, states: Tensor, steps_left: int) -> Tensor:
        """``logits`` with the disallowed tokens at -inf; a row with no allowed token keeps its logits
        (a vocabulary without every single byte could corner it; a byte-level one never does).

        Shapes: logits (B, V), states (B,) -> (B, V).
        """
        ok = self.allowed(states, steps_left, logits.size(-1))  # (B, V)
        ok |= ~ok.any(dim=-1, keepdim=True)  # no host read-back: a cornered row is left as it was
        return logits.masked_fill(~ok, float("-inf"))

    def advance(self, states: Tensor, next_ids: Tensor) -> Tensor:
        """The states after each row takes its token. Shapes: states (B,), next_ids (B,) -> (B,)."""
        table, restart = self.next_state.to(states.device), self.restart_state.to(states.device)
        inside = next_ids < table.size(1)  # an id beyond the table (only a cornered row takes one): start over
        known = torch.where(inside, next_ids, torch.zeros_like(next_ids))
        state = torch.where(inside, table[states, known], torch.full_like(states, ACCEPT))  # (B,)
        return torch.where(state == REJECT, restart[known], state)
