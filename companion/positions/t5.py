"""T5's relative position bias: distances sorted into log-spaced buckets, one learned scalar per bucket and head.

Raffel et al. 2020 (§2.1, "a simplified form of position embeddings"): no vector is added to the embeddings.
Instead each head adds a learned scalar ``table[bucket(j - i), h]`` to the score of query ``i`` with key ``j``,
where the distance ``j - i`` is first put into one of ``num_buckets`` buckets:

* the first half of a direction's buckets hold the small distances exactly (0, 1, ..., max_exact - 1);
* the other half cover ``max_exact ... max_distance`` in logarithmically growing bins;
* every distance at or beyond ``max_distance`` shares the last bucket, so the bias is defined for any length.

With ``bidirectional=True`` (T5's encoder) half of the buckets are for keys after the query; with
``bidirectional=False`` (T5's decoder, causal) keys after the query all map to bucket 0 (the causal mask
hides them anyway). T5 learns one table per stack, shared by all layers, and does not scale the scores by
``1/sqrt(D_h)``; this module provides the bucket function and the bias, as pure functions, and leaves those
model choices to the caller.

Checked against Hugging Face ``T5Attention._relative_position_bucket`` in ``tests/test_t5_bias.py``.

Shapes: ``T`` query length, ``S`` key length, ``H`` heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from companion._checks import check_positive_int

__all__ = ["relative_position_bucket", "relative_positions", "t5_bias"]


def _check_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """Validate the bucket settings; return max_exact, the number of exact (one-distance) buckets."""
    check_positive_int("num_buckets", num_buckets)
    check_positive_int("max_distance", max_distance)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    if bidirectional and num_buckets % 2:
        raise ValueError(f"num_buckets={num_buckets} must be even when bidirectional=True (half per direction)")
    max_exact = per_direction // 2
    if max_exact < 1:
        raise ValueError(f"num_buckets={num_buckets} is too small; expected at least {4 if bidirectional else 2}")
    if max_distance <= max_exact:
        raise ValueError(f"max_distance={max_distance} must be larger than the exact range max_exact={max_exact}")
    return max_exact


def relative_positions(query_len: int, key_len: int, *, offset: int = 0) -> Tensor:
    """The (T, S) matrix of distances ``key position - query position``.

    ``offset`` is the position of the first query (e.g. the cache length when decoding one token at a time).

    Shapes:
        returns (T, S) int64
    """
    check_positive_int("query_len", query_len)
    check_positive_int("key_len", key_len)
    if offset < 0:
        raise ValueError(f"offset={offset} is negative; expected the position of the first query, >= 0")
    q = torch.arange(offset, offset + query_len)[:, None]  # (T, 1)
    k = torch.arange(key_len)[None, :]  # (1, S)
    return k - q  # (T, S)


def relative_position_bucket(
    relative_position: Tensor, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each distance ``key - query``: exact for small distances, log-spaced up to max_distance.

    With ``n = |distance|`` (bidirectional) or ``n = max(-distance, 0)`` (causal) and ``max_exact`` half of
    one direction's buckets: bucket ``n`` if ``n < max_exact``, else
    ``max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (buckets - max_exact))``,
    capped at the last bucket. Bidirectional: keys after the query use the upper half of the buckets.

    Shapes:
        relative_position (...) integer -> (...) int64, values in [0, num_buckets)
    """
    if relative_position.dtype.is_floating_point or relative_position.dtype == torch.bool:
        raise TypeError(f"relative_position has dtype {relative_position.dtype}; expected an integer tensor")
    max_exact = _check_buckets(num_buckets, max_distance, bidirectional)
    rel = relative_position.to(torch.long)
    buckets = torch.zeros_like(rel)
    if bidirectional:
        per_direction = num_buckets // 2
        buckets = buckets + (rel > 0).to(torch.long) * per_direction  # keys after the query: upper half
        n = rel.abs()
    else:
        per_direction = num_buckets
        n = (-rel).clamp(min=0)  # only keys before the query are distinguished
    # log-spaced bins; float32 as in the reference implementations (T5's Mesh TensorFlow, Hugging Face)
    scaled = torch.log(n.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (per_direction - max_exact)).to(torch.long)
    large = large.clamp(max=per_direction - 1)  # everything from max_distance on shares the last bucket
    return buckets + torch.where(n < max_exact, n, large)


def t5_bias(
    table: Tensor,
    query_len: int,
    key_len: int,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    offset: int = 0,
) -> Tensor:
    """The (H, T, S) additive score bias ``table[bucket(j - i), h]``, to add to the scores like a mask.

    ``table`` is the learned (num_buckets, H) matrix (in a model: an ``nn.Embedding(num_buckets, H)``'s
    weight); ``offset`` is the position of the first query.

    Shapes:
        table (num_buckets, H), returns (H, T, S)
    """
    if table.dim() != 2:
        raise ValueError(f"table has shape {tuple(table.shape)}; expected (num_buckets, n_heads)")
    rel = relative_positions(query_len, key_len, offset=offset)  # (T, S)
    buckets = relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=table.shape[0], max_distance=max_distance
    )  # (T, S)
    return table[buckets].permute(2, 0, 1)  # (T, S, H) -> (H, T, S)
