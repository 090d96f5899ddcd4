"""Token embeddings: the lookup table that turns token ids into vectors, and weight tying.

Implements the embedding layer of Vaswani et al., *Attention Is All You Need* (2017, §3.4): a (V, D)
table whose row ``i`` is the vector of token ``i``, optionally multiplied by ``√D`` so that its scale
matches the positional encoding added to it; and weight tying (Press & Wolf, 2017), where the output
layer that produces the logits reuses the same (V, D) matrix.

Checked against ``torch.nn.functional.embedding`` / ``torch.nn.Embedding`` (``tests/test_embeddings.py``).
Unlike ``nn.Embedding``, an id outside ``[0, V)`` raises a ``ValueError`` that names the id, on every device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import check_bool, check_positive_int, check_token_ids

__all__ = ["TokenEmbedding", "tie_weights"]


class TokenEmbedding(nn.Module):
    """A learned (V, D) lookup table: ``forward(ids)[b, t] = weight[ids[b, t]]`` (times ``√D`` if ``scale``).

    Initialisation: N(0, 1) like ``nn.Embedding``; with ``scale=True``, N(0, 1/D) instead, so that the
    scaled output again has unit variance (the choice of fairseq's Transformer). ``padding_idx``: that row
    starts at zero and receives no gradient (as in ``nn.Embedding``).
    """

    def __init__(
        self, vocab_size: int, d_model: int, *, scale: bool = False, padding_idx: int | None = None
    ) -> None:
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        check_bool("scale", scale)
        if padding_idx is not None:
            check_positive_int("padding_idx", padding_idx, allow_zero=True)
            if padding_idx >= vocab_size:
                raise ValueError(f"padding_idx={padding_idx} is out of range; expected < {vocab_size}")
        self.vocab_size, self.d_model = vocab_size, d_model
        self.scale, self.padding_idx = scale, padding_idx
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table again (see the class docstring); zero the padding row."""
        nn.init.normal_(self.weight, mean=0.0, std=self.d_model**-0.5 if self.scale else 1.0)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].zero_()

    def forward(self, ids: Tensor) -> Tensor:
        """Look up the vector of every token id.

        Shapes:
            ids: (B, T) or (T,) integer ids in [0, V) -> (B, T, D) or (T, D)
        """
        check_token_ids("ids", ids, ndim=(1, 2), vocab_size=self.vocab_size)
        if ids.dtype == torch.int16:
            ids = ids.long()  # F.embedding takes int32 or int64 indices
        out = F.embedding(ids, self.weight, padding_idx=self.padding_idx)  # (B, T, D)
        return out * math.sqrt(self.d_model) if self.scale else out

    def extra_repr(self) -> str:
        return f"{self.vocab_size}, {self.d_model}, scale={self.scale}, padding_idx={self.padding_idx}"


def tie_weights(lm_head: nn.Linear, embedding: TokenEmbedding) -> None:
    """Make ``lm_head`` use the embedding table as its weight (one shared ``Parameter``, Press & Wolf 2017).

    ``lm_head`` maps D -> V, so its (V, D) weight has the table's shape. Its bias, if any, stays its own.
    """
    if not isinstance(lm_head, nn.Linear):
        raise TypeError(f"lm_head must be an nn.Linear, got {type(lm_head).__name__}")
    if not isinstance(embedding, TokenEmbedding):
        raise TypeError(f"embedding must be a TokenEmbedding, got {type(embedding).__name__}")
    if lm_head.weight.shape != embedding.weight.shape:
        raise ValueError(
            f"lm_head.weight has shape {tuple(lm_head.weight.shape)} but embedding.weight has "
            f"{tuple(embedding.weight.shape)}; expected lm_head = nn.Linear(d_model, vocab_size)"
        )
    lm_head.weight = embedding.weight
