"""Multi-head latent attention (companion.attention.mla) and QK-norm in MultiHeadAttention.

MLA: the absorbed form (W_UK folded into the query, W_UV applied after the weighted sum) equals the explicit
one; cached decoding equals full recomputation; the cache holds kv_rank + rope_head_dim numbers per token. The
whole attention is checked against transformers' DeepseekV3Attention through the model (tests/test_hf_families.py).
QK-norm: each head's q and k are RMS-normalised, which makes attention blind to the scale of W_Q and W_K.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from companion.attention import KVCache, MultiHeadAttention, MultiHeadLatentAttention
from companion.masks import causal_mask
from companion.positions import RotaryEmbedding

D, H = 32, 4


def mla(q_rank: int | None = 12, absorb: bool = False, seed: int = 0) -> MultiHeadLatentAttention:
    torch.manual_seed(seed)
    rope = RotaryEmbedding(6, 64, pairing="adjacent")
    layer = MultiHeadLatentAttention(D, H, 10, q_rank=q_rank, rope_head_dim=6, nope_head_dim=8, v_head_dim=5,
                                     rope=rope, absorb=absorb)  # fmt: skip
    return layer.eval()


def pair(q_rank: int | None) -> tuple[MultiHeadLatentAttention, MultiHeadLatentAttention]:
    explicit = mla(q_rank)
    absorbed = mla(q_rank, absorb=True)
    absorbed.load_state_dict(explicit.state_dict())
    return explicit, absorbed


@pytest.mark.parametrize("q_rank", [None, 12])
@torch.no_grad()
def test_absorbed_form_equals_the_explicit_one(q_rank: int | None) -> None:
    explicit, absorbed = pair(q_rank)
    x = torch.randn(2, 9, D)
    out, weights = explicit(x, is_causal=True, return_weights=True)
    out_a, weights_a = absorbed(x, is_causal=True, return_weights=True)
    assert_close(out_a, out, atol=1e-5, rtol=1e-5)
    assert_close(weights_a, weights, atol=1e-6, rtol=1e-5)  # the same attention pattern, computed in the latent


@pytest.mark.parametrize("absorb", [False, True])
@torch.no_grad()
def test_cached_decoding_equals_full_recomputation(absorb: bool) -> None:
    layer = mla(absorb=absorb)
    x = torch.randn(2, 10, D)
    full = layer(x, mask=causal_mask(10))
    cache = KVCache()
    steps = [layer(x[:, :4], kv_cache=cache, is_causal=True)]  # a prompt of 4, then one token at a time
    steps += [layer(x[:, t : t + 1], kv_cache=cache) for t in range(4, 10)]
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.k.shape == (2, 1, 10, 10) and cache.v.shape == (2, 1, 10, 6)  # latent and shared RoPE key only


def test_gradients_flow_through_the_absorbed_form() -> None:
    explicit, absorbed = pair(12)
    x = torch.randn(1, 5, D)
    explicit(x, is_causal=True).sum().backward()
    absorbed(x, is_causal=True).sum().backward()
    assert_close(absorbed.kv_up_proj.weight.grad, explicit.kv_up_proj.weight.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [(dict(kv_rank=0), ValueError, "kv_rank=0"),
     (dict(kv_rank=33), ValueError, "kv_rank=33 is larger than the model width d_model=32"),
     (dict(kv_rank=8, q_rank=0), ValueError, "q_rank=0"),
     (dict(kv_rank=8, q_rank=40), ValueError, "q_rank=40 is larger"),
     (dict(kv_rank=8, rope=RotaryEmbedding(8, 16)), ValueError, "rope_head_dim=64")],
)  # fmt: skip
def test_bad_ranks_are_named(kwargs: dict[str, object], error: type, needle: str) -> None:
    with pytest.raises(error, match=needle):
        MultiHeadLatentAttention(D, H, **kwargs)


# --- QK-norm --------------------------------------------------------------------------------------------


def test_qk_norm_normalises_each_head_before_the_scores() -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(D, H, qk_norm=True).eval()
    x = torch.randn(2, 6, D)
    _, weights = layer(x, return_weights=True)
    q = layer.q_proj(x).view(2, 6, H, 8).transpose(1, 2)  # (B, H, T, D_h)
    k = layer.k_proj(x).view(2, 6, H, 8).transpose(1, 2)
    q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6)  # unit RMS per head, gains start at 1
    k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert_close(weights, torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1))


@torch.no_grad()
def test_qk_norm_makes_attention_blind_to_the_scale_of_w_q_and_w_k() -> None:
    """The logits q·k/√D_h of a normalised q and k are bounded by √D_h times the gains, whatever W_Q, W_K do."""
    torch.manual_seed(0)
    plain = MultiHeadAttention(D, H, bias=False).eval()
    normed = MultiHeadAttention(D, H, bias=False, qk_norm=True).eval()
    normed.load_state_dict(plain.state_dict() | {k: v for k, v in normed.state_dict().items() if "norm" in k})
    x = torch.randn(2, 6, D)
    before = [m(x) for m in (plain, normed)]
    for m in (plain, normed):
        m.q_proj.weight.mul_(10.0)
        m.k_proj.weight.mul_(10.0)
    assert not torch.allclose(plain(x), before[0], atol=1e-3)  # without: 100 times larger logits
    assert_close(normed(x), before[1], atol=1e-5, rtol=1e-5)  # with: the same output


def test_an_explicit_head_width_sets_the_projection_shapes() -> None:
    layer = MultiHeadAttention(24, 4, 2, head_dim=16, qk_norm=True)
    assert layer.q_proj.weight.shape == (64, 24) and layer.k_proj.weight.shape == (32, 24)
    assert layer.o_proj.weight.shape == (24, 64) and layer.q_norm.weight.shape == (16,)
    assert layer(torch.randn(1, 3, 24)).shape == (1, 3, 24)
