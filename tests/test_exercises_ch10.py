"""Chapter 10 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import math

import numpy as np

from companion.exercises.ch10_scaling import LLAMA2_7B_PARAMS
from companion.exercises.testing import assert_fails, assert_passes
from companion.models import ModelConfig
from companion.scaling import count_parameters


def test_llama2_training_flops() -> None:
    assert count_parameters(ModelConfig.llama()) == LLAMA2_7B_PARAMS
    assert_passes("llama2_training_flops", 6 * 6.74e9 * 2e12)
    assert_passes("llama2_training_flops", 6 * 7e9 * 2e12)  # the rounded "7B" is within the tolerance
    assert_fails("llama2_training_flops", 2 * 6.74e9 * 2e12, "forward pass only")
    assert_fails("llama2_training_flops", 4 * 6.74e9 * 2e12, "backward pass only")
    assert_fails("llama2_training_flops", 6.74e9 * 2e12, "multiply-add is 2 FLOPs")
    assert_fails("llama2_training_flops", 1e24, "too high")


def forward_ok(config, seq_len):
    d, layers = config.d_model, config.n_layers
    weights = layers * (4 * d * d + 2 * d * config.d_ff) + d * config.vocab_size
    return 2 * weights + 4 * layers * seq_len * d


def test_forward_flops_per_token() -> None:
    assert_passes("forward_flops_per_token", forward_ok)
    assert_fails(
        "forward_flops_per_token", lambda c, t: forward_ok(c, t) - 4 * c.n_layers * t * c.d_model, "left out attention"
    )
    assert_fails("forward_flops_per_token", lambda c, t: forward_ok(c, t) / 2, "multiply-adds")
    assert_fails("forward_flops_per_token", lambda c, t: forward_ok(c, t) - 2 * c.n_layers * t * c.d_model, "QKᵀ only")
    assert_fails("forward_flops_per_token", lambda c, t: forward_ok(c, t) - 2 * c.d_model * c.vocab_size, "output head")
    assert_fails("forward_flops_per_token", lambda c, t: "many", "expected a number")


def test_llama2_70b_kv_cache_gib() -> None:
    assert_passes("llama2_70b_kv_cache_gib", 2 * 80 * 8 * 128 * 32768 * 4 * 2 / 2**30)
    assert_fails("llama2_70b_kv_cache_gib", 2 * 80 * 64 * 128 * 32768 * 4 * 2 / 2**30, "64 query heads")
    assert_fails("llama2_70b_kv_cache_gib", 2 * 80 * 8 * 128 * 32768 * 2 / 2**30, "batch of 4")
    assert_fails("llama2_70b_kv_cache_gib", 80 * 8 * 128 * 32768 * 4 * 2 / 2**30, "K *and* V")
    assert_fails("llama2_70b_kv_cache_gib", 2 * 80 * 8 * 128 * 32768 * 4 * 2 / 1e9, "GB")


def power_law_ok(n, loss, e):
    slope, intercept = np.polyfit(np.log(n), np.log(loss - e), 1)
    return math.exp(intercept), -slope


def test_power_law_fit() -> None:
    assert_passes("power_law_fit", power_law_ok)
    assert_fails("power_law_fit", lambda n, loss, e: power_law_ok(n, loss, 0.0), "subtract the floor")
    assert_fails(
        "power_law_fit",
        lambda n, loss, e: (power_law_ok(n, loss, e)[0], -power_law_ok(n, loss, e)[1]),
        "minus the slope",
    )
    assert_fails(
        "power_law_fit",
        lambda n, loss, e: (10 ** math.log(power_law_ok(n, loss, e)[0]), power_law_ok(n, loss, e)[1]),
        "exp(intercept)",
    )
    assert_fails("power_law_fit", lambda n, loss, e: power_law_ok(n, loss, e)[::-1], "(A, alpha)")


def optimal_ok(c, a, b, alpha, beta):
    g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
    n = g * (c / 6) ** (beta / (alpha + beta))
    return n, c / (6 * n)


def test_compute_optimal_split() -> None:
    assert_passes("compute_optimal_split", optimal_ok)
    assert_fails("compute_optimal_split", lambda c, *args: optimal_ok(6 * c, *args), "C / 6")

    def swapped(c, a, b, alpha, beta):
        n = (alpha * a / (beta * b)) ** (1 / (alpha + beta)) * (c / 6) ** (alpha / (alpha + beta))
        return n, c / (6 * n)

    def inverted(c, a, b, alpha, beta):
        n = (beta * b / (alpha * a)) ** (1 / (alpha + beta)) * (c / 6) ** (beta / (alpha + beta))
        return n, c / (6 * n)

    assert_fails("compute_optimal_split", swapped, "beta / (alpha + beta)")
    assert_fails("compute_optimal_split", inverted, "not its inverse")
    assert_fails(
        "compute_optimal_split", lambda c, *args: (math.sqrt(c / 120), 20 * math.sqrt(c / 120)), "rule of thumb"
    )
