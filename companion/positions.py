"""Position information for attention: sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention by itself is permutation-equivariant: shuffle the tokens and the outputs shuffle with them.
This module gives the model a sense of order, in the four ways the course compares:

- ``sinusoidal_encoding``: fixed sin/cos table added to the embeddings (Vaswani et al. 2017, §3.5).
  ``relative_offset_matrix`` builds the rotation ``R_k`` with ``PE[p + k] = R_k @ PE[p]``.
- ``LearnedPositionalEmbedding``: a trained table, one row per position (GPT-2, BERT).
- ``rope_frequencies`` / ``apply_rope`` / ``RotaryEmbedding``: rotary position embedding (Su et al. 2021,
  RoFormer), with context extension by Position Interpolation (Chen et al. 2023), NTK-aware base scaling
  (bloc97 2023), its dynamic variant, and YaRN (Peng et al. 2023).
- ``alibi_slopes`` / ``alibi_bias``: attention with linear biases (Press et al. 2022).

Checked against: Hugging Face ``transformers`` (``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` for the
linear / dynamic / YaRN frequencies, ``modeling_llama.apply_rotary_pos_emb`` and ``LlamaRotaryEmbedding``
for the "half" pairing), Meta's Llama reference (complex multiplication) for the "adjacent" pairing, and
the ALiBi paper's slope rule. Left out on purpose: partial rotary dimensions, LongRoPE, Llama-3 scaling.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from companion._checks import check_choice, check_positive_int, check_tensor

__all__ = [
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "relative_offset_matrix",
    "rope_frequencies",
    "sinusoidal_encoding",
    "yarn_attention_factor",
]

PAIRINGS = ("half", "adjacent")
SCALINGS = (None, "linear", "ntk", "dynamic", "yarn")


def _check_even(name: str, value: int) -> None:
    check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name}={value} is odd; expected an even number (dimensions come in sin/cos pairs)")


# ---------------------------------------------------------------------------------------------------------
# Sinusoidal and learned absolute positions
# ---------------------------------------------------------------------------------------------------------


def sinusoidal_encoding(seq_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The fixed table ``PE[p, 2i] = sin(p / base^(2i/D))``, ``PE[p, 2i+1] = cos(p / base^(2i/D))``.

    Positions run from 0 to ``seq_len - 1``. Computed in float64, returned as float32.

    Shapes:
        returns (T, D) with T = seq_len, D = d_model
    """
    check_positive_int("seq_len", seq_len)
    _check_even("d_model", d_model)
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    angles = positions * inv_freq  # (T, D/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (T, D): sin, cos, sin, cos, ...
    return pe.float()


