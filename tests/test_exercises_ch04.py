"""Chapter 4's exercise checks: a right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch

from companion.exercises.testing import assert_fails, assert_passes


def split_ok(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_ok(x):
    b, h, t, d_h = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d_h)


def test_split_heads() -> None:
    assert_passes("split_heads", split_ok)
    assert_fails("split_heads", lambda x, h: x.view(x.shape[0], h, x.shape[1], -1), "without transposing")
    assert_fails("split_heads", lambda x, h: x.view(*x.shape[:2], -1, h).permute(0, 3, 1, 2), "strided columns")
    assert_fails("split_heads", lambda x, h: x.view(*x.shape[:2], h, -1), "stopped at (B, T, H, D_h)")


def test_merge_heads() -> None:
    assert_passes("merge_heads", merge_ok)
    assert_fails("merge_heads", lambda x: x.reshape(x.shape[0], x.shape[2], -1), "without transposing")
    assert_fails("merge_heads", lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1), "interleaves")
    assert_fails("merge_heads", lambda x: x.transpose(1, 2), "did not concatenate")


def params_ok(d_model, n_heads, n_kv_heads=None, bias=True):
    d_h = d_model // n_heads
    kv = (n_heads if n_kv_heads is None else n_kv_heads) * d_h
    weights = 2 * d_model * d_model + 2 * d_model * kv  # W_Q, W_O: D×D; W_K, W_V: D×(H_kv·D_h)
    return weights + (2 * d_model + 2 * kv if bias else 0)


def test_mha_parameters() -> None:
    assert_passes("mha_parameters", params_ok)
    assert_passes("mha_parameters", lambda *a, **k: torch.tensor(params_ok(*a, **k)))  # a 0-d tensor is fine

    def no_w_o(d, h, n_kv_heads=None, bias=True):
        return params_ok(d, h, n_kv_heads, bias) - d * d - (d if bias else 0)

    def full_width(d, h, n_kv_heads=None, bias=True):
        return 4 * d * d + (4 * d if bias else 0)

    def no_bias(d, h, n_kv_heads=None, bias=True):
        return params_ok(d, h, n_kv_heads, False)

    def per_head(d, h, n_kv_heads=None, bias=True):
        return h * full_width(d, h, None, bias)

    assert_fails("mha_parameters", no_w_o, "output projection W_O")
    assert_fails("mha_parameters", full_width, "H_kv·D_h only")
    assert_fails("mha_parameters", no_bias, "forgot the biases")
    assert_fails("mha_parameters", per_head, "head count multiplies nothing")
    assert_fails("mha_parameters", lambda *a, **k: "many", "expected an int")


def test_gqa_kv_cache_gib() -> None:
    right = 2 * 80 * 8 * 128 * 4096 * 2 / 2**30
    assert_passes("gqa_kv_cache_gib", right)
    assert_passes("gqa_kv_cache_gib", 1.25)
    assert_fails("gqa_kv_cache_gib", right / 2, "both K and V")
    assert_fails("gqa_kv_cache_gib", right * 8, "64 query heads")
    assert_fails("gqa_kv_cache_gib", right * 2, "2 bytes per number")
    assert_fails("gqa_kv_cache_gib", right * 2**30 / 1e9, "2^30 bytes")


def test_heads_trade_off() -> None:
    assert_passes("heads_trade_off", "b")
    assert_fails("heads_trade_off", "a", "does not change")
    assert_fails("heads_trade_off", "c", "KV cache")
    assert_fails("heads_trade_off", "d", "narrower")
