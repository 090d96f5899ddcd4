"""Chapter 3's exercise checks: a right answer passes, each classic mistake fails with the hint naming it.

The answers are written as a reader would write them, independently of the package.
"""

from __future__ import annotations

import math

import torch

from companion.exercises.testing import assert_fails, assert_passes


def softmax_ok(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def test_softmax() -> None:
    assert_passes("softmax", softmax_ok)
    assert_fails("softmax", lambda x, dim=-1: x.exp() / x.exp().sum(dim, keepdim=True), ["as is", "row max"])
    assert_fails("softmax", lambda x, dim=-1: softmax_ok(x, 0), "wrong axis")
    assert_fails("softmax", lambda x, dim=-1: softmax_ok(x, -1), "ignored the `dim` argument")


def attention_ok(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_scaled_dot_product_attention() -> None:
    assert_passes("scaled_dot_product_attention", attention_ok)

    def no_scale(q, k, v, mask=None):
        return attention_ok(q * math.sqrt(q.shape[-1]), k, v, mask)

    def by_d_k(q, k, v, mask=None):
        return attention_ok(q / math.sqrt(q.shape[-1]), k, v, mask)

    def mask_after(q, k, v, mask=None):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return (w if mask is None else w * mask) @ v

    def inverted(q, k, v, mask=None):
        return attention_ok(q, k, v, None if mask is None else ~mask)

    def over_queries(q, k, v, mask=None):  # softmax over the query axis: each key's column sums to 1
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-2) @ v

    assert_fails("scaled_dot_product_attention", no_scale, "√d_k")
    assert_fails("scaled_dot_product_attention", by_d_k, "not by d_k itself")
    assert_fails("scaled_dot_product_attention", mask_after, "BEFORE the softmax")
    assert_fails("scaled_dot_product_attention", inverted, "True = may attend")
    assert_fails("scaled_dot_product_attention", over_queries, ["not over the queries", "dim=-2"])


def test_attention_weights_by_hand() -> None:
    # scores (4, 2, 0) / √4 = (2, 1, 0); softmax by hand
    z = math.e**2 + math.e + 1
    assert_passes("attention_weights_by_hand", (math.e**2 / z, math.e / z, 1 / z))
    assert_passes("attention_weights_by_hand", (0.665, 0.245, 0.09))  # rounded as a reader would
    assert_fails("attention_weights_by_hand", (0.867, 0.117, 0.016), "√d_k = 2")
    assert_fails("attention_weights_by_hand", (0.506, 0.307, 0.186), "divided by d_k = 4")
    assert_fails("attention_weights_by_hand", (4 / 6, 2 / 6, 0.0), "by their sum")
    assert_fails("attention_weights_by_hand", (2, 1, 0), "scaled scores")
    assert_fails("attention_weights_by_hand", None, "no answer yet")


def test_scale_by_d_k() -> None:
    assert_passes("scale_by_d_k", "b")
    assert_passes("scale_by_d_k", " B ")
    assert_fails("scale_by_d_k", "a", "NO scaling")
    assert_fails("scale_by_d_k", "c", "ADD a constant")
    assert_fails("scale_by_d_k", "d", "sums to 1")
    assert_fails("scale_by_d_k", "e", "not one of the choices")


def test_attention_flops() -> None:
    t, d = 1024, 64
    assert_passes("attention_flops", 4 * t * t * d)
    assert_fails("attention_flops", 2 * t * t * d, ["too low", "only one of the two"])
    assert_fails("attention_flops", t * t * d, "one FLOP per multiply–add")
    assert_fails("attention_flops", 8 * t * d * d, "four projections")
    assert_fails("attention_flops", 4 * t * t * d + 8 * t * d * d, "added the projections")
