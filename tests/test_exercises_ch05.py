"""Chapter 5's exercise checks: a right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import math

import torch

from companion.exercises.testing import assert_fails, assert_passes


def sinusoidal_ok(seq_len, d_model, start=0, exponent_step=2):
    p = torch.arange(start, start + seq_len, dtype=torch.float64)[:, None]
    w = 10000 ** (-exponent_step * torch.arange(d_model // 2 + d_model % 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(p * w)
    pe[:, 1::2] = torch.cos(p * w)[:, : d_model // 2]
    return pe.float()


def test_sinusoidal_encoding() -> None:
    assert_passes("sinusoidal_encoding", sinusoidal_ok)
    assert_fails("sinusoidal_encoding", lambda t, d: sinusoidal_ok(t, d, start=1), "start at 0")

    def swapped(t, d):
        pe = sinusoidal_ok(t, d)
        return pe.view(t, -1, 2).flip(-1).reshape(t, d)

    def halves(t, d):
        pe = sinusoidal_ok(t, d)
        return torch.cat((pe[:, 0::2], pe[:, 1::2]), -1)

    assert_fails("sinusoidal_encoding", swapped, "swapped")
    assert_fails("sinusoidal_encoding", halves, "all the sines first")
    assert_fails("sinusoidal_encoding", lambda t, d: sinusoidal_ok(t, d, exponent_step=1), "i/d_model")


def test_pe_dot_product() -> None:
    assert_passes("pe_dot_product", math.cos(2) + math.cos(0.02))
    assert_passes("pe_dot_product", 0.58)
    assert_fails("pe_dot_product", 2.0, "offset 0")
    assert_fails("pe_dot_product", math.cos(2), "only the first pair")
    assert_fails("pe_dot_product", math.sin(2) + math.sin(0.02), "sin(k ω_i)")


def rope_ok(x, positions):
    d_h = x.shape[-1]
    ang = positions[:, None].double() * 10000 ** (-torch.arange(0, d_h, 2, dtype=torch.float64) / d_h)
    c, s = ang.cos(), ang.sin()
    a, b = x[:, 0::2].double(), x[:, 1::2].double()
    return torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2).float()


def rope_half_ok(x, positions):
    d_h = x.shape[-1]
    ang = positions[:, None].double() * 10000 ** (-torch.arange(0, d_h, 2, dtype=torch.float64) / d_h)
    c, s = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
    x1, x2 = x[:, : d_h // 2].double(), x[:, d_h // 2 :].double()
    return (x.double() * c + torch.cat((-x2, x1), -1) * s).float()


def rope_mixed(x, positions):
    d_h = x.shape[-1]
    ang = positions[:, None].double() * 10000 ** (-torch.arange(0, d_h, 2, dtype=torch.float64) / d_h)
    c, s = ang.cos().repeat_interleave(2, -1), ang.sin().repeat_interleave(2, -1)
    x1, x2 = x[:, : d_h // 2].double(), x[:, d_h // 2 :].double()
    return (x.double() * c + torch.cat((-x2, x1), -1) * s).float()


def test_rope_both_pairings() -> None:
    assert_passes("rope", rope_ok)
    assert_passes("rope_half", rope_half_ok)
    assert_fails("rope", rope_half_ok, "'half' pairing")
    assert_fails("rope_half", rope_ok, "'adjacent' pairing")
    assert_fails("rope", rope_mixed, "mixed the two pairings")
    assert_fails("rope_half", rope_mixed, "mixed the two pairings")


def slopes_ok(n_heads):
    def geometric(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    p = 2 ** int(math.log2(n_heads))
    return torch.tensor(geometric(p) + geometric(2 * p)[0::2][: n_heads - p])


def test_alibi_slopes() -> None:
    assert_passes("alibi_slopes", slopes_ok)
    assert_fails("alibi_slopes", lambda h: torch.tensor([2.0 ** (-8.0 * k / h) for k in range(h)]), "not 2^0 = 1")
    assert_fails("alibi_slopes", lambda h: slopes_ok(h).flip(0), "steepest slope")
    assert_fails("alibi_slopes", lambda h: torch.tensor([2.0 ** -(k + 1) for k in range(h)]), "8-head sequence")
    assert_fails(
        "alibi_slopes", lambda h: torch.tensor([2.0 ** (-8.0 * (k + 1) / h) for k in range(h)]), "not a power of two"
    )


def test_yarn_kept_pairs() -> None:
    # pair i turns 4096 · 10000^(-2i/64) / (2π) times; kept if >= 32: i <= 10, so 11 pairs
    turns = [4096 * 10000 ** (-2 * i / 64) / (2 * math.pi) for i in range(32)]
    kept = sum(t >= 32 for t in turns)
    assert_passes("yarn_kept_pairs", kept)
    assert_fails("yarn_kept_pairs", kept - 1, "index of the last kept pair")
    assert_fails("yarn_kept_pairs", sum(t < 1 for t in turns), "interpolates fully")
    assert_fails("yarn_kept_pairs", 32 - kept, "pairs YaRN changes")
    assert_fails("yarn_kept_pairs", 2 * kept, "coordinates")
