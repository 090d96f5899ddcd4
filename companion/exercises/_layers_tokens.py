"""Checks for chapters 1 and 6: one BPE merge step and layer normalisation.

References: :class:`companion.layers.LayerNorm` (equal to ``torch.nn.LayerNorm``) and the merge step of
:class:`companion.tokens.BPETokenizer`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, seeded


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


def _list_judge(expected: list[int]) -> Any:
    def judge(out: Any) -> str | None:
        if not isinstance(out, (list, tuple)):
            return f"returned a {type(out).__name__} object, expected a list of ints"
        if list(out) != expected:
            return f"returned {list(out)}, expected {expected}"
        return None

    return judge


def _bpe_cases() -> list[Case]:
    from companion.tokens import merge_pair

    a, b, x = ord("a"), ord("b"), 256
    overlap = 'occurrences must not overlap: after merging the pair at i, go on at i + 2 ("aaa" -> [X, a]).'
    cases = []
    for label, ids, pair, new_id, hint in [
        ('"abab" with (a, b)', [a, b, a, b], (a, b), x, None),
        ('"aaa" with (a, a)', [a, a, a], (a, a), x, overlap),
        ('"aaaa" with (a, a)', [a, a, a, a], (a, a), x, overlap),
        ("pair absent", [1, 2, 3, 4], (3, 1), 300, "leave the ids unchanged when the pair does not occur."),
        ("pair at the end", [5, 6, 7, 6, 7], (6, 7), 257, "check the last position too (i + 1 < len(ids))."),
        ("reversed pair is not the pair", [b, a, a, b], (a, b), x, "(a, b) is ordered; (b, a) differs."),
        ("single id", [a], (a, a), x, "a list of one id has no pair; don't read past its end."),
        ("empty list", [], (a, b), x, "the empty list merges to the empty list."),
    ]:
        expected = merge_pair(list(ids), pair[0], pair[1], new_id)
        known: list[tuple[Any, str]] = []
        if pair[0] == pair[1]:  # every overlapping occurrence replaced, e.g. "aaa" -> [X, X]
            greedy = [new_id] * (len(ids) - 1) if len(ids) > 1 else ids
            known.append((greedy, overlap))
        cases.append(Case(label, (ids, pair, new_id), _list_judge(expected), hint, mistakes=known))
    return cases


BPE_MERGE = Check(
    name="bpe_merge",
    signature="fn(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int] (a new list)",
    description="one BPE merge: replace each non-overlapping occurrence of pair, left to right, by new_id",
    hint="walk left to right with an index i: if (ids[i], ids[i + 1]) == pair, append new_id and skip 2, "
    "else append ids[i] and skip 1.",
    make_cases=_bpe_cases,
)

CHECKS = [LAYER_NORM, BPE_MERGE]
