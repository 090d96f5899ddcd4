"""Tests for companion.positions: identities of each encoding, and equality with Hugging Face / Meta forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from companion import positions as P
from companion.scratch import positions as SP


def rope_pair(head_dim: int, seq_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * P.rope_frequencies(head_dim, base).double()
    return angles.cos().float(), angles.sin().float()  # (T, D_h/2) each


def rotate_at(x: torch.Tensor, position: int, pairing: str, head_dim: int = 16) -> torch.Tensor:
    """Rotate one vector x (D_h,) as if it sat at `position`."""
    cos, sin = rope_pair(head_dim, position + 1)
    return P.apply_rope(x[None], cos[position : position + 1], sin[position : position + 1], pairing)[0]


# --------------------------------------------------------------------------------------------------------
# Sinusoidal and learned
# --------------------------------------------------------------------------------------------------------


def test_sinusoidal_values_by_definition() -> None:
    pe = P.sinusoidal_encoding(50, 8)
    assert pe.shape == (50, 8) and pe.dtype == torch.float32
    assert_close(pe[0], torch.tensor([0.0, 1.0] * 4))  # position 0: sin 0 = 0, cos 0 = 1
    p, i = 7, 2
    angle = p / 10000 ** (2 * i / 8)
    assert_close(pe[p, 2 * i], torch.tensor(math.sin(angle)))
    assert_close(pe[p, 2 * i + 1], torch.tensor(math.cos(angle)))


@pytest.mark.parametrize("offset", [1, 5, 17])
def test_sinusoidal_relative_offset_is_a_rotation(offset: int) -> None:
    pe = P.sinusoidal_encoding(64, 32).double()
    R = P.relative_offset_matrix(offset, 32).double()
    assert_close(pe[offset:], pe[: 64 - offset] @ R.T, atol=1e-6, rtol=0)  # PE[p + k] = R_k PE[p], all p
    assert_close(R @ R.T, torch.eye(32, dtype=torch.float64), atol=1e-6, rtol=0)  # R_k is orthogonal


def test_sinusoidal_numpy_twin_equals_torch() -> None:
    assert_close(torch.from_numpy(SP.sinusoidal_encoding(40, 12)).float(), P.sinusoidal_encoding(40, 12))


def test_sinusoidal_rejects_odd_width() -> None:
    with pytest.raises(ValueError, match="d_model=7"):
        P.sinusoidal_encoding(10, 7)


def test_learned_embedding_rows_and_offset() -> None:
    torch.manual_seed(0)
    emb = P.LearnedPositionalEmbedding(16, 8)
    assert_close(emb(5), emb.weight[:5])
    assert_close(emb(3, offset=4), emb.weight[4:7])
    ids = torch.tensor([[0, 15], [3, 3]])
    assert emb(ids).shape == (2, 2, 8)
    emb(6).sum().backward()
    assert emb.weight.grad[:6].abs().sum() > 0 and emb.weight.grad[6:].abs().sum() == 0


def test_learned_embedding_rejects_positions_beyond_table() -> None:
    emb = P.LearnedPositionalEmbedding(16, 8)
    with pytest.raises(ValueError, match="position 16"):
        emb(17)
    with pytest.raises(ValueError, match="position 20"):
        emb(torch.tensor([1, 20]))
    with pytest.raises(ValueError, match="position -1"):
        emb(torch.tensor([-1, 2]))
    with pytest.raises(TypeError, match="integers"):
        emb(torch.tensor([1.0]))


# --------------------------------------------------------------------------------------------------------
# RoPE: properties of the rotation
# --------------------------------------------------------------------------------------------------------


def test_rope_frequency_table_is_base_power() -> None:
    d, base = 16, 500.0
    expected = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float32)
    assert_close(P.rope_frequencies(d, base), expected)


@pytest.mark.parametrize("pairing", ["half", "adjacent"])
def test_rope_preserves_norm(pairing: str) -> None:
    torch.manual_seed(0)
    rope = P.RotaryEmbedding(32, max_seq_len=64, pairing=pairing)
    x = torch.randn(2, 3, 64, 32)  # (B, H, T, D_h)
    assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("pairing", ["half", "adjacent"])
def test_rope_position_zero_is_identity(pairing: str) -> None:
    torch.manual_seed(0)
    rope = P.RotaryEmbedding(16, max_seq_len=8, pairing=pairing)
    x = torch.randn(1, 2, 4, 16)
    assert_close(rope(x)[..., 0, :], x[..., 0, :])
    assert not torch.allclose(rope(x)[..., 1, :], x[..., 1, :])  # position 1 does rotate


@pytest.mark.parametrize("pairing", ["half", "adjacent"])
def test_rope_dot_product_depends_only_on_offset(pairing: str) -> None:
    torch.manual_seed(0)
    q, k = torch.randn(16), torch.randn(16)
    for shift in (0, 7, 40):
        scores = [rotate_at(q, m + shift, pairing) @ rotate_at(k, m + shift + 3, pairing) for m in (0, 11)]
        assert_close(scores[0], scores[1], atol=1e-4, rtol=1e-4)
        assert_close(scores[0], rotate_at(q, 0, pairing) @ rotate_at(k, 3, pairing), atol=1e-4, rtol=1e-4)


def test_buggy_mixed_pairing_breaks_the_relative_property() -> None:
    """The classic bug: cos/sin repeated for adjacent pairs (repeat_interleave) but halves rotated."""

    def buggy_rope(x: torch.Tensor, position: int) -> torch.Tensor:
        cos, sin = rope_pair(16, position + 1)
        # cos laid out for adjacent pairs, (D_h,): c0 c0 c1 c1 ...
        cos, sin = cos[position].repeat_interleave(2), sin[position].repeat_interleave(2)
        rotated_half = torch.cat((-x[8:], x[:8]))  # HF's rotate_half
        return x * cos + rotated_half * sin

    torch.manual_seed(0)
    q, k = torch.randn(16), torch.randn(16)
    near = buggy_rope(q, 0) @ buggy_rope(k, 3)
    far = buggy_rope(q, 20) @ buggy_rope(k, 23)  # same offset n - m = 3
    assert (near - far).abs() > 1e-2, "the buggy version should depend on the absolute position"
    assert (buggy_rope(q, 5).norm() - q.norm()).abs() > 1e-3, "and it is not even a rotation"


def test_pairings_differ_by_a_fixed_permutation() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    cos, sin = rope_pair(16, 5)
    perm = torch.cat((torch.arange(0, 16, 2), torch.arange(1, 16, 2)))  # evens first, then odds
    half_of_permuted = P.apply_rope(x[..., perm], cos, sin, "half")
    assert_close(half_of_permuted, P.apply_rope(x, cos, sin, "adjacent")[..., perm])
    assert not torch.allclose(P.apply_rope(x, cos, sin, "half"), P.apply_rope(x, cos, sin, "adjacent"))


# --------------------------------------------------------------------------------------------------------
# RoPE: equality with the reference implementations
# --------------------------------------------------------------------------------------------------------


def test_half_pairing_equals_hugging_face_apply_rotary_pos_emb() -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 10, 32), torch.randn(2, 2, 10, 32)  # (B, H, T, D_h), (B, H_kv, T, D_h)
    cos, sin = rope_pair(32, 10)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, torch.cat((cos, cos), -1)[None], torch.cat((sin, sin), -1)[None])
    assert_close(P.apply_rope(q, cos, sin, "half"), hf_q)
    assert_close(P.apply_rope(k, cos, sin, "half"), hf_k)


def test_adjacent_pairing_equals_complex_multiplication() -> None:
    """Meta's Llama reference: view pairs as complex numbers and multiply by e^{i m θ}."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 10, 32)  # (B, H, T, D_h)
    angles = torch.arange(10)[:, None].float() * P.rope_frequencies(32)  # (T, D_h/2)
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    x_complex = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    expected = torch.view_as_real(x_complex * freqs_cis).flatten(-2)
    assert_close(P.apply_rope(x, angles.cos(), angles.sin(), "adjacent"), expected)


