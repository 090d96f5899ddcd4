"""Log-probabilities of responses: what SFT minimises, what DPO compares, and the KL to a reference.

A language model's logits at position ``t`` give ``log p(token_{t+1} | tokens_{<= t})``. Fine-tuning scores only
some of those positions: the tokens of the response, not the prompt (the loss mask of :mod:`.chat`). Here a
batch is a pair ``(inputs, labels)`` of shape (B, T): ``labels[b, t]`` is the token that position ``t`` must
predict, or :data:`IGNORE_INDEX` where nothing is scored (prompt, padding). This is the layout of Hugging Face's
``labels`` (already shifted by one here) and of ``F.cross_entropy(..., ignore_index=-100)``.

- ``token_logprobs(logits, labels)``: ``log p(label)`` at every scored position, 0 elsewhere (float32).
- ``sequence_logprobs(model, batch)``: their sum per row, ``log π(response | prompt)``: the quantity of the
  DPO loss (Rafailov et al. 2023, eq. 7), as trl's ``DPOTrainer`` sums its per-token log-probs.
- ``mean_token_kl(policy_logits, ref_logits, labels)``: KL(π ‖ π_ref) over the whole vocabulary at each scored
  position, averaged: how far fine-tuning has moved the model from where it started.

The log-softmax runs in float32 even for a half-precision model (the sum of many small log-probabilities
loses digits otherwise). Checked in tests/test_finetune.py: ``token_logprobs`` equals ``-F.cross_entropy``
position by position, ``sequence_logprobs`` equals the chain rule computed one token at a time, and the KL
equals ``F.kl_div``, is zero against itself and positive otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import check_labels, check_tensor

__all__ = ["IGNORE_INDEX", "token_logprobs", "sequence_logprobs", "mean_token_kl", "check_labelled_batch"]

IGNORE_INDEX = -100  # a label that scores nothing (PyTorch's and Hugging Face's convention)


def check_labelled_batch(batch: object) -> tuple[Tensor, Tensor]:
    """``(inputs, labels)``, two integer tensors of the same shape (B, T); ``TypeError``/``ValueError`` otherwise."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(f"batch must be a pair (inputs, labels) of (B, T) tensors, got {type(batch).__name__}")
    inputs, labels = batch
    check_tensor("inputs", inputs, ndim=2)
    check_tensor("labels", labels, ndim=2)
    if inputs.shape != labels.shape:
        raise ValueError(f"inputs has shape {tuple(inputs.shape)} but labels has {tuple(labels.shape)}; "
                         "expected the same (B, T)")
    if inputs.is_floating_point() or labels.is_floating_point():
        raise TypeError(f"inputs and labels must hold integer token ids, got {inputs.dtype} and {labels.dtype}")
    return inputs, labels


def token_logprobs(logits: Tensor, labels: Tensor) -> Tensor:
    """``log p(labels[b, t])`` under ``logits[b, t]``; 0 where ``labels`` is ``IGNORE_INDEX``.

    Shapes: logits (B, T, V), labels (B, T) -> (B, T) float32.
    """
    check_tensor("logits", logits, ndim=3)
    check_tensor("labels", labels, ndim=2)
    if logits.shape[:2] != labels.shape:
        raise ValueError(f"logits has shape {tuple(logits.shape)} and labels {tuple(labels.shape)}; expected "
                         "logits (B, T, V) for labels (B, T)")
    check_labels("labels", labels, logits.size(-1), ignore_index=IGNORE_INDEX, bound="vocab_size")
    scored = labels != IGNORE_INDEX  # (B, T)
    safe = labels.masked_fill(~scored, 0)  # any valid id; its value is discarded below
    logp = F.log_softmax(logits.float(), dim=-1)  # (B, T, V), float32 for the sums that follow
    picked = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked * scored


def sequence_logprobs(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """``log π(response | prompt)`` of each row: the sum of ``token_logprobs`` over its scored positions.

    Shapes: batch (inputs (B, T), labels (B, T)) -> (B,) float32.
    """
    inputs, labels = check_labelled_batch(batch)
    return token_logprobs(model(inputs), labels).sum(-1)  # (B,)


def mean_token_kl(policy_logits: Tensor, ref_logits: Tensor, labels: Tensor) -> Tensor:
    """Mean over scored positions of KL(π ‖ π_ref) = Σ_v π(v) (log π(v) − log π_ref(v)), in nats.

    An exact per-position KL (every token of the vocabulary counted), not a sampled estimate. A token that π
    gives probability 0 (a logit of -inf) adds nothing, as 0 · log 0 = 0, even where π_ref gives it 0 too.
    Shapes: policy_logits (B, T, V), ref_logits (B, T, V), labels (B, T) -> scalar.
    """
    check_tensor("policy_logits", policy_logits, ndim=3)
    check_tensor("ref_logits", ref_logits, ndim=3)
    if policy_logits.shape != ref_logits.shape or policy_logits.shape[:2] != labels.shape:
        raise ValueError(f"policy_logits {tuple(policy_logits.shape)}, ref_logits {tuple(ref_logits.shape)} and "
                         f"labels {tuple(labels.shape)} do not fit; expected (B, T, V), (B, T, V) and (B, T)")
    check_labels("labels", labels, policy_logits.size(-1), ignore_index=IGNORE_INDEX, bound="vocab_size",
                 require_scored=True)  # fmt: skip
    scored = labels != IGNORE_INDEX  # (B, T)
    logp = F.log_softmax(policy_logits.float(), dim=-1)  # (B, T, V)
    logq = F.log_softmax(ref_logits.float(), dim=-1)  # (B, T, V)
    p = logp.exp()  # (B, T, V)
    # 0 · log(0 / q) = 0: where p = 0 the term is left out (-inf - -inf would be NaN, and so would its gradient)
    kl = (p * torch.where(p > 0, logp - logq, 0.0)).sum(-1)  # (B, T)
    return kl[scored].mean()
