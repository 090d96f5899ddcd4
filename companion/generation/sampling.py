"""Choosing the next token from logits: temperature, top-k, top-p (nucleus), and the pick itself.

Pure functions on logits (..., V), shared by :func:`companion.generation.generate` and chapter 9.
References: Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration" (top-p); Fan et al. 2018
(top-k). The filters follow Hugging Face ``TopKLogitsWarper`` / ``TopPLogitsWarper``: ties at the k-th logit
are kept, and top-p keeps the smallest set of most likely tokens whose probabilities reach ``p``
(tests/test_generation.py checks both against ``transformers``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import check_bool, check_positive_float, check_positive_int, check_probability

__all__ = ["apply_temperature", "pick_next", "top_k_filter", "top_p_filter", "check_sampling"]


# --- pure helpers on logits (..., V) -------------------------------------------------------------


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    """Divide logits by ``temperature``: < 1 sharpens the softmax, > 1 flattens it.

    Shapes: logits (..., V) -> (..., V).
    """
    check_positive_float("temperature", temperature)
    return logits / temperature


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row (ties with the k-th are kept); set the rest to -inf.

    Shapes: logits (..., V) -> (..., V).
    """
    check_positive_int("top_k", k)
    k = min(k, logits.size(-1))
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probabilities sum to >= ``p``.

    The most likely token is always kept, so ``p`` close to 0 means greedy and ``p=1`` keeps everything.

    Shapes: logits (..., V) -> (..., V).
    """
    check_probability("top_p", p, allow_zero=False)
    if p == 1.0:  # everything; also spares the last tokens from a cumulative sum that rounds past 1
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (..., V)
    probs = torch.softmax(sorted_logits.float(), dim=-1)  # float32 for a stable cumulative sum
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
    drop_sorted = mass_before >= p  # the set already reached p before this token
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def check_sampling(temperature: float, top_k: int | None, top_p: float | None, greedy: bool) -> None:
    check_bool("greedy", greedy)
    if not greedy:
        check_positive_float("temperature", temperature)
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if top_p is not None:
        check_probability("top_p", top_p, allow_zero=False)


def pick_next(
    logits: Tensor,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    greedy: bool,
    generator: torch.Generator | None,
) -> Tensor:
    """Next token for each row of ``logits`` (B, V) -> (B,)."""
    if greedy:
        return logits.argmax(dim=-1)
    logits = apply_temperature(logits.float(), temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
