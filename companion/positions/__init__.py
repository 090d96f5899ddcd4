"""Position information for attention: sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention by itself is permutation-equivariant: shuffle the tokens and the outputs shuffle with them.
This package gives the model a sense of order, in the four ways the course compares, one module each:

* :mod:`companion.positions.sinusoidal` -- ``sinusoidal_encoding`` (Vaswani et al. 2017, §3.5) and
  ``relative_offset_matrix`` (the rotation ``R_k`` with ``PE[p + k] = R_k @ PE[p]``);
* :mod:`companion.positions.learned` -- ``LearnedPositionalEmbedding`` (GPT-2, BERT);
* :mod:`companion.positions.rope` -- ``rope_frequencies``, ``apply_rope``, ``RotaryEmbedding`` (Su et al.
  2021) with Position Interpolation, NTK-aware, dynamic NTK and YaRN scaling;
* :mod:`companion.positions.alibi` -- ``alibi_slopes``, ``alibi_bias`` (Press et al. 2022);
* :mod:`companion.positions._frequencies` -- ``inverse_frequencies``, the ``θ_i = base^(-2i/D)`` that the
  sin/cos schemes share.

A relative scheme added later (e.g. T5's bucketed bias) gets its own module here and one line below.
Import from here: ``from companion.positions import apply_rope``. Checked against Hugging Face
``transformers`` and the papers (``tests/test_positions.py``).
"""

from __future__ import annotations

from companion.positions._frequencies import inverse_frequencies
from companion.positions.alibi import alibi_bias, alibi_slopes
from companion.positions.learned import LearnedPositionalEmbedding
from companion.positions.rope import (
    PAIRINGS,
    SCALINGS,
    TABLE_SCALINGS,
    RotaryEmbedding,
    apply_rope,
    rope_frequencies,
    yarn_attention_factor,
)
from companion.positions.sinusoidal import relative_offset_matrix, sinusoidal_encoding
from companion.positions.t5 import relative_position_bucket, relative_positions, t5_bias

__all__ = [
    "PAIRINGS",
    "SCALINGS",
    "TABLE_SCALINGS",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "inverse_frequencies",
    "relative_offset_matrix",
    "relative_position_bucket",
    "relative_positions",
    "rope_frequencies",
    "sinusoidal_encoding",
    "t5_bias",
    "yarn_attention_factor",
]
