"""Learned absolute positions: a trained table with one row per position (GPT-2, BERT).

Checked in ``tests/test_positions.py`` (rows, offsets, gradients reach only the rows used, positions
beyond the table rejected) and, inside ``companion.models.GPT``, against Hugging Face GPT-2.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from companion._checks import check_positive_int, check_tensor

__all__ = ["LearnedPositionalEmbedding"]


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
            if offset + positions > self.max_seq_len:  # checked on the host: no device sync per decoding step
                raise ValueError(
                    f"position {offset + positions - 1} is outside the learned table; "
                    f"expected 0 <= position < max_seq_len={self.max_seq_len}"
                )
            return self.weight[offset : offset + positions]  # (T, D)
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
