"""Chapter 14 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch

from companion.exercises.testing import assert_fails, assert_passes
from companion.masks import sliding_window_mask
from companion.models import ModelConfig
from companion.moe import MoE
from companion.scaling import cache_bytes_per_token, count_parameters


def route_ok(logits, k):
    probs = logits.softmax(dim=-1)
    top = probs.topk(k, dim=-1)
    return top.values / top.values.sum(-1, keepdim=True), top.indices


def test_router_topk() -> None:
    assert_passes("router_topk", route_ok)
    assert_passes("router_topk", lambda x, k: (x.topk(k, -1).values.softmax(-1), x.topk(k, -1).indices))  # same
    assert_passes("router_topk", lambda x, k: tuple(t.flip(-1) for t in route_ok(x, k)))  # any order of the k

    def not_renormalised(x, k):
        top = x.softmax(-1).topk(k, -1)
        return top.values, top.indices

    assert_fails("router_topk", not_renormalised, "renormalise")
    assert_fails("router_topk", lambda x, k: (x.topk(k, -1).values, x.topk(k, -1).indices), "before you pick")
    assert_fails("router_topk", _wrong_axis, "wrong axis")
    assert_fails("router_topk", _smallest, "least")
    assert_fails("router_topk", lambda x, k: (route_ok(x, k)[0], route_ok(x, k)[1].float()), "integer")


def _wrong_axis(x, k):
    probs = x.softmax(dim=0)
    experts = x.softmax(-1).topk(k, -1).indices
    w = probs.gather(1, experts)
    return w / w.sum(-1, keepdim=True), experts


def _smallest(x, k):
    top = x.softmax(-1).topk(k, -1, largest=False)
    return top.values / top.values.sum(-1, keepdim=True), top.indices


def test_moe_active_parameters_agrees_with_a_layer() -> None:
    """The predicted count is what one token touches in a real (meta-device) Mixtral MoE layer."""
    with torch.device("meta"):
        layer = MoE(4096, 14336, 8, 2)
    per_expert = sum(p.numel() for p in layer.experts[0].parameters())
    assert 2 * per_expert + layer.router.weight.numel() == 2 * 3 * 4096 * 14336 + 4096 * 8
    right = 2 * 3 * 4096 * 14336 + 4096 * 8
    assert_passes("moe_active_parameters", right)
    assert_fails("moe_active_parameters", 8 * 3 * 4096 * 14336 + 4096 * 8, "all 8 experts")
    assert_fails("moe_active_parameters", 2 * 2 * 4096 * 14336 + 4096 * 8, "three matrices")
    assert_fails("moe_active_parameters", 2 * 3 * 4096 * 14336, "router")
    assert_fails("moe_active_parameters", 3 * 4096 * 14336 + 4096 * 8, "k = 2")
    assert_fails("moe_active_parameters", right * 1.5, "too high")
    # the whole model: 32 such layers plus attention and embeddings give 12.9B
    assert round(count_parameters(ModelConfig.mixtral_8x7b(), active=True) / 1e9, 1) == 12.9


def test_mla_cache_bytes() -> None:
    assert cache_bytes_per_token(ModelConfig.deepseek_v3()) == 70_272
    assert_passes("mla_cache_bytes", 61 * 576 * 2)
    assert_fails("mla_cache_bytes", 61 * 512 * 2, "RoPE key")
    assert_fails("mla_cache_bytes", 2 * 61 * 576 * 2, "stored once")
    assert_fails("mla_cache_bytes", 576 * 2, "one layer")
    assert_fails("mla_cache_bytes", 2 * 61 * 128 * 128 * 2, "multi-head attention")
    assert_fails("mla_cache_bytes", 61 * 576, "bytes, not values")


def sink_ok(t, window, n_sinks):
    p, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return (j <= p) & ((j < n_sinks) | (p - j < window - n_sinks))


def test_sink_window_mask() -> None:
    assert torch.equal(sink_ok(12, 6, 2), sliding_window_mask(12, 6, n_sinks=2))
    assert_passes("sink_window_mask", sink_ok)
    assert_passes("sink_window_mask", lambda t, w, s: sliding_window_mask(t, w, n_sinks=s))

    def future_sinks(t, window, n_sinks):  # the chapter's first attempt
        p, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        return (j < n_sinks) | ((j <= p) & (p - j < window - n_sinks))

    def window_beside_sinks(t, window, n_sinks):
        p, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        return (j <= p) & ((j < n_sinks) | (p - j < window))

    def one_short(t, window, n_sinks):
        p, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        return (j <= p) & ((j < n_sinks) | (p - j < window - n_sinks - 1))

    assert_fails("sink_window_mask", future_sinks, "in the past")
    assert_fails("sink_window_mask", window_beside_sinks, "share the window")
    assert_fails("sink_window_mask", one_short, "one recent key short")
    assert_fails("sink_window_mask", lambda t, w, s: ~sink_ok(t, w, s), "True = may attend")
    assert_fails("sink_window_mask", lambda t, w, s: sink_ok(t, w, s).float(), "bool")


def test_decoupled_rope() -> None:
    assert_passes("decoupled_rope", "b")
    assert_passes("decoupled_rope", " B ")
    assert_fails("decoupled_rope", "a", "bigger")
    assert_fails("decoupled_rope", "c", "even")
    assert_fails("decoupled_rope", "d", "scale")
