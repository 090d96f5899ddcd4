"""Position encodings in NumPy, forward only, written to be read next to ``companion.positions``.

- ``sinusoidal_encoding``: the fixed sin/cos table of Vaswani et al. 2017, §3.5.
- ``rope_cos_sin`` and ``apply_rope``: rotary position embedding (Su et al. 2021), both pairings.

Checked against ``companion.positions`` (tests/test_positions.py), which is checked against Hugging Face.
"""

from __future__ import annotations

import numpy as np

__all__ = ["apply_rope", "rope_cos_sin", "sinusoidal_encoding"]


def sinusoidal_encoding(seq_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE[p, 2i] = sin(p / base^(2i/D)), PE[p, 2i+1] = cos(p / base^(2i/D)); returns (T, D) float64."""
    if d_model % 2:
        raise ValueError(f"d_model={d_model} is odd; expected an even number")
    p = np.arange(seq_len)[:, None]  # (T, 1)
    inv_freq = base ** (-np.arange(0, d_model, 2) / d_model)  # (D/2,)
    pe = np.zeros((seq_len, d_model))
    pe[:, 0::2] = np.sin(p * inv_freq)  # even columns
    pe[:, 1::2] = np.cos(p * inv_freq)  # odd columns
    return pe


def rope_cos_sin(seq_len: int, head_dim: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos(m θ_i) and sin(m θ_i) with θ_i = base^(-2i/D_h), for m = 0..T-1; each (T, D_h/2)."""
    theta = base ** (-np.arange(0, head_dim, 2) / head_dim)  # (D_h/2,)
    angles = np.arange(seq_len)[:, None] * theta  # (T, D_h/2)
    return np.cos(angles), np.sin(angles)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pairing: str = "half") -> np.ndarray:
    """Rotate pairs of coordinates of x (..., T, D_h) by the angles in cos/sin (T, D_h/2).

    pairing="adjacent": pairs (x[2i], x[2i+1]) as in the RoFormer paper.
    pairing="half":     pairs (x[i], x[i + D_h/2]) as in Hugging Face Llama (`rotate_half`).
    Each pair (a, b) becomes (a cos - b sin, a sin + b cos): a 2-D rotation.
    """
    d = x.shape[-1]
    if pairing == "half":
        a, b = x[..., : d // 2], x[..., d // 2 :]
    elif pairing == "adjacent":
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        raise ValueError(f"pairing={pairing!r} is not supported; expected 'half' or 'adjacent'")
    ra, rb = a * cos - b * sin, a * sin + b * cos  # rotated pairs, (..., T, D_h/2) each
    out = np.empty_like(x, dtype=np.result_type(x, cos))
    if pairing == "half":
        out[..., : d // 2], out[..., d // 2 :] = ra, rb
    else:
        out[..., 0::2], out[..., 1::2] = ra, rb
    return out
