"""Chapter 7 (masking) checks: the causal, padding and sliding-window masks, their combination, the
receptive field of a stack of windows, and the two boolean conventions.

References: :func:`companion.masks.causal_mask`, :func:`~companion.masks.padding_mask`,
:func:`~companion.masks.sliding_window_mask` and :func:`~companion.masks.combine_masks`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, compare, value_check

CHAPTER = "07_masking"

_CAUSAL_HINT = (
    "query i may attend to keys j <= i (itself included): torch.tril(torch.ones(t, t, dtype=torch.bool)),"
    " or an additive float mask with 0 on and below the diagonal and float('-inf') above it."
)


def _causal_judge(t: int) -> Any:
    """Accept either form: bool (True = may attend) or additive float (0 allowed, -inf blocked)."""
    from companion.masks import causal_mask

    def judge(out: Any) -> str | None:
        if isinstance(out, Tensor) and out.dtype == torch.bool:
            result = compare(out, causal_mask(t), 0.0, 0.0)
        elif isinstance(out, Tensor) and out.dtype.is_floating_point:
            result = compare(out, causal_mask(t, additive=True, dtype=out.dtype), 0.0, 0.0)
        else:
            kind = type(out).__name__ if not isinstance(out, Tensor) else f"tensor of dtype {out.dtype}"
            result = ("type", f"returned a {kind}, expected a bool or float torch.Tensor")
        return None if result is None else result[1]

    return judge


def _causal_cases() -> list[Case]:
    from companion.masks import causal_mask

    cases = []
    for t in (2, 5, 8, 1):  # t=1 last: its masks cannot tell the mistakes apart
        allowed = causal_mask(t)
        no_diag = torch.ones(t, t, dtype=torch.bool).tril(-1)
        known = [
            (~allowed, "this course uses True = may attend (like F.scaled_dot_product_attention); you "
             "returned True = blocked (nn.MultiheadAttention's attn_mask convention). Invert it with ~."),
            (allowed.T, "the mask is transposed: row i is the query, column j the key; a query sees the "
             "past (lower triangle), not the future."),
            (no_diag, "a token may attend to itself: keep the diagonal (tril with diagonal=0, or "
             "triu(..., 1) for the blocked part)."),
            (torch.zeros(t, t).masked_fill(no_diag.logical_not(), float("-inf")),
             "a token may attend to itself: the diagonal must be 0, not -inf."),
            (allowed.float(), "a float mask is added to the scores, so it holds 0 (allowed) and -inf "
             "(blocked), not 1 and 0; or return the bool mask directly."),
            (torch.zeros(t, t).masked_fill(~allowed, -1e9),
             "use float('-inf') for blocked positions: -1e9 is not -inf (and overflows in float16)."),
        ]
        cases.append(Case(f"t={t}", (t,), _causal_judge(t), mistakes=known))
    return cases


CAUSAL_MASK = Check(
    name="causal_mask",
    signature="fn(t) -> (T, T) mask: bool with True = may attend, OR additive float with 0 / -inf",
    description="the decoder's look-ahead mask: query i sees keys 0 ... i",
    hint=_CAUSAL_HINT,
    make_cases=_causal_cases,
)



def _same_bool(target: Tensor) -> Any:
    """A matcher: ``out`` is a bool tensor that broadcasts to ``target``'s shape and then equals it."""

    def matches(out: Any) -> bool:
        if not isinstance(out, Tensor) or out.dtype != torch.bool:
            return False
        try:
            return bool(torch.equal(torch.broadcast_to(out, target.shape), target))
        except RuntimeError:  # shapes that do not broadcast
            return False

    return matches


