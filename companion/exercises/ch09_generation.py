"""Chapter 9 (generation) checks: temperature, top-k, top-p (nucleus), one cached decoding step, beam search.

References, imported inside the case builders: :func:`companion.generation.apply_temperature`,
:func:`~companion.generation.top_k_filter`, :func:`~companion.generation.top_p_filter`,
:func:`~companion.generation.beam_search`, :class:`companion.attention.KVCache`,
:func:`companion.attention.scaled_dot_product_attention` and :class:`companion.generation.BigramModel`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, compare, seeded, value_check
from companion.exercises.ch03_attention import QUERY_AXIS

CHAPTER = "09_generation"

_NEG_INF = float("-inf")


# ------------------------------------------------------------------------------------------ temperature


def _temperature_cases() -> list[Case]:
    from companion.generation import apply_temperature

    g = seeded(9)
    cases = []
    for label, x, tau in [
        ("random rows, tau=0.5", torch.randn(4, 6, generator=g) * 2, 0.5),
        ("random rows, tau=2", torch.randn(3, 5, generator=g) * 2, 2.0),
        ("one vector, tau=1", torch.tensor([3.0, 2.2, 1.9, 1.2, 0.8]), 1.0),
        ("large logits, tau=0.5", torch.tensor([[1000.0, 999.0, 990.0], [-5.0, 0.0, 5.0]]), 0.5),
    ]:
        expected = torch.softmax(apply_temperature(x, tau), dim=-1)
        with torch.no_grad():
            times = torch.softmax(x * tau, dim=-1)
            wrong_axis = torch.softmax(x / tau, dim=0)
            no_renorm = torch.softmax(x, dim=-1) ** (1.0 / tau)
            unstable = (x / tau).exp() / (x / tau).exp().sum(-1, keepdim=True)
        mistakes = [
            (times, "you multiplied by the temperature: divide the logits by tau, so that tau < 1 sharpens."),
            (no_renorm, "p ** (1/tau) is not a distribution: renormalise it, or simply softmax(logits / tau)."),
            (unstable, "exp(1000) overflows to inf and inf / inf is NaN: subtract the row maximum before exp."),
        ]
        if x.dim() > 1:  # on a 1-D input dim 0 is the last dim
            mistakes.append((wrong_axis, "the softmax runs over the vocabulary, the last axis (dim=-1), not dim 0."))
        cases.append(Case(label, (x, tau), expected, mistakes=mistakes))
    return cases


TEMPERATURE = Check(
    name="temperature_softmax",
    signature="fn(logits, temperature) -> probabilities; logits (..., V), softmax over the last axis",
    description="softmax(logits / temperature): sharper below 1, flatter above 1",
    hint="divide the logits by the temperature, subtract the row maximum, exponentiate, divide by the sum "
    "over the last axis.",
    make_cases=_temperature_cases,
)


# ------------------------------------------------------------------------------------------ top-k


def _top_k_cases() -> list[Case]:
    from companion.generation import top_k_filter

    g = seeded(11)
    cases = []
    for label, x, k in [
        ("eight candidates, k=3", torch.tensor([3.0, 2.2, 1.9, 1.2, 0.8, 0.3, -0.5, -1.0]), 3),
        ("shuffled batch, k=2", torch.randn(3, 7, generator=g), 2),
        ("k=1 is greedy", torch.randn(2, 5, generator=g), 1),
        ("k = V keeps everything", torch.randn(2, 4, generator=g), 4),
    ]:
        expected = top_k_filter(x, k)
        kth_smallest = torch.topk(x, k, dim=-1, largest=False).values[..., -1:]
        smallest = x.masked_fill(x > kth_smallest, _NEG_INF)
        keep = expected > _NEG_INF
        mistakes = [
            (smallest, "you kept the k *smallest* logits: keep the k largest (torch.topk's default largest=True)."),
            (
                x.masked_fill(~keep, 0.0),
                "a dropped token must get logit -inf (probability 0), not 0: logit 0 still has probability e^0 / sum.",
            ),
            (
                torch.softmax(x.masked_fill(~keep, _NEG_INF), -1),
                "return the filtered *logits*, not probabilities: the softmax comes after every filter.",
            ),
        ]
        if k > 1:
            kth = torch.topk(x, k, dim=-1).values[..., -1:]
            mistakes.append(
                (
                    x.masked_fill(x <= kth, _NEG_INF),
                    "you kept only k - 1 tokens: a token is "
                    "dropped only if it is *below* the k-th largest logit (keep logits >= the k-th).",
                )
            )
        cases.append(Case(label, (x, k), expected, mistakes=mistakes))
    return cases


TOP_K = Check(
    name="top_k_filter",
    signature="fn(logits, k) -> Tensor; logits (..., V); all but the k largest set to -inf",
    description="top-k filtering: keep the k most likely tokens of each row",
    hint="find the k-th largest logit of each row (torch.topk(logits, k).values[..., -1:]) and set every "
    "logit below it to float('-inf'), in vocabulary order.",
    make_cases=_top_k_cases,
)


# ------------------------------------------------------------------------------------------ top-p


def _top_p_cases() -> list[Case]:
    from companion.generation import top_p_filter

    g = seeded(4)
    probs = torch.tensor([[0.05, 0.5, 0.1, 0.3, 0.05]])  # the most likely token is not first
    logits = probs.log()
    crossing = (
        "keep the token that crosses p: drop a token only if the probability mass ranked above it already reaches p."
    )
    cases = []
    for label, x, p in [
        ("hand example, p=0.7", logits, 0.7),
        ("batch, p=0.9", torch.randn(3, 10, generator=g), 0.9),
        ("p=1 keeps everything", torch.randn(2, 6, generator=g), 1.0),
        ("tiny p keeps the top token", torch.randn(2, 6, generator=g), 1e-4),
    ]:
        expected = top_p_filter(x, p)
        sorted_logits, order = x.sort(-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, -1)
        drop_sorted = sorted_probs.cumsum(-1) > p  # the mistake: also drops the token that crosses p
        keep = expected > _NEG_INF
        mistakes = [
            (x.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), _NEG_INF), crossing),
            (
                sorted_logits.masked_fill(sorted_probs.cumsum(-1) - sorted_probs >= p, _NEG_INF),
                "your output is still in *sorted* order: position 0 holds the best token's logit whatever its id. "
                "Put the decisions back in vocabulary order (scatter with the sort order, or gather with "
                "order.argsort(-1)).",
            ),
            (x.masked_fill(~keep, 0.0), "a dropped token must get logit -inf (probability 0), not 0."),
        ]
        asc_probs, asc_order = torch.softmax(x, -1).sort(-1)  # ascending: the least likely first
        asc_drop = asc_probs.cumsum(-1) - asc_probs >= p
        mistakes.append(
            (
                x.masked_fill(asc_drop.scatter(-1, asc_order, asc_drop), _NEG_INF),
                "sort in *descending* order: the nucleus is built from the most likely tokens down.",
            )
        )
        cases.append(Case(label, (x, p), expected, mistakes=mistakes))
    return cases


TOP_P = Check(
    name="top_p_filter",
    signature="fn(logits, p) -> Tensor; logits (..., V); tokens outside the nucleus set to -inf",
    description="nucleus (top-p) filtering: keep the smallest most-likely set whose probability reaches p",
    hint="sort the probabilities in descending order, cumsum, and drop the tokens whose preceding mass is "
    ">= p; scatter the decision back to vocabulary order and set dropped logits to -inf.",
    make_cases=_top_p_cases,
)


# ------------------------------------------------------------------------------------------ one cached step


def _is_triple(out: Any) -> str | None:
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        return f"returned {type(out).__name__}; expected a tuple (out, k_cache, v_cache)"
    return None


def _kv_step_judge(expected: tuple[Tensor, Tensor, Tensor]) -> Any:
    def judge(out: Any) -> str | None:
        problem = _is_triple(out)
        if problem:
            return problem
        for name, got, want in zip(("out", "k_cache", "v_cache"), out, expected):
            result = compare(got, want, 1e-5, 1e-4)
            if result is not None:
                return f"{name} {result[1]}"
        return None

    return judge


def _kv_step_cases() -> list[Case]:
    from companion.attention import KVCache, scaled_dot_product_attention

    g = seeded(21)
    cases = []
    for label, b, h, s, d in [
        ("one head, 3 cached", 1, 1, 3, 4),
        ("batch 2, 2 heads, 5 cached", 2, 2, 5, 8),
        ("empty cache", 1, 2, 0, 4),
        ("large scores", 1, 1, 4, 4),
    ]:
        q, k_new, v_new = (torch.randn(b, h, 1, d, generator=g) for _ in range(3))
        k_cache, v_cache = torch.randn(b, h, s, d, generator=g), torch.randn(b, h, s, d, generator=g)
        if label == "large scores":
            q, k_cache = q * 30, k_cache * 30
        cache = KVCache()
        if s:
            cache.update(k_cache, v_cache)
        k_all, v_all = cache.update(k_new, v_new)  # (B, H, S + 1, D_h): the new position goes last
        out = scaled_dot_product_attention(q, k_all, v_all)  # one query may see every key: no mask
        k_pre = torch.cat([k_new, k_cache], -2)  # the new key in front: a classic mistake
        unscaled = torch.softmax(q @ k_all.transpose(-2, -1), -1) @ v_all
        # softmax over the query axis: with one query every weight is 1, so out is the sum of all values
        query_axis = torch.softmax(q @ k_all.transpose(-2, -1) / d**0.5, -2) @ v_all  # (B, H, 1, D_h)

        def close(a: Any, t: Tensor) -> bool:
            return isinstance(a, Tensor) and a.shape == t.shape and bool(torch.allclose(a, t, atol=1e-5))

        mistakes = [
            (
                lambda o, v_new=v_new, s=s: _is_triple(o) is None and s > 0 and close(o[0], v_new),
                "your query attended to the new key only (its output is v_new): append k_new and v_new to the "
                "cache first, then attend to all S + 1 keys.",
            ),
            (
                lambda o, k_pre=k_pre, s=s: _is_triple(o) is None and s > 0 and close(o[1], k_pre),
                "the new key went in *front* of the cache: it belongs at position S, after the cached ones "
                "(torch.cat([k_cache, k_new], dim=-2)).",
            ),
            (
                lambda o, u=unscaled: _is_triple(o) is None and close(o[0], u),
                "divide the scores q·k by sqrt(D_h) before the softmax.",
            ),
            (lambda o, w=query_axis: _is_triple(o) is None and close(o[0], w), QUERY_AXIS),
            (
                lambda o, k_cache=k_cache: _is_triple(o) is None and close(o[1], k_cache),
                "return the *updated* caches (with the new key and value appended), or the next step loses this token.",
            ),
        ]
        cases.append(
            Case(label, (q, k_new, v_new, k_cache, v_cache), _kv_step_judge((out, k_all, v_all)), mistakes=mistakes)
        )
    return cases


KV_CACHE_STEP = Check(
    name="kv_cache_step",
    signature="fn(q, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache); q, k_new, v_new "
    "(B, H, 1, D_h), caches (B, H, S, D_h) -> out (B, H, 1, D_h), caches (B, H, S + 1, D_h)",
    description="one decoding step with a KV cache: append the new key/value, attend the new query to all",
    hint="k_all = torch.cat([k_cache, k_new], dim=-2) (same for v); out = softmax(q k_allᵀ / sqrt(D_h)) v_all; "
    "return (out, k_all, v_all).",
    make_cases=_kv_step_cases,
)


# ------------------------------------------------------------------------------------------ beam search (predict)

# A bigram table (row = current token): <bos> 0, <eos> 1, A 2, B 3, C 4, x 5, y 6.
BEAM_TOKENS = ("<bos>", "<eos>", "A", "B", "C", "x", "y")


def beam_table() -> Tensor:
    """Next-token probabilities of the beam-search exercise: greedy, a beam of 2 and the best sentence differ."""
    p = torch.zeros(7, 7)
    p[0, [2, 3, 4]] = torch.tensor([0.40, 0.35, 0.25])  # <bos> -> A / B / C
    p[2, [1, 5, 6]] = torch.tensor([0.25, 0.40, 0.35])  # A -> <eos> / x / y
    p[3, [5, 6]] = torch.tensor([0.60, 0.40])  # B -> x / y
    p[4, [1, 5]] = torch.tensor([0.04, 0.96])  # C -> <eos> / x
    p[[1, 5, 6], 1] = 1.0  # <eos>, x, y -> <eos>
    return p


def _sequence_probability(p: Tensor, ids: list[int]) -> float:
    return math.prod(float(p[a, b]) for a, b in zip(ids, ids[1:]))


def _beam_probability() -> float:
    from companion.generation import BigramModel, beam_search

    p = beam_table()
    best = beam_search(BigramModel(p.log()), torch.tensor([[0]]), beam_width=2, max_new_tokens=4, eos_id=1)
    return round(_sequence_probability(p, best[0].tolist()), 6)


BEAM = value_check(
    "beam_search_probability",
    _beam_probability,
    description="predict the probability of the sentence a beam of width 2 returns on a bigram table",
    hint="step 1 keeps the two most likely first tokens; step 2 extends both by every token and keeps the two "
    "best *whole* prefixes; multiply the probabilities along the winning sentence (x and y end with "
    "probability 1).",
    signature="a number: the probability of the returned sentence",
    mistakes={
        0.16: "that is greedy decoding's sentence (A x): the beam keeps B alive, and B x scores higher.",
        0.24: "C x is the best sentence overall, but a beam of 2 drops C after step 1 (third, 0.25), so it never "
        "sees C x: beam search is a heuristic.",
        0.35: "that is the probability after step 1 only: multiply by the second word's probability too.",
        0.40: "that is the first step's best token alone.",
    },
    rtol=1e-3,
)

CHECKS = [TEMPERATURE, TOP_K, TOP_P, KV_CACHE_STEP, BEAM]
