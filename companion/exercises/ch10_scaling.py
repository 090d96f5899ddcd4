"""Chapter 10 (scaling) checks: 6ND, forward FLOPs per token, KV-cache memory, a power-law fit and the
compute-optimal split of a parametric loss.

References, imported inside the case builders: :func:`companion.scaling.training_flops`,
:func:`~companion.scaling.forward_flops_per_token`, :func:`~companion.scaling.kv_cache_bytes`,
:func:`~companion.scaling.fit_power_law`, :func:`~companion.scaling.compute_optimal_split` and
:func:`~companion.scaling.count_parameters`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from companion.exercises._runner import Case, Check, near, value_check

CHAPTER = "10_scaling"


# ------------------------------------------------------------------------------------------ 6ND (predict)


LLAMA2_7B_PARAMS = 6_738_415_616  # count_parameters(ModelConfig.llama()); tests/test_exercises_ch10.py checks it


def _llama2_7b_flops() -> float:
    from companion.scaling import training_flops

    return training_flops(LLAMA2_7B_PARAMS, 2e12)


_C_7B = 6 * LLAMA2_7B_PARAMS * 2e12
_FLOPS_MISTAKES = [
    (_C_7B / 3, "2·N·D is the forward pass only: training adds the backward pass, 4·N·D, for 6·N·D in all."),
    (_C_7B * 2 / 3, "4·N·D is the backward pass only: add the forward pass's 2·N·D."),
    (
        _C_7B / 6,
        "N·D counts one operation per weight and token: a multiply-add is 2 FLOPs, and backward costs "
        "twice the forward, so C ≈ 6·N·D.",
    ),
]


TRAINING_FLOPS = value_check(
    "llama2_training_flops",
    _llama2_7b_flops,
    description="predict the training compute C ≈ 6ND of Llama-2 7B on 2 trillion tokens",
    hint="C ≈ 6 · N · D: N = 6.74e9 parameters, D = 2e12 tokens; forward 2 FLOPs per weight and token, backward 4.",
    signature="a number of FLOPs, e.g. 1.2e22",
    mistakes=_FLOPS_MISTAKES,
    rtol=0.05,
)


# ------------------------------------------------------------------------------------------ forward FLOPs (write)


def _pair_judge(expected: tuple[float, ...], names: tuple[str, ...], rtol: float) -> Callable[[Any], str | None]:
    """Judge a tuple of numbers part by part (relative tolerance), naming the part that is off."""

    def judge(out: Any) -> str | None:
        if not isinstance(out, (tuple, list)) or len(out) != len(expected):
            return f"returned {type(out).__name__}; expected a tuple ({', '.join(names)})"
        for name, got, want in zip(names, out, expected):
            try:
                got = float(got)
            except (TypeError, ValueError):
                return f"{name} is {type(got).__name__}, expected a number"
            if not math.isclose(got, want, rel_tol=rtol):
                return f"{name} is {'too high' if got > want else 'too low'}"
        return None

    return judge



def _forward_flops_cases() -> list[Case]:
    from companion.models import ModelConfig
    from companion.scaling import forward_flops_per_token

    gpt2 = ModelConfig.gpt2_small()
    small = ModelConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=128, max_seq_len=64)
    cases = []
    for label, config, t in [
        ("GPT-2 small, T=1024", gpt2, 1024),
        ("GPT-2 small, T=8192", gpt2, 8192),
        ("tiny GPT, T=64", small, 64),
        (
            "GPT-3 widths, T=2048",
            gpt2.replace(d_model=12288, n_heads=96, n_layers=96, d_ff=4 * 12288, max_seq_len=2048),
            2048,
        ),
    ]:
        expected = forward_flops_per_token(config, t)
        attention = 4 * config.n_layers * t * config.d_model  # QKᵀ and AV, 2·T·D FLOPs each per layer
        head = 2 * config.d_model * config.vocab_size
        mistakes = [
            (
                near(expected - attention),
                "you left out attention itself: a query scored against T keys and "
                "mixing T values costs 4·T·D FLOPs per layer (QKᵀ and AV).",
            ),
            (near(expected / 2), "you counted multiply-adds: each is 2 FLOPs (one multiply, one add)."),
            (
                near(expected - attention / 2),
                "Kaplan's 2·L·T·D counts the scores QKᵀ only: the weighted sum AV costs as much again, 4·L·T·D in all.",
            ),
            (near(expected - head), "the output head is a D × V matrix too: add 2·D·V FLOPs."),
        ]
        cases.append(Case(label, (config, t), _near_judge(expected), mistakes=mistakes))
    return cases


def _near_judge(expected: float) -> Callable[[Any], str | None]:
    def judge(out: Any) -> str | None:
        try:
            got = float(out)
        except (TypeError, ValueError):
            return f"returned {type(out).__name__}, expected a number of FLOPs"
        if math.isclose(got, expected, rel_tol=1e-6):
            return None
        return f"{got:.4g} is {'too high' if got > expected else 'too low'}"

    return judge


FORWARD_FLOPS = Check(
    name="forward_flops_per_token",
    signature="fn(config, seq_len) -> float: forward FLOPs per token of a GPT-2-style ModelConfig (MHA, "
    "d_ff-wide 2-matrix FFN, output head D × V; biases, norms and embeddings left out)",
    description="forward FLOPs per token: 2 per weight of every matrix, plus attention's 4·L·T·D",
    hint="per layer: 4·D² (W_Q, W_K, W_V, W_O) + 2·D·d_ff (FFN) weights; plus the D·V output head; 2 FLOPs per "
    "weight; plus 4·L·seq_len·D for QKᵀ and AV.",
    make_cases=_forward_flops_cases,
)


# ------------------------------------------------------------------------------------------ KV-cache memory (predict)


def _kv_gib() -> float:
    from companion.scaling import kv_cache_bytes

    return kv_cache_bytes(80, 8, 128, 32768, batch_size=4, bytes_per_value=2) / 2**30


KV_CACHE_GIB = value_check(
    "llama2_70b_kv_cache_gib",
    _kv_gib,
    description="predict the KV cache of Llama-2 70B (80 layers, 8 K/V heads of width 128, GQA) for 4 "
    "sequences of 32,768 tokens in fp16, in GiB",
    hint="2 (K and V) × layers × K/V heads × head width × tokens × batch × 2 bytes, divided by 2**30.",
    signature="a number of GiB",
    mistakes={
        320.0: "you used all 64 query heads (d_model = 8192): with GQA only the 8 K/V heads are cached.",
        10.0: "that is one sequence: multiply by the batch of 4.",
        20.0: "half the answer: count K *and* V, each value 2 bytes in fp16.",
        40 * 2**30 / 1e9: "that is in GB (10**9 bytes): a GiB is 2**30 bytes.",
    },
    rtol=0.01,
)


# ------------------------------------------------------------------------------------------ power-law fit (write)


def _power_law_cases() -> list[Case]:
    from companion.scaling import fit_power_law

    cases = []
    for label, e, a, alpha in [
        ("Chinchilla's N term", 1.69, 406.4, 0.34),
        ("our Markov table", 1.556, 665.0, 1.0),
        ("a steep law", 0.5, 2.0e4, 1.5),
    ]:
        n = np.geomspace(1e3, 1e7, 9)
        loss = e + a * n ** (-alpha)
        fit = fit_power_law(n, loss)  # the package's three-parameter fit recovers (E, A, alpha)
        expected = (fit.A, fit.alpha)
        slope, intercept = np.polyfit(np.log(n), np.log(loss), 1)  # the mistake: no floor subtracted
        good_slope, good_intercept = np.polyfit(np.log(n), np.log(loss - e), 1)
        mistakes = [
            (
                lambda o, s=slope: _pair_near(o, None, -s),
                "subtract the floor E before taking logs: only L − E is a straight line on log–log axes.",
            ),
            (
                lambda o, s=good_slope: _pair_near(o, None, s),
                "alpha is minus the slope: log(L − E) = log A − alpha·log N.",
            ),
            (
                lambda o, i=good_intercept: _pair_near(o, 10**i, None),
                "you fitted natural logs, so A = exp(intercept), not 10**intercept.",
            ),
            (lambda o, x=expected: _pair_near(o, x[1], x[0]), "return (A, alpha), in that order."),
        ]
        cases.append(Case(label, (n, loss, e), _pair_judge(expected, ("A", "alpha"), 1e-3), mistakes=mistakes))
    return cases


def _pair_near(out: Any, first: float | None, second: float | None) -> bool:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return False
    try:
        pair = (float(out[0]), float(out[1]))
    except (TypeError, ValueError):
        return False
    return all(want is None or math.isclose(got, want, rel_tol=1e-3) for got, want in zip(pair, (first, second)))


POWER_LAW = Check(
    name="power_law_fit",
    signature="fn(n, loss, E) -> (A, alpha): NumPy arrays n, loss and the known floor E, for loss = E + A·n^(−alpha)",
    description="fit a power law with a known floor by a straight line on log–log axes",
    hint="log(loss − E) = log A − alpha · log n is a straight line: np.polyfit(np.log(n), np.log(loss - E), 1) "
    "gives (slope, intercept); A = exp(intercept), alpha = −slope.",
    make_cases=_power_law_cases,
)


# ------------------------------------------------------------------------------------------ compute-optimal (write)

_CHINCHILLA = (406.4, 410.7, 0.34, 0.28)
_REFIT = (482.01, 2085.43, 0.3478, 0.3658)  # Besiroglu et al. 2024


def _optimal_cases() -> list[Case]:
    from companion.scaling import compute_optimal_split

    cases = []
    for label, c, (a, b, alpha, beta) in [
        ("Chinchilla's fit, GPT-3's compute", 3.15e23, _CHINCHILLA),
        ("Chinchilla's fit, 1e21 FLOPs", 1e21, _CHINCHILLA),
        ("the refit, 1e24 FLOPs", 1e24, _REFIT),
        ("equal exponents", 6e20, (400.0, 300.0, 0.3, 0.3)),
    ]:
        expected = compute_optimal_split(c, a, b, alpha, beta)
        g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
        no_six = g * c ** (beta / (alpha + beta))
        swapped = g * (c / 6) ** (alpha / (alpha + beta))
        inverted = (c / 6) ** (beta / (alpha + beta)) / g
        rule = math.sqrt(c / 120)
        mistakes = [
            (lambda o, n=no_six: _pair_near(o, n, None), "the budget is C = 6·N·D: use C / 6 in N_opt's formula."),
            (
                lambda o, n=swapped: _pair_near(o, n, None),
                "N's exponent is beta / (alpha + beta): the data term's exponent decides how fast the model grows.",
            ),
            (
                lambda o, n=inverted: _pair_near(o, n, None),
                "G = (alpha·A / (beta·B)) ** (1 / (alpha + beta)), not its inverse.",
            ),
            (
                lambda o, n=rule: _pair_near(o, n, 20 * n),
                "that is the 20-tokens-per-parameter rule of thumb, not the minimum of this formula.",
            ),
        ]
        cases.append(Case(label, (c, a, b, alpha, beta), _pair_judge(expected, ("N", "D"), 1e-6), mistakes=mistakes))
    return cases


COMPUTE_OPTIMAL = Check(
    name="compute_optimal_split",
    signature="fn(compute, A, B, alpha, beta) -> (N, D): the minimum of E + A/N^alpha + B/D^beta with 6·N·D = compute",
    description="the compute-optimal split of a Chinchilla-style parametric loss",
    hint="put D = C/(6N) into the loss and set dL/dN = 0: N = G·(C/6)^(beta/(alpha+beta)) with "
    "G = (alpha·A/(beta·B))^(1/(alpha+beta)), and D = C/(6N).",
    make_cases=_optimal_cases,
)

CHECKS = [TRAINING_FLOPS, FORWARD_FLOPS, KV_CACHE_GIB, POWER_LAW, COMPUTE_OPTIMAL]
