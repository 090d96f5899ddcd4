"""Adapters that make other models decodable by :func:`~companion.generation.decoding.generate` and ``beam_search``.

The decoding loop needs one interface (:class:`~companion.generation.decoding.Decodable`): ``model(ids,
kv_caches=...) -> (B, T, V)``, ``model.new_kv_caches()`` and ``model.config.max_seq_len``. These classes
give it to what does not have it:

- ``ConditionedDecoder(seq2seq, src)``: the decoder of an encoder–decoder ``Transformer`` with its source
  fixed. The source is encoded once, here; on the first cached step each decoder layer projects H to its
  cross-attention K/V and caches them, so later steps cost one target token each. ``translate`` uses it.
- ``FunctionModel(fn, vocab_size=..., max_seq_len=...)``: any function ids (B, T) -> logits (B, T, V).
  Its "cache" (``TokenHistory``) stores the ids seen so far, so cached decoding calls ``fn`` on the whole
  sequence and returns the new positions: the same tokens as recomputation, by construction.
- ``BigramModel(table)``: a (V, V) table of next-token logits indexed by the current token (a toy
  language model for hand-worked examples; chapter 9's greedy-versus-beam example).
- ``DecodingConfig``: the ``config`` those adapters carry (``vocab_size``, ``max_seq_len``).

Checked in ``tests/test_adapters.py``: each adapter decodes through ``generate`` and ``beam_search``, with
and without a cache, to the same tokens as the model it wraps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from companion._checks import check_positive_int, check_tensor, check_token_id, check_token_ids
from companion.generation.decoding import eval_mode
from companion.masks import padding_mask

__all__ = ["BigramModel", "ConditionedDecoder", "DecodingConfig", "FunctionModel", "TokenHistory"]


@dataclass(frozen=True)
class DecodingConfig:
    """The part of a model's configuration that decoding reads."""

    vocab_size: int  # V: logits per position
    max_seq_len: int  # longest sequence (prompt + generated tokens) the model accepts

    def __post_init__(self) -> None:
        check_positive_int("vocab_size", self.vocab_size)
        check_positive_int("max_seq_len", self.max_seq_len)


class ConditionedDecoder(nn.Module):
    """The decoder of an encoder–decoder with the source fixed: a :class:`~companion.generation.decoding.Decodable`.

    ``ConditionedDecoder(model, src, src_pad_id=0)`` runs ``model.encode`` once (in eval mode, without
    gradients) and keeps H (``memory``) and the source padding mask. ``forward(ids, kv_caches)`` is
    ``model.decode(ids, memory, padding_mask, kv_caches)``: with the caches of ``new_kv_caches()`` the
    projected K/V of H are computed on the first step and reused after. A one-sentence source serves any
    number of rows (beams): H is broadcast to the batch of ``ids``.

    Shapes: src (B_src, S); forward: ids (B, T) -> logits (B, T, V), B == B_src or B_src == 1.
    """

    def __init__(self, model: nn.Module, src: Tensor, *, src_pad_id: int | None = None) -> None:
        super().__init__()
        missing = [name for name in ("encode", "decode", "new_kv_caches") if not callable(getattr(model, name, None))]
        max_seq_len = getattr(getattr(model, "config", None), "max_seq_len", None)
        if missing or not isinstance(max_seq_len, int):
            missing = [f"{m}()" for m in missing] + ([] if isinstance(max_seq_len, int) else ["config.max_seq_len"])
            lacks = ", ".join(missing)
            raise TypeError(f"model must be an encoder-decoder like companion.models.Transformer; "
                            f"{type(model).__name__} lacks {lacks}")
        vocab_size = getattr(model.config, "vocab_size", None)
        check_token_ids("src", src, ndim=2, vocab_size=vocab_size)
        if src_pad_id is not None:
            check_token_id("src_pad_id", src_pad_id, vocab_size)
        self.model, self.config = model, model.config
        self.padding_mask = padding_mask(src, src_pad_id) if src_pad_id is not None else None  # (B, 1, 1, S)
        with eval_mode(model), torch.no_grad():
            self.memory = model.encode(src, self.padding_mask)  # (B_src, S, D): the encoder runs once

    def new_kv_caches(self) -> list[Any]:
        """The encoder–decoder's own caches (self-attention K/V and projected encoder K/V per layer)."""
        return self.model.new_kv_caches()

    def forward(self, ids: Tensor, kv_caches: list[Any] | None = None) -> Tensor:
        """Shapes: ids (B, T) -> logits (B, T, V)."""
        b, b_src = ids.size(0), self.memory.size(0)
        if b != b_src and b_src != 1:
            raise ValueError(f"ids has batch size {b} but the source has {b_src}; expected equal (or a 1-row source)")
        memory = self.memory.expand(b, -1, -1)  # (B, S, D): one view per row / beam, no copy
        return self.model.decode(ids, memory, self.padding_mask, kv_caches=kv_caches)  # (B, T, V)


