"""NumPy twin of :func:`companion.masks.causal_mask` (additive form), forward only, written to be read."""

from __future__ import annotations

import numpy as np

__all__ = ["causal_mask"]


def causal_mask(t: int) -> np.ndarray:
    """(T, T) additive mask: 0 on and below the diagonal, -inf above it (query i must not see key j > i)."""
    if t < 1:
        raise ValueError(f"t={t} is invalid; expected an integer >= 1")
    future = np.triu(np.ones((t, t), dtype=bool), k=1)  # True where j > i
    return np.where(future, -np.inf, 0.0)
