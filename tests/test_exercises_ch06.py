"""Chapter 6 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from companion.exercises.testing import assert_fails, assert_passes


def layer_norm_ok(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def test_layer_norm() -> None:
    assert_passes("layer_norm", layer_norm_ok)
    assert_fails("layer_norm", lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True))
                 / torch.sqrt(x.var(-1, keepdim=True) + eps) * g + b, "biased variance")
    assert_fails("layer_norm", lambda x, g, b, eps=1e-5: (x - x.mean(0, keepdim=True))
                 / torch.sqrt(x.var(0, keepdim=True, unbiased=False) + eps) * g + b, "last axis")
    assert_fails("layer_norm", lambda x, g, b, eps=1e-5: layer_norm_ok(x, g, b, 1e-5), "eps")
    one_pass = lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / torch.sqrt(  # noqa: E731
        (x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2 + eps) * g + b
    assert_fails("layer_norm", one_pass, "cancel")


def rms_norm_ok(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_rms_norm() -> None:
    assert_passes("rms_norm", rms_norm_ok)
    assert_fails("rms_norm", lambda x, w, eps=1e-6: rms_norm_ok(x - x.mean(-1, keepdim=True), w, eps), "LayerNorm")
    assert_fails("rms_norm", lambda x, w, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True) + eps) * w, "square root")
    assert_fails("rms_norm", lambda x, w, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w,
                 "eps inside")


def swiglu_ok(x, gate_weight, up_weight, down_weight):
    return (F.silu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T


def test_swiglu() -> None:
    assert_passes("swiglu", swiglu_ok)
    assert_fails("swiglu", lambda x, g, u, d: (torch.sigmoid(x @ g.T) * (x @ u.T)) @ d.T, "plain sigmoid")
    assert_fails("swiglu", lambda x, g, u, d: ((x @ g.T) * F.silu(x @ u.T)) @ d.T, "not to the up projection")
    assert_fails("swiglu", lambda x, g, u, d: (F.relu(x @ g.T) * (x @ u.T)) @ d.T, "not ReLU")
    assert_fails("swiglu", lambda x, g, u, d: F.silu(x @ g.T) @ d.T, "up projection")


def test_swiglu_params() -> None:
    assert_passes("swiglu_params", 3 * 4096 * 11008)
    assert_fails("swiglu_params", 2 * 4096 * 11008, ["too low", "three"])
    assert_fails("swiglu_params", 8 * 4096 * 4096, "4D ReLU FFN")
    assert_fails("swiglu_params", 3 * 4096 * 4 * 4096, ["too high", "8D/3"])
    assert_fails("swiglu_params", 3 * 4096 * 11008 + 2 * 11008 + 4096, "no biases")
    assert_fails("swiglu_params", None, "no answer yet")


def residual_block_ok(x, sublayer, norm, placement):
    if placement == "pre":
        return x + sublayer(norm(x))
    return norm(x + sublayer(x))


def test_residual_block() -> None:
    assert_passes("residual_block", residual_block_ok)
    swapped = lambda x, f, n, p: residual_block_ok(x, f, n, "post" if p == "pre" else "pre")  # noqa: E731
    assert_fails("residual_block", swapped, ["Post-LN", "Pre-LN"])
    assert_fails("residual_block", lambda x, f, n, p: f(n(x)) if p == "pre" else n(x + f(x)), "keep the residual")
    assert_fails("residual_block", lambda x, f, n, p: x + n(f(x)), "not its output")
    assert_fails("residual_block", lambda x, f, n, p: n(x) + f(n(x)) if p == "pre" else n(x + f(x)), "raw x")
    assert_fails("residual_block", lambda x, f, n, p: x + f(n(x)) if p == "pre" else n(f(x)), "add x before")


def test_float32_norm_zero() -> None:
    assert_passes("float32_norm_zero", "b")
    assert_passes("float32_norm_zero", " B ")
    assert_fails("float32_norm_zero", "a", "elements are not zero")
    assert_fails("float32_norm_zero", "c", "ReLU")
    assert_fails("float32_norm_zero", "d", "overflow")
    assert_fails("float32_norm_zero", "e", "not one of the choices")
