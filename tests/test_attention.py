"""Tests for companion.attention against torch's SDPA and nn.MultiheadAttention, plus identities.

Identities used: softmax rows sum to 1; tiled (online-softmax) attention equals plain attention;
cached decoding equals full recomputation; a future token never changes earlier outputs under a causal
mask; GQA equals MHA with its key/value heads repeated; the fast path equals the explicit one.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.testing import assert_close

from companion.attention import (
    KVCache,
    MultiHeadAttention,
    repeat_kv,
    scaled_dot_product_attention,
    softmax,
    tiled_attention,
)
from companion.masks import causal_mask, padding_mask, to_additive

B, T, S, D, H = 2, 5, 7, 16, 4


def qkv(t: int = T, s: int = S, d_h: int = 8, seed: int = 0, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, t, d_h, generator=g).to(dtype)
    k = torch.randn(B, H, s, d_h, generator=g).to(dtype)
    v = torch.randn(B, H, s, d_h, generator=g).to(dtype)
    return q, k, v


def random_bool_mask(t: int, s: int, seed: int = 0) -> Tensor:
    """A random (B, 1, T, S) mask in which every query sees at least one key (its last one)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, 1, t, s, generator=g) > 0.5
    mask[..., -1] = True
    return mask


# ----------------------------------------------------------------------------- softmax


def test_softmax_matches_torch_and_rows_sum_to_one() -> None:
    x = torch.randn(3, 4, 9) * 10
    assert_close(softmax(x), torch.softmax(x, dim=-1))
    assert_close(softmax(x, dim=0), torch.softmax(x, dim=0))
    assert_close(softmax(x).sum(-1), torch.ones(3, 4))


def test_softmax_is_stable_for_huge_logits() -> None:
    x = torch.tensor([1000.0, 1001.0, 1002.0])
    assert_close(softmax(x), softmax(x - 1000.0))


def test_softmax_fully_masked_row_is_zeros_not_nan() -> None:
    x = torch.tensor([[0.5, float("-inf"), 1.0], [float("-inf")] * 3])
    out = softmax(x)
    assert not torch.isnan(out).any()
    assert torch.equal(out[1], torch.zeros(3))
    assert_close(out[0].sum(), torch.tensor(1.0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_half_is_computed_in_float32(dtype: torch.dtype) -> None:
    x = torch.randn(4, 50) * 5
    out = softmax(x.to(dtype))
    assert out.dtype == dtype
    assert_close(out, torch.softmax(x.to(dtype).float(), dim=-1).to(dtype))


def test_softmax_backward_works_and_has_no_nan() -> None:
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(softmax, (x,))
    masked = torch.tensor([[float("-inf")] * 3, [0.0, 1.0, float("-inf")]], requires_grad=True)
    softmax(masked).sum().backward()
    assert not torch.isnan(masked.grad).any()


# ----------------------------------------------------------------------------- scaled dot-product attention


@pytest.mark.parametrize("kind", ["none", "bool", "additive", "causal", "padding"])
def test_sdpa_matches_torch(kind: str) -> None:
    q, k, v = qkv()
    masks = {
        "none": None,
        "bool": random_bool_mask(T, S),
        "additive": torch.randn(B, H, T, S),  # a real-valued bias, not just 0/-inf
        "causal": causal_mask(T, S),
        "padding": padding_mask(torch.tensor([[1, 2, 3, 4, 5, 0, 0], [1, 2, 3, 4, 5, 6, 7]]), 0),
    }
    mask = masks[kind]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(scaled_dot_product_attention(q, k, v, mask), expected)


def test_sdpa_weights_are_the_softmax_of_scaled_scores() -> None:
    q, k, v = qkv()
    mask = causal_mask(T, S)
    out, weights = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + to_additive(mask)
    assert_close(weights, torch.softmax(scores, dim=-1))
    assert_close(weights.sum(-1), torch.ones(B, H, T))
    assert_close(out, weights @ v)


def test_sdpa_custom_scale_matches_torch() -> None:
    q, k, v = qkv()
    assert_close(
        scaled_dot_product_attention(q, k, v, scale=0.3), F.scaled_dot_product_attention(q, k, v, scale=0.3)
    )


def test_sdpa_fully_masked_query_gives_zeros() -> None:
    q, k, v = qkv()
    mask = torch.ones(T, S, dtype=torch.bool)
    mask[2] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert not torch.isnan(out).any()
    assert torch.equal(out[:, :, 2], torch.zeros(B, H, 8)) and torch.equal(
        weights[:, :, 2], torch.zeros(B, H, S)
    )
    rest = [0, 1, 3, 4]
    expected = F.scaled_dot_product_attention(q[:, :, rest], k, v, attn_mask=mask[rest])
    assert_close(out[:, :, rest], expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_half_precision(dtype: torch.dtype) -> None:
    q, k, v = qkv()
    out, weights = scaled_dot_product_attention(
        q.to(dtype), k.to(dtype), v.to(dtype), causal_mask(T, S), return_weights=True
    )
    assert out.dtype == dtype and weights.dtype == dtype
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T, S))
    assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)


