"""The KV cache: keys and values already computed by one attention layer, reused while decoding (chapter 04).

Autoregressive decoding need not recompute past positions: each step appends the new positions' keys and
values and attends over all of them (its memory cost is analysed in Pope et al., *Efficiently Scaling
Transformer Inference*, 2022). Checked in ``tests/test_attention.py`` and ``tests/test_generation.py``:
cached decoding equals full recomputation, for self- and cross-attention.
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import ID_DTYPES, check_positive_int, check_same_dtype_device, check_tensor
from companion.masks import check_sinks

__all__ = ["KVCache", "RollingKVCache"]


class KVCache:
    """Keys and values of the positions already processed by one attention layer.

    Self-attention (``MultiHeadAttention(x, kv_cache=cache)``): each call projects the new positions,
    applies RoPE to their keys at offset ``cache.length`` (the length *before* the call), then calls
    :meth:`update`, which appends the new keys/values along the sequence axis and returns all of them.
    The cache stores H_kv heads (before :func:`repeat_kv`), so GQA/MQA's memory saving is kept, and the
    keys are stored *after* RoPE. The caller still passes the attention mask for the new queries against
    all ``S = length`` keys, e.g. ``causal_mask(T, cache.length + T)`` (or ``is_causal=True``); for one new
    token no mask is needed.

    Cross-attention (``MultiHeadAttention(x, memory=enc, kv_cache=cache)``): on the first call (empty
    cache) the layer projects ``memory`` once and stores it with :meth:`update`; on later calls, while
    the cache is non-empty, it reuses :attr:`k`/:attr:`v` and does **not** look at ``memory`` again (still
    pass it: it tells the layer that this is cross-attention). Use one cache per layer and per kind, and
    :meth:`reset` (or a new cache) for a new batch or a new source sentence.

    A padding mask for cached decoding must cover all S keys, i.e. be built from every id seen so far:
    ``combine_masks(causal_mask(T, S), padding_mask(all_ids, pad_id))``. RoPE is never applied in
    cross-attention. The cache is a plain object (not an ``nn.Module``): it holds whatever dtype, device and
    autograd graph its tensors came with; decode under ``torch.no_grad()``. :meth:`reorder` selects batch
    rows (for beam search).

    How it grows: appending with ``torch.cat`` would copy all S stored positions at every decoding step
    (O(S²) copying over a generation). Instead the keys and values live in buffers with room to spare,
    like a Python list: the new positions are written into the next free slots, and when the room runs out
    the buffers are reallocated with twice the room (never more than ``max_length``, when given), so the
    copying is O(S) in all. :attr:`k` and :attr:`v` are views of the first ``length`` positions. Under
    autograd (new keys that require grad) it concatenates instead, so no in-place write touches a tensor
    a backward pass still needs.

    Args:
        max_length: the most positions this cache will hold (e.g. ``config.max_seq_len``), a cap on the
            room it reserves; ``None``: no cap.

    Shapes:
        k, v: (B, H_kv, S, D_h), ``None`` while empty; length = S.
    """

    def __init__(self, max_length: int | None = None) -> None:
        if max_length is not None:
            check_positive_int("max_length", max_length)
        self.max_length = max_length
        self._k: Tensor | None = None  # (B, H_kv, room, D_h): positions 0 .. length - 1 are filled
        self._v: Tensor | None = None  # (B, H_kv, room, D_v)
        self._length = 0

    @property
    def k(self) -> Tensor | None:
        """The stored keys (B, H_kv, S, D_h), or ``None`` while empty."""
        return None if self._k is None else self._k[:, :, : self._length]

    @property
    def v(self) -> Tensor | None:
        """The stored values (B, H_kv, S, D_v), or ``None`` while empty."""
        return None if self._v is None else self._v[:, :, : self._length]

    @property
    def length(self) -> int:
        """Number of positions stored (0 when empty)."""
        return self._length

    def reset(self) -> None:
        """Forget everything stored."""
        self._k, self._v, self._length = None, None, 0

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (in that order), e.g. the surviving beams of a beam search.

        Shapes:
            index: (B_new,) integer -> k, v become (B_new, H_kv, S, D_h)
        """
        check_tensor("index", index, ndim=1)
        if index.dtype not in ID_DTYPES:
            raise TypeError(f"index must hold integer row numbers, got dtype {index.dtype}")
        if self._k is not None and self._v is not None:
            rows = self._k.shape[0]
            low, high = int(index.min()), int(index.max())  # one read-back per beam step, not per layer call
            if low < 0 or high >= rows:
                bad = low if low < 0 else high
                raise ValueError(f"index holds row {bad}; expected 0 <= index < {rows} (the cached batch size)")
            self._k = self._k.index_select(0, index.to(self._k.device))  # (B_new, H_kv, room, D_h)
            self._v = self._v.index_select(0, index.to(self._v.device))  # (B_new, H_kv, room, D_h)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k``, ``v`` along the sequence axis and return all stored keys and values.

        Shapes:
            k, v: (B, H_kv, T, D_h) -> (k_all, v_all): (B, H_kv, S + T, D_h)
        """
        self._check_new(k, v)
        old, new = self._length, self._length + k.shape[-2]
        if self.max_length is not None and new > self.max_length:
            raise ValueError(f"the cache would hold {new} positions; expected at most max_length={self.max_length}")
        if k.requires_grad or v.requires_grad or (self._k is not None and self._k.requires_grad):
            # under autograd, concatenate: an in-place write could change a tensor that backward still needs
            self._k = k if self._k is None else torch.cat([self.k, k], dim=-2)  # (B, H_kv, S + T, D_h)
            self._v = v if self._v is None else torch.cat([self.v, v], dim=-2)  # (B, H_kv, S + T, D_h)
        else:
            if self._k is None or self._v is None:
                self._k, self._v = self._room_for(k, new), self._room_for(v, new)
            elif new > self._k.shape[-2]:  # out of room: twice as much, the filled part copied over
                self._k, self._v = self._grow(self._k, old, new), self._grow(self._v, old, new)
            self._k[:, :, old:new] = k  # (B, H_kv, T, D_h) written into the next free slots
            self._v[:, :, old:new] = v
        self._length = new
        return self.k, self.v  # type: ignore[return-value]

    def _check_new(self, k: Tensor, v: Tensor) -> None:
        """New keys and values fit each other and what is cached: same (B, H_kv, ·, D_h), dtype and device."""
        check_tensor("k", k, ndim=4)
        check_tensor("v", v, ndim=4)
        check_same_dtype_device(k=k, v=v)
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"k is {tuple(k.shape)} but v has {tuple(v.shape)}; expected equal (B, H_kv, T)")
        if self._k is not None and self._v is not None:
            same_heads = k.shape[:2] == self._k.shape[:2] and k.shape[-1] == self._k.shape[-1]
            if not same_heads or v.shape[-1] != self._v.shape[-1]:
                raise ValueError(
                    f"new k {tuple(k.shape)} does not match the cached k {tuple(self._k.shape[:2])} + "
                    f"(·, {self._k.shape[-1]}); expected the same (B, H_kv, ·, D_h) (call reset() for a new batch)"
                )
            check_same_dtype_device(cached_k=self._k, k=k)

    def _room(self, needed: int, current: int) -> int:
        room = max(needed, 2 * current)
        return room if self.max_length is None else min(room, self.max_length)

    def _room_for(self, x: Tensor, needed: int) -> Tensor:
        b, h, _, d = x.shape
        return x.new_empty(b, h, self._room(needed, 0), d)  # (B, H_kv, room, D_h)

    def _grow(self, buffer: Tensor, filled: int, needed: int) -> Tensor:
        b, h, current, d = buffer.shape
        bigger = buffer.new_empty(b, h, self._room(needed, current), d)  # (B, H_kv, room, D_h)
        bigger[:, :, :filled] = buffer[:, :, :filled]
        return bigger


class RollingKVCache(KVCache):
    """A KV cache of fixed size: Mistral's rolling buffer, with StreamingLLM's attention sinks if asked.

    Each query sees at most ``window`` keys: the first ``n_sinks`` positions of the text (the *attention
    sinks* of Xiao et al., *Efficient Streaming Language Models with Attention Sinks*, 2024) and the
    ``window - n_sinks`` most recent ones, itself included. Between calls the cache stores the ``window - 1``
    of them the next query needs besides its own key; older positions are evicted as new ones come in, so
    memory stays constant however long the text. ``n_sinks=0`` is the plain sliding window of Mistral 7B
    (Jiang et al. 2023).

    Positions stay absolute: keys keep the RoPE rotation of the position they were computed at, and
    :attr:`length` counts every position seen so far (the offset of the next token), while :attr:`size`
    counts the positions stored. Decoding through this cache gives exactly what a full forward pass with
    ``sliding_window_mask(T, window, n_sinks=n_sinks)`` gives (tests/test_rolling_cache.py). A query sees the
    stored keys and the new ones allowed by :meth:`mask`; for one new token that is every key returned.

    Args:
        window: the most positions held (and seen by one query, itself included).
        n_sinks: how many of them are the text's first positions (0 <= n_sinks < window).

    Shapes:
        k, v: (B, H_kv, size, D_h), ``None`` while empty; positions: (size,) int64, increasing.
    """

    def __init__(self, window: int, n_sinks: int = 0) -> None:
        check_positive_int("window", window)
        check_sinks(n_sinks, window)
        super().__init__(None)
        self.window, self.n_sinks = window, n_sinks
        self._seen = 0
        self._positions = torch.empty(0, dtype=torch.long)  # (size,) absolute position of each stored slot

    @property
    def k(self) -> Tensor | None:
        """The stored keys (B, H_kv, size, D_h), or ``None`` while empty."""
        return self._k

    @property
    def v(self) -> Tensor | None:
        """The stored values (B, H_kv, size, D_v), or ``None`` while empty."""
        return self._v

    @property
    def length(self) -> int:
        """Positions seen so far (stored or evicted): the absolute position of the next token."""
        return self._seen

    @property
    def size(self) -> int:
        """Positions stored (at most ``window - 1`` between calls)."""
        return int(self._positions.numel())

    @property
    def positions(self) -> Tensor:
        """Absolute positions of the stored keys, (size,) int64."""
        return self._positions

    def reset(self) -> None:
        super().reset()
        self._seen, self._positions = 0, torch.empty(0, dtype=torch.long)

    def mask(self, t: int, device: torch.device | str | None = None) -> Tensor:
        """Which keys the next ``t`` queries may see: the stored ones then the ``t`` new ones (what
        :meth:`update` returns). Query ``p`` sees key ``j`` iff ``j <= p`` and (``j < n_sinks`` or
        ``p - j < window - n_sinks``).

        Shapes: returns (T, size + T), boolean (``True`` = may attend).
        """
        check_positive_int("t", t)
        p = torch.arange(self._seen, self._seen + t)  # (T,) absolute positions of the new queries
        j = torch.cat([self._positions, p])  # (size + T,) absolute positions of the keys
        p, j = p[:, None], j[None, :]  # (T, 1), (1, size + T)
        visible = (j <= p) & ((j < self.n_sinks) | (p - j < self.window - self.n_sinks))  # (T, size + T)
        return visible.to(device)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Return the stored keys/values followed by ``k``, ``v`` (for the new queries, with :meth:`mask`), then
        keep only what the next query needs: the sinks and the ``window - n_sinks - 1`` most recent positions.

        Shapes:
            k, v: (B, H_kv, T, D_h) -> (k_all, v_all): (B, H_kv, size + T, D_h)
        """
        self._check_new(k, v)
        if self._k is not None and self._v is not None:
            k_all = torch.cat([self._k, k], dim=-2)  # (B, H_kv, size + T, D_h)
            v_all = torch.cat([self._v, v], dim=-2)  # (B, H_kv, size + T, D_v)
        else:
            k_all, v_all = k, v
        t = k.shape[-2]
        positions = torch.cat([self._positions, torch.arange(self._seen, self._seen + t)])  # (size + T,)
        last = self._seen + t - 1  # the newest position: what the next query needs is decided from it
        # keep what the next query (at last + 1) will see besides itself: the sinks and the recent keys
        keep = (positions < self.n_sinks) | (last - positions < self.window - self.n_sinks - 1)  # (size + T,)
        index = keep.nonzero().flatten().to(k.device)  # (size_new,) slots that stay
        self._k, self._v = k_all.index_select(-2, index), v_all.index_select(-2, index)  # (B, H_kv, size_new, D_h)
        self._positions = positions[keep]
        self._seen += t
        return k_all, v_all
