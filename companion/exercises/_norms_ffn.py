"""Checks for chapter 6: RMSNorm and the SwiGLU feed-forward network.

References: :class:`companion.layers.RMSNorm` (equal to Hugging Face's ``LlamaRMSNorm``) and
:class:`companion.layers.SwiGLU` (equal to ``LlamaMLP``), with the reader's weights copied in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from companion.exercises._runner import Case, Check, seeded


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

CHECKS = [RMS_NORM, SWIGLU]