def test_sdpa_dropout_changes_output_only_when_asked() -> None:
    q, k, v = qkv()
    torch.manual_seed(0)
    dropped = scaled_dot_product_attention(q, k, v, dropout=0.5)
    assert not torch.allclose(dropped, scaled_dot_product_attention(q, k, v))


# ----------------------------------------------------------------------------- repeat_kv and tiled attention


def test_repeat_kv_equals_repeat_interleave() -> None:
    x = torch.randn(2, 3, 4, 5)
    assert torch.equal(repeat_kv(x, 4), torch.repeat_interleave(x, 4, dim=1))
    assert repeat_kv(x, 1) is x


@pytest.mark.parametrize("block_size", [1, 3, 4, 7, 64])
@pytest.mark.parametrize("kind", ["none", "causal", "bool", "additive", "causal+bool"])
def test_tiled_equals_plain(block_size: int, kind: str) -> None:
    q, k, v = qkv(seed=block_size)
    mask = {
        "bool": random_bool_mask(T, S),
        "additive": torch.randn(T, S),
        "causal+bool": random_bool_mask(T, S),
    }
    mask = mask.get(kind)
    causal = kind.startswith("causal")
    plain_mask = (
        mask & causal_mask(T, S) if kind == "causal+bool" else (causal_mask(T, S) if causal else mask)
    )
    expected = scaled_dot_product_attention(q, k, v, plain_mask)
    assert_close(tiled_attention(q, k, v, mask, block_size=block_size, causal=causal), expected)


def test_tiled_fully_masked_query_gives_zeros() -> None:
    q, k, v = qkv()
    mask = torch.ones(T, S, dtype=torch.bool)
    mask[0] = False
    out = tiled_attention(q, k, v, mask, block_size=3)
    assert torch.equal(out[:, :, 0], torch.zeros(B, H, 8))
    assert_close(out, scaled_dot_product_attention(q, k, v, mask))


def test_tiled_half_precision_keeps_dtype() -> None:
    q, k, v = qkv(dtype=torch.bfloat16)
    out = tiled_attention(q, k, v, block_size=2, causal=True)
    assert out.dtype == torch.bfloat16
    assert_close(
        out.float(),
        scaled_dot_product_attention(q.float(), k.float(), v.float(), causal_mask(T, S)),
        atol=2e-2,
        rtol=2e-2,
    )


# ----------------------------------------------------------------------------- MultiHeadAttention vs torch


