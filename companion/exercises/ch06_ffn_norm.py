"""Chapter 6 (FFN and normalisation) checks: LayerNorm, RMSNorm, the SwiGLU feed-forward network, its
parameter count, the pre-/post-norm residual block, and what a float32 gradient norm of 0 means.

References: :class:`companion.layers.LayerNorm` (equal to ``torch.nn.LayerNorm``),
:class:`companion.layers.RMSNorm` (equal to Hugging Face's ``LlamaRMSNorm``),
:class:`companion.layers.SwiGLU` (equal to ``LlamaMLP``) and :class:`companion.layers.ResidualBlock`, with
the reader's weights copied in; :func:`companion.models.num_parameters` for the count.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, seeded, value_check

CHAPTER = "06_ffn_norm"

def _layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    from companion.layers import LayerNorm

    norm = LayerNorm(x.shape[-1], eps)
    with torch.no_grad():
        norm.weight.copy_(gamma)
        norm.bias.copy_(beta)
        return norm(x)


def _layer_norm_cases() -> list[Case]:
    g = seeded(6)
    unbiased = (
        "use the biased variance (divide by D, not D - 1): x.var(-1, unbiased=False, keepdim=True) or "
        "((x - mean) ** 2).mean(-1, keepdim=True); torch.var divides by D - 1 by default."
    )
    wrong_axis = "normalise over the last axis (the features of each token), with keepdim=True."
    cases = []
    for label, shape, offset, eps in [
        ("T=3, D=8", (3, 8), 0.0, 1e-5),
        ("batch dims (2, 4, 16)", (2, 4, 16), 0.0, 1e-5),
        ("D=2", (5, 2), 0.0, 1e-5),
        ("large offset (x + 1000)", (3, 16), 1000.0, 1e-5),
        ("eps=0.1 is used", (3, 8), 0.0, 0.1),
    ]:
        x = torch.randn(*shape, generator=g) + offset
        d = shape[-1]
        gamma, beta = 1 + 0.5 * torch.randn(d, generator=g), 0.5 * torch.randn(d, generator=g)
        mean = x.mean(-1, keepdim=True)
        var_unbiased = x.var(-1, keepdim=True, unbiased=True)
        known = [((x - mean) / (var_unbiased + eps).sqrt() * gamma + beta, unbiased)]
        if x.dim() == 2 and x.shape[0] > 1:
            m0, v0 = x.mean(0, keepdim=True), x.var(0, keepdim=True, unbiased=False)
            known.append(((x - m0) / (v0 + eps).sqrt() * gamma + beta, wrong_axis))
        hint = None
        if offset:
            hint = (
                "compute the variance as mean((x - mean)²), not mean(x²) - mean(x)²: with values near 1000 "
                "the two big float32 numbers cancel and leave rounding noise."
            )
        if eps != 1e-5:
            hint = "use the `eps` argument: (x - mean) / sqrt(var + eps), with eps inside the square root."
        kwargs = {} if eps == 1e-5 else {"eps": eps}
        atol = 1e-3 if offset else None  # x itself is only stored to ~6e-5 near 1000
        expected = _layer_norm(x, gamma, beta, eps)
        cases.append(Case(label, (x, gamma, beta), expected, hint, kwargs, known, atol))
    return cases


LAYER_NORM = Check(
    name="layer_norm",
    signature="fn(x, gamma, beta, eps=1e-5) -> Tensor; x (..., D), gamma and beta (D,)",
    description="LayerNorm over the last axis, biased variance, as torch.nn.LayerNorm",
    hint="mean and biased variance over the last axis (keepdim=True), then "
    "(x - mean) / sqrt(var + eps) * gamma + beta.",
    make_cases=_layer_norm_cases,
    atol=1e-4,
)


def _rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    from companion.layers import RMSNorm

    norm = RMSNorm(x.shape[-1], eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def _rms_norm_cases() -> list[Case]:
    g = seeded(16)
    cases = []
    for label, shape, shift, eps in [
        ("T=3, D=8", (3, 8), 0.0, 1e-6),
        ("batch dims (2, 4, 16)", (2, 4, 16), 0.0, 1e-6),
        ("inputs with a non-zero mean", (4, 8), 3.0, 1e-6),
        ("eps=0.5 is used", (3, 8), 0.0, 0.5),
    ]:
        x = torch.randn(*shape, generator=g) + shift
        weight = 1 + 0.5 * torch.randn(shape[-1], generator=g)
        ms = x.pow(2).mean(-1, keepdim=True)
        centred = x - x.mean(-1, keepdim=True)
        known = [
            (centred / (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt() * weight,
             "you subtracted the mean: that is LayerNorm. RMSNorm only rescales by the root mean square."),
            (x / (ms + eps) * weight, "take the square root: divide by sqrt(mean(x²) + eps), not by mean(x²)."),
            (x / (ms.sqrt() + eps) * weight, "put eps inside the square root: sqrt(mean(x²) + eps)."),
        ]
        if x.dim() == 2 and x.shape[0] > 1:
            known.append((x / (x.pow(2).mean(0, keepdim=True) + eps).sqrt() * weight,
                          "average over the last axis (each token's features), with keepdim=True."))
        hint = "use the `eps` argument, inside the square root." if eps != 1e-6 else None
        kwargs = {} if eps == 1e-6 else {"eps": eps}
        cases.append(Case(label, (x, weight), _rms_norm(x, weight, eps), hint, kwargs, known))
    return cases


RMS_NORM = Check(
    name="rms_norm",
    signature="fn(x, weight, eps=1e-6) -> Tensor; x (..., D), weight (D,)",
    description="RMSNorm over the last axis (no mean subtraction, no bias), as in Llama",
    hint="x / sqrt(mean(x², last axis, keepdim=True) + eps) * weight.",
    make_cases=_rms_norm_cases,
    atol=1e-5,
)


def _swiglu(x: Tensor, gate_weight: Tensor, up_weight: Tensor, down_weight: Tensor) -> Tensor:
    from companion.layers import SwiGLU

    with torch.random.fork_rng(devices=[]):  # building the module draws random weights: keep the reader's RNG
        ffn = SwiGLU(gate_weight.shape[1], gate_weight.shape[0])
    with torch.no_grad():
        ffn.gate_proj.weight.copy_(gate_weight)
        ffn.up_proj.weight.copy_(up_weight)
        ffn.down_proj.weight.copy_(down_weight)
        return ffn(x)


def _swiglu_cases() -> list[Case]:
    g = seeded(17)
    cases = []
    for label, (shape, d_ff) in {
        "T=4, D=8, d_ff=12": ((4, 8), 12),
        "batch dims (2, 3, 6), d_ff=16": ((2, 3, 6), 16),
        "single token": ((1, 8), 8),
    }.items():
        d = shape[-1]
        x = torch.randn(*shape, generator=g)
        wg, wu = torch.randn(d_ff, d, generator=g) / d**0.5, torch.randn(d_ff, d, generator=g) / d**0.5
        wd = torch.randn(d, d_ff, generator=g) / d_ff**0.5
        gate, up = x @ wg.T, x @ wu.T  # (..., d_ff)
        known = [
            ((torch.sigmoid(gate) * up) @ wd.T, "use SiLU (x * sigmoid(x)) on the gate, not a plain sigmoid (GLU)."),
            ((gate * F.silu(up)) @ wd.T, "apply SiLU to the gate projection, not to the up projection."),
            ((F.relu(gate) * up) @ wd.T, "the gate's activation is SiLU (Swish), not ReLU."),
            (F.silu(gate) @ wd.T, "multiply the activated gate by the up projection before projecting down."),
        ]
        cases.append(Case(label, (x, wg, wu, wd), _swiglu(x, wg, wu, wd), mistakes=known))
    return cases


SWIGLU = Check(
    name="swiglu",
    signature="fn(x, gate_weight, up_weight, down_weight) -> Tensor; weights in nn.Linear layout (out, in)",
    description="SwiGLU feed-forward: down(silu(gate(x)) * up(x)), no biases, as in Llama",
    hint="(F.silu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T",
    make_cases=_swiglu_cases,
    atol=1e-5,
)



def _swiglu_params() -> int:
    from companion.layers import SwiGLU
    from companion.models import num_parameters

    with torch.device("meta"):  # shapes only: no memory, no random numbers drawn
        return num_parameters(SwiGLU(4096, 11008))


_D, _DFF = 4096, 11008
SWIGLU_PARAMS = value_check(
    "swiglu_params",
    _swiglu_params,
    description="predict: parameters of Llama-2 7B's SwiGLU FFN, D = 4096, d_ff = 11008, no biases",
    hint="count every matrix of the gated FFN: gate_proj and up_proj are (d_ff, D), down_proj is (D, d_ff).",
    signature="an integer: the number of parameters",
    mistakes={
        2 * _D * _DFF: "that counts two matrices, as in a ReLU FFN; SwiGLU has three (gate, up and down).",
        8 * _D * _D: "that is the 4D ReLU FFN (two D x 4D matrices); SwiGLU's d_ff here is 11008, with three "
        "matrices.",
        3 * _D * 4 * _D: "d_ff is 11008 (about 8D/3), not 4D: Llama shrinks d_ff so that three matrices cost "
        "about as much as two 4D ones.",
        3 * _D * _DFF + 2 * _DFF + _D: "Llama's projections have no biases.",
    },
    rtol=1e-6,
)


def _residual_reference(x: Tensor, sublayer: Any, norm: Any, placement: str) -> Tensor:
    from companion.layers import ResidualBlock

    block = ResidualBlock(x.shape[-1], placement=placement)
    with torch.no_grad():
        block.norm.weight.copy_(norm.weight)
        block.norm.bias.copy_(norm.bias)
        return block(x, sublayer)


def _residual_cases() -> list[Case]:
    from companion.layers import FeedForward, LayerNorm

    g = seeded(61)
    cases = []
    for label, shape, placement in [
        ("pre-norm, T=4, D=8", (4, 8), "pre"),
        ("post-norm, T=4, D=8", (4, 8), "post"),
        ("pre-norm, batch dims (2, 3, 6)", (2, 3, 6), "pre"),
        ("post-norm, batch dims (2, 3, 6)", (2, 3, 6), "post"),
    ]:
        d = shape[-1]
        x = 2 * torch.randn(*shape, generator=g) + 1
        with torch.random.fork_rng(devices=[]):  # building modules draws random weights: keep the reader's RNG
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
            sublayer = FeedForward(d, 2 * d).eval()
            norm = LayerNorm(d)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.5 * torch.randn(d, generator=g))
            norm.bias.copy_(0.5 * torch.randn(d, generator=g))
            f, n = sublayer, norm
            if placement == "pre":
                known = [
                    (n(x + f(x)), "that is Post-LN, norm(x + sublayer(x)); Pre-LN normalises the sublayer's "
                     "input: x + sublayer(norm(x))."),
                    (f(n(x)), "keep the residual: add x to the sublayer's output (x + sublayer(norm(x)))."),
                    (x + n(f(x)), "normalise the sublayer's input, not its output: x + sublayer(norm(x))."),
                    (n(x) + f(n(x)), "add the raw x, not norm(x): in Pre-LN the residual path is never "
                     "normalised."),
                ]
            else:
                known = [
                    (x + f(n(x)), "that is Pre-LN, x + sublayer(norm(x)); Post-LN normalises the sum: "
                     "norm(x + sublayer(x))."),
                    (n(f(x)), "keep the residual: add x before normalising (norm(x + sublayer(x)))."),
                    (x + n(f(x)), "normalise the sum x + sublayer(x), not the sublayer's output alone."),
                ]
            expected = _residual_reference(x, sublayer, norm, placement)
        cases.append(Case(label, (x, sublayer, norm, placement), expected, mistakes=known))
    return cases


RESIDUAL_BLOCK = Check(
    name="residual_block",
    signature='fn(x, sublayer, norm, placement) -> Tensor; placement "pre" or "post"; sublayer and norm callables',
    description="the residual connection with its norm: Pre-LN x + f(norm(x)) or Post-LN norm(x + f(x))",
    hint='placement "pre": x + sublayer(norm(x)); placement "post": norm(x + sublayer(x)).',
    make_cases=_residual_cases,
    atol=1e-5,
)

FLOAT32_NORM_ZERO = choice_check(
    "float32_norm_zero",
    "b",
    ("a", "b", "c", "d"),
    description="choose: what a float32 gradient norm of exactly 0 in a deep plain stack means",
    hint="look at the elements of the gradient, not at its norm: are they zero?",
    mistakes={
        "a": "the elements are not zero (about 1e-33 here); only their squares, computed inside norm(), fall "
        "below the smallest float32 and round to 0.",
        "c": "ReLU blocks the gradient only where its input is negative; every element of this gradient is "
        "non-zero, it is just tiny.",
        "d": "an overflow gives inf, not 0; here the numbers are far too small, not too large.",
    },
)

CHECKS = [LAYER_NORM, RMS_NORM, SWIGLU, SWIGLU_PARAMS, RESIDUAL_BLOCK, FLOAT32_NORM_ZERO]