def _bool_judge(expected: Tensor, shape_hint: str, *, exact_shape: bool = True) -> Any:
    """Judge a bool mask: dtype bool, the shape of ``expected`` (or one that broadcasts to it), equal values."""

    def judge(out: Any) -> str | None:
        if not isinstance(out, Tensor):
            return f"returned a {type(out).__name__}, expected a bool torch.Tensor"
        if out.dtype != torch.bool:
            return f"returned a tensor of dtype {out.dtype}, expected torch.bool (True = may attend)"
        if exact_shape and tuple(out.shape) != tuple(expected.shape):
            return f"returned shape {tuple(out.shape)}, expected {tuple(expected.shape)} ({shape_hint})"
        try:
            full = torch.broadcast_to(out, expected.shape)
        except RuntimeError:
            return (f"returned shape {tuple(out.shape)}, which does not broadcast to {tuple(expected.shape)} "
                    f"({shape_hint})")
        result = compare(full, expected, 0.0, 0.0)
        return None if result is None else result[1]

    return judge


def _padding_cases() -> list[Case]:
    from companion.masks import padding_mask

    cases = []
    for label, rows, pad_id in [
        ("right padding, pad_id=0", [[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]], 0),
        ("left padding, pad_id=0", [[0, 0, 5, 6, 7], [0, 5, 6, 7, 8]], 0),
        ("pad_id=3, id 0 is a real token", [[0, 4, 3, 3], [4, 5, 0, 3]], 3),
        ("no padding, B=1", [[2, 4, 6]], 0),
    ]:
        ids = torch.tensor(rows)
        expected = padding_mask(ids, pad_id)  # (B, 1, 1, S)
        known = [
            (~expected, "True = may attend, i.e. a real token; you marked the PAD positions as True."),
            (lambda out, ids=ids: isinstance(out, Tensor) and tuple(out.shape) == tuple(ids.shape),
             "add two singleton axes, mask[:, None, None, :], so that the (B, 1, 1, S) mask broadcasts over heads "
             "and queries."),
            ((ids != pad_id)[:, None, :, None],
             "the padding hides keys, the last axis: (B, 1, 1, S), not (B, 1, S, 1)."),
            ((ids != 0)[:, None, None, :], "compare with pad_id, not with 0: the padding token's id is an argument."),
            (expected.float(),
             "return a bool mask (True = may attend): a 0/1 float added to the scores blocks nothing."),
        ]
        cases.append(Case(label, (ids, pad_id), _bool_judge(expected, "(B, 1, 1, S)"), mistakes=known))
    return cases


PADDING_MASK = Check(
    name="padding_mask",
    signature="fn(ids, pad_id) -> bool (B, 1, 1, S); ids (B, S) integer token ids; True = real token",
    description="the padding mask: hide PAD keys, broadcast over heads and queries",
    hint="(ids != pad_id)[:, None, None, :]",
    make_cases=_padding_cases,
)


def _window_cases() -> list[Case]:
    from companion.masks import sliding_window_mask

    cases = []
    for t, window in [(6, 3), (8, 2), (5, 1), (4, 4)]:
        expected = sliding_window_mask(t, window)
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]  # (T, 1) queries, (1, T) keys
        known = [
            ((i - j).abs() < window, "a decoder's window is causal: a query sees its W most recent positions, "
             "never a later one (j <= i)."),
            ((j <= i) & (j >= i - window), "that is W + 1 keys: the window holds W keys including the query "
             "itself, so j > i - W."),
            ((j < i) & (j >= i - window), "the query's own position is one of its W keys: keep the diagonal."),
            (~expected, "True = may attend; you returned True where a key is blocked."),
        ]
        cases.append(Case(f"t={t}, window={window}", (t, window), _bool_judge(expected, "(T, T)"), mistakes=known))
    return cases


SLIDING_WINDOW_MASK = Check(
    name="sliding_window_mask",
    signature="fn(t, window) -> bool (T, T); True = may attend",
    description="the causal sliding-window mask: query i sees keys i - W + 1 ... i",
    hint="j <= i and j > i - window, with i = torch.arange(t)[:, None] and j = torch.arange(t)[None, :].",
    make_cases=_window_cases,
)