def torch_mha_and_ours(bias: bool = True, seed: int = 0) -> tuple[nn.MultiheadAttention, MultiHeadAttention]:
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=True).eval()
    ours = MultiHeadAttention(D, H, bias=bias).eval()
    with torch.no_grad():
        for proj, w in zip((ours.q_proj, ours.k_proj, ours.v_proj), ref.in_proj_weight.chunk(3)):
            proj.weight.copy_(w)
        ours.o_proj.weight.copy_(ref.out_proj.weight)
        if bias:
            for proj, b in zip((ours.q_proj, ours.k_proj, ours.v_proj), ref.in_proj_bias.chunk(3)):
                proj.bias.copy_(b)
            ours.o_proj.bias.copy_(ref.out_proj.bias)
    return ref, ours


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masks", ["none", "causal", "padding", "both"])
def test_self_attention_matches_torch_multihead_attention(bias: bool, masks: str) -> None:
    ref, ours = torch_mha_and_ours(bias)
    x = torch.randn(B, T, D)
    ids = torch.tensor([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]])
    causal = causal_mask(T) if masks in ("causal", "both") else None
    pad = padding_mask(ids, 0) if masks in ("padding", "both") else None
    ours_mask = causal if pad is None else (pad if causal is None else causal & pad)
    # torch.nn.MultiheadAttention's boolean masks mean True = *blocked*: the opposite of ours.
    expected, expected_w = ref(
        x, x, x,
        attn_mask=None if causal is None else ~causal,
        key_padding_mask=None if pad is None else ids == 0,
        need_weights=True, average_attn_weights=False,
    )  # fmt: skip
    out, weights = ours(x, mask=ours_mask, return_weights=True)
    assert_close(out, expected)
    assert_close(weights, expected_w)


def test_cross_attention_matches_torch_multihead_attention() -> None:
    ref, ours = torch_mha_and_ours()
    x, context = torch.randn(B, T, D), torch.randn(B, S, D)
    src_ids = torch.tensor([[4, 5, 6, 7, 0, 0, 0], [4, 5, 6, 7, 8, 9, 1]])
    expected, expected_w = ref(x, context, context, key_padding_mask=src_ids == 0, average_attn_weights=False)
    out, weights = ours(x, memory=context, mask=padding_mask(src_ids, 0), return_weights=True)
    assert weights.shape == (B, H, T, S)
    assert_close(out, expected)
    assert_close(weights, expected_w)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("kind", ["none", "causal", "bool", "additive"])
def test_sdpa_fast_path_equals_explicit(n_kv_heads: int, kind: str) -> None:
    torch.manual_seed(0)
    explicit = MultiHeadAttention(D, H, n_kv_heads).eval()
    fast = MultiHeadAttention(D, H, n_kv_heads, use_sdpa=True).eval()
    fast.load_state_dict(explicit.state_dict())
    x = torch.randn(B, T, D)
    mask = {
        "causal": causal_mask(T),
        "bool": random_bool_mask(T, T),
        "additive": torch.randn(B, H, T, T),
    }.get(kind)
    assert_close(fast(x, mask=mask), explicit(x, mask=mask))
    out, weights = fast(x, mask=mask, return_weights=True)  # weights requested: explicit path
    assert_close(out, explicit(x, mask=mask))
    assert weights.shape == (B, H, T, T)


def test_sdpa_fast_path_half_with_float32_additive_mask() -> None:
    torch.manual_seed(0)
    fast = MultiHeadAttention(D, H, use_sdpa=True).to(torch.bfloat16)
    out = fast(torch.randn(B, T, D, dtype=torch.bfloat16), mask=causal_mask(T, additive=True))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


# ----------------------------------------------------------------------------- GQA / MQA


def test_gqa_equals_mha_with_repeated_kv_heads() -> None:
    torch.manual_seed(0)
    gqa = MultiHeadAttention(D, H, n_kv_heads=2)
    mha = MultiHeadAttention(D, H)
    d_h, n_rep = D // H, H // 2
    with torch.no_grad():
        mha.q_proj.load_state_dict(gqa.q_proj.state_dict())
        mha.o_proj.load_state_dict(gqa.o_proj.state_dict())
        for src, dst in ((gqa.k_proj, mha.k_proj), (gqa.v_proj, mha.v_proj)):
            # rows of kv head g serve query heads g*n_rep .. g*n_rep + n_rep - 1
            dst.weight.copy_(src.weight.view(2, d_h, D).repeat_interleave(n_rep, dim=0).reshape(D, D))
            dst.bias.copy_(src.bias.view(2, d_h).repeat_interleave(n_rep, dim=0).reshape(D))
    x = torch.randn(B, T, D)
    assert_close(gqa(x, mask=causal_mask(T)), mha(x, mask=causal_mask(T)))


