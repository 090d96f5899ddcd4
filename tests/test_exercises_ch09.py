"""Chapter 9 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import math

import torch

from companion.exercises.testing import assert_fails, assert_passes


def temperature_ok(logits, temperature):
    z = logits / temperature
    e = (z - z.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def test_temperature_softmax() -> None:
    assert_passes("temperature_softmax", temperature_ok)
    assert_fails("temperature_softmax", lambda x, t: temperature_ok(x * t * t, t), "multiplied by the temperature")
    assert_fails("temperature_softmax", lambda x, t: torch.softmax(x, -1) ** (1 / t), "renormalise")
    assert_fails(
        "temperature_softmax",
        lambda x, t: (x / t).exp() / (x / t).exp().sum(-1, keepdim=True),
        "subtract the row maximum",
    )
    assert_fails("temperature_softmax", lambda x, t: torch.softmax(x / t, dim=0), "last axis")


def top_k_ok(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def test_top_k_filter() -> None:
    assert_passes("top_k_filter", top_k_ok)
    assert_fails(
        "top_k_filter",
        lambda x, k: x.masked_fill(x > torch.topk(x, k, largest=False).values[..., -1:], float("-inf")),
        "smallest",
    )
    assert_fails("top_k_filter", lambda x, k: top_k_ok(x, k).nan_to_num(neginf=0.0), "not 0")
    assert_fails("top_k_filter", lambda x, k: torch.softmax(top_k_ok(x, k), -1), "not probabilities")
    assert_fails(
        "top_k_filter", lambda x, k: x.masked_fill(x <= torch.topk(x, k).values[..., -1:], float("-inf")), "k - 1"
    )


def top_p_ok(logits, p):
    probs, order = torch.softmax(logits, -1).sort(-1, descending=True)
    drop = probs.cumsum(-1) - probs >= p
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def test_top_p_filter() -> None:
    assert_passes("top_p_filter", top_p_ok)

    def crossing(logits, p):
        probs, order = torch.softmax(logits, -1).sort(-1, descending=True)
        drop = probs.cumsum(-1) > p
        return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))

    def sorted_order(logits, p):
        s, _ = logits.sort(-1, descending=True)
        probs = torch.softmax(s, -1)
        return s.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))

    def ascending(logits, p):
        probs, order = torch.softmax(logits, -1).sort(-1)
        drop = probs.cumsum(-1) - probs >= p
        return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))

    assert_fails("top_p_filter", crossing, "crosses p")
    assert_fails("top_p_filter", sorted_order, "sorted")
    assert_fails("top_p_filter", lambda x, p: top_p_ok(x, p).nan_to_num(neginf=0.0), "not 0")
    assert_fails("top_p_filter", ascending, "descending")


def kv_step_ok(q, k_new, v_new, k_cache, v_cache):
    k_all, v_all = torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)
    w = torch.softmax(q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    return w @ v_all, k_all, v_all


def test_kv_cache_step() -> None:
    assert_passes("kv_cache_step", kv_step_ok)

    def new_only(q, k_new, v_new, k_cache, v_cache):
        w = torch.softmax(q @ k_new.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
        return w @ v_new, torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)

    def prepended(q, k_new, v_new, k_cache, v_cache):
        out, _, _ = kv_step_ok(q, k_new, v_new, k_cache, v_cache)
        return out, torch.cat([k_new, k_cache], -2), torch.cat([v_new, v_cache], -2)

    def unscaled(q, k_new, v_new, k_cache, v_cache):
        _, k_all, v_all = kv_step_ok(q, k_new, v_new, k_cache, v_cache)
        return torch.softmax(q @ k_all.transpose(-2, -1), -1) @ v_all, k_all, v_all

    def stale(q, k_new, v_new, k_cache, v_cache):
        return kv_step_ok(q, k_new, v_new, k_cache, v_cache)[0], k_cache, v_cache

    def over_queries(q, k_new, v_new, k_cache, v_cache):  # softmax over the one query: every weight is 1
        _, k_all, v_all = kv_step_ok(q, k_new, v_new, k_cache, v_cache)
        return torch.softmax(q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1]), -2) @ v_all, k_all, v_all

    assert_fails("kv_cache_step", new_only, "new key only")
    assert_fails("kv_cache_step", prepended, "in *front*")
    assert_fails("kv_cache_step", unscaled, "sqrt(D_h)")
    assert_fails("kv_cache_step", stale, "updated")
    assert_fails("kv_cache_step", over_queries, ["not over the queries", "dim=-2"])
    assert_fails("kv_cache_step", lambda *args: kv_step_ok(*args)[0], "tuple")


def test_beam_search_probability() -> None:
    assert_passes("beam_search_probability", 0.35 * 0.6)
    assert_fails("beam_search_probability", 0.4 * 0.4, "greedy")
    assert_fails("beam_search_probability", 0.25 * 0.96, "heuristic")
    assert_fails("beam_search_probability", 0.35, "step 1 only")
    assert_fails("beam_search_probability", 0.4, "first step")
    assert_fails("beam_search_probability", 0.5, "too high")
