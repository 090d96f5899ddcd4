"""Retrieval with an encoder: sentence embeddings, the InfoNCE loss and recall@k.

Dense retrieval turns every text into one vector and finds the texts nearest a query by cosine similarity
(Reimers & Gurevych 2019, Sentence-BERT; Karpukhin et al. 2020, DPR). The pieces:

- ``embed``: an encoder's vectors averaged over the real tokens (mean pooling, padding left out) and scaled to
  unit length, so that a dot product is a cosine.
- ``info_nce_loss``: contrastive training with in-batch negatives (van den Oord et al. 2018, InfoNCE; DPR §3.2;
  SimCSE, Gao et al. 2021). Row i of ``queries`` belongs with row i of ``keys``; every other key of the batch
  is a negative. With unit vectors q_i, k_j and a temperature τ::

      loss = -1/B Σ_i log( exp(q_i·k_i / τ) / Σ_j exp(q_i·k_j / τ) )

  which is the cross-entropy of the (B, B) similarity matrix against the labels 0, 1, ..., B-1.
- ``recall_at_k``: the fraction of queries whose right document is among the k best-scored ones.

Checked in ``tests/test_retrieval.py``: the loss against the formula written out and against
``F.cross_entropy`` of the similarity matrix; padding changes no embedding; recall@k by hand.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from companion._checks import check_positive_float, check_positive_int, check_tensor
from companion.models.encoder import Encoder
from companion.models.heads import pool

__all__ = ["embed", "info_nce_loss", "recall_at_k"]


def embed(
    encoder: Encoder, ids: Tensor, padding_mask: Tensor | None = None, *, normalize: bool = True
) -> Tensor:
    """One vector per sequence: the encoder's hidden vectors averaged over the real tokens.

    ``padding_mask`` (B, S) or (B, 1, 1, S), True = a real token (None: every token is real). ``normalize``
    scales each vector to unit length (then ``a @ b.T`` is the cosine similarity).
    Raises ``TypeError`` if ``encoder`` is not an ``Encoder``.
    Shapes: ids (B, S) -> (B, D).
    """
    if not isinstance(encoder, Encoder):
        raise TypeError(f"encoder must be a companion.models.Encoder, got {type(encoder).__name__}")
    h = encoder.hidden_states(ids, padding_mask)  # (B, S, D)
    vectors = pool(h, "mean", padding_mask)  # (B, D): padding left out of the average
    return F.normalize(vectors, dim=-1) if normalize else vectors


def info_nce_loss(queries: Tensor, keys: Tensor, temperature: float = 0.05) -> Tensor:
    """InfoNCE with in-batch negatives: row i of ``queries`` should be nearest row i of ``keys``.

    The vectors are scaled to unit length here (cosine similarity), divided by ``temperature`` and scored
    by cross-entropy, in float32 (a softmax over B entries in half precision loses the small probabilities).
    Raises ``ValueError`` for shapes that differ, fewer than 2 rows (no negative) or ``temperature`` <= 0.
    Shapes: queries (B, D), keys (B, D) -> scalar.
    """
    check_tensor("queries", queries, ndim=2)
    check_tensor("keys", keys, ndim=2)
    if queries.shape != keys.shape:
        raise ValueError(f"queries has shape {tuple(queries.shape)} but keys has {tuple(keys.shape)}; expected "
                         "the same (B, D): key i is the positive of query i")
    if queries.size(0) < 2:
        raise ValueError(f"queries has {queries.size(0)} row; expected at least 2 (the other rows of the batch "
                         "are the negatives)")
    check_positive_float("temperature", temperature)
    q = F.normalize(queries.float(), dim=-1)  # (B, D)
    k = F.normalize(keys.float(), dim=-1)  # (B, D)
    logits = q @ k.T / temperature  # (B, B): row i scores query i against every key
    return F.cross_entropy(logits, torch.arange(len(q), device=q.device))


def recall_at_k(scores: Tensor, targets: Tensor, k: int) -> float:
    """The fraction of queries whose right document is among the ``k`` best-scored documents.

    ``scores[q, d]`` is how well document d matches query q; ``targets[q]`` the index of the right document.
    Ties count against the query: a document scored *equal* to the right one ranks before it, so a query
    that scores every document alike (no word in common, for a word-count method) is a miss unless k
    covers them all. Raises ``ValueError`` for a bad shape, a target out of range or k < 1.
    Shapes: scores (Q, N), targets (Q,) -> a float in [0, 1].
    """
    check_tensor("scores", scores, ndim=2)
    check_tensor("targets", targets, ndim=1)
    check_positive_int("k", k)
    q, n = scores.shape
    if len(targets) != q:
        raise ValueError(f"targets has {len(targets)} entries; expected one per query, {q}")
    if targets.dtype.is_floating_point or int(targets.min()) < 0 or int(targets.max()) >= n:
        raise ValueError(f"targets must be document indices in [0, {n}); got values from {targets.min().item()} "
                         f"to {targets.max().item()} ({targets.dtype})")
    right = scores.gather(1, targets[:, None])  # (Q, 1): each query's score of its right document
    ahead = (scores >= right).sum(dim=1) - 1  # (Q,): documents ranked at or before the right one, itself excluded
    return int((ahead < k).sum()) / q