def test_n_kv_heads_equal_to_n_heads_is_plain_mha() -> None:
    torch.manual_seed(0)
    a = MultiHeadAttention(D, H, n_kv_heads=H)
    torch.manual_seed(0)
    b = MultiHeadAttention(D, H)
    x = torch.randn(B, T, D)
    assert_close(a(x), b(x))


def test_mqa_shapes_and_cache_size() -> None:
    mqa = MultiHeadAttention(D, H, n_kv_heads=1)
    assert mqa.k_proj.weight.shape == (D // H, D) and mqa.v_proj.weight.shape == (D // H, D)
    cache = KVCache()
    out, weights = mqa(torch.randn(B, T, D), mask=causal_mask(T), kv_cache=cache, return_weights=True)
    assert out.shape == (B, T, D) and weights.shape == (B, H, T, T)
    assert cache.k.shape == (B, 1, T, D // H) and cache.length == T


# ----------------------------------------------------------------------------- KV cache and causality


def make_rope():
    from companion.positions import RotaryEmbedding  # written by another module's owner; must exist

    return RotaryEmbedding(D // H, max_seq_len=32)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("use_rope", [False, True])
@pytest.mark.parametrize("chunks", [(1,) * 6, (3, 1, 2)])
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_cached_decoding_equals_full_recomputation(
    n_kv_heads: int, use_rope: bool, chunks: tuple, use_sdpa: bool
) -> None:
    torch.manual_seed(0)
    rope = make_rope() if use_rope else None
    attn = MultiHeadAttention(D, H, n_kv_heads, rope=rope, use_sdpa=use_sdpa).eval()
    x = torch.randn(B, sum(chunks), D)
    full = MultiHeadAttention(D, H, n_kv_heads, rope=rope).eval()  # the explicit path, without a cache
    full.load_state_dict(attn.state_dict())
    full = full(x, mask=causal_mask(x.shape[1]))
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        # new queries see every cached key and the new keys up to themselves
        outs.append(attn(x[:, start : start + n], mask=causal_mask(n, start + n), kv_cache=cache))
        start += n
        assert cache.length == start
    assert_close(torch.cat(outs, dim=1), full)


def test_cross_attention_cache_projects_context_once_and_reuses_it() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H).eval()
    context = torch.randn(B, S, D)
    x = torch.randn(B, 3, D)
    calls = []
    attn.k_proj.register_forward_hook(lambda *_: calls.append(1))
    cache = KVCache()
    outs = [attn(x[:, i : i + 1], memory=context, kv_cache=cache) for i in range(3)]
    assert len(calls) == 1 and cache.length == S
    assert_close(torch.cat(outs, dim=1), attn(x, memory=context))
    # The cached encoder K/V are used even if another context is passed: it is not read again.
    assert_close(attn(x, memory=torch.zeros_like(context), kv_cache=cache), attn(x, memory=context))
    cache.reset()
    assert cache.length == 0 and cache.k is None


def test_kv_cache_update_appends_and_checks_shapes() -> None:
    cache = KVCache()
    k1, v1 = torch.randn(B, 2, 3, 4), torch.randn(B, 2, 3, 4)
    k2, v2 = torch.randn(B, 2, 1, 4), torch.randn(B, 2, 1, 4)
    cache.update(k1, v1)
    k_all, v_all = cache.update(k2, v2)
    assert torch.equal(k_all, torch.cat([k1, k2], dim=2)) and torch.equal(v_all, torch.cat([v1, v2], dim=2))
    with pytest.raises(ValueError, match="does not match the cached k"):
        cache.update(torch.randn(B, 3, 1, 4), torch.randn(B, 3, 1, 4))
    with pytest.raises(ValueError, match="expected equal"):
        cache.update(k2, torch.randn(B, 2, 2, 4))


def test_kv_cache_reorder_selects_batch_rows() -> None:
    cache = KVCache()
    k, v = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)
    cache.update(k, v)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert torch.equal(cache.k, k[[2, 2, 0]]) and torch.equal(cache.v, v[[2, 2, 0]])


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_future_token_does_not_change_earlier_outputs(use_sdpa: bool) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, use_sdpa=use_sdpa)
    x = torch.randn(B, T, D)
    changed = x.clone()
    changed[:, -1] += 10.0
    before, after = attn(x, mask=causal_mask(T)), attn(changed, mask=causal_mask(T))
    assert_close(before[:, :-1], after[:, :-1])
    assert not torch.allclose(before[:, -1], after[:, -1])  # the test can fail: the last output does change


