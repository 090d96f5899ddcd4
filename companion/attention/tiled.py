"""Tiled attention with an online softmax: the idea behind FlashAttention, minus the GPU kernel (chapter 10).

The online softmax of Milakov & Gimelshein, *Online normalizer calculation for softmax* (2018), as used by
Dao et al., *FlashAttention* (2022): keys are visited block by block and the (T, S) score matrix is never
built. Checked against (``tests/test_attention.py``): :func:`companion.attention.scaled_dot_product_attention`
(itself checked against PyTorch's), for block sizes from 1 to more than S, with causal, boolean and additive masks.

Left out on purpose: the fused GPU kernel, tiling over queries, the backward pass (autograd handles it).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from companion._checks import check_positive_int
from companion.attention.sdpa import _check_mask, _check_qkv

__all__ = ["tiled_attention"]


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    block_size: int = 64,
    *,
    causal: bool = False,
) -> Tensor:
    """Attention over blocks of keys with an online softmax: never builds the (T, S) score matrix.

    For each block of ``block_size`` keys we compute the (T, block) scores and update, per query, a
    running maximum ``m``, a running sum ``l = Σ exp(score - m)`` and a running weighted sum of values
    ``acc``. When the maximum grows from ``m`` to ``m'`` the old ``l`` and ``acc`` are rescaled by
    ``exp(m - m')``. At the end ``acc / l`` equals ``softmax(scores) @ v`` exactly (up to rounding).
    This is the idea behind FlashAttention, minus the GPU kernel. Computed in float32.

    ``causal=True`` applies :func:`companion.masks.causal_mask` (queries are the last T of S positions);
    ``mask`` (bool or additive, broadcastable to (..., T, S)) may be combined with it. Fully masked
    queries get zeros, as in :func:`scaled_dot_product_attention`.

    Shapes:
        q: (..., T, D_h); k: (..., S, D_h); v: (..., S, D_v) -> out (..., T, D_v)
    """
    _check_qkv(q, k, v)
    check_positive_int("block_size", block_size)
    t, s = q.shape[-2], k.shape[-2]
    if causal and s < t:
        raise ValueError(f"causal=True needs S >= T, got T={t} queries and S={s} keys")
    if mask is not None:
        _check_mask(mask, (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), t, s), q.device)
    q32 = q.float() * (1.0 / math.sqrt(q.shape[-1]))
    query_pos = torch.arange(t, device=q.device).unsqueeze(1) + (s - t)  # (T, 1) absolute positions
    m = torch.full((*q.shape[:-1], 1), float("-inf"), device=q.device)  # (..., T, 1) running max
    l = torch.zeros_like(m)  # (..., T, 1) running sum of exp(score - m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], device=q.device)  # (..., T, D_v)
    for start in range(0, s, block_size):
        end = min(start + block_size, s)
        scores = q32 @ k[..., start:end, :].float().transpose(-2, -1)  # (..., T, b)
        if causal:
            key_pos = torch.arange(start, end, device=q.device)  # (b,)
            scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        if mask is not None:
            block = mask if mask.shape[-1] == 1 else mask[..., start:end]  # (..., T, b)
            if block.dtype == torch.bool:
                scores = scores.masked_fill(~block, float("-inf"))
            else:
                scores = scores + block
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., T, 1)
        m_ref = m_new.masked_fill(m_new == float("-inf"), 0.0)  # nothing visible yet: any finite reference
        p = torch.exp(scores - m_ref)  # (..., T, b)
        correction = torch.exp(m - m_ref)  # rescales what was accumulated under the old maximum
        l = l * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ v[..., start:end, :].float()  # (..., T, D_v)
        m = m_new
    out = torch.where(l > 0, acc / l.clamp_min(torch.finfo(l.dtype).tiny), 0.0)  # fully masked query -> 0
    return out.to(q.dtype)
