"""Feed-forward and normalisation layers in NumPy, forward only, written to be read.

Weights follow the NumPy habit ``x @ W`` with W of shape (in, out); a ``torch.nn.Linear`` weight is
the transpose. Checked against ``companion.layers`` (tests/test_scratch_layers.py).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["feed_forward", "gelu", "layer_norm", "relu", "rms_norm"]

_erf = np.vectorize(math.erf)  # NumPy has no erf; fine for the small arrays of the course


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU(x) = x Φ(x), Φ the standard normal CDF; approximate="tanh" is GPT-2's formula."""
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if approximate != "none":
        raise ValueError(f"approximate={approximate!r} is not supported; expected 'none' or 'tanh'")
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0), elementwise."""
    return np.maximum(x, 0.0)


def layer_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, eps: float = 1e-5
) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (biased variance)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # divide by D, not D - 1
    y = (x - mean) / np.sqrt(var + eps) * weight
    return y if bias is None else y + bias


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) * weight over the last axis: no centring, no bias."""
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * weight


def feed_forward(
    x: np.ndarray,
    W1: np.ndarray,
    b1: np.ndarray | None,
    W2: np.ndarray,
    b2: np.ndarray | None,
    activation: str = "relu",
) -> np.ndarray:
    """act(x @ W1 + b1) @ W2 + b2; x (..., D), W1 (D, d_ff), W2 (d_ff, D); act relu | gelu | gelu_tanh."""
    h = x @ W1 + (0.0 if b1 is None else b1)  # (..., d_ff)
    if activation == "relu":
        h = relu(h)
    elif activation == "gelu":
        h = gelu(h)
    elif activation == "gelu_tanh":
        h = gelu(h, approximate="tanh")
    else:
        raise ValueError(f"activation={activation!r} is not supported; expected relu, gelu or gelu_tanh")
    return h @ W2 + (0.0 if b2 is None else b2)  # (..., D)
