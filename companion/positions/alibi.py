"""ALiBi: attention with linear biases (Press et al. 2022), a per-head penalty proportional to distance.

No vector is added to the embeddings: the bias ``-m_h * |i - j|`` is added to the attention scores
(pass it as an additive mask). Checked in ``tests/test_positions.py`` against the paper's slope rule
(and the authors' code for a head count that is not a power of two).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from companion._checks import check_positive_int

__all__ = ["alibi_bias", "alibi_slopes"]


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
