"""Scaled dot-product attention, multi-head attention (MHA / GQA / MQA) and the KV cache.

Implements ``Attention(Q, K, V) = softmax(Q Kᵀ / √D_h + mask) V`` and multi-head attention from
Vaswani et al., *Attention Is All You Need* (2017, §3.2); grouped-query attention from Ainslie et al.,
*GQA* (2023), multi-query attention from Shazeer, *Fast Transformer Decoding* (2019); and the online
softmax behind FlashAttention (Milakov & Gimelshein 2018; Dao et al. 2022) in :func:`tiled_attention`.

Checked against (``tests/test_attention.py``): ``torch.nn.functional.scaled_dot_product_attention``
and ``torch.nn.MultiheadAttention`` with copied weights. The GQA head layout (query head ``h`` uses
key/value head ``h // (H / H_kv)``) follows Hugging Face ``modeling_llama.repeat_kv``.

Masks follow :mod:`companion.masks`: boolean ``True`` = may attend, or additive 0 / ``-inf``.
Left out on purpose: attention biases such as ALiBi are plain additive masks here (pass them as ``mask``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import check_divisible, check_positive_int, check_same_dtype_device, check_tensor

if TYPE_CHECKING:
    from companion.positions import RotaryEmbedding

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "merge_heads",
    "repeat_kv",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "tiled_attention",
]

_HALF = (torch.float16, torch.bfloat16)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax along ``dim``, computed in float32 for fp16/bf16 inputs.

    ``softmax(x)_i = exp(x_i - m) / Σ_j exp(x_j - m)`` with ``m = max_j x_j``: subtracting the maximum
    changes nothing mathematically but keeps ``exp`` from overflowing. ``torch.softmax`` performs exactly
    these steps in one fused pass, so we call it (the steps are written out one by one in
    :func:`companion.scratch.attention.softmax`). Half-precision inputs are computed in float32, whose
    wider mantissa keeps the small weights and the row sums accurate, and cast back.

    A row that is entirely ``-inf`` (every key masked) returns **zeros**, not NaN (which is what
    ``torch.softmax`` gives: 0 / 0): there is nothing to attend to, so that query's output is the zero
    vector, and no NaN leaks into the gradients either.
    """
    check_tensor("x", x)
    out_dtype = x.dtype
    dead = x.amax(dim=dim, keepdim=True) == float("-inf")  # rows with nothing to attend to
    any_dead = bool(dead.any())
    if any_dead:
        x = x.masked_fill(dead, 0.0)  # any finite row will do; it is zeroed below (and gets zero gradient)
    out = torch.softmax(x, dim=dim, dtype=torch.float32 if out_dtype in _HALF else None)
    if any_dead:
        out = out.masked_fill(dead, 0.0)
    return out.to(out_dtype)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., length, D_h), got {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); expected at least one position")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    check_same_dtype_device(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has head width {q.shape[-1]} but k has {k.shape[-1]}; expected the same D_h")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; expected equal (..., S)")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError as err:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} have incompatible batch dims") from err


def _check_mask(mask: Tensor, scores_shape: tuple[int, ...], device: torch.device) -> None:
    check_tensor("mask", mask)
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = may attend) or additive float, got dtype {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q is on {device}; expected one device")
    ok = mask.dim() <= len(scores_shape)
    if ok:
        try:
            ok = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
        except RuntimeError:
            ok = False
    if not ok:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}, which does not broadcast to the scores shape "
            f"(..., T, S) = {tuple(scores_shape)}"
        )


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    return_weights: bool = False,
    *,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``softmax(q kᵀ · scale + mask) v``, written out step by step (scale defaults to ``1/√D_h``).

    ``mask`` is boolean (``True`` = may attend) or additive (0 / ``-inf``); a query whose keys are all
    masked gets the zero vector (see :func:`softmax`). ``dropout_p`` drops attention weights (pass 0 at
    evaluation time, as with the PyTorch function). The returned weights are those before dropout.

    Shapes:
        q: (..., T, D_h); k: (..., S, D_h); v: (..., S, D_v); mask broadcastable to (..., T, S).
        returns out (..., T, D_v), and weights (..., T, S) if ``return_weights``.
    """
    _check_qkv(q, k, v)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p} is invalid; expected 0 <= dropout_p < 1")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., T, S)
    if mask is not None:
        _check_mask(mask, tuple(scores.shape), q.device)
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))  # in place: the (..., T, S) tensor is the big one
        else:
            scores.add_(mask)
    weights = softmax(scores, dim=-1)  # (..., T, S), rows sum to 1 (or 0 if fully masked)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    out = dropped @ v  # (..., T, D_v)
    return (out, weights) if return_weights else out


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the model width into ``n_heads`` heads: head h owns columns h*D_h ... (h+1)*D_h - 1.

    Shapes:
        x: (B, T, D) -> (B, H, T, D_h) with D_h = D // H.
    """
    check_tensor("x", x, ndim=3)
    b, t, d = x.shape
    if d % n_heads != 0:
        raise ValueError(f"the last dimension of x ({d}) is not divisible by n_heads={n_heads}")
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)  # (B, H, T, D_h)


