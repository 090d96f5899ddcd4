"""Checks for chapters 5 and 7: the causal mask, sinusoidal encodings and RoPE (both pairings).

References: :func:`companion.masks.causal_mask`, :func:`companion.positions.sinusoidal_encoding`,
:func:`companion.positions.rope_frequencies` and :func:`companion.positions.apply_rope`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, compare, seeded

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


def _sinusoidal_cases() -> list[Case]:
    from companion.positions import sinusoidal_encoding

    cases = []
    for seq_len, d_model in [(1, 4), (10, 16), (50, 64), (7, 6)]:
        pe = sinusoidal_encoding(seq_len, d_model)
        halves = torch.cat((pe[:, 0::2], pe[:, 1::2]), dim=-1)  # (T, D): all sines, then all cosines
        from_one = sinusoidal_encoding(seq_len + 1, d_model)[1:]  # (T, D): positions 1 .. T
        known = [
            (halves, "interleave: PE[p, 2i] = sin and PE[p, 2i+1] = cos; you put all the sines first, "
             "then all the cosines."),
            (from_one, "positions start at 0 (torch.arange(seq_len)), not at 1."),
        ]
        cases.append(Case(f"seq_len={seq_len}, d_model={d_model}", (seq_len, d_model), pe, mistakes=known))
    return cases


SINUSOIDAL = Check(
    name="sinusoidal_encoding",
    signature="fn(seq_len, d_model) -> (T, D) float32 table, positions 0 ... T-1",
    description="the fixed sin/cos position table of Vaswani et al. (2017)",
    hint="PE[p, 2i] = sin(p / 10000^(2i/d_model)) and PE[p, 2i+1] = cos(p / 10000^(2i/d_model)); "
    "the exponent uses the even column index 2i, shared by the sin/cos pair.",
    make_cases=_sinusoidal_cases,
    atol=1e-4,
)


def _rope_cases(pairing: str) -> list[Case]:
    from companion.positions import apply_rope, rope_frequencies

    other = "half" if pairing == "adjacent" else "adjacent"
    other_check = "rope_half" if pairing == "adjacent" else "rope"
    layout = {
        "adjacent": "adjacent pairs (x[2i], x[2i+1]), with cos/sin repeat_interleave(2) to width D_h",
        "half": "pairs (x[i], x[i + D_h/2]), with cos/sin torch.cat([c, c]) to width D_h and rotate_half",
    }
    mixed = (
        f"you mixed the two pairings; this check wants {layout[pairing]}. Lay out cos/sin the way you pair "
        "the coordinates: repeat_interleave goes with adjacent pairs, cat([c, c]) with halves."
    )
    g = seeded(5)
    cases = []
    for label, t, d_h, start in [
        ("T=4, D_h=8", 4, 8, 0),
        ("position 0 only", 1, 8, 0),
        ("positions 5 ... 9", 5, 8, 5),
        ("T=6, D_h=64", 6, 64, 0),
    ]:
        x = torch.randn(t, d_h, generator=g)
        positions = torch.arange(start, start + t)
        angles = positions[:, None].float() * rope_frequencies(d_h)[None, :]  # (T, D_h/2): m θ_i
        cos, sin = angles.cos(), angles.sin()
        # The classic mixed-up versions: cos/sin laid out for one pairing, coordinates rotated in the other.
        c_inter, s_inter = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)  # (T, D_h)
        c_cat, s_cat = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (T, D_h)
        x1, x2 = x[:, : d_h // 2], x[:, d_h // 2 :]
        rot_half = torch.cat((-x2, x1), -1)  # (T, D_h)
        rot_adj = torch.stack((-x[:, 1::2], x[:, 0::2]), -1).flatten(-2)  # (T, D_h)
        known = [
            (apply_rope(x, cos, sin, pairing=other), f"that is the '{other}' pairing; this check wants "
             f"{layout[pairing]}. (check('{other_check}', fn) tests the other convention.)"),
            (x * c_inter + rot_half * s_inter, mixed),
            (x * c_cat + rot_adj * s_cat, mixed),
        ]
        expected = apply_rope(x, cos, sin, pairing=pairing)
        cases.append(Case(label, (x, positions), expected, mistakes=known))
    return cases


_ROPE_SIGNATURE = "fn(x, positions) -> Tensor; x (T, D_h), positions (T,) int64; θ_i = 10000^(-2i/D_h)"

ROPE = Check(
    name="rope",
    signature=_ROPE_SIGNATURE + "; pairs (x[2i], x[2i+1]) as in RoFormer",
    description="rotary position embedding, adjacent pairs (RoFormer paper, original Llama code)",
    hint="rotate pair i = (x[2i], x[2i+1]) by the angle m·θ_i: (a, b) -> (a cos - b sin, a sin + b cos).",
    make_cases=lambda: _rope_cases("adjacent"),
    atol=1e-4,
)

ROPE_HALF = Check(
    name="rope_half",
    signature=_ROPE_SIGNATURE + "; pairs (x[i], x[i + D_h/2]) as in GPT-NeoX / Hugging Face Llama",
    description="rotary position embedding, half pairing (rotate_half)",
    hint="x * cat([cos, cos]) + rotate_half(x) * cat([sin, sin]) with rotate_half(x) = cat([-x2, x1]).",
    make_cases=lambda: _rope_cases("half"),
    atol=1e-4,
)

CHECKS = [CAUSAL_MASK, SINUSOIDAL, ROPE, ROPE_HALF]
