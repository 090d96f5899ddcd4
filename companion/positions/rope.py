"""Rotary position embedding (RoPE, Su et al. 2021, RoFormer) and its context-extension scalings.

- ``rope_frequencies``: the rotation speeds θ_i, optionally rescaled by Position Interpolation (Chen et al.
  2023), NTK-aware base scaling (bloc97 2023), its dynamic variant, or YaRN (Peng et al. 2023).
- ``apply_rope``: the rotation itself, for either pairing of the coordinates (see the comment below).
- ``RotaryEmbedding``: cos/sin tables for one model, applied to queries and keys inside attention.

Checked against (``tests/test_positions.py``): Hugging Face ``transformers``
(``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` for the linear / dynamic / YaRN frequencies,
``modeling_llama.apply_rotary_pos_emb`` and ``LlamaRotaryEmbedding`` for the "half" pairing), and Meta's
Llama reference (complex multiplication) for the "adjacent" pairing.
Left out on purpose: partial rotary dimensions, LongRoPE, Llama-3 scaling.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from companion._checks import check_choice, check_positive_float, check_positive_int, check_tensor
from companion.positions._frequencies import check_base, check_even, inverse_frequencies

__all__ = [
    "PAIRINGS",
    "SCALINGS",
    "TABLE_SCALINGS",
    "RotaryEmbedding",
    "apply_rope",
    "rope_frequencies",
    "yarn_attention_factor",
]

PAIRINGS = ("half", "adjacent")  # which coordinates rotate together (see the comment above apply_rope)
SCALINGS = (None, "linear", "ntk", "dynamic", "yarn")  # context extension in rope_frequencies
TABLE_SCALINGS = (None, "linear", "ntk", "yarn")  # those a fixed table can hold ("dynamic" depends on length)


def yarn_attention_factor(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature ``0.1 mscale ln(factor) + 1`` (1 when factor <= 1); it multiplies cos and sin.

    DeepSeek's configs name the coefficient of ln(factor) ``mscale`` (and ``mscale_all_dim``, where the factor
    moves onto the softmax scale of every dimension: see ``MultiHeadLatentAttention``'s ``softmax_scale``)."""
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


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
    check_even("head_dim", head_dim)
    if head_dim < 4 and scaling in ("ntk", "dynamic"):
        raise ValueError(f"head_dim={head_dim} is too small for NTK scaling; expected head_dim >= 4")
    check_base(base)
    check_choice("scaling", scaling, SCALINGS)
    if scaling is not None and not factor >= 1.0:
        raise ValueError(f"factor={factor} is invalid for scaling={scaling!r}; expected factor >= 1")
    if scaling in ("dynamic", "yarn"):
        if original_max_seq_len is None:
            raise ValueError(f"scaling={scaling!r} needs original_max_seq_len (the pre-training context)")
        check_positive_int("original_max_seq_len", original_max_seq_len)

    d = head_dim
    if scaling == "ntk":
        base = base * factor ** (d / (d - 2))
    elif scaling == "dynamic":
        length = max(seq_len if seq_len is not None else original_max_seq_len, original_max_seq_len)
        base = base * (factor * length / original_max_seq_len - (factor - 1)) ** (d / (d - 2))
    inv_freq = inverse_frequencies(d, base, name="head_dim")  # (D_h/2,): base^(-2i / D_h)

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
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype} (convert with .float())")
    d = x.shape[-1]
    check_even("x.shape[-1] (head_dim)", d)
    if cos.shape != sin.shape:
        raise ValueError(f"cos has shape {tuple(cos.shape)} but sin has {tuple(sin.shape)}; expected equal")
    if cos.shape[-1] != d // 2:
        raise ValueError(f"cos.shape[-1]={cos.shape[-1]} does not match head_dim/2={d // 2} (head_dim={d})")
    try:
        fits = torch.broadcast_shapes(cos.shape[:-1], x.shape[:-1]) == x.shape[:-1]
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"cos has {cos.shape[-2] if cos.dim() > 1 else 1} positions (shape {tuple(cos.shape)}) but x has "
            f"T={x.shape[-2]} (shape {tuple(x.shape)}); expected cos, sin broadcastable to (..., T, D_h/2)"
        )

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
    With "yarn", cos and sin are multiplied by ``attention_factor`` (default ``yarn_attention_factor(factor)``)
    as in Hugging Face, so q·k grows by its square: a softmax temperature, and the rotation no longer preserves
    norms. DeepSeek-V3 moves that temperature onto the softmax scale instead and passes its ratio here (1.0).
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
        attention_factor: float | None = None,
    ) -> None:
        super().__init__()
        check_even("head_dim", head_dim)
        check_positive_int("max_seq_len", max_seq_len)
        check_choice("pairing", pairing, PAIRINGS)
        check_choice("scaling", scaling, TABLE_SCALINGS)
        self.head_dim, self.max_seq_len, self.base, self.pairing = head_dim, max_seq_len, base, pairing
        self.scaling, self.factor = scaling, factor
        inv_freq = rope_frequencies(
            head_dim, base, scaling=scaling, factor=factor,
            original_max_seq_len=original_max_seq_len, dtype=torch.float64,
        )  # fmt: skip
        if attention_factor is not None:
            check_positive_float("attention_factor", attention_factor)
            if scaling != "yarn":
                raise ValueError(f"attention_factor={attention_factor} is given but scaling={scaling!r}; expected "
                                 "scaling='yarn' (the factor is YaRN's temperature)")
        elif scaling == "yarn":
            attention_factor = yarn_attention_factor(factor)
        self.attention_scaling = 1.0 if attention_factor is None else attention_factor
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
