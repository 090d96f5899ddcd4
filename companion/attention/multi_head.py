"""Multi-head attention (MHA), grouped-query (GQA) and multi-query (MQA) attention (chapter 04_multi_head).

Multi-head attention from Vaswani et al., *Attention Is All You Need* (2017, §3.2.2); grouped-query attention
from Ainslie et al., *GQA* (2023); multi-query attention from Shazeer, *Fast Transformer Decoding* (2019).
The pure functions ``split_heads``, ``merge_heads`` and ``repeat_kv`` do the reshaping; the module is thin.

Checked against (``tests/test_attention.py``): ``torch.nn.MultiheadAttention`` with copied weights and
``torch.nn.functional.scaled_dot_product_attention`` (the ``use_sdpa`` fast path); the ``fused_qkv`` fast path
against the three separate projections (``tests/test_packing.py``). The GQA head layout
(query head ``h`` uses key/value head ``h // (H / H_kv)``) follows Hugging Face ``modeling_llama.repeat_kv``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import (
    check_bool,
    check_divisible,
    check_dropout,
    check_positive_int,
    check_same_dtype_device,
    check_tensor,
)
from companion.attention.kv_cache import KVCache
from companion.attention.sdpa import _check_causal, _check_mask, scaled_dot_product_attention
from companion.layers import RMSNorm
from companion.masks import causal_mask, combine_masks
from companion.packing import pack_linears, packed_linear

if TYPE_CHECKING:
    from companion.positions import RotaryEmbedding

__all__ = ["MultiHeadAttention", "merge_heads", "repeat_kv", "split_heads"]


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the model width into ``n_heads`` heads: head h owns columns h*D_h ... (h+1)*D_h - 1.

    Shapes:
        x: (B, T, D) -> (B, H, T, D_h) with D_h = D // H.
    """
    check_tensor("x", x, ndim=3)
    check_positive_int("n_heads", n_heads)
    b, t, d = x.shape
    if d % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} does not divide the last dimension of x ({d}, shape {tuple(x.shape)})")
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
        fused_qkv: keep ``q_proj``/``k_proj``/``v_proj``'s weights side by side in one matrix and compute the
            three in one matrix product when no gradient is needed (fast path for decoding; same parameters
            and ``state_dict``; see :mod:`companion.packing`).
        head_dim: D_h when it is not D / H (Qwen3: 128 with D = 1024, H = 16); the projections then map
            D -> H·D_h and back.
        qk_norm: an RMSNorm over each head's queries and keys (one gain vector of D_h, shared by the heads),
            before RoPE, as in Qwen3, OLMo 2 and Gemma 3 (chapter 14); ``qk_norm_eps`` is its epsilon.
        sink_logits: a learned logit per head (``sinks``, shape (H,), initialised at 0), an extra softmax column
            that absorbs attention and carries no value, as in gpt-oss (chapter 14); always the explicit path.
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
        fused_qkv: bool = False,
        head_dim: int | None = None,
        qk_norm: bool = False,
        qk_norm_eps: float = 1e-6,
        sink_logits: bool = False,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("n_heads", n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_positive_int("n_kv_heads", n_kv_heads)
        if head_dim is None:
            check_divisible("d_model", d_model, "n_heads", n_heads)
        else:
            check_positive_int("head_dim", head_dim)
        check_bool("qk_norm", qk_norm)
        check_bool("sink_logits", sink_logits)
        check_divisible("n_heads", n_heads, "n_kv_heads", n_kv_heads)
        check_bool("bias", bias)
        check_dropout("dropout", dropout)
        check_bool("use_sdpa", use_sdpa)
        check_bool("fused_qkv", fused_qkv)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads if head_dim is None else head_dim
        self.dropout, self.rope, self.use_sdpa, self.fused_qkv = dropout, rope, use_sdpa, fused_qkv
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, qk_norm_eps) if qk_norm else None  # QK-norm (chapter 14)
        self.k_norm = RMSNorm(self.head_dim, qk_norm_eps) if qk_norm else None
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if sink_logits else None  # (H,) gpt-oss's sink logits
        if fused_qkv:
            self._pack_qkv()

    def _pack_qkv(self) -> None:
        """With ``fused_qkv``: q/k/v's weights side by side in one matrix (while they are plain ``nn.Linear``
        layers; LoRA adapters replace them until merged, and the products then run one by one)."""
        if all(type(p) is nn.Linear for p in (self.q_proj, self.k_proj, self.v_proj)):
            pack_linears(self.q_proj, self.k_proj, self.v_proj)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> MultiHeadAttention:
        """``.to()``, ``.half()``... convert each weight on its own: with ``fused_qkv``, pack q/k/v again."""
        super()._apply(fn, recurse)
        if self.fused_qkv:
            self._pack_qkv()
        return self

    def _check_inputs(self, x: Tensor, memory: Tensor | None, kv_cache: KVCache | None) -> None:
        check_tensor("x", x, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has last dimension {x.shape[-1]}, expected d_model={self.d_model}")
        check_same_dtype_device(x=x, q_proj_weight=self.q_proj.weight)
        if memory is not None:
            check_tensor("memory", memory, ndim=3)
            if memory.shape[-1] != self.d_model:
                raise ValueError(f"memory has last dim {memory.shape[-1]}, expected d_model={self.d_model}")
            if memory.shape[0] != x.shape[0]:
                raise ValueError(f"memory has batch size {memory.shape[0]} but x has {x.shape[0]}")
            check_same_dtype_device(x=x, memory=memory)
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a KVCache or None, got {type(kv_cache).__name__}")

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
        return_weights: bool = False,
        *,
        is_causal: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Self-attention over ``x``, or cross-attention from ``x`` to ``memory`` (the encoder output H) if given.

        ``mask`` is boolean (``True`` = may attend) or additive, broadcastable to (B, H, T, S), typically
        (T, S) or (B, 1, 1, S). With ``kv_cache`` see :class:`KVCache` for what is stored and reused.
        ``is_causal=True`` hides later keys without a (T, S) mask from the caller: the T new queries are the
        last T of the S positions (the cached ones come first), as with ``causal_mask(T, S)``; it combines
        with ``mask`` (e.g. a padding mask). On the fused path (``use_sdpa``) no mask is built at all when T ==
        S and nothing else is masked, and none is needed for one new query (T = 1).

        Shapes:
            x: (B, T, D); memory: (B, S, D); returns out (B, T, D), and weights (B, H, T, S).
        """
        self._check_inputs(x, memory, kv_cache)
        check_bool("is_causal", is_causal)
        b, t, _ = x.shape
        if memory is None:  # self-attention
            if self.fused_qkv:  # one matrix product for the three when no gradient is needed (companion.packing)
                q, k, v = packed_linear(x, self.q_proj, self.k_proj, self.v_proj)
            else:
                q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, H·D_h), 2 × (B, T, H_kv·D_h)
            q = split_heads(q, self.n_heads)  # (B, H, T, D_h)
            k = split_heads(k, self.n_kv_heads)  # (B, H_kv, T, D_h)
            v = split_heads(v, self.n_kv_heads)  # (B, H_kv, T, D_h)
            if self.q_norm is not None:  # QK-norm: each head's q and k to unit RMS times a gain, before RoPE
                q, k = self.q_norm(q), self.k_norm(k)
            if self.rope is not None:
                offset = 0 if kv_cache is None else kv_cache.length
                q, k = self.rope(q, offset), self.rope(k, offset)
            if kv_cache is not None:
                k, v = kv_cache.update(k, v)  # (B, H_kv, S, D_h)
        else:  # cross-attention: queries from x, keys and values from the encoder output
            q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, T, D_h)
            if self.q_norm is not None:
                q = self.q_norm(q)
            if kv_cache is not None and kv_cache.length > 0:  # encoder K/V already cached
                k, v = kv_cache.k, kv_cache.v  # (B, H_kv, S, D_h)
            else:
                k = split_heads(self.k_proj(memory), self.n_kv_heads)  # (B, H_kv, S, D_h)
                v = split_heads(self.v_proj(memory), self.n_kv_heads)  # (B, H_kv, S, D_h)
                if self.k_norm is not None:
                    k = self.k_norm(k)
                if kv_cache is not None:
                    kv_cache.update(k, v)
        n_rep = self.n_heads // self.n_kv_heads
        dropout = self.dropout if self.training else 0.0
        s = k.shape[-2]
        _check_causal(is_causal, t, s)
        if self.use_sdpa and not return_weights and self.sinks is None:  # PyTorch's kernel has no sink column
            if mask is not None:
                _check_mask(mask, (b, self.n_heads, t, s), q.device)
            # PyTorch's is_causal aligns the mask top-left: right only when T == S. One new query (T = 1) sees
            # every key anyway; otherwise (T < S, a chunk after cached positions) build the mask, aligned right.
            torch_causal = is_causal and t == s and mask is None
            if is_causal and not torch_causal and t > 1:
                mask = combine_masks(causal_mask(t, s, device=q.device), mask)  # (T, S) or broadcast with mask
            if mask is not None and mask.dtype != torch.bool:
                mask = mask.to(q.dtype)  # PyTorch wants a float mask in the query's dtype
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=torch_causal, enable_gqa=n_rep > 1
            )  # (B, H, T, D_h)
            weights = None
        else:
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, S, D_h)
            out, weights = scaled_dot_product_attention(q, k, v, mask, True, dropout=dropout, is_causal=is_causal,
                                                        sinks=self.sinks)  # fmt: skip
        out = merge_heads(out)  # (B, T, D)
        out = self.o_proj(out)  # (B, T, D)
        return (out, weights) if return_weights else out
