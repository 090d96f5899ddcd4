"""The one inverse-frequency helper behind every sin/cos position scheme of the package.

Sinusoidal encodings (Vaswani et al. 2017, §3.5) and RoPE (Su et al. 2021) turn coordinate pair i at
the speed ``θ_i = base^(-2i / D)``, i = 0 .. D/2 - 1: the first pair turns once per position, the last
one about ``base`` times slower. Both build their tables from :func:`inverse_frequencies`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import check_positive_float, check_positive_int

__all__ = ["check_base", "check_even", "inverse_frequencies"]


def check_even(name: str, value: int) -> None:
    """Raise unless ``value`` is a positive even int (dimensions come in sin/cos pairs)."""
    check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name}={value} is odd; expected an even number (dimensions come in sin/cos pairs)")


def check_base(base: float, name: str = "base") -> None:
    """Raise unless ``base`` is a finite number > 1 (a base of 1 or less would not make slower pairs)."""
    check_positive_float(name, base)
    if not base > 1.0:
        raise ValueError(f"{name}={base} is invalid; expected a number > 1")


def inverse_frequencies(dim: int, base: float = 10000.0, *, name: str = "d_model") -> Tensor:
    """``θ_i = base^(-2i / dim)`` for i = 0 .. dim/2 - 1, in float64.

    Shapes:
        returns (dim/2,)
    """
    check_even(name, dim)
    check_base(base)
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