class TokenHistory:
    """The "KV cache" of a model without one: the token ids seen so far, per batch row.

    Shapes: ids (B, S), ``None`` while empty; length = S.
    """

    def __init__(self) -> None:
        self.ids: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.ids is None else self.ids.size(1)

    def update(self, ids: Tensor) -> Tensor:
        """Append ``ids`` (B, T) and return every id seen, (B, S + T)."""
        self.ids = ids if self.ids is None else torch.cat([self.ids, ids], dim=1)
        return self.ids

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` (beam search). Shapes: index (B_new,) integer."""
        check_token_ids("index", index, ndim=1, vocab_size=None if self.ids is None else self.ids.size(0))
        if self.ids is not None:
            self.ids = self.ids.index_select(0, index.to(self.ids.device))


class FunctionModel(nn.Module):
    """A plain logits function as a decodable model: ``fn(ids (B, T)) -> logits (B, T, V)``.

    Cached decoding keeps the ids in a :class:`TokenHistory` and calls ``fn`` on the whole sequence, so it
    gives exactly the uncached result (and saves nothing: ``fn`` has no cache of its own).
    """

    def __init__(self, fn: Callable[[Tensor], Tensor], *, vocab_size: int, max_seq_len: int) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"fn must be callable (ids -> logits), got {type(fn).__name__}")
        self.fn = fn
        self.config = DecodingConfig(vocab_size, max_seq_len)

    def new_kv_caches(self) -> list[TokenHistory]:
        return [TokenHistory()]

    def forward(self, ids: Tensor, kv_caches: list[TokenHistory] | None = None) -> Tensor:
        """Shapes: ids (B, T) -> logits (B, T, V) for the new positions."""
        t = ids.size(1)
        seq = ids if kv_caches is None else kv_caches[0].update(ids)  # (B, S)
        logits = self.fn(seq)
        check_tensor("fn(ids)", logits, ndim=3)
        if logits.shape[:2] != seq.shape or logits.size(-1) != self.config.vocab_size:
            raise ValueError(f"fn returned logits of shape {tuple(logits.shape)} for ids of shape {tuple(seq.shape)}; "
                             f"expected (B, T, V={self.config.vocab_size})")
        return logits[:, -t:]  # (B, T, V)


class BigramModel(nn.Module):
    """A language model whose next-token logits depend on the current token only: ``logits = table[ids]``.

    ``table[a, b]`` is the logit (e.g. a log-probability; ``-inf`` = never) of token b after token a.
    It needs no cache (only the last token matters), so ``new_kv_caches()`` is an empty list.

    Shapes: table (V, V); forward: ids (B, T) -> logits (B, T, V).
    """

    def __init__(self, table: Tensor, *, max_seq_len: int = 64) -> None:
        super().__init__()
        check_tensor("table", table, ndim=2)
        if table.size(0) != table.size(1) or not table.is_floating_point():
            raise ValueError(
                f"table must be a square float (V, V) tensor of logits, got {tuple(table.shape)} {table.dtype}"
            )
        self.register_buffer("table", table)
        self.config = DecodingConfig(table.size(0), max_seq_len)

    def new_kv_caches(self) -> list[Any]:
        return []

    def forward(self, ids: Tensor, kv_caches: list[Any] | None = None) -> Tensor:
        """Shapes: ids (B, T) -> logits (B, T, V)."""
        return self.table[ids]  # (B, T, V): row = current token
