"""The KV cache: keys and values already computed by one attention layer, reused while decoding (chapter 04).

Autoregressive decoding need not recompute past positions: each step appends the new positions' keys and
values and attends over all of them (its memory cost is analysed in Pope et al., *Efficiently Scaling
Transformer Inference*, 2022). Checked in ``tests/test_attention.py`` and ``tests/test_generation.py``:
cached decoding equals full recomputation, for self- and cross-attention.
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import ID_DTYPES, check_same_dtype_device, check_tensor

__all__ = ["KVCache"]


class KVCache:
    """Keys and values of the positions already processed by one attention layer.

    Self-attention (``MultiHeadAttention(x, kv_cache=cache)``): each call projects the new positions,
    applies RoPE to their keys at offset ``cache.length`` (the length *before* the call), then calls
    :meth:`update`, which appends the new keys/values along the sequence axis and returns all of them.
    The cache stores H_kv heads (before :func:`repeat_kv`), so GQA/MQA's memory saving is kept, and the
    keys are stored *after* RoPE. The caller still passes the attention mask for the new queries against
    all ``S = length`` keys, e.g. ``causal_mask(T, cache.length + T)``; for one new token no mask is needed.

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

    Shapes:
        k, v: (B, H_kv, S, D_h), ``None`` while empty; length = S.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of positions stored (0 when empty)."""
        return 0 if self.k is None else self.k.shape[-2]

    def reset(self) -> None:
        """Forget everything stored."""
        self.k = None
        self.v = None

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (in that order), e.g. the surviving beams of a beam search.

        Shapes:
            index: (B_new,) integer -> k, v become (B_new, H_kv, S, D_h)
        """
        check_tensor("index", index, ndim=1)
        if index.dtype not in ID_DTYPES:
            raise TypeError(f"index must hold integer row numbers, got dtype {index.dtype}")
        if self.k is not None and self.v is not None:
            rows = self.k.shape[0]
            low, high = int(index.min()), int(index.max())  # one read-back per beam step, not per layer call
            if low < 0 or high >= rows:
                bad = low if low < 0 else high
                raise ValueError(f"index holds row {bad}; expected 0 <= index < {rows} (the cached batch size)")
            self.k = self.k.index_select(0, index.to(self.k.device))  # (B_new, H_kv, S, D_h)
            self.v = self.v.index_select(0, index.to(self.v.device))  # (B_new, H_kv, S, D_h)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``k``, ``v`` along the sequence axis and return all stored keys and values.

        Shapes:
            k, v: (B, H_kv, T, D_h) -> (k_all, v_all): (B, H_kv, S + T, D_h)
        """
        check_tensor("k", k, ndim=4)
        check_tensor("v", v, ndim=4)
        check_same_dtype_device(k=k, v=v)
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"k is {tuple(k.shape)} but v has {tuple(v.shape)}; expected equal (B, H_kv, T)")
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            same_heads = k.shape[:2] == self.k.shape[:2] and k.shape[-1] == self.k.shape[-1]
            if not same_heads or v.shape[-1] != self.v.shape[-1]:
                raise ValueError(
                    f"new k {tuple(k.shape)} does not match the cached k {tuple(self.k.shape)}; "
                    "expected the same (B, H_kv, ·, D_h) (call reset() for a new batch)"
                )
            check_same_dtype_device(cached_k=self.k, k=k)
            self.k = torch.cat([self.k, k], dim=-2)  # (B, H_kv, S + T, D_h)
            self.v = torch.cat([self.v, v], dim=-2)  # (B, H_kv, S + T, D_h)
        return self.k, self.v