def test_fully_masked_query_in_module_gives_output_bias() -> None:
    attn = MultiHeadAttention(D, H)
    mask = torch.ones(T, T, dtype=torch.bool)
    mask[1] = False
    out = attn(torch.randn(B, T, D), mask=mask)
    assert_close(out[:, 1], attn.o_proj.bias.expand(B, D))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_module_half_precision(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, n_kv_heads=2)
    x = torch.randn(B, T, D)
    expected = attn(x, mask=causal_mask(T))
    out = attn.to(dtype)(x.to(dtype), mask=causal_mask(T))
    assert out.dtype == dtype
    assert_close(out.float(), expected, atol=5e-2, rtol=5e-2)


def test_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, T, D)
    attn.eval()
    assert_close(attn(x), attn(x))
    attn.train()
    assert not torch.allclose(attn(x), attn.eval()(x))


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: MultiHeadAttention(510, 8), ValueError, "d_model=510 is not divisible by n_heads=8"),
        (lambda: MultiHeadAttention(16, 4, 3), ValueError, "n_heads=4 is not divisible by n_kv_heads=3"),
        (lambda: MultiHeadAttention(16, 0), ValueError, "n_heads=0"),
        (lambda: MultiHeadAttention(16, 4, dropout=1.5), ValueError, "dropout=1.5"),
        (lambda: MultiHeadAttention(D, H)(torch.randn(T, D)), ValueError, "x must have 3 dimensions"),
        (lambda: MultiHeadAttention(D, H)(torch.randn(B, T, D + 1)), ValueError, f"expected d_model={D}"),
        (lambda: MultiHeadAttention(D, H)(torch.randn(B, 0, D)), ValueError, "x is empty"),
        (lambda: MultiHeadAttention(D, H)(torch.randn(B, T, D).double()), ValueError, "dtype"),
        (lambda: MultiHeadAttention(D, H)([[1.0]]), TypeError, "x must be a torch.Tensor"),
        (
            lambda: MultiHeadAttention(D, H)(torch.randn(B, T, D), memory=torch.randn(B + 1, S, D)),
            ValueError,
            "memory has batch size",
        ),
        (
            lambda: MultiHeadAttention(D, H)(torch.randn(B, T, D), memory=torch.randn(B, S, D).double()),
            ValueError,
            "memory has dtype",
        ),
        (
            lambda: MultiHeadAttention(D, H)(torch.randn(B, T, D), mask=causal_mask(T + 1)),
            ValueError,
            "does not broadcast",
        ),
        (lambda: MultiHeadAttention(D, H)(torch.randn(B, T, D), kv_cache={}), TypeError, "kv_cache"),
        (
            lambda: scaled_dot_product_attention(torch.randn(4, 8), torch.randn(5, 7), torch.randn(5, 7)),
            ValueError,
            "head width",
        ),
        (
            lambda: scaled_dot_product_attention(torch.randn(4, 8), torch.randn(5, 8), torch.randn(6, 8)),
            ValueError,
            "k has shape",
        ),
        (
            lambda: scaled_dot_product_attention(torch.randn(8), torch.randn(5, 8), torch.randn(5, 8)),
            ValueError,
            "at least 2 dims",
        ),
        (
            lambda: scaled_dot_product_attention(torch.randn(0, 8), torch.randn(5, 8), torch.randn(5, 8)),
            ValueError,
            "q is empty",
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(4, 8), torch.randn(5, 8).half(), torch.randn(5, 8)
            ),
            ValueError,
            "dtype",
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(4, 8), torch.randn(5, 8), torch.randn(5, 8), torch.ones(4, 5, dtype=torch.long)
            ),
            TypeError,
            "mask must be bool",
        ),
        (
            lambda: scaled_dot_product_attention(
                torch.randn(4, 8), torch.randn(5, 8), torch.randn(5, 8), dropout=1.0
            ),
            ValueError,
            "dropout=1.0",
        ),
        (lambda: repeat_kv(torch.randn(2, 3, 4), 2), ValueError, "x must have 4 dimensions"),
        (
            lambda: tiled_attention(torch.randn(4, 8), torch.randn(5, 8), torch.randn(5, 8), block_size=0),
            ValueError,
            "block_size=0",
        ),
        (
            lambda: tiled_attention(torch.randn(6, 8), torch.randn(5, 8), torch.randn(5, 8), causal=True),
            ValueError,
            "S >= T",
        ),
    ],
)
def test_bad_input_raises_clear_errors(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_mixed_devices_are_rejected() -> None:
    meta = torch.empty(5, 8, device="meta")
    with pytest.raises(ValueError, match="device"):
        scaled_dot_product_attention(torch.randn(4, 8), meta, meta)


# ----------------------------------------------------------------------------- is_causal


@pytest.mark.parametrize("t, s", [(T, T), (3, S), (1, S)])
@pytest.mark.parametrize("padded", [False, True])
def test_sdpa_is_causal_equals_the_explicit_causal_mask(t: int, s: int, padded: bool) -> None:
    """is_causal=True is causal_mask(T, S) (queries = the last T of S positions), also combined with padding,
    and equals torch's SDPA given that mask explicitly; gradients too."""
    q, k, v = (x.requires_grad_() for x in qkv(t, s))
    pad = padding_mask(torch.tensor([[1] * s, [1] * (s - 2) + [0, 0]]), 0) if padded else None  # (B, 1, 1, S)
    mask = causal_mask(t, s) if pad is None else causal_mask(t, s) & pad
    out, weights = scaled_dot_product_attention(q, k, v, pad, True, is_causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(out, expected)
    assert_close(weights, scaled_dot_product_attention(q, k, v, mask, True)[1])
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
    for g, e in zip(grads, expected_grads):
        assert_close(g, e)


def test_sdpa_is_causal_with_an_additive_mask() -> None:
    q, k, v = qkv(T, T)
    bias = torch.randn(B, H, T, T)
    expected = scaled_dot_product_attention(q, k, v, bias + to_additive(causal_mask(T)))
    assert_close(scaled_dot_product_attention(q, k, v, bias, is_causal=True), expected)


@pytest.mark.parametrize("use_sdpa", [False, True])
@pytest.mark.parametrize("n_kv_heads", [4, 1])
@pytest.mark.parametrize("padded", [False, True])
def test_module_is_causal_equals_an_explicit_causal_mask(use_sdpa: bool, n_kv_heads: int, padded: bool) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, n_kv_heads, use_sdpa=use_sdpa)  # training mode (dropout 0): gradients
    x = torch.randn(B, T, D, requires_grad=True)
    pad = padding_mask(torch.tensor([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]), 0) if padded else None
    mask = causal_mask(T) if pad is None else causal_mask(T) & pad
    out = attn(x, mask=pad, is_causal=True)
    expected = attn(x, mask=mask)
    assert_close(out, expected)
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    (expected_grad,) = torch.autograd.grad(expected.square().sum(), x)
    assert_close(grad, expected_grad)


@pytest.mark.parametrize("use_sdpa", [False, True])
@pytest.mark.parametrize("chunks", [(1,) * 6, (3, 1, 2), (2, 4)])
def test_module_is_causal_with_a_kv_cache_aligns_bottom_right(use_sdpa: bool, chunks: tuple) -> None:
    """With a cache the T new queries come after S - T cached positions: torch's own is_causal (top-left)
    would hide keys they may see. Chunked decoding with is_causal must equal one causal pass."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, 2, use_sdpa=use_sdpa).eval()
    x = torch.randn(B, sum(chunks), D)
    with torch.no_grad():
        full = attn(x, mask=causal_mask(x.shape[1]))
        cache, outs, start = KVCache(), [], 0
        for n in chunks:
            outs.append(attn(x[:, start : start + n], kv_cache=cache, is_causal=True))
            start += n
    assert_close(torch.cat(outs, dim=1), full)


def test_fused_is_causal_builds_no_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """T == S and nothing else masked: torch's kernel gets is_causal=True and no (T, S) mask at all."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("attn_mask"), kwargs.get("is_causal")))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    attn = MultiHeadAttention(D, H, use_sdpa=True).eval()
    with torch.no_grad():
        attn(torch.randn(B, T, D), is_causal=True)
        cache = KVCache()
        attn(torch.randn(B, 3, D), kv_cache=cache, is_causal=True)  # T == S: torch's is_causal is right
        attn(torch.randn(B, 1, D), kv_cache=cache, is_causal=True)  # one new query: nothing to hide
    assert calls == [(None, True), (None, True), (None, False)]


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_gpt_uses_is_causal_and_still_hides_the_future(use_sdpa: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from companion.models import GPT, ModelConfig

    seen = []
    real = MultiHeadAttention.forward

    def spy(self, *args, **kwargs):
        seen.append((kwargs.get("mask"), kwargs.get("is_causal")))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MultiHeadAttention, "forward", spy)
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=30, d_model=D, n_heads=H, n_layers=2, max_seq_len=16, use_sdpa=use_sdpa))
    ids = torch.randint(0, 30, (B, 9))
    with torch.no_grad():
        out = model(ids)
        changed = ids.clone()
        changed[:, -1] = (changed[:, -1] + 1) % 30
        assert_close(model(changed)[:, :-1], out[:, :-1])  # the last token changes no earlier position
    assert seen[0] == (None, True)  # no (T, T) mask was built


