"""Sinusoidal position encoding: the fixed sin/cos table added to the embeddings (Vaswani et al. 2017, §3.5).

``PE[p, 2i] = sin(p θ_i)``, ``PE[p, 2i+1] = cos(p θ_i)`` with ``θ_i = base^(-2i/D)``
(:func:`companion.positions.inverse_frequencies`). ``relative_offset_matrix`` builds the rotation ``R_k``
with ``PE[p + k] = R_k @ PE[p]``, the property the paper hoped would let a model attend by relative position.

Checked against (``tests/test_positions.py``): the definition, value by value, and the NumPy twin
:func:`companion.scratch.positions.sinusoidal_encoding`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import check_positive_int
from companion.positions._frequencies import inverse_frequencies

__all__ = ["relative_offset_matrix", "sinusoidal_encoding"]


def sinusoidal_encoding(seq_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The fixed table ``PE[p, 2i] = sin(p / base^(2i/D))``, ``PE[p, 2i+1] = cos(p / base^(2i/D))``.

    Positions run from 0 to ``seq_len - 1``. Computed in float64, returned as float32.

    Shapes:
        returns (T, D) with T = seq_len, D = d_model
    """
    check_positive_int("seq_len", seq_len)
    inv_freq = inverse_frequencies(d_model, base)  # (D/2,)
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]  # (T, 1)
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
    check_positive_int("offset", offset, allow_zero=True)
    inv_freq = inverse_frequencies(d_model, base)  # (D/2,)
    c, s = (offset * inv_freq).cos(), (offset * inv_freq).sin()
    blocks = torch.stack((torch.stack((c, s), -1), torch.stack((-s, c), -1)), -2)  # (D/2, 2, 2)
    return torch.block_diag(*blocks).float()
