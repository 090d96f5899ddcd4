"""Chapter 5 (positions) checks: sinusoidal encodings, their dot products, RoPE (both pairings), ALiBi's
slopes and the pairs YaRN keeps.

References: :func:`companion.positions.sinusoidal_encoding`, :func:`companion.positions.rope_frequencies`,
:func:`companion.positions.apply_rope` and :func:`companion.positions.alibi_slopes`.
"""

from __future__ import annotations

import torch

from companion.exercises._runner import Case, Check, seeded, value_check

CHAPTER = "05_positions"


def _exponent_i(seq_len: int, d_model: int) -> torch.Tensor:
    """The classic slip: omega_i = 10000^(-i/d) with i the pair index, instead of 10000^(-2i/d)."""
    p = torch.arange(seq_len, dtype=torch.float64)[:, None]  # (T, 1)
    w = 10000 ** (-torch.arange(d_model // 2, dtype=torch.float64) / d_model)  # (D/2,)
    return torch.stack((torch.sin(p * w), torch.cos(p * w)), -1).reshape(seq_len, -1)[:, :d_model].float()


def _sinusoidal_cases() -> list[Case]:
    from companion.positions import sinusoidal_encoding

    cases = []
    for seq_len, d_model in [(1, 4), (10, 16), (50, 64), (7, 6)]:
        pe = sinusoidal_encoding(seq_len, d_model)
        halves = torch.cat((pe[:, 0::2], pe[:, 1::2]), dim=-1)  # (T, D): all sines, then all cosines
        from_one = sinusoidal_encoding(seq_len + 1, d_model)[1:]  # (T, D): positions 1 .. T
        known = [
            (
                halves,
                "interleave: PE[p, 2i] = sin and PE[p, 2i+1] = cos; you put all the sines first, then all the cosines.",
            ),
            (from_one, "positions start at 0 (torch.arange(seq_len)), not at 1."),
            (
                sinusoidal_encoding(seq_len, d_model).view(seq_len, -1, 2).flip(-1).reshape(seq_len, d_model),
                "sin and cos are swapped: the even column 2i holds sin, the odd column 2i+1 holds cos.",
            ),
            (
                _exponent_i(seq_len, d_model),
                "the exponent uses the even column index 2i over d_model (i is the pair index); "
                "you used i/d_model, so the frequencies fall too slowly.",
            ),
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
            (
                apply_rope(x, cos, sin, pairing=other),
                f"that is the '{other}' pairing; this check wants "
                f"{layout[pairing]}. (check('{other_check}', fn) tests the other convention.)",
            ),
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


# ---------------------------------------------------------------- predict: a dot product of two codes
def _pe_dot() -> float:
    from companion.positions import sinusoidal_encoding

    pe = sinusoidal_encoding(8, 4).double()  # d_model = 4: omega = 1 and 0.01
    return float(pe[5] @ pe[7])


PE_DOT = value_check(
    "pe_dot_product",
    _pe_dot,
    description="PE_5 · PE_7 for the sinusoidal encoding with d_model = 4",
    hint="PE_p · PE_(p+k) = Σ_i cos(k ω_i), with k = 2 and ω = (1, 0.01) for d_model = 4.",
    signature="a number",
    mistakes={
        2.0: "that is PE_p · PE_p = d_model / 2 (offset 0); here the offset is k = 2.",
        -0.4161468: "cos(2) is only the first pair; the second pair (ω_1 = 0.01) adds cos(0.02) ≈ 1.",
        0.9292974: "you summed sin(k ω_i); the dot product is Σ cos(k ω_i) (sin·sin + cos·cos = cos of the "
        "difference).",
    },
    rtol=0.01,
    atol=0.005,
)

# ---------------------------------------------------------------- write: ALiBi's slopes


def _alibi_cases() -> list[Case]:
    from companion.positions import alibi_slopes

    cases = []
    for h in (8, 4, 16, 12, 6):
        right = alibi_slopes(h)
        from_one = torch.tensor([2.0 ** (-8.0 * k / h) for k in range(h)])  # starts at 2^0 = 1
        halves = torch.tensor([2.0 ** -(k + 1) for k in range(h)])  # 1/2, 1/4, ... whatever H is
        plain = torch.tensor([2.0 ** (-8.0 * (k + 1) / h) for k in range(h)])  # the power-of-two rule for any H
        mistakes = [
            (from_one, "the first slope is 2^(-8/H), not 2^0 = 1: count the heads from 1 in 2^(-8h/H)."),
            (right.flip(0), "the slopes decrease: head 0 gets the steepest slope 2^(-8/H)."),
        ]
        if h != 8:
            mistakes.append(
                (
                    halves,
                    "1/2, 1/4, ... is the 8-head sequence; the ratio is 2^(-8/H), so the slopes "
                    "depend on the head count.",
                )
            )
        if h & (h - 1):
            mistakes.append(
                (
                    plain,
                    f"{h} is not a power of two: take the slopes of the largest power of two "
                    "below it, then every other slope of the sequence for twice that many heads.",
                )
            )
        cases.append(Case(f"{h} heads", (h,), right, mistakes=mistakes))
    return cases


ALIBI_SLOPES = Check(
    name="alibi_slopes",
    signature="fn(n_heads) -> Tensor (H,) float32",
    description="ALiBi's per-head slopes m_h (Press et al. 2022), any head count",
    hint="for H a power of two: m_h = 2^(-8h/H) for h = 1 ... H; otherwise the slopes of the largest power "
    "of two p < H, then the 1st, 3rd, 5th, ... slopes of the 2p-head sequence until there are H.",
    make_cases=_alibi_cases,
    atol=1e-6,
)

# ---------------------------------------------------------------- predict: the pairs YaRN keeps


def _yarn_kept() -> int:
    from companion.positions import rope_frequencies

    scaled = rope_frequencies(64, scaling="yarn", factor=8.0, original_max_seq_len=4096)
    return int((scaled == rope_frequencies(64)).sum())  # pairs whose frequency is left alone


YARN_KEPT = value_check(
    "yarn_kept_pairs",
    _yarn_kept,
    description="how many of the 32 pairs YaRN leaves unchanged for D_h = 64, base 10,000, s = 8, original "
    "context 4,096, beta_fast = 32",
    hint="pair i makes 4096·θ_i / (2π) turns over the original context; YaRN keeps the pairs with at least "
    "beta_fast = 32 turns, θ_i = 10000^(-2i/64).",
    signature="a whole number of pairs",
    mistakes={
        10: "that is the index of the last kept pair; pairs are counted from 0, so add one.",
        9: "you counted the pairs YaRN interpolates fully (fewer than beta_slow = 1 turn); the question is the "
        "pairs it keeps (at least beta_fast = 32 turns).",
        21: "you counted the pairs YaRN changes; the question is the pairs it leaves alone.",
        22: "you counted coordinates; a pair is two coordinates.",
    },
    rtol=0.0,
    atol=0.5,
)

CHECKS = [SINUSOIDAL, PE_DOT, ROPE, ROPE_HALF, ALIBI_SLOPES, YARN_KEPT]