def test_is_causal_bad_values() -> None:
    q, k, v = qkv(T, S)
    with pytest.raises(TypeError, match="is_causal"):
        scaled_dot_product_attention(q, k, v, is_causal="yes")
    with pytest.raises(TypeError, match="is_causal"):
        MultiHeadAttention(D, H)(torch.randn(B, T, D), is_causal=1)
    with pytest.raises(ValueError, match=r"is_causal=True with T=7 queries but only S=5 keys"):
        scaled_dot_product_attention(k, q, q, is_causal=True)  # 7 queries, 5 keys


# ----------------------------------------------------------------------------- the cache's room


def test_kv_cache_grows_in_place_and_equals_concatenation() -> None:
    """Written into spare room, reallocated when full: the stored keys are always the concatenation."""
    g = torch.Generator().manual_seed(0)
    cache, ks, vs = KVCache(), [], []
    rooms = []
    for n in (3, 1, 1, 1, 4, 1, 7):
        k, v = torch.randn(B, 2, n, 8, generator=g), torch.randn(B, 2, n, 6, generator=g)
        ks.append(k)
        vs.append(v)
        k_all, v_all = cache.update(k, v)
        assert torch.equal(k_all, torch.cat(ks, dim=-2)) and torch.equal(v_all, torch.cat(vs, dim=-2))
        rooms.append(cache._k.shape[-2])
    assert cache.length == 18 and torch.equal(cache.k, torch.cat(ks, dim=-2))
    assert len(set(rooms)) < len(rooms)  # some steps wrote into room left by an earlier reallocation
    assert all(room >= used for room, used in zip(rooms, (3, 4, 5, 6, 10, 11, 18)))


def test_kv_cache_max_length_caps_the_room_and_rejects_more() -> None:
    cache = KVCache(max_length=5)
    cache.update(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4))
    cache.update(torch.randn(1, 1, 1, 4), torch.randn(1, 1, 1, 4))
    assert cache._k.shape[-2] <= 5
    with pytest.raises(ValueError, match=r"would hold 6 positions; expected at most max_length=5"):
        cache.update(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4))
    with pytest.raises(TypeError, match="max_length"):
        KVCache(max_length=2.5)


def test_kv_cache_under_autograd_keeps_gradients_right() -> None:
    """With keys that require grad the cache concatenates (no in-place write): backward works and matches."""
    k1, k2 = torch.randn(1, 2, 3, 4, requires_grad=True), torch.randn(1, 2, 1, 4, requires_grad=True)
    cache = KVCache()
    cache.update(k1, k1 * 2)
    k_all, v_all = cache.update(k2, k2 * 2)
    (k_all.sum() + v_all.square().sum()).backward()
    assert_close(k1.grad, 1 + 8 * k1.detach())
    assert_close(k2.grad, 1 + 8 * k2.detach())
