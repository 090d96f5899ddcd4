"""Choosing the next token from logits: temperature, top-k, top-p (nucleus), min-p, a repetition penalty,
and the pick itself.

Pure functions on logits (..., V), shared by :func:`companion.generation.generate` and chapter 9.
References: Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration" (top-p); Fan et al. 2018
(top-k); Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling" (min-p); Keskar et al. 2019, CTRL (the
repetition penalty); OpenAI's API reference (presence and frequency penalties). The functions follow Hugging
Face's ``TopKLogitsWarper``, ``TopPLogitsWarper``, ``MinPLogitsWarper``, ``RepetitionPenaltyLogitsProcessor``
and ``NoRepeatNGramLogitsProcessor``: ties at the k-th logit are kept, top-p keeps the smallest set of most
likely tokens whose probabilities reach ``p``, min-p keeps the tokens at least ``min_p`` times as likely as the
most likely one, the penalty divides a seen token's positive logit (or multiplies its negative one) by
``penalty`` once, however often it was seen, and the n-gram filter blocks every token that would repeat an
n-gram (tests/test_sampling.py checks all five against ``transformers``). The sign-aware penalty is Hugging
Face's; CTRL's paper divides every seen logit by the penalty, which *raises* a negative one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import (
    check_bool,
    check_number,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_tensor,
    check_token_ids,
)

__all__ = [
    "apply_temperature", "pick_next", "top_k_filter", "top_p_filter", "min_p_filter", "apply_repetition_penalty",
    "apply_presence_frequency_penalty", "no_repeat_ngram_filter", "check_sampling",
]  # fmt: skip


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


def min_p_filter(logits: Tensor, min_p: float) -> Tensor:
    """Min-p filter: keep the tokens whose probability is at least ``min_p`` times the largest one's.

    The bar moves with the model's confidence: when one token holds 0.9 and ``min_p=0.1``, only tokens above
    0.09 stay; when the best holds 0.05, every token above 0.005 stays. The most likely token is always kept;
    ``min_p=0`` keeps everything.

    Shapes: logits (..., V) -> (..., V).
    """
    check_probability("min_p", min_p)
    probs = torch.softmax(logits.float(), dim=-1)  # float32: the bar is a ratio of probabilities
    bar = min_p * probs.amax(dim=-1, keepdim=True)  # (..., 1)
    return logits.masked_fill(probs < bar, float("-inf"))


def apply_repetition_penalty(logits: Tensor, previous: Tensor, penalty: float) -> Tensor:
    """Make every token already in ``previous`` less likely (``penalty > 1``) or more likely (``< 1``).

    A seen token's logit z becomes z / penalty if z > 0 and z · penalty otherwise (Hugging Face's sign-aware
    form of CTRL's rule; CTRL divides every seen logit, so a negative one would rise): once per token, however
    many times it occurs. ``penalty=1`` changes nothing.

    Shapes: logits (B, V), previous (B, T) integer ids -> (B, V).
    """
    check_positive_float("repetition_penalty", penalty)
    _check_history(logits, previous)
    return _penalise(logits, previous.long(), penalty)


def apply_presence_frequency_penalty(
    logits: Tensor, previous: Tensor, presence: float = 0.0, frequency: float = 0.0
) -> Tensor:
    """Subtract ``presence`` from the logit of every token seen at least once, and ``frequency`` per occurrence.

    z_j becomes z_j - frequency · c_j - presence · [c_j > 0], where c_j counts token j in ``previous``
    (OpenAI's presence and frequency penalties). Unlike the repetition penalty the shift does not depend on
    the sign of z_j, and the frequency term grows with every repeat. Zero for both changes nothing; negative
    values make repeats more likely.

    Shapes: logits (B, V), previous (B, T) integer ids -> (B, V).
    """
    check_number("presence", presence)
    check_number("frequency", frequency)
    _check_history(logits, previous)
    counts = torch.zeros_like(logits).scatter_add(-1, previous.long(), torch.ones_like(previous, dtype=logits.dtype))
    return logits - frequency * counts - presence * (counts > 0).to(logits.dtype)  # (B, V)


def no_repeat_ngram_filter(logits: Tensor, previous: Tensor, n: int) -> Tensor:
    """Set to -inf every token that would complete an ``n``-gram already present in ``previous``.

    The last n - 1 tokens of each row are the prefix the next token would extend; wherever that prefix
    occurred before, the token that followed it is blocked (Hugging Face's ``no_repeat_ngram_size``). With
    ``n=1`` every seen token is blocked. Rows shorter than ``n`` tokens are left alone.

    Shapes: logits (B, V), previous (B, T) integer ids -> (B, V).
    """
    check_positive_int("no_repeat_ngram_size", n)
    _check_history(logits, previous)
    previous = previous.long()
    if previous.size(1) < n:
        return logits
    grams = previous.unfold(1, n, 1)  # (B, T - n + 1, n): every n-gram so far
    prefix = previous[:, previous.size(1) - n + 1 :]  # (B, n - 1): what the next token would extend
    hit = (grams[..., :-1] == prefix[:, None, :]).all(-1)  # (B, T - n + 1): n-grams with that prefix
    blocked = torch.zeros(logits.shape, dtype=torch.int8, device=logits.device)
    blocked = blocked.scatter_reduce(-1, grams[..., -1], hit.to(torch.int8), reduce="amax")  # (B, V)
    return logits.masked_fill(blocked.bool(), float("-inf"))


def _check_history(logits: Tensor, previous: Tensor) -> None:
    check_tensor("logits", logits, ndim=2)
    check_token_ids("previous", previous, ndim=2, vocab_size=logits.size(-1))
    if previous.size(0) != logits.size(0):
        raise ValueError(f"previous has {previous.size(0)} rows but logits has {logits.size(0)}; expected equal")


def _penalise(logits: Tensor, previous: Tensor, penalty: float) -> Tensor:
    """:func:`apply_repetition_penalty` without the checks (inside the decoding loop: no read-back per step)."""
    seen = logits.gather(-1, previous)  # (B, T): the logits of the tokens seen so far
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, previous, seen)  # a token seen twice is written twice, with the same value


def check_sampling(
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    greedy: bool,
    min_p: float | None = None,
    repetition_penalty: float | None = None,
) -> None:
    check_bool("greedy", greedy)
    if not greedy:
        check_positive_float("temperature", temperature)
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if top_p is not None:
        check_probability("top_p", top_p, allow_zero=False)
    if min_p is not None:
        check_probability("min_p", min_p)
    if repetition_penalty is not None:
        check_positive_float("repetition_penalty", repetition_penalty)


def pick_next(
    logits: Tensor,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    greedy: bool,
    generator: torch.Generator | None,
    min_p: float | None = None,
    repetition_penalty: float | None = None,
    previous: Tensor | None = None,
) -> Tensor:
    """Next token for each row of ``logits`` (B, V) -> (B,).

    In Hugging Face's order: the ``repetition_penalty`` on the ids in ``previous`` (B, T) first, then the
    greedy argmax, or temperature, top-k, top-p and min-p before the draw.
    """
    if repetition_penalty is not None:
        logits = _penalise(logits, previous, repetition_penalty)  # previous: ids the caller checked
    if greedy:
        return logits.argmax(dim=-1)
    logits = apply_temperature(logits.float(), temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    if min_p is not None:
        logits = min_p_filter(logits, min_p)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
