"""Checks for chapters 3, 4 and 9: softmax, scaled dot-product attention, split/merge heads, top-p.

References: :func:`companion.attention.softmax`, :func:`companion.attention.scaled_dot_product_attention`,
:func:`companion.generation.top_p_filter`, imported inside each case builder.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from companion.attention import merge_heads, split_heads
from companion.exercises._runner import Case, Check, seeded

_STABLE = "subtract the row max before exp — exp(1000) overflows to inf, and inf / inf is NaN."


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
        Case("large logits", (big,), softmax(big, dim=-1), kwargs=last, hint=_STABLE),
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

    def inverted(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Any, str]:
        flipped = sdpa(q, k, v, ~mask)  # a fully masked row gives 0 here, NaN in most hand-written versions

        def looks_inverted(out: Any) -> bool:
            if not isinstance(out, Tensor) or out.shape != flipped.shape:
                return False
            return bool(torch.allclose(out.detach().nan_to_num(0.0), flipped, atol=1e-5, rtol=1e-4))

        return looks_inverted, "True = may attend: block where mask is False: scores.masked_fill(~mask, -inf)"

    def case(label: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, **kw: str) -> Case:
        known = [no_scale(q, k, v, mask), d_k_scale(q, k, v, mask)]
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

_SPLIT_HINT = (
    "view as (B, T, H, D_h), then transpose(1, 2) to (B, H, T, D_h); a plain .view(B, H, T, D_h) keeps the "
    "memory order and hands each head a mix of tokens."
)
_MERGE_HINT = (
    "transpose(1, 2) back to (B, T, H, D_h), then .reshape(B, T, H * D_h) (a transposed tensor is not "
    "contiguous, so .view needs .contiguous() first)."
)


def _split_cases() -> list[Case]:
    g = seeded(2)
    cases = []
    for label, (b, t, d), h in [
        ("B=2, T=5, D=12, H=3", (2, 5, 12), 3),
        ("T equals H", (2, 4, 8), 4),
        ("single token", (1, 1, 8), 2),
        ("one head", (3, 4, 6), 1),
    ]:
        x = torch.randn(b, t, d, generator=g)
        wrong = x.view(b, h, t, d // h)  # (B, H, T, D_h) in shape only: tokens mixed across heads
        known = [(wrong, "you reshaped without transposing: " + _SPLIT_HINT)]
        cases.append(Case(label, (x, h), split_heads(x, h), mistakes=known))
    return cases


def _merge_cases() -> list[Case]:
    g = seeded(3)
    cases = []
    for label, (b, h, t, dh) in [
        ("B=2, H=3, T=5, D_h=4", (2, 3, 5, 4)),
        ("T equals H", (2, 4, 4, 2)),
        ("single token", (1, 2, 1, 4)),
        ("one head", (3, 1, 4, 6)),
    ]:
        x = torch.randn(b, h, t, dh, generator=g)
        merged = merge_heads(x)  # (B, T, D)
        assert torch.equal(split_heads(merged, h), x)
        wrong = x.reshape(b, t, h * dh)  # (B, T, D) in shape only: heads and tokens mixed
        known = [(wrong, "you reshaped without transposing: " + _MERGE_HINT)]
        cases.append(Case(label, (x,), merged, mistakes=known))
    return cases


SPLIT_HEADS = Check(
    name="split_heads",
    signature="fn(x, n_heads) -> Tensor; x (B, T, D) -> (B, H, T, D_h) with D_h = D // H",
    description="cut the model width into H heads of width D_h (head h gets columns h·D_h ... (h+1)·D_h - 1)",
    hint=_SPLIT_HINT,
    make_cases=_split_cases,
    atol=0.0,
    rtol=0.0,
)

MERGE_HEADS = Check(
    name="merge_heads",
    signature="fn(x) -> Tensor; x (B, H, T, D_h) -> (B, T, H·D_h), the inverse of split_heads",
    description="concatenate the heads back into one (B, T, D) tensor",
    hint=_MERGE_HINT,
    make_cases=_merge_cases,
    atol=0.0,
    rtol=0.0,
)


def _top_p_cases() -> list[Case]:
    from companion.generation import top_p_filter

    g = seeded(4)
    probs = torch.tensor([[0.5, 0.05, 0.3, 0.1, 0.05]])
    logits = probs.log()
    crossing = (
        "keep the token that crosses p: drop a token only if the probability mass ranked above it already "
        "reaches p."
    )
    cases = []
    for label, x, p in [
        ("hand example, p=0.7", logits, 0.7),
        ("batch, p=0.9", torch.randn(3, 10, generator=g), 0.9),
        ("p=1 keeps everything", torch.randn(2, 6, generator=g), 1.0),
        ("tiny p keeps the top token", torch.randn(2, 6, generator=g), 1e-4),
    ]:
        sorted_probs, order = torch.softmax(x, -1).sort(-1, descending=True)
        drop_sorted = sorted_probs.cumsum(-1) > p  # the mistake: also drops the token that crosses p
        wrong = x.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
        cases.append(Case(label, (x, p), top_p_filter(x, p), mistakes=[(wrong, crossing)]))
    return cases


TOP_P = Check(
    name="top_p_filter",
    signature="fn(logits, p) -> Tensor; logits (..., V); tokens outside the nucleus set to -inf",
    description="nucleus (top-p) filtering: keep the smallest most-likely set whose probability reaches p",
    hint="sort the probabilities in descending order, cumsum, and drop the tokens whose preceding mass is "
    ">= p; scatter the decision back to vocabulary order and set dropped logits to -inf.",
    make_cases=_top_p_cases,
)

CHECKS = [SOFTMAX, ATTENTION, SPLIT_HEADS, MERGE_HEADS]  # TOP_P is listed last, with chapter 9
