"""Chapter 3 (attention) checks: softmax, scaled dot-product attention, weights by hand, the scale, the cost.

References: :func:`companion.attention.softmax`, :func:`companion.attention.scaled_dot_product_attention`
(also for the weights computed by hand, and, through ``torch.utils.flop_counter``, for the FLOP count),
imported inside each case builder.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, seeded, value_check

CHAPTER = "03_attention"

_STABLE = "subtract the row max before exp — exp(1000) overflows to inf, and inf / inf is NaN."
# Every attention-shaped check (chapters 3, 8, 9) names this mistake in these words.
QUERY_AXIS = (
    "normalise over the keys, the last axis of the (..., T, S) scores (softmax(dim=-1)), not over the "
    "queries (dim=-2): each query's weights must sum to 1."
)


def _softmax_cases() -> list[Case]:
    from companion.attention import softmax

    g = seeded(0)
    x = torch.randn(4, 7, generator=g)  # (rows, classes): not square, so a wrong axis shows
    x0 = torch.randn(5, 3, generator=g)
    xb = torch.randn(2, 3, 4, 5, generator=g)
    big = torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0], [-3.0, 0.0, 3.0]])
    one = torch.randn(3, 1, generator=g)
    last = {"dim": -1}  # passed explicitly, so that fn(x, dim) without a default works too
    inf = float("-inf")
    masked = torch.tensor([[inf, 2.0, inf, inf], [0.5, inf, 1.5, inf], [inf, inf, inf, -7.0]])
    wrong_axis = "you normalised along the wrong axis: sum over `dim` (keepdim=True); each slice sums to 1."
    return [
        Case("random rows", (x,), softmax(x, dim=-1), kwargs=last, mistakes=[(softmax(x, 0), wrong_axis)]),
        Case(
            "dim=0",
            (x0,),
            softmax(x0, dim=0),
            kwargs={"dim": 0},
            hint="use the `dim` argument: take the max and the sum over `dim`, with keepdim=True.",
            mistakes=[(softmax(x0, dim=-1), "you ignored the `dim` argument and always used the last axis.")],
        ),
        Case("batch dims", (xb,), softmax(xb, dim=-1), kwargs=last, mistakes=[(softmax(xb, 0), wrong_axis)]),
        Case(
            "large logits",
            (big,),
            softmax(big, dim=-1),
            kwargs=last,
            hint=_STABLE,
            mistakes=[(big.exp() / big.exp().sum(-1, keepdim=True), "you used exp(x) / sum(exp(x)) as is: " + _STABLE)],
        ),
        Case(
            "masked row (-inf all but one)",
            (masked,),
            softmax(masked, dim=-1),
            kwargs=last,
            hint="exp(-inf) = 0, so -inf logits must get weight exactly 0; keep them as -inf and subtract "
            "the row max (which is finite here).",
        ),
        Case("single token", (one,), torch.ones(3, 1), kwargs=last, hint="softmax of one number is 1."),
    ]


SOFTMAX = Check(
    name="softmax",
    signature="fn(x, dim=-1) -> Tensor (same shape and dtype as x)",
    description="numerically stable softmax along any dimension",
    hint="softmax(x) = exp(x - max) / sum(exp(x - max)) along `dim`, with keepdim=True.",
    make_cases=_softmax_cases,
)


def _attention_cases() -> list[Case]:
    from companion.attention import scaled_dot_product_attention as sdpa
    from companion.masks import causal_mask

    def no_scale(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, str]:
        return sdpa(q, k, v, mask, scale=1.0), "divide the scores by √d_k (d_k = q.shape[-1]) before softmax."

    def d_k_scale(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, str]:
        d_k = q.shape[-1]
        return sdpa(q, k, v, mask, scale=1.0 / d_k), f"divide by √d_k (here √{d_k}), not by d_k itself."

    def mask_after(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, str]:
        _, weights = sdpa(q, k, v, None, return_weights=True)
        out = (weights * mask) @ v  # (..., T, D_v): masked after the softmax, rows no longer sum to 1
        return out, (
            "apply the mask to the scores BEFORE the softmax (scores.masked_fill(~mask, float('-inf'))); "
            "zeroing weights after the softmax leaves rows that no longer sum to 1."
        )

    def query_axis(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, str]:
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (..., T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-2) @ v, QUERY_AXIS  # each key's column sums to 1: the wrong axis

    def inverted(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Any, str]:
        flipped = sdpa(q, k, v, ~mask)  # a fully masked row gives 0 here, NaN in most hand-written versions

        def looks_inverted(out: Any) -> bool:
            if not isinstance(out, Tensor) or out.shape != flipped.shape:
                return False
            return bool(torch.allclose(out.detach().nan_to_num(0.0), flipped, atol=1e-5, rtol=1e-4))

        return looks_inverted, "True = may attend: block where mask is False: scores.masked_fill(~mask, -inf)"

    def case(label: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, **kw: str) -> Case:
        known = [no_scale(q, k, v, mask), d_k_scale(q, k, v, mask), query_axis(q, k, v, mask)]
        if mask is not None:
            known += [mask_after(q, k, v, mask), inverted(q, k, v, mask)]
        kwargs = {} if mask is None else {"mask": mask}  # so that fn(q, k, v) without a mask also runs
        return Case(label, (q, k, v), sdpa(q, k, v, mask), kwargs=kwargs, mistakes=known, **kw)

    g = seeded(1)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    q, k, v = r(2, 5, 8), r(2, 5, 8), r(2, 5, 8)
    one_key = torch.zeros(4, 4, dtype=torch.bool)
    one_key[torch.arange(4), torch.tensor([2, 0, 3, 1])] = True  # each query may see exactly one key
    return [
        case("no mask, T=3, S=5", r(3, 8), r(5, 8), r(5, 6)),
        case("batch and head dims", r(2, 3, 4, 16), r(2, 3, 6, 16), r(2, 3, 6, 16)),
        case("causal mask", q, k, v, causal_mask(5)),
        case("one key allowed per query", r(4, 8), r(4, 8), r(4, 8), one_key),
        case("single token", r(1, 4), r(1, 4), r(1, 4)),
        case("large scores", 20 * r(3, 4), 20 * r(3, 4), r(3, 4), hint="use a stable softmax: " + _STABLE),
    ]


ATTENTION = Check(
    name="scaled_dot_product_attention",
    signature="fn(q, k, v, mask=None) -> out; q (..., T, D_h), k (..., S, D_h), v (..., S, D_v), "
    "bool mask (T, S) with True = may attend",
    description="softmax(q kᵀ / √d_k, masked) v",
    hint="scores = q @ k.transpose(-2, -1) / √d_k; set masked scores (mask False) to -inf; "
    "softmax over the last (key) axis; multiply by v.",
    make_cases=_attention_cases,
)


# ---------------------------------------------------------------- predict: the weights of one query, by hand
# q = (1, 1, 1, 1) against k1 = (1, 1, 1, 1), k2 = (1, 1, 0, 0), k3 = (1, -1, 1, -1), d_k = 4:
# q·k = 4, 2, 0; divided by √4 = 2: scores 2, 1, 0; softmax: 0.665, 0.245, 0.090.
_Q_HAND = [[1.0, 1.0, 1.0, 1.0]]
_K_HAND = [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0], [1.0, -1.0, 1.0, -1.0]]


def _weights_by_hand() -> tuple[float, ...]:
    from companion.attention import scaled_dot_product_attention as sdpa

    q, k = torch.tensor(_Q_HAND), torch.tensor(_K_HAND)
    _, weights = sdpa(q, k, k, return_weights=True)  # (1, 3): one query, three keys
    return tuple(weights[0].tolist())


def _softmax3(scores: list[float]) -> tuple[float, ...]:
    return tuple(torch.tensor(scores).softmax(-1).tolist())


WEIGHTS_BY_HAND = value_check(
    "attention_weights_by_hand",
    _weights_by_hand,
    description="the attention weights of q = (1,1,1,1) over k1 = (1,1,1,1), k2 = (1,1,0,0), k3 = (1,-1,1,-1)",
    hint="scores q·k_j / √d_k with d_k = 4, then a softmax: exp(s_j) / Σ exp(s_i).",
    signature="a tuple of three numbers (weight on k1, on k2, on k3)",
    mistakes=[
        (_softmax3([4.0, 2.0, 0.0]), "you forgot to divide the scores by √d_k = 2."),
        (_softmax3([1.0, 0.5, 0.0]), "you divided by d_k = 4 instead of √d_k = 2."),
        ((4 / 6, 2 / 6, 0.0), "you divided the scores by their sum; the softmax exponentiates them first."),
        ((2.0, 1.0, 0.0), "those are the scaled scores; the weights are their softmax."),
    ],
    rtol=0.02,
    atol=0.005,
)

# ---------------------------------------------------------------- choose: d_k instead of √d_k
SCALE_CHOICE = choice_check(
    "scale_by_d_k",
    "b",
    ("a", "b", "c", "d"),
    description="dividing the scores by d_k = 64 instead of √d_k = 8: what happens to the softmax?",
    hint="dividing by 64 makes every score 8 times smaller than dividing by 8; what does that do to exp(s)?",
    mistakes={
        "a": "saturation is what NO scaling does; dividing by 64 shrinks the scores 8× more than √64, so the "
        "weights become flatter, not peakier.",
        "c": "the softmax is unchanged when you ADD a constant to every score, not when you multiply them: "
        "scaling changes how peaked the weights are.",
        "d": "any scaling still goes through a softmax, so every row still sums to 1.",
    },
)

# ---------------------------------------------------------------- predict: the cost of QKᵀ and AV
_T_COST, _D_COST = 1024, 64


def _attention_flops() -> int:
    from torch.utils.flop_counter import FlopCounterMode

    from companion.attention import scaled_dot_product_attention as sdpa

    q = torch.zeros(1, _T_COST, _D_COST)
    with FlopCounterMode(display=False) as counter:  # counts 2·m·n·k per (m, k) @ (k, n) product
        sdpa(q, q, q)
    return int(counter.get_total_flops())


_T, _D = _T_COST, _D_COST
ATTENTION_FLOPS = value_check(
    "attention_flops",
    _attention_flops,
    description=f"FLOPs of QKᵀ and AV for one head, T = {_T} tokens, d_k = d_v = {_D} (projections excluded)",
    hint="QKᵀ is T·T dot products of length d (a multiply and an add each: 2·T²·d); AV costs the same again.",
    signature="a number of FLOPs",
    mistakes=[
        (
            2 * _T * _T * _D,
            "you counted only one of the two T×T×d products (QKᵀ or AV), or one FLOP per "
            "multiply–add; each product costs 2·T²·d.",
        ),
        (_T * _T * _D, "you counted one FLOP per multiply–add and only one product; each product costs 2·T²·d."),
        (8 * _T * _D * _D, "8·T·d² is the cost of the four projections, not of QKᵀ and AV."),
        (4 * _T * _T * _D + 8 * _T * _D * _D, "you added the projections; this asks for QKᵀ and AV only."),
    ],
    rtol=0.02,
)

CHECKS = [SOFTMAX, ATTENTION, WEIGHTS_BY_HAND, SCALE_CHOICE, ATTENTION_FLOPS]
