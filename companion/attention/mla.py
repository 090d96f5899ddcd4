"""Multi-head latent attention (MLA): keys and values through a low-rank latent, the form DeepSeek-V2/V3 use.

DeepSeek-AI, *DeepSeek-V2* (2024, §2.1) and *DeepSeek-V3* (2024, §2.1.1). Instead of caching H key heads
and H value heads per token, MLA caches one small vector per token and layer:

- the **latent** ``c_KV = RMSNorm(x W_DKV)`` of width ``kv_rank`` (512 in DeepSeek-V3, against
  2·128·128 = 32,768 numbers for the keys and values of 128 full heads); each head's key and value are
  recovered from it by up-projections, ``k_nope = c_KV W_UK`` and ``v = c_KV W_UV`` (``kv_up_proj``);
- a **decoupled RoPE key** ``k_rope = RoPE(x W_KR)`` of width ``rope_head_dim``, one for all heads.
  RoPE cannot act on the latent itself: a rotation between ``W_UK`` and the query would depend on the
  position, so ``W_UK`` could no longer be folded into the query (below). The position therefore rides on
  a few extra dimensions, concatenated to each head's key: ``k = [k_nope ; k_rope]``, ``q = [q_nope ; q_rope]``.

Queries may be low-rank too (``q_rank``: ``q = RMSNorm(x W_DQ) W_UQ``), which saves parameters, not cache.
The scores are ``(q_nope·k_nope + q_rope·k_rope) / sqrt(nope_head_dim + rope_head_dim)`` (DeepSeek-V3's YaRN
multiplies that scale by its attention temperature squared: ``softmax_scale``).

**The absorbed form** (``absorb=True``). Since ``q_nope·k_nope = q_nope·(W_UKᵀ c_KV) = (W_UK q_nope)·c_KV``,
each head's ``W_UK`` can be applied to the *query* instead, and ``W_UV`` after the weighted sum of the
latents: attention then runs on the cached latents directly and no per-head key or value is ever built.
It gives the same output (tests/test_mla.py); it is what makes the small cache pay off at inference.

The cache (a :class:`~companion.attention.KVCache` or :class:`~companion.attention.RollingKVCache`) stores the
latent as its "keys" (B, 1, S, kv_rank) and the shared RoPE key as its "values" (B, 1, S, rope_head_dim):
``kv_rank + rope_head_dim`` numbers per token and layer (576 for DeepSeek-V3).

Checked against ``transformers``' ``DeepseekV3Attention`` through whole models (tests/test_hf_families.py).
Its names: ``q_a_proj``/``q_a_layernorm``/``q_b_proj`` are our ``q_down_proj``/``q_norm``/``q_up_proj``,
``kv_a_proj_with_mqa``/``kv_a_layernorm``/``kv_b_proj`` our ``kv_down_proj``/``kv_norm``/``kv_up_proj``.
The two latent norms use epsilon 1e-6, as there.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from companion._checks import (
    check_bool,
    check_dropout,
    check_input_dtype,
    check_positive_float,
    check_positive_int,
    check_tensor,
)
from companion.attention.kv_cache import KVCache
from companion.attention.multi_head import merge_heads, split_heads
from companion.attention.sdpa import scaled_dot_product_attention
from companion.layers import RMSNorm

if TYPE_CHECKING:
    from companion.positions import RotaryEmbedding

__all__ = ["MultiHeadLatentAttention", "check_rank"]

LATENT_NORM_EPS = 1e-6  # DeepSeek's q_a_layernorm / kv_a_layernorm keep RMSNorm's default epsilon


def check_rank(name: str, rank: int | None, d_model: int) -> None:
    """``rank`` is None or an int in 1 .. d_model (a low-rank bottleneck no wider than the model)."""
    if rank is None:
        return
    check_positive_int(name, rank)
    if rank > d_model:
        raise ValueError(f"{name}={rank} is larger than the model width d_model={d_model}; expected 1 <= "
                         f"{name} <= d_model (a compression, not an expansion)")


class MultiHeadLatentAttention(nn.Module):
    """MLA: H query heads reading keys and values rebuilt from one cached latent per token (DeepSeek-V2/V3).

    Args:
        d_model: model width D. n_heads: heads H.
        kv_rank: width of the key/value latent c_KV (<= D).
        q_rank: width of the query latent (<= D), or None for a full-rank query projection.
        rope_head_dim: width of the RoPE part of each query and of the shared RoPE key (even).
        nope_head_dim: width of the position-free part of each head's query and key.
        v_head_dim: width of each head's value.
        rope: the :class:`~companion.positions.RotaryEmbedding` (of width ``rope_head_dim``) for the RoPE part.
        bias: biases on ``q_down_proj``, ``kv_down_proj`` and ``o_proj`` (DeepSeek's ``attention_bias``); the
            up-projections never have one (the absorbed form needs them linear).
        dropout: dropout on the attention weights (training only).
        absorb: compute attention in the latent space (W_UK folded into the query); same output.
        softmax_scale: the factor on q·k; None: 1 / sqrt(nope_head_dim + rope_head_dim). DeepSeek-V3's YaRN
            multiplies that by its temperature squared (``yarn_attention_factor(factor, mscale_all_dim) ** 2``).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        kv_rank: int,
        *,
        q_rank: int | None = None,
        rope_head_dim: int = 64,
        nope_head_dim: int = 128,
        v_head_dim: int = 128,
        rope: RotaryEmbedding | None = None,
        bias: bool = False,
        dropout: float = 0.0,
        absorb: bool = False,
        softmax_scale: float | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("n_heads", n_heads)
        check_rank("kv_rank", kv_rank, d_model)
        check_rank("q_rank", q_rank, d_model)
        for name, value in (("rope_head_dim", rope_head_dim), ("nope_head_dim", nope_head_dim),
                            ("v_head_dim", v_head_dim)):  # fmt: skip
            check_positive_int(name, value)
        if rope is not None and rope.head_dim != rope_head_dim:
            raise ValueError(f"rope has head_dim={rope.head_dim}; expected rope_head_dim={rope_head_dim}")
        check_bool("bias", bias)
        check_dropout("dropout", dropout)
        check_bool("absorb", absorb)
        if softmax_scale is not None:
            check_positive_float("softmax_scale", softmax_scale)
        self.d_model, self.n_heads, self.kv_rank, self.q_rank = d_model, n_heads, kv_rank, q_rank
        self.rope_dim, self.nope_dim, self.v_dim = rope_head_dim, nope_head_dim, v_head_dim
        self.rope, self.dropout, self.absorb = rope, dropout, absorb
        qk_dim = nope_head_dim + rope_head_dim
        self.softmax_scale = 1.0 / math.sqrt(qk_dim) if softmax_scale is None else softmax_scale
        if q_rank is None:
            self.q_proj = nn.Linear(d_model, n_heads * qk_dim, bias=False)
        else:
            self.q_down_proj = nn.Linear(d_model, q_rank, bias=bias)  # W_DQ
            self.q_norm = RMSNorm(q_rank, LATENT_NORM_EPS)
            self.q_up_proj = nn.Linear(q_rank, n_heads * qk_dim, bias=False)  # W_UQ and W_QR, per head
        self.kv_down_proj = nn.Linear(d_model, kv_rank + rope_head_dim, bias=bias)  # W_DKV and W_KR side by side
        self.kv_norm = RMSNorm(kv_rank, LATENT_NORM_EPS)
        self.kv_up_proj = nn.Linear(kv_rank, n_heads * (nope_head_dim + v_head_dim), bias=False)  # W_UK, W_UV
        self.o_proj = nn.Linear(n_heads * v_head_dim, d_model, bias=bias)

    def queries(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Each head's query, cut into its position-free and RoPE parts (RoPE not applied yet).

        Shapes: x (B, T, D) -> q_nope (B, H, T, nope), q_rope (B, H, T, rope)
        """
        q = self.q_proj(x) if self.q_rank is None else self.q_up_proj(self.q_norm(self.q_down_proj(x)))
        q = split_heads(q, self.n_heads)  # (B, H, T, nope + rope)
        return q.split([self.nope_dim, self.rope_dim], dim=-1)

    def latents(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """What MLA caches per token: the normalised latent c_KV and the shared key part (RoPE not applied yet).

        Shapes: x (B, T, D) -> c_kv (B, 1, T, kv_rank), k_rope (B, 1, T, rope)
        """
        c_kv, k_rope = self.kv_down_proj(x).split([self.kv_rank, self.rope_dim], dim=-1)  # (B, T, r), (B, T, rope)
        return self.kv_norm(c_kv)[:, None], k_rope[:, None]  # one "head": (B, 1, T, r), (B, 1, T, rope)

    def up_weights(self) -> tuple[Tensor, Tensor]:
        """W_UK and W_UV of every head, cut out of ``kv_up_proj``'s weight (the absorbed form folds them into the
        query and the output). Shapes: (H, nope, r), (H, v, r).

        Raises ``ValueError`` if ``kv_up_proj`` is not a plain linear layer (a LoRA adapter acts only through the
        module: merge it first)."""
        if not isinstance(self.kv_up_proj, nn.Linear):
            raise ValueError(f"absorb=True reads kv_up_proj's weight, but kv_up_proj is a "
                             f"{type(self.kv_up_proj).__name__}, whose update the weight does not hold; call "
                             "merge_lora(model) first, or use absorb=False")
        w = self.kv_up_proj.weight.view(self.n_heads, self.nope_dim + self.v_dim, self.kv_rank)  # (H, nope + v, r)
        return w[:, : self.nope_dim], w[:, self.nope_dim :]

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        kv_cache: KVCache | None = None,
        return_weights: bool = False,
        *,
        is_causal: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Causal or masked self-attention over ``x`` (and the cached positions), as ``MultiHeadAttention``.

        ``mask`` is boolean (``True`` = may attend) or additive, broadcastable to (B, H, T, S); ``is_causal``
        hides later keys (the T queries are the last T of the S positions).

        Shapes:
            x: (B, T, D) -> out (B, T, D), and weights (B, H, T, S) if ``return_weights``.
        """
        check_tensor("x", x, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has last dimension {x.shape[-1]}, expected d_model={self.d_model}")
        check_input_dtype("x", x, self.kv_down_proj.weight)
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a KVCache or None, got {type(kv_cache).__name__}")
        q_nope, q_rope = self.queries(x)  # (B, H, T, nope), (B, H, T, rope)
        c_kv, k_rope = self.latents(x)  # (B, 1, T, r), (B, 1, T, rope)
        if self.rope is not None:
            offset = 0 if kv_cache is None else kv_cache.length
            q_rope, k_rope = self.rope(q_rope, offset), self.rope(k_rope, offset)
        if kv_cache is not None:
            c_kv, k_rope = kv_cache.update(c_kv, k_rope)  # (B, 1, S, r), (B, 1, S, rope): the whole cache
        scale = self.softmax_scale
        dropout = self.dropout if self.training else 0.0
        if self.absorb:
            # q_nope·(W_UK c) = (W_UKᵀ q_nope)·c: fold W_UK into the query, attend over the latents themselves
            w_uk, w_uv = self.up_weights()  # (H, nope, r), (H, v, r)
            q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk)  # (B, H, T, r)
            q = torch.cat([q_latent, q_rope], dim=-1)  # (B, H, T, r + rope)
            k = torch.cat([c_kv, k_rope], dim=-1)  # (B, 1, S, r + rope): one key for all heads
            out, weights = scaled_dot_product_attention(
                q, k, c_kv, mask, True, dropout=dropout, scale=scale, is_causal=is_causal
            )  # (B, H, T, r): each head's weighted sum of latents
            out = torch.einsum("bhtr,hvr->bhtv", out, w_uv)  # (B, H, T, v): W_UV after the sum
        else:
            # every head's key and value, rebuilt by calling kv_up_proj (so an adapter on it acts)
            kv = split_heads(self.kv_up_proj(c_kv[:, 0]), self.n_heads)  # (B, H, S, nope + v)
            k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)  # (B, H, S, nope), (B, H, S, v)
            h, s = self.n_heads, k_nope.shape[-2]
            k = torch.cat([k_nope, k_rope.expand(-1, h, s, -1)], dim=-1)  # (B, H, S, nope + rope)
            q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, nope + rope)
            out, weights = scaled_dot_product_attention(
                q, k, v, mask, True, dropout=dropout, scale=scale, is_causal=is_causal
            )  # (B, H, T, v)
        out = self.o_proj(merge_heads(out))  # (B, T, D)
        return (out, weights) if return_weights else out
