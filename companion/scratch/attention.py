"""NumPy twin of :mod:`companion.attention`: softmax, scaled dot-product and multi-head attention.

Forward only, written to be read next to Vaswani et al. (2017, §3.2). Weights act on row vectors
(``x @ W``); copy them from ``torch.nn.Linear`` as ``linear.weight.T``. No biases. Checked against the
torch versions in ``tests/test_scratch_attention.py``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["multi_head_attention", "scaled_dot_product_attention", "softmax"]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)); a row that is all -inf (fully masked) gives zeros."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)  # fully masked row: avoid -inf - (-inf) = nan
    e = np.exp(x - m)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / np.maximum(total, 1.0)  # a non-empty row sums to >= 1 (exp(0) at its max); an empty one to 0


def scaled_dot_product_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, return_weights: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """softmax(q kᵀ / √D_h + mask) v.

    ``mask``: additive (0 / -inf) or boolean (True = may attend), broadcastable to (..., T, S).

    Shapes:
        q (..., T, D_h), k (..., S, D_h), v (..., S, D_v) -> out (..., T, D_v) [, weights (..., T, S)]
    """
    d_h = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_h)  # (..., T, S)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    weights = softmax(scores, axis=-1)  # (..., T, S)
    out = weights @ v  # (..., T, D_v)
    return (out, weights) if return_weights else out


def multi_head_attention(
    x: np.ndarray,
    W_q: np.ndarray,
    W_k: np.ndarray,
    W_v: np.ndarray,
    W_o: np.ndarray,
    n_heads: int,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Self-attention with ``n_heads`` heads: project, split into heads, attend, concatenate, mix.

    Shapes:
        x (B, T, D) or (T, D); W_q, W_k, W_v, W_o (D, D); mask broadcastable to (B, H, T, T) -> like x.
    """
    *lead, t, d = x.shape
    if d % n_heads != 0:
        raise ValueError(f"d_model={d} is not divisible by n_heads={n_heads}")
    d_h = d // n_heads

    def split(y: np.ndarray) -> np.ndarray:
        return np.swapaxes(y.reshape(*lead, t, n_heads, d_h), -2, -3)  # (B, H, T, D_h)

    q, k, v = split(x @ W_q), split(x @ W_k), split(x @ W_v)  # (B, H, T, D_h) each
    heads = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, D_h)
    concat = np.swapaxes(heads, -2, -3).reshape(*lead, t, d)  # (B, T, D)
    return concat @ W_o  # (B, T, D)