def merge_heads(x: Tensor) -> Tensor:
    """Inverse of :func:`split_heads`: put the heads side by side again.

    Shapes:
        x: (B, H, T, D_h) -> (B, T, H * D_h).
    """
    check_tensor("x", x, ndim=4)
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, D)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Repeat each key/value head ``n_rep`` times so that H_kv heads serve H = H_kv·n_rep query heads.

    Query head ``h`` ends up reading key/value head ``h // n_rep`` (the layout of Hugging Face Llama and of
    ``torch.repeat_interleave(x, n_rep, dim=1)``).

    Shapes:
        x: (B, H_kv, S, D_h) -> (B, H_kv * n_rep, S, D_h)
    """
    check_tensor("x", x, ndim=4)
    check_positive_int("n_rep", n_rep)
    if n_rep == 1:
        return x
    b, h_kv, s, d_h = x.shape
    x = x[:, :, None, :, :].expand(b, h_kv, n_rep, s, d_h)  # (B, H_kv, n_rep, S, D_h)
    return x.reshape(b, h_kv * n_rep, s, d_h)  # (B, H, S, D_h)


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


class KVCache:
    """Keys and values of the positions already processed by one attention layer.

    Self-attention (``MultiHeadAttention(x, kv_cache=cache)``): each call projects the new positions,
    applies RoPE to their keys at offset ``cache.length`` (the length *before* the call), then calls
    :meth:`update`, which appends the new keys/values along the sequence axis and returns all of them.
    The cache stores H_kv heads (before :func:`repeat_kv`), so GQA/MQA's memory saving is kept, and the
    keys are stored *after* RoPE. The caller still passes the attention mask for the new queries against
    all ``S = length`` keys, e.g. ``causal_mask(T, cache.length + T)``; for one new token no mask is needed.

    Cross-attention (``MultiHeadAttention(x, context=enc, kv_cache=cache)``): on the first call (empty
    cache) the layer projects ``context`` once and stores it with :meth:`update`; on later calls, while
    the cache is non-empty, it reuses :attr:`k`/:attr:`v` and does **not** look at ``context`` again (still
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
        if self.k is not None and self.v is not None:
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


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``n_kv_heads`` for grouped-query (GQA) and multi-query (MQA) attention.

    ::

        MHA  (n_kv_heads = H)       GQA  (1 < n_kv_heads < H)    MQA  (n_kv_heads = 1)
        q:  Q Q Q Q Q Q Q Q         q:  Q Q Q Q Q Q Q Q          q:  Q Q Q Q Q Q Q Q
            | | | | | | | |             └─┤ └─┤ └─┤ └─┤              └──┴──┴─┬┴──┴──┴──┘
        kv: K K K K K K K K         kv:   K   K   K   K          kv:         K
            V V V V V V V V               V   V   V   V                      V
        H key/value heads           H_kv heads, each shared      one key/value head
                                    by H / H_kv query heads      shared by all

    Each head attends in a D_h = D / H dimensional subspace; the heads' outputs are concatenated and
    mixed by ``o_proj``. Fewer key/value heads shrink ``k_proj``/``v_proj`` and the KV cache by H / H_kv.

    Args:
        d_model: model width D. n_heads: query heads H (D % H == 0).
        n_kv_heads: key/value heads H_kv (default H; H % H_kv == 0).
        bias: biases in the four projections. dropout: dropout on the attention weights (training only).
        rope: a :class:`companion.positions.RotaryEmbedding` applied to queries and keys in self-attention.
        use_sdpa: compute attention with ``torch.nn.functional.scaled_dot_product_attention`` (fast path;
            falls back to the explicit path when weights are requested). Fully masked rows follow PyTorch.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        rope: RotaryEmbedding | None = None,
        use_sdpa: bool = False,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("n_heads", n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_positive_int("n_kv_heads", n_kv_heads)
        check_divisible("d_model", d_model, "n_heads", n_heads)
        check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout} is invalid; expected 0 <= dropout < 1")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.dropout, self.rope, self.use_sdpa = dropout, rope, use_sdpa
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)

    def _check_inputs(self, x: Tensor, context: Tensor | None, kv_cache: KVCache | None) -> None:
        check_tensor("x", x, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has last dimension {x.shape[-1]}, expected d_model={self.d_model}")
        check_same_dtype_device(x=x, q_proj_weight=self.q_proj.weight)
        if context is not None:
            check_tensor("context", context, ndim=3)
            if context.shape[-1] != self.d_model:
                raise ValueError(f"context has last dim {context.shape[-1]}, expected d_model={self.d_model}")
            if context.shape[0] != x.shape[0]:
                raise ValueError(f"context has batch size {context.shape[0]} but x has {x.shape[0]}")
            check_same_dtype_device(x=x, context=context)
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a KVCache or None, got {type(kv_cache).__name__}")

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention over ``x``, or cross-attention from ``x`` to ``context`` if it is given.

        ``mask`` is boolean (``True`` = may attend) or additive, broadcastable to (B, H, T, S), typically
        (T, S) or (B, 1, 1, S). With ``kv_cache`` see :class:`KVCache` for what is stored and reused.

        Shapes:
            x: (B, T, D); context: (B, S, D); returns out (B, T, D), and weights (B, H, T, S).
        """
        self._check_inputs(x, context, kv_cache)
        b, t, _ = x.shape
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, T, D_h)
        if context is None:  # self-attention
            k = split_heads(self.k_proj(x), self.n_kv_heads)  # (B, H_kv, T, D_h)
            v = split_heads(self.v_proj(x), self.n_kv_heads)  # (B, H_kv, T, D_h)
            if self.rope is not None:
                offset = 0 if kv_cache is None else kv_cache.length
                q, k = self.rope(q, offset), self.rope(k, offset)
            if kv_cache is not None:
                k, v = kv_cache.update(k, v)  # (B, H_kv, S, D_h)
        elif kv_cache is not None and kv_cache.length > 0:  # cross-attention, encoder K/V already cached
            k, v = kv_cache.k, kv_cache.v  # (B, H_kv, S, D_h)
        else:  # cross-attention: keys and values come from the encoder output
            k = split_heads(self.k_proj(context), self.n_kv_heads)  # (B, H_kv, S, D_h)
            v = split_heads(self.v_proj(context), self.n_kv_heads)  # (B, H_kv, S, D_h)
            if kv_cache is not None:
                kv_cache.update(k, v)
        n_rep = self.n_heads // self.n_kv_heads
        dropout_p = self.dropout if self.training else 0.0
        if self.use_sdpa and not return_weights:
            if mask is not None:
                _check_mask(mask, (b, self.n_heads, t, k.shape[-2]), q.device)
                if mask.dtype != torch.bool:
                    mask = mask.to(q.dtype)  # PyTorch wants a float mask in the query's dtype
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=n_rep > 1
            )  # (B, H, T, D_h)
            weights = None
        else:
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, S, D_h)
            out, weights = scaled_dot_product_attention(q, k, v, mask, True, dropout_p=dropout_p)
        out = merge_heads(out)  # (B, T, D)
        out = self.o_proj(out)  # (B, T, D)
        return (out, weights) if return_weights else out