def llama_config(rope_parameters: dict, max_position_embeddings: int = 4096, head_dim: int = 32):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_theta": 10000.0, **rope_parameters},
    )  # fmt: skip


@pytest.mark.parametrize("factor", [2.0, 8.0])
def test_linear_scaling_equals_hugging_face(factor: float) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf, _ = ROPE_INIT_FUNCTIONS["linear"](llama_config({"rope_type": "linear", "factor": factor}), "cpu")
    assert_close(P.rope_frequencies(32, scaling="linear", factor=factor), hf)
    assert_close(P.rope_frequencies(32, scaling="linear", factor=factor), P.rope_frequencies(32) / factor)


@pytest.mark.parametrize("seq_len", [1024, 3000, 8192])
def test_dynamic_ntk_equals_hugging_face(seq_len: int) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = llama_config({"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=1024)
    hf, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=seq_len)
    ours = P.rope_frequencies(32, scaling="dynamic", factor=4.0, original_max_seq_len=1024, seq_len=seq_len)
    assert_close(ours, hf)


@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_static_ntk_equals_dynamic_ntk_at_the_matching_length(factor: float) -> None:
    """HF's dynamic NTK with factor 1 at length factor * L uses base * factor^(d/(d-2)): our static "ntk"."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = llama_config({"rope_type": "dynamic", "factor": 1.0}, max_position_embeddings=1024)
    hf, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=int(factor * 1024))
    ours = P.rope_frequencies(32, scaling="ntk", factor=factor)
    assert_close(ours, hf)
    assert_close(ours, P.rope_frequencies(32, base=10000.0 * factor ** (32 / 30)))
    assert_close(ours[0], torch.tensor(1.0))  # the fastest pair is untouched


@pytest.mark.parametrize("factor,original,beta_fast,beta_slow", [(4.0, 1024, 32, 1), (16.0, 2048, 16, 2)])
def test_yarn_equals_hugging_face(factor: float, original: int, beta_fast: float, beta_slow: float) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original,
              "beta_fast": beta_fast, "beta_slow": beta_slow}  # fmt: skip
    config = llama_config(params, int(factor * original), head_dim=64)
    hf, hf_attention = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    ours = P.rope_frequencies(
        64, scaling="yarn", factor=factor, original_max_seq_len=original,
        beta_fast=beta_fast, beta_slow=beta_slow,
    )  # fmt: skip
    assert_close(ours, hf)
    assert P.yarn_attention_factor(factor) == pytest.approx(hf_attention)
    plain = P.rope_frequencies(64)
    assert_close(ours[0], plain[0])  # fastest pair: extrapolated (kept)
    assert_close(ours[-1], plain[-1] / factor)  # slowest pair: interpolated


@pytest.mark.parametrize(
    "scaling,extra",
    [
        (None, {}),
        ("linear", {"factor": 4.0}),
        ("yarn", {"factor": 4.0, "original_max_position_embeddings": 256}),
    ],
)
def test_rotary_embedding_tables_equal_llama_rotary_embedding(scaling: str | None, extra: dict) -> None:
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    hf = LlamaRotaryEmbedding(llama_config({"rope_type": scaling or "default", **extra}, 1024))
    x = torch.zeros(1, 1024, 32)
    hf_cos, hf_sin = hf(x, torch.arange(1024)[None])  # (1, T, D_h), halves repeated
    ours = P.RotaryEmbedding(32, max_seq_len=1024, scaling=scaling, factor=extra.get("factor", 1.0),
                             original_max_seq_len=extra.get("original_max_position_embeddings"))  # fmt: skip
    cos, sin = ours.cos_sin(1024)
    assert_close(torch.cat((cos, cos), -1), hf_cos[0], atol=1e-4, rtol=0)  # HF: float32 angles up to 1023 rad
    assert_close(torch.cat((sin, sin), -1), hf_sin[0], atol=2e-4, rtol=0)


def test_rotary_embedding_offset_matches_full_sequence() -> None:
    torch.manual_seed(0)
    rope = P.RotaryEmbedding(16, max_seq_len=32)
    x = torch.randn(1, 2, 10, 16)
    # KV-cache decoding: the last 4 tokens alone, at offset 6, get the same rotation as in the full sequence
    assert_close(rope(x[..., 6:, :], offset=6), rope(x)[..., 6:, :])


def test_rotary_embedding_caches_are_non_persistent_buffers() -> None:
    rope = P.RotaryEmbedding(16, max_seq_len=32)
    buffers = dict(rope.named_buffers())
    assert {"cos_cached", "sin_cached"} <= set(buffers) and buffers["cos_cached"].shape == (32, 8)
    assert rope.state_dict() == {}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_half_precision(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    rope = P.RotaryEmbedding(32, max_seq_len=64)
    x = torch.randn(2, 2, 64, 32)
    out = rope(x.to(dtype))
    assert out.dtype == dtype
    assert_close(out.float(), rope(x.to(dtype).float()), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("pairing", ["half", "adjacent"])
def test_rope_numpy_twin_equals_torch(pairing: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 12, 16))
    cos, sin = SP.rope_cos_sin(12, 16)
    expected = P.apply_rope(torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin), pairing)
    assert_close(torch.from_numpy(SP.apply_rope(x, cos, sin, pairing)), expected)
    assert_close(torch.from_numpy(cos).float(), rope_pair(16, 12)[0])


def test_rope_bad_inputs() -> None:
    with pytest.raises(ValueError, match="head_dim=15"):
        P.RotaryEmbedding(15)
    with pytest.raises(ValueError, match="head_dim=7"):
        P.rope_frequencies(7)
    rope = P.RotaryEmbedding(16, max_seq_len=8)
    with pytest.raises(ValueError, match="max_seq_len=8"):
        rope(torch.randn(1, 1, 9, 16))
    with pytest.raises(ValueError, match="offset=5"):
        rope(torch.randn(1, 1, 4, 16), offset=5)
    with pytest.raises(ValueError, match="D_h=16"):
        rope(torch.randn(1, 1, 4, 8))
    with pytest.raises(ValueError, match="pairing='interleaved'"):
        P.RotaryEmbedding(16, pairing="interleaved")
    with pytest.raises(ValueError, match="scaling='ntk-by-parts'"):
        P.rope_frequencies(16, scaling="ntk-by-parts")
    with pytest.raises(ValueError, match="original_max_seq_len"):
        P.rope_frequencies(16, scaling="yarn", factor=4.0)
    with pytest.raises(ValueError, match="factor=0.5"):
        P.rope_frequencies(16, scaling="linear", factor=0.5)
    cos, sin = rope_pair(16, 4)
    with pytest.raises(ValueError, match="cos.shape"):
        P.apply_rope(torch.randn(4, 16), cos[:, :4], sin[:, :4])
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        P.apply_rope(np.zeros((4, 16)), cos, sin)


# --------------------------------------------------------------------------------------------------------
# ALiBi
# --------------------------------------------------------------------------------------------------------


def test_alibi_slopes_for_eight_heads() -> None:
    assert_close(P.alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))


def test_alibi_slopes_non_power_of_two() -> None:
    """12 heads: the 8-head slopes, then the 1st, 3rd, 5th, 7th slopes of the 16-head sequence."""
    sixteen = P.alibi_slopes(16)
    assert_close(P.alibi_slopes(12), torch.cat((P.alibi_slopes(8), sixteen[0:8:2])))
    assert_close(sixteen[0:8:2], torch.tensor([2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]))
    assert P.alibi_slopes(1).tolist() == [2.0**-8]


def test_alibi_bias_is_minus_slope_times_distance() -> None:
    bias = P.alibi_bias(4, 5)
    assert bias.shape == (4, 5, 5)
    slopes = P.alibi_slopes(4)
    assert_close(bias.diagonal(dim1=-2, dim2=-1), torch.zeros(4, 5))
    assert_close(bias[:, 4, 1], -3 * slopes)  # query 4, key 1: distance 3
    assert_close(bias, bias.transpose(-1, -2))  # future keys get the same penalty; causal mask is separate
    with pytest.raises(ValueError, match="n_heads=0"):
        P.alibi_slopes(0)
