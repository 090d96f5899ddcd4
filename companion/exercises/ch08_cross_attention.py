"""Chapter 8 (cross-attention) checks: one head of cross-attention, the three masks of an encoder–decoder
model, the shape of the cross-attention weights, and what the cross-attention cache saves.

References: :func:`companion.attention.scaled_dot_product_attention` (queries from the decoder, keys and
values from the encoder output), :class:`companion.attention.MultiHeadAttention` (its ``memory`` argument)
and :mod:`companion.masks` (``causal_mask``, ``padding_mask``, ``combine_masks``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, compare, seeded, value_check

CHAPTER = "08_cross_attention"


def _cross_reference(y: Tensor, memory: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor,
                     padding_mask: Tensor | None = None) -> Tensor:
    from companion.attention import scaled_dot_product_attention

    mask = None if padding_mask is None else padding_mask[:, None, :]  # (B, 1, S): broadcasts over queries
    return scaled_dot_product_attention(y @ w_q, memory @ w_k, memory @ w_v, mask)  # (B, T, d_v)


def _by_hand(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dim: int = -1, scale: bool = True) -> Tensor:
    """Attention written out, to build the classic mistakes (softmax over the wrong axis, no scale)."""
    scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5 if scale else 1.0)  # (B, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=dim) @ v


def _cross_cases() -> list[Case]:
    g = seeded(81)
    cases = []
    for label, (b, t, s, d, d_k), padded in [
        ("B=1, T=3 targets, S=5 sources", (1, 3, 5, 8, 4), False),
        ("source padding, B=2, T=4, S=6", (2, 4, 6, 8, 8), True),
        ("T = S = 5, with padding", (2, 5, 5, 6, 6), True),
    ]:
        y, memory = torch.randn(b, t, d, generator=g), torch.randn(b, s, d, generator=g)
        w_q, w_k, w_v = (torch.randn(d, d_k, generator=g) / d**0.5 for _ in range(3))
        pad = None
        if padded:
            pad = torch.ones(b, s, dtype=torch.bool)
            pad[0, s - 2:] = False  # the first source sentence ends in two PAD tokens
        key_mask = None if pad is None else pad[:, None, :]  # (B, 1, S)
        q, k, v = y @ w_q, memory @ w_k, memory @ w_v
        lower = torch.ones(t, s, dtype=torch.bool).tril()  # (T, S): target t sees sources 0..t
        known = [
            (_cross_reference(y, y, w_q, w_k, w_v), "keys and values come from the encoder output (memory), "
             "queries from the decoder stream y: that was self-attention."),
            (_by_hand(q, k, v, key_mask, dim=-2), "normalise over the source keys, the last axis of the (T, S) "
             "scores (softmax(dim=-1)), not over the queries."),
            (_by_hand(q, k, v, lower if key_mask is None else lower & key_mask),
             "cross-attention has no causal mask: the source sentence is complete, every target position may "
             "read all of it."),
            (_by_hand(q, k, v, key_mask, scale=False), "divide the scores by sqrt(d_k), the width of the "
             "queries and keys."),
        ]
        if pad is not None:
            known.append((_by_hand(q, k, v, None), "hide the source's padding keys: scores.masked_fill("
                          "~padding_mask[:, None, :], float('-inf'))."))
        kwargs = {} if pad is None else {"padding_mask": pad}
        expected = _cross_reference(y, memory, w_q, w_k, w_v, pad)
        cases.append(Case(label, (y, memory, w_q, w_k, w_v), expected, kwargs=kwargs, mistakes=known))
    return cases


CROSS_ATTENTION = Check(
    name="cross_attention",
    signature="fn(y, memory, w_q, w_k, w_v, padding_mask=None) -> (B, T, d_v); y (B, T, D) decoder, memory "
    "(B, S, D) encoder output, w_* (D, d_k), padding_mask (B, S) bool, True = real source token",
    description="one head of cross-attention: Q from the decoder, K and V from the encoder output",
    hint="q = y @ w_q; k, v = memory @ w_k, memory @ w_v; scores (B, T, S) = q @ k.transpose(-2, -1) / sqrt(d_k); "
    "blocked where ~padding_mask[:, None, :]; softmax over the last axis; @ v.",
    make_cases=_cross_cases,
    atol=1e-5,
)


def _reference_masks(src: Tensor, tgt: Tensor, pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    from companion.masks import causal_mask, combine_masks, padding_mask

    b, s, t = src.shape[0], src.shape[1], tgt.shape[1]
    src_pad = padding_mask(src, pad_id)  # (B, 1, 1, S)
    enc = src_pad.expand(b, 1, s, s)
    dec = combine_masks(causal_mask(t), padding_mask(tgt, pad_id)).expand(b, 1, t, t)
    cross = src_pad.expand(b, 1, t, s)
    return enc, dec, cross


_NAMES = ("encoder self-attention", "decoder self-attention", "cross-attention")


def _parts_equal(out: Any, wanted: tuple[Tensor | None, Tensor | None, Tensor | None]) -> bool:
    """``out`` is three bool masks; each one given in ``wanted`` broadcasts to it and equals it."""
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        return False
    for part, target in zip(out, wanted):
        if target is None:
            continue
        if not isinstance(part, Tensor) or part.dtype != torch.bool:
            return False
        try:
            if not torch.equal(torch.broadcast_to(part, target.shape), target):
                return False
        except RuntimeError:
            return False
    return True


def _masks_judge(expected: tuple[Tensor, Tensor, Tensor]) -> Any:
    def judge(out: Any) -> str | None:
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            return "returned something other than three masks (encoder, decoder, cross)"
        for name, part, target in zip(_NAMES, out, expected):
            if not isinstance(part, Tensor) or part.dtype != torch.bool:
                return f"the {name} mask is not a bool tensor (True = may attend)"
            try:
                full = torch.broadcast_to(part, target.shape)
            except RuntimeError:
                return (f"the {name} mask has shape {tuple(part.shape)}, which does not broadcast to "
                        f"{tuple(target.shape)}")
            problem = compare(full, target, 0.0, 0.0)
            if problem is not None:
                return f"the {name} mask {problem[1]}"
        return None

    return judge


def _masks_cases() -> list[Case]:
    from companion.masks import causal_mask, padding_mask

    cases = []
    for label, src_rows, tgt_rows in [
        ("S=5 sources, T=4 targets", [[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]], [[1, 5, 6, 0], [1, 7, 8, 9]]),
        ("S=3, T=6, B=1, no padding", [[4, 5, 6]], [[1, 7, 8, 9, 10, 11]]),
        ("S=6, T=3", [[4, 5, 0, 0, 0, 0], [4, 5, 6, 7, 8, 9]], [[1, 7, 0], [1, 8, 9]]),
    ]:
        src, tgt = torch.tensor(src_rows), torch.tensor(tgt_rows)
        enc, dec, cross = _reference_masks(src, tgt, 0)
        b, s, t = src.shape[0], src.shape[1], tgt.shape[1]
        known = [
            (lambda out, w=(None, None, cross & torch.ones(t, s, dtype=torch.bool).tril()): _parts_equal(out, w),
             "cross-attention has no causal mask: the source is complete before decoding starts."),
            (lambda out, w=(None, padding_mask(tgt, 0).expand(b, 1, t, t), None): _parts_equal(out, w),
             "the decoder's self-attention also needs the causal mask (combined with the target padding)."),
            (lambda out, w=(enc & causal_mask(s), None, None): _parts_equal(out, w),
             "the encoder reads its source in both directions: padding mask only, no causal mask."),
            (lambda out, p=padding_mask(tgt, 0): isinstance(out, (tuple, list)) and len(out) == 3
             and isinstance(out[2], Tensor) and out[2].shape == p.shape and bool(torch.equal(out[2], p)),
             "cross-attention's keys are the source tokens: hide the SOURCE padding, (B, 1, 1, S)."),
        ]
        cases.append(Case(label, (src, tgt, 0), _masks_judge((enc, dec, cross)), mistakes=known))
    return cases


ENCODER_DECODER_MASKS = Check(
    name="encoder_decoder_masks",
    signature="fn(src_ids, tgt_ids, pad_id) -> (encoder, decoder, cross) bool masks, broadcastable to "
    "(B, 1, S, S), (B, 1, T, T), (B, 1, T, S); True = may attend",
    description="the three masks of an encoder–decoder model",
    hint="encoder: source padding (B, 1, 1, S); decoder: causal (T, T) & target padding (B, 1, 1, T); "
    "cross: source padding (B, 1, 1, S) again, no causal mask.",
    make_cases=_masks_cases,
)


def _cross_weights_shape() -> tuple[int, ...]:
    from companion.attention import MultiHeadAttention

    with torch.random.fork_rng(devices=[]):  # building the module draws random weights: keep the reader's RNG
        mha = MultiHeadAttention(8, 4)
        y, memory = torch.zeros(2, 11, 8), torch.zeros(2, 10, 8)  # T = 11 targets, S = 10 sources
        with torch.no_grad():
            _, weights = mha(y, memory=memory, return_weights=True)
    return tuple(weights.shape)


CROSS_WEIGHTS_SHAPE = value_check(
    "cross_weights_shape",
    _cross_weights_shape,
    description="predict: the shape of the cross-attention weights, B = 2, 4 heads, S = 10 sources, T = 11 targets",
    hint="(batch, heads, one row per query, one column per key); the queries come from the decoder.",
    signature="a tuple of 4 integers, e.g. (1, 2, 3, 4)",
    mistakes=[
        ((2, 4, 10, 11), "rows are queries, the target positions (T = 11); columns are keys, the source "
         "tokens (S = 10)."),
        ((2, 4, 11, 11), "that is the decoder's self-attention (T × T); cross-attention's keys are the source."),
        ((2, 4, 10, 10), "that is the encoder's self-attention (S × S)."),
        ((2, 11, 10), "every head has its own weights: (B, H, T, S)."),
    ],
    rtol=0.0,
)

CROSS_KV_CACHE = choice_check(
    "cross_kv_cache",
    "b",
    ("a", "b", "c", "d"),
    description="choose: how often one decoder layer computes its cross-attention K = H W_K in cached decoding",
    hint="does H, the encoder output, change while the decoder writes one word after another?",
    mistakes={
        "a": "12 is the count without the cache: H never changes while the target grows, so the cache computes "
        "H W_K once and reuses it at every step.",
        "c": "6 is the number of decoder layers; each layer computes its own K once (per source sentence).",
        "d": "72 = 6 layers × 12 steps is the total without any cache.",
    },
)

CHECKS = [CROSS_ATTENTION, ENCODER_DECODER_MASKS, CROSS_WEIGHTS_SHAPE, CROSS_KV_CACHE]