def _combined_cases() -> list[Case]:
    from companion.masks import causal_mask, combine_masks, padding_mask

    cases = []
    for label, rows in [
        ("left padding", [[0, 0, 5, 6, 7], [5, 6, 7, 8, 9]]),
        ("right padding", [[5, 6, 7, 0, 0], [0, 5, 6, 7, 8]]),
        ("B=3, T=4", [[1, 2, 0, 0], [0, 1, 2, 3], [4, 4, 4, 4]]),
    ]:
        ids = torch.tensor(rows)
        t = ids.shape[1]
        causal, pad = causal_mask(t), padding_mask(ids, 0)  # (T, T), (B, 1, 1, T)
        expected = combine_masks(causal, pad).expand(ids.shape[0], 1, t, t)  # (B, 1, T, T)
        full = expected.shape
        known = [
            (_same_bool((causal | pad).expand(full)), "combine with AND (&), not OR: a key is visible only where "
             "both masks allow it."),
            (_same_bool(pad.expand(full)), "add the causal mask: a decoder's query must not see later keys."),
            (_same_bool(causal.expand(full)), "add the padding mask: with left padding the causal mask alone lets "
             "real tokens read the PADs before them."),
            (_same_bool((causal & (ids != 0)[:, None, :, None]).expand(full)),
             "the padding mask hides keys (the last axis), not queries: (B, 1, 1, S)."),
        ]
        judge = _bool_judge(expected, "(B, 1, T, T), or a shape that broadcasts to it", exact_shape=False)
        cases.append(Case(label, (ids, 0), judge, mistakes=known))
    return cases


CAUSAL_PADDING_MASK = Check(
    name="causal_padding_mask",
    signature="fn(ids, pad_id) -> bool mask broadcastable to (B, 1, T, T); ids (B, T); True = may attend",
    description="a decoder's combined mask: causal AND padding, one mask per sentence",
    hint="causal (T, T) & padding (B, 1, 1, T) broadcasts to (B, 1, T, T).",
    make_cases=_combined_cases,
)


def _receptive_field() -> int:
    """How many positions the last of 24 tokens can be influenced by through 5 layers with a window of 4."""
    from companion.masks import sliding_window_mask

    step = sliding_window_mask(24, 4).float()  # (T, T): 1 = can read directly
    reach = torch.eye(24)
    for _ in range(5):
        reach = (step @ reach).clamp(max=1)  # can read within one more layer
    return int(reach[-1].sum())


RECEPTIVE_FIELD = value_check(
    "receptive_field",
    _receptive_field,
    description="predict: positions the last of 24 tokens can be influenced by, window W = 4, L = 5 layers",
    hint="each layer lets a position read W - 1 positions further back than the layer below it could.",
    signature="an integer: the number of positions, the token itself included",
    mistakes={
        20: "W·L counts the query's own position once per layer; each layer adds only W - 1 new positions.",
        4: "that is a single layer; information read in layer 1 is passed on by layer 2, and so on.",
        15: "count the token itself too: L(W - 1) + 1.",
        24: "the reach grows by W - 1 per layer; 5 layers of W = 4 do not reach the whole sequence of 24.",
    },
    rtol=0.0,
    atol=0.5,
)

MASK_CONVENTION = choice_check(
    "mask_convention",
    "b",
    ("a", "b", "c", "d"),
    description="choose: a course mask (True = may attend) passed unchanged to nn.MultiheadAttention",
    hint="in nn.MultiheadAttention's attn_mask, True means the position is NOT allowed to attend.",
    mistakes={
        "a": "the two conventions are opposite: nn.MultiheadAttention's True means blocked, the course's and "
        "F.scaled_dot_product_attention's True means may attend.",
        "c": "a bool mask of the right shape is accepted without complaint; nothing checks its meaning.",
        "d": "a bool attn_mask is applied (True = blocked); only its meaning is reversed.",
    },
)

CHECKS = [CAUSAL_MASK, PADDING_MASK, SLIDING_WINDOW_MASK, CAUSAL_PADDING_MASK, RECEPTIVE_FIELD, MASK_CONVENTION]
