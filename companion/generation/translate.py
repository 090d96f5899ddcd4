"""Greedy translation with an encoder–decoder: encode the source once, then decode token by token.

:class:`companion.generation.adapters.ConditionedDecoder` makes an encoder–decoder ``Transformer`` with its
source fixed a :class:`~companion.generation.decoding.Decodable` model; :func:`translate` decodes it with
:func:`~companion.generation.decoding.generate` (chapters 8 and 9). Checked in tests/test_generation.py and
tests/test_adapters.py: cached and uncached decoding give the same tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from companion._checks import check_token_id
from companion.generation.adapters import ConditionedDecoder
from companion.generation.decoding import generate

__all__ = ["translate"]


@torch.no_grad()
def translate(
    model: nn.Module,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int,
    *,
    src_pad_id: int | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Greedy translation with an encoder-decoder ``Transformer``: encode once, decode token by token.

    The source is encoded once by :class:`~companion.generation.adapters.ConditionedDecoder`, which makes the
    encoder–decoder a ``Decodable`` model, and :func:`generate` decodes it greedily from ``bos_id``.
    With ``use_cache`` each step feeds only the newest target token: the self-attention keys/values of
    earlier target tokens and the cross-attention keys/values of H (projected on the first step) come
    from the caches.

    Shapes: src (B, S) -> (B, 1 + n): ``bos_id`` followed by n <= max_new_tokens tokens; rows that
    finished early are padded with ``eos_id``.
    """
    decoder = ConditionedDecoder(model, src, src_pad_id=src_pad_id)  # checks model, src; encodes once
    check_token_id("bos_id", bos_id, decoder.config.vocab_size)
    check_token_id("eos_id", eos_id, decoder.config.vocab_size)
    start = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    return generate(decoder, start, max_new_tokens, greedy=True, eos_id=eos_id, use_cache=use_cache)
