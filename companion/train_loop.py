"""The training loop: teacher forcing, AdamW with warm-up and cosine decay, gradient clipping.

- ``lm_loss`` / ``seq2seq_loss``: the two small adapters between a batch and a loss. Both use teacher
  forcing (the model reads the true previous tokens and predicts the next one at every position) and
  ignore padding in the cross-entropy (``ignore_index``).
- ``train``: one loop for both: AdamW (Loshchilov & Hutter 2019) with linear warm-up then cosine decay,
  gradient-norm clipping, periodic evaluation, a tqdm progress bar; returns a history (list of dicts).

The schedule and the weight-decay split follow nanoGPT (karpathy/nanoGPT ``train.py``): no decay on
biases, norm weights and other 1-D parameters. Checked in ``tests/test_training.py``: the losses equal
``F.cross_entropy`` on hand-shifted targets and a teacher-forced forward, the schedule's warm-up, mid-point
and end point, the parameter groups, clipping to exactly ``grad_clip``, and a fixed batch being fitted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import check_positive_int, check_tensor

__all__ = ["LossFn", "TrainConfig", "lm_loss", "seq2seq_loss", "lr_at", "make_optimizer", "train"]

LossFn = Callable[[nn.Module, Any], Tensor]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of ``train``."""

    steps: int = 1000  # optimiser steps
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    min_lr_ratio: float = 0.1  # the cosine decays to lr * min_lr_ratio at the last step
    warmup_steps: int = 100  # linear warm-up from lr / warmup_steps to lr
    weight_decay: float = 0.01  # AdamW decoupled weight decay (matrices and embeddings only)
    betas: tuple[float, float] = (0.9, 0.98)  # Adam moment decay rates (0.98 as in Vaswani et al. 2017)
    grad_clip: float | None = 1.0  # clip the global gradient norm to this value; None: no clipping
    eval_every: int = 0  # call eval_fn every this many steps (and at the end); 0: only at the end


def lm_loss(model: nn.Module, batch: Tensor, *, pad_id: int | None = None) -> Tensor:
    """Next-token cross-entropy of a decoder-only model on ``batch`` (B, T + 1).

    The model reads ``batch[:, :-1]`` and is scored on ``batch[:, 1:]`` (targets shifted by one).
    Positions whose target is ``pad_id`` are ignored.
    Shapes: batch (B, T + 1) -> scalar.
    """
    check_tensor("batch", batch, ndim=2)
    inputs, targets = batch[:, :-1], batch[:, 1:]  # (B, T), (B, T)
    logits = model(inputs)  # (B, T, V)
    return _cross_entropy(logits, targets, pad_id)


def seq2seq_loss(model: nn.Module, batch: tuple[Tensor, Tensor], *, pad_id: int = 0) -> Tensor:
    """Teacher-forced cross-entropy of an encoder–decoder on ``(src, tgt)``.

    ``tgt`` is ``<bos> y_1 … y_n <eos> <pad>…``: the decoder reads ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``;
    padded source positions are masked out of attention, padded targets out of the loss.
    Shapes: src (B, S), tgt (B, T + 1) -> scalar.
    """
    from companion.masks import padding_mask

    src, tgt = batch
    check_tensor("src", src, ndim=2)
    check_tensor("tgt", tgt, ndim=2)
    src_mask = padding_mask(src, pad_id)  # (B, 1, 1, S): True = a real token
    memory = model.encode(src, src_mask)  # (B, S, D)
    logits = model.decode(tgt[:, :-1], memory, memory_mask=src_mask)  # (B, T, V)
    return _cross_entropy(logits, tgt[:, 1:], pad_id)


def _cross_entropy(logits: Tensor, targets: Tensor, pad_id: int | None) -> Tensor:
    v = logits.size(-1)
    ignore = -100 if pad_id is None else pad_id
    # float32 for the log-softmax even when the model runs in half precision
    return F.cross_entropy(logits.reshape(-1, v).float(), targets.reshape(-1), ignore_index=ignore)  # (B*T, V)


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate for optimiser step ``step`` (0-based): linear warm-up, then cosine to ``min_lr_ratio``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    decay_steps = max(1, config.steps - 1 - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    floor = config.lr * config.min_lr_ratio
    return floor + 0.5 * (config.lr - floor) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings (ndim >= 2) only, not on biases or norm weights."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)


def train(
    model: nn.Module,
    get_batch: Callable[[int], Any],
    loss_fn: LossFn,
    config: TrainConfig,
    *,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    progress: bool = True,
    start_step: int = 0,
) -> list[dict[str, float]]:
    """Run ``config.steps`` optimiser steps; return one dict per step (``step``, ``loss``, ``lr``, ``grad_norm``).

    ``get_batch(step)`` returns the batch of that step, ``loss_fn(model, batch)`` its scalar loss (use
    ``lm_loss`` or ``seq2seq_loss``). ``eval_fn(model)`` is called under ``torch.no_grad`` in eval mode every
    ``config.eval_every`` steps and after the last step; its results are merged into that step's dict.
    ``model`` may be wrapped in ``DistributedDataParallel``: the gradients are then averaged over processes.
    """
    check_positive_int("config.steps", config.steps)
    optimizer = optimizer or make_optimizer(model, config)
    history: list[dict[str, float]] = []
    steps = range(start_step, config.steps)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(steps, desc="train", leave=False)
    model.train()
    for step in steps:
        lr = lr_at(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = loss_fn(model, get_batch(step))
        if not torch.isfinite(loss):
            raise ValueError(f"the loss became {loss.item()} at step {step}; lower TrainConfig.lr={config.lr}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = config.grad_clip if config.grad_clip is not None else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        record = {"step": step + 1, "loss": loss.item(), "lr": lr, "grad_norm": float(grad_norm)}
        last = step == config.steps - 1
        if eval_fn is not None and (last or (config.eval_every and (step + 1) % config.eval_every == 0)):
            model.eval()
            with torch.no_grad():
                record.update(eval_fn(model))
            model.train()
        history.append(record)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}")
    if bar is not None:
        bar.close()
    model.eval()
    return history