def relative_offset_matrix(offset: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The block-diagonal rotation ``R_k`` (k = ``offset``) with ``PE[p + k] = R_k @ PE[p]`` for every p.

    Each (sin, cos) pair turns by the angle ``k * θ_i``: ``sin(a + b) = sin a cos b + cos a sin b`` and
    ``cos(a + b) = cos a cos b - sin a sin b``. ``R_k`` does not depend on p, which is why Vaswani et al.
    hoped the model could attend by relative position.

    Shapes:
        returns (D, D)
    """
    _check_even("d_model", d_model)
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    c, s = (offset * inv_freq).cos(), (offset * inv_freq).sin()
    blocks = torch.stack((torch.stack((c, s), -1), torch.stack((-s, c), -1)), -2)  # (D/2, 2, 2)
    return torch.block_diag(*blocks).float()


class LearnedPositionalEmbedding(nn.Module):
    """A trained table with one row per position, as in GPT-2 and BERT (``.weight`` is (max_seq_len, D)).

    It cannot represent a position it has no row for: asking for one raises ``ValueError``.
    """

    def __init__(self, max_seq_len: int, d_model: int) -> None:
        super().__init__()
        check_positive_int("max_seq_len", max_seq_len)
        check_positive_int("d_model", d_model)
        self.max_seq_len = max_seq_len
        self.d_model = d_model
        self.weight = nn.Parameter(torch.randn(max_seq_len, d_model) * 0.02)  # GPT-2's init

    def forward(self, positions: int | Tensor, *, offset: int = 0) -> Tensor:
        """Rows for ``offset .. offset + T - 1`` when ``positions`` is an int T, else for the given positions.

        Shapes:
            positions: int T -> returns (T, D);  integer tensor (...) -> returns (..., D)
        """
        if isinstance(positions, int) and not isinstance(positions, bool):
            check_positive_int("positions", positions)
            check_positive_int("offset", offset, allow_zero=True)
            positions = torch.arange(offset, offset + positions, device=self.weight.device)  # (T,)
        check_tensor("positions", positions)
        if positions.is_floating_point() or positions.dtype == torch.bool:
            raise TypeError(f"positions must hold integers, got dtype {positions.dtype}")
        high, low = int(positions.max()), int(positions.min())
        if high >= self.max_seq_len or low < 0:
            bad = high if high >= self.max_seq_len else low
            raise ValueError(
                f"position {bad} is outside the learned table; "
                f"expected 0 <= position < max_seq_len={self.max_seq_len}"
            )
        return self.weight[positions]  # (..., D)

    def extra_repr(self) -> str:
        return f"max_seq_len={self.max_seq_len}, d_model={self.d_model}"


# ---------------------------------------------------------------------------------------------------------
# RoPE: frequencies, context-extension scaling, and the rotation itself
# ---------------------------------------------------------------------------------------------------------


def yarn_attention_factor(factor: float) -> float:
    """YaRN's attention temperature ``0.1 ln(factor) + 1`` (1 when factor <= 1); it multiplies cos and sin."""
    return 1.0 if factor <= 1.0 else 0.1 * math.log(factor) + 1.0


def rope_frequencies(
    head_dim: int,
    base: float = 10000.0,
    *,
    scaling: str | None = None,
    factor: float = 1.0,
    original_max_seq_len: int | None = None,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    seq_len: int | None = None,
    truncate: bool = True,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Rotation speeds ``θ_i = base^(-2i / D_h)`` for pairs i = 0 .. D_h/2 - 1, optionally rescaled.

    scaling:
        None       the RoFormer frequencies.
        "linear"   Position Interpolation: positions are divided by ``factor``, i.e. every θ_i / factor.
        "ntk"      NTK-aware: keep the fastest pair, stretch the slowest ones, by raising the base to
                   ``base * factor^(D_h / (D_h - 2))``.
        "dynamic"  NTK with a factor that grows with the current length ``seq_len`` (HF's "dynamic"):
                   ``base * (factor * seq_len / original_max_seq_len - (factor - 1))^(D_h / (D_h - 2))``,
                   unchanged while ``seq_len <= original_max_seq_len``.
        "yarn"     per pair, interpolate (θ_i / factor) the slow pairs that turn fewer than ``beta_slow``
                   times over the original context, keep the fast ones that turn more than ``beta_fast``
                   times, and ramp linearly in between. Pair with ``yarn_attention_factor(factor)``.

    Computed in float64, returned in ``dtype``. Equal to ``transformers.modeling_rope_utils`` (tested).

    Shapes:
        returns (D_h/2,)
    """
    _check_even("head_dim", head_dim)
    if head_dim < 4 and scaling in ("ntk", "dynamic"):
        raise ValueError(f"head_dim={head_dim} is too small for NTK scaling; expected head_dim >= 4")
    if not base > 1.0:
        raise ValueError(f"base={base} is invalid; expected a number > 1")
    check_choice("scaling", scaling, SCALINGS)
    if scaling is not None and not factor >= 1.0:
        raise ValueError(f"factor={factor} is invalid for scaling={scaling!r}; expected factor >= 1")
    if scaling in ("dynamic", "yarn"):
        if original_max_seq_len is None:
            raise ValueError(f"scaling={scaling!r} needs original_max_seq_len (the pre-training context)")
        check_positive_int("original_max_seq_len", original_max_seq_len)

    d = head_dim
    exponents = torch.arange(0, d, 2, dtype=torch.float64) / d  # (D_h/2,): 2i / D_h
    if scaling == "ntk":
        base = base * factor ** (d / (d - 2))
    elif scaling == "dynamic":
        length = max(seq_len if seq_len is not None else original_max_seq_len, original_max_seq_len)
        base = base * (factor * length / original_max_seq_len - (factor - 1)) ** (d / (d - 2))
    inv_freq = base**-exponents  # (D_h/2,)

    if scaling == "linear":
        inv_freq = inv_freq / factor
    elif scaling == "yarn":
        # Pair i turns L * θ_i / (2π) times over the original context L. Solve for the pair index at which
        # it turns r times:  i(r) = D_h * ln(L / (2π r)) / (2 ln base).
        def pair_index(rotations: float) -> float:
            return d * math.log(original_max_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = pair_index(beta_fast), pair_index(beta_slow)  # fast pairs have small i
        if truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # avoid dividing by zero, as the reference does
        pair = torch.arange(d // 2, dtype=torch.float64)  # (D_h/2,)
        ramp = ((pair - low) / (high - low)).clamp(0, 1)  # 0: keep θ_i, 1: θ_i / factor
        inv_freq = inv_freq * (1 - ramp) + (inv_freq / factor) * ramp
    return inv_freq.to(dtype)


# Two ways to pair up the D_h coordinates that RoPE rotates together, with the same angles θ_i:
#
#   "adjacent"  (RoFormer paper, Meta's original Llama code, GPT-J):  pairs (x_0, x_1), (x_2, x_3), ...
#               pair i = (x_{2i}, x_{2i+1}); reads like complex numbers x_{2i} + j x_{2i+1} times e^{j m θ_i}.
#   "half"      (GPT-NeoX, Hugging Face Llama, `rotate_half`):  pairs (x_0, x_{D/2}), (x_1, x_{D/2+1}), ...
#               pair i = (x_i, x_{i + D_h/2}); two contiguous slices, no strided indexing.
#
# Both are the same rotation up to a fixed permutation of the coordinates (tested): "half" on P x equals
# P applied to "adjacent" on x, where P gathers the even coordinates first and the odd ones second. Since
# q_proj/k_proj are learned, a model trains equally well with either; but weights trained with one
# pairing are wrong with the other unless their rows are permuted (HF's Llama converter does exactly that).
# The classic bug mixes them: cos/sin laid out for adjacent pairs (repeat_interleave) while rotating
# halves. Then x_i and x_{i+D/2} get different angles, the map is no longer a rotation, and q·k stops
# depending only on n - m (tests/test_positions.py shows it failing).


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, pairing: str = "half") -> Tensor:
    """Rotate each coordinate pair i of the vector at position m by the angle ``m θ_i``.

    ``cos``/``sin`` hold ``cos(m θ_i)``/``sin(m θ_i)`` per position and pair (not repeated to D_h), e.g.
    a slice of ``RotaryEmbedding.cos_cached``. Computed in float32 (float64 stays float64), cast back.

    Shapes:
        x: (..., T, D_h);  cos, sin: (T, D_h/2) or anything broadcastable to (..., T, D_h/2)
        returns (..., T, D_h)
    """
    check_tensor("x", x)
    check_tensor("cos", cos)
    check_tensor("sin", sin)
    check_choice("pairing", pairing, PAIRINGS)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., T, D_h), got shape {tuple(x.shape)}")
    d = x.shape[-1]
    _check_even("x.shape[-1] (head_dim)", d)
    if cos.shape != sin.shape:
        raise ValueError(f"cos has shape {tuple(cos.shape)} but sin has {tuple(sin.shape)}; expected equal")
    if cos.shape[-1] != d // 2:
        raise ValueError(f"cos.shape[-1]={cos.shape[-1]} does not match head_dim/2={d // 2} (head_dim={d})")

    compute = torch.promote_types(x.dtype, torch.float32)
    xf, cos, sin = x.to(compute), cos.to(compute), sin.to(compute)
    if pairing == "half":
        x1, x2 = xf[..., : d // 2], xf[..., d // 2 :]  # (..., T, D_h/2) each
        out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (..., T, D_h)
    else:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]  # (..., T, D_h/2) each
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)  # (..., T, D_h)
    return out.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE for one attention layer: cos/sin tables for positions 0 .. max_seq_len - 1, applied to q or k.

    ``scaling``/``factor``/``original_max_seq_len`` select a context-extension method (see
    ``rope_frequencies``; "dynamic" is left out here because its table depends on the current length).
    With "yarn", cos and sin are multiplied by ``yarn_attention_factor(factor)`` as in Hugging Face, so
    q·k grows by its square: a softmax temperature, and the rotation no longer preserves norms.
    The tables are non-persistent buffers (not in the state dict), computed in float64, stored float32.
    """

    def __init__(
        self,
        head_dim: int,
        max_seq_len: int = 2048,
        base: float = 10000.0,
        *,
        pairing: str = "half",
        scaling: str | None = None,
        factor: float = 1.0,
        original_max_seq_len: int | None = None,
    ) -> None:
        super().__init__()
        _check_even("head_dim", head_dim)
        check_positive_int("max_seq_len", max_seq_len)
        check_choice("pairing", pairing, PAIRINGS)
        check_choice("scaling", scaling, (None, "linear", "ntk", "yarn"))
        self.head_dim, self.max_seq_len, self.base, self.pairing = head_dim, max_seq_len, base, pairing
        self.scaling, self.factor = scaling, factor
        inv_freq = rope_frequencies(
            head_dim, base, scaling=scaling, factor=factor,
            original_max_seq_len=original_max_seq_len, dtype=torch.float64,
        )  # fmt: skip
        self.attention_scaling = yarn_attention_factor(factor) if scaling == "yarn" else 1.0
        angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * inv_freq  # (T_max, D_h/2)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self.register_buffer("cos_cached", (angles.cos() * self.attention_scaling).float(), persistent=False)
        self.register_buffer("sin_cached", (angles.sin() * self.attention_scaling).float(), persistent=False)

    def cos_sin(self, seq_len: int, offset: int = 0) -> tuple[Tensor, Tensor]:
        """The cos and sin rows for positions ``offset .. offset + seq_len - 1``, each (T, D_h/2)."""
        check_positive_int("seq_len", seq_len)
        check_positive_int("offset", offset, allow_zero=True)
        if offset + seq_len > self.max_seq_len:
            raise ValueError(
                f"positions {offset}..{offset + seq_len - 1} (offset={offset}, T={seq_len}) are beyond "
                f"the cos/sin table; "
                f"expected offset + T <= max_seq_len={self.max_seq_len}"
            )
        return self.cos_cached[offset : offset + seq_len], self.sin_cached[offset : offset + seq_len]

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Rotate queries or keys at positions ``offset .. offset + T - 1`` (``offset`` = cache length).

        Shapes:
            x: (B, H, T, D_h) (any (..., T, D_h) works)  ->  returns the same shape and dtype
        """
        check_tensor("x", x)
        if x.dim() < 2 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must have shape (..., T, D_h={self.head_dim}), got shape {tuple(x.shape)}")
        cos, sin = self.cos_sin(x.shape[-2], offset)  # (T, D_h/2) each
        return apply_rope(x, cos, sin, self.pairing)

    def extra_repr(self) -> str:
        extra = f", scaling={self.scaling!r}, factor={self.factor}" if self.scaling else ""
        return f"head_dim={self.head_dim}, max_seq_len={self.max_seq_len}, base={self.base}, " \
               f"pairing={self.pairing!r}{extra}"  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------------------------------------


def alibi_slopes(n_heads: int) -> Tensor:
    """Per-head slopes m_h of ALiBi (Press et al. 2022, and the authors' code).

    For n a power of two: the geometric sequence that starts at ``2^(-8/n)`` with that same ratio, so
    8 heads get 1/2, 1/4, ..., 1/256. Otherwise, with p the largest power of two below n: the p slopes
    for p heads, then the 1st, 3rd, 5th, ... slopes of the 2p-head sequence until there are n.

    Shapes:
        returns (H,) float32
    """
    check_positive_int("n_heads", n_heads)

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(n_heads: int, seq_len: int) -> Tensor:
    """Additive attention bias ``-m_h * |i - j|`` for query i and key j (0 on the diagonal).

    Future keys (j > i) also get ``-m_h * (j - i)``; combine with a causal mask for a decoder.

    Shapes:
        returns (H, T, T) float32
    """
    check_positive_int("seq_len", seq_len)
    slopes = alibi_slopes(n_heads)  # (H,)
    pos = torch.arange(seq_len, dtype=torch.float32)
    distance = (pos[:, None] - pos[None, :]).abs()  # (T, T)
    return -slopes[:, None, None] * distance  # (H, T, T)
