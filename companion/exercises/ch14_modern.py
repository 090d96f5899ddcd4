"""Chapter 14 (inside today's models) checks: the top-k router, active parameters, the MLA cache, the window
with attention sinks, and why MLA's RoPE is decoupled.

References, imported inside the case builders: :func:`companion.moe.route` (softmax scores, top-k,
renormalised: Mixtral's router), :func:`companion.scaling.count_parameters` with ``active=True`` (one Mixtral
MoE layer), :func:`companion.scaling.cache_bytes_per_token` (DeepSeek-V3's MLA cache) and
:func:`companion.masks.sliding_window_mask` with ``n_sinks`` (what a :class:`~companion.attention.RollingKVCache`
lets each query see).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, compare, seeded, value_check

CHAPTER = "14_modern"


# ------------------------------------------------------------------------------------------ the router (write)


def _routing_judge(weights: Tensor, experts: Tensor) -> Any:
    """Right if, token by token, the same experts carry the same weights (in any order)."""

    def judge(out: Any) -> str | None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            return f"returned {type(out).__name__}; expected a pair (weights, experts)"
        got_w, got_e = out
        for name, got, want in (("weights", got_w, weights), ("experts", got_e, experts)):
            if not isinstance(got, Tensor) or tuple(got.shape) != tuple(want.shape):
                shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
                return f"{name} is {shape}; expected a tensor of shape {tuple(want.shape)} (N, k)"
        if got_e.dtype.is_floating_point:
            return "experts must be integer indices (the .indices of torch.topk), not scores"
        order, want_order = got_e.sort(dim=-1), experts.sort(dim=-1)
        if not torch.equal(order.values.long(), want_order.values):
            return "some token is routed to the wrong experts"
        problem = compare(got_w.float().gather(1, order.indices), weights.gather(1, want_order.indices), 1e-5, 1e-4)
        return None if problem is None else f"the weights of the chosen experts differ: {problem[1]}"

    return judge


def _same_routing(weights: Tensor, experts: Tensor) -> Any:
    judge = _routing_judge(weights, experts)
    return lambda out: judge(out) is None


def _router_cases() -> list[Case]:
    from companion.moe import route

    cases = []
    for label, n, e, k, seed in [("8 tokens, 4 experts, k=2", 8, 4, 2, 0), ("5 tokens, 8 experts, k=2", 5, 8, 2, 1),
                                 ("6 tokens, 8 experts, k=3", 6, 8, 3, 2), ("4 tokens, 6 experts, k=1", 4, 6, 1, 3)]:
        logits = 2.0 * torch.randn(n, e, generator=seeded(seed))  # (N, E)
        weights, experts, probs = route(logits, k)
        top = logits.topk(k, dim=-1)
        plain = probs.gather(1, experts)  # softmax over all E, not renormalised
        column = logits.softmax(dim=0).gather(1, experts)  # softmax over the tokens
        smallest = logits.topk(k, dim=-1, largest=False).indices
        mistakes = [
            (_same_routing(plain, experts), "renormalise: the k chosen probabilities of a softmax over all E experts "
             "sum to less than 1; divide them by their sum (Mixtral does)."),
            (_same_routing(top.values, experts), "the weights are probabilities: take the softmax of the logits "
             "(over the experts) before you pick, not the raw logits."),
            (_same_routing(column / column.sum(-1, keepdim=True), experts),
             "softmax over the wrong axis: each token's scores are a distribution over its E experts (dim=-1), "
             "not over the tokens."),
            (_same_routing(probs.gather(1, smallest) / probs.gather(1, smallest).sum(-1, keepdim=True), smallest),
             "those are the k *least* likely experts: torch.topk picks the largest by default."),
        ]
        cases.append(Case(label, (logits.clone(), k), _routing_judge(weights, experts), mistakes=mistakes))
    return cases


ROUTER_TOPK = Check(
    name="router_topk",
    signature="fn(logits, k) -> (weights, experts); logits (N, E) float, both outputs (N, k); experts int64",
    description="Mixtral's router: softmax over the experts, top k, renormalised weights",
    hint="probs = logits.softmax(dim=-1); top = probs.topk(k, dim=-1); weights = top.values / "
    "top.values.sum(-1, keepdim=True); return weights, top.indices.",
    make_cases=_router_cases,
)


# ------------------------------------------------------------------------------------------ active parameters (predict)

D, WIDTH, EXPERTS, K = 4096, 14336, 8, 2  # one MoE layer of Mixtral 8x7B


def _active_layer() -> float:
    from companion.models import ModelConfig
    from companion.scaling import count_parameters

    one = ModelConfig.mixtral_8x7b(n_layers=1)  # the layer's FFN = one-layer model minus its dense-FFN twin's FFN
    dense = one.replace(n_experts=0, d_ff=1)  # a 1-wide dense FFN costs 3·D
    return float(count_parameters(one, active=True) - count_parameters(dense) + 3 * D)


ACTIVE_PARAMETERS = value_check(
    "moe_active_parameters",
    _active_layer,
    description="predict the parameters one token uses in one MoE layer of Mixtral 8x7B (router + its experts)",
    hint="each expert is a SwiGLU FFN with three D × d_expert matrices (gate, up, down); a token runs k of the "
    "E experts, and the router (a D × E matrix) runs for every token.",
    signature="a number of parameters",
    mistakes={
        float(EXPERTS * 3 * D * WIDTH + D * EXPERTS): "that counts all 8 experts: the total, not what one token uses.",
        float(K * 2 * D * WIDTH + D * EXPERTS): "a SwiGLU expert has three matrices (gate_proj, up_proj, down_proj), "
        "not two.",
        float(K * 3 * D * WIDTH): "add the router: its D × E matrix scores every expert for every token.",
        float(3 * D * WIDTH + D * EXPERTS): "Mixtral sends each token to k = 2 experts, not one.",
    },
    rtol=1e-7,
)


# ------------------------------------------------------------------------------------------ the MLA cache (predict)


def _mla_bytes() -> float:
    from companion.models import ModelConfig
    from companion.scaling import cache_bytes_per_token

    return float(cache_bytes_per_token(ModelConfig.deepseek_v3(), bytes_per_value=2))


MLA_CACHE = value_check(
    "mla_cache_bytes",
    _mla_bytes,
    description="predict the bytes DeepSeek-V3's MLA cache holds per token (61 layers, bf16)",
    hint="per layer MLA caches the latent c_KV (kv_rank = 512 numbers) and the shared RoPE key (64 numbers), "
    "nothing else; multiply by the 61 layers and 2 bytes per bf16 value.",
    signature="a number of bytes",
    mistakes={
        float(61 * 512 * 2): "the decoupled RoPE key (64 numbers per layer) is cached too, beside the latent.",
        float(2 * 61 * 576 * 2): "the latent is stored once and serves both keys and values; there is no second copy "
        "(and bf16 takes 2 bytes, not 4).",
        float(576 * 2): "that is one layer; the cache holds every layer's latent.",
        float(2 * 61 * 128 * 128 * 2): "that is multi-head attention's cache (a key and a value for each of the 128 "
        "heads): MLA caches only the latent and the RoPE key.",
        float(61 * 576): "count bytes, not values: a bf16 value takes 2 bytes.",
    },
    rtol=1e-6,
)


# ------------------------------------------------------------------------------------------ window with sinks (fix)


def _bool_judge(expected: Tensor) -> Any:
    def judge(out: Any) -> str | None:
        if not isinstance(out, Tensor) or out.dtype != torch.bool:
            kind = type(out).__name__ if not isinstance(out, Tensor) else f"tensor of dtype {out.dtype}"
            return f"returned a {kind}, expected a bool torch.Tensor (True = may attend)"
        problem = compare(out, expected, 0.0, 0.0)
        return None if problem is None else problem[1]

    return judge


def _sink_cases() -> list[Case]:
    from companion.masks import sliding_window_mask

    cases = []
    for t, window, n_sinks in [(10, 4, 1), (12, 6, 2), (8, 3, 2), (7, 5, 0)]:
        expected = sliding_window_mask(t, window, n_sinks=n_sinks)
        p, j = torch.arange(t)[:, None], torch.arange(t)[None, :]  # (T, 1) queries, (1, T) keys
        mistakes = [
            ((j < n_sinks) | ((j <= p) & (p - j < window - n_sinks)),
             "a sink is visible only once it is in the past: a query at position p < n_sinks must not see the "
             "later sinks (keep j <= p for the sinks too)."),
            ((j <= p) & ((j < n_sinks) | (p - j < window)),
             "the sinks share the window's slots: the recent part holds window - n_sinks keys, so that a query "
             "sees at most `window` keys (and the cache stays that size)."),
            ((j <= p) & ((j < n_sinks) | (p - j < window - n_sinks - 1)),
             "one recent key short: the query's own key is one of the window - n_sinks recent ones (p - j < "
             "window - n_sinks)."),
            (~expected, "True = may attend; you returned True where a key is blocked."),
        ]
        mistakes = [(m, hint) for m, hint in mistakes if not torch.equal(m, expected)]
        cases.append(Case(f"t={t}, window={window}, n_sinks={n_sinks}", (t, window, n_sinks), _bool_judge(expected),
                          mistakes=mistakes))  # fmt: skip
    return cases


SINK_MASK = Check(
    name="sink_window_mask",
    signature="fn(t, window, n_sinks) -> bool (T, T); True = may attend",
    description="StreamingLLM's window with attention sinks: the first n_sinks keys plus the recent ones",
    hint="p = torch.arange(t)[:, None], j = torch.arange(t)[None, :]; visible iff j <= p and (j < n_sinks or "
    "p - j < window - n_sinks).",
    make_cases=_sink_cases,
)


# ------------------------------------------------------------------------------------------ decoupled RoPE (choose)

DECOUPLED_ROPE = choice_check(
    "decoupled_rope",
    "b",
    ("a", "b", "c", "d"),
    description="choose: why MLA keeps RoPE on separate dimensions instead of rotating the latent's keys",
    hint="write the score of one head with RoPE on the rebuilt key: q_mᵀ R_m⁻¹... the rotation sits between "
    "the query and W_UK and depends on the key's position.",
    mistakes={
        "a": "the cache gets a little bigger with the decoupled key (64 more numbers per token), not smaller; "
        "saving cache is not the reason.",
        "c": "RoPE needs an even width in either design; the latent's 512 is even.",
        "d": "the softmax scale is 1/sqrt(nope + rope) in both forms; absorbing W_UK does not change it.",
    },
)

CHECKS = [ROUTER_TOPK, ACTIVE_PARAMETERS, MLA_CACHE, SINK_MASK, DECOUPLED_ROPE]
