"""The training loop: ``train`` runs optimiser steps on batches, with clipping, evaluation and a progress bar.

One loop for every model of the course: ``get_batch(step)`` supplies the data, ``loss_fn(model, batch)``
(``lm_loss`` or ``seq2seq_loss`` from :mod:`companion.training.losses`) turns it into a loss, ``TrainConfig``
(:mod:`companion.training.schedule`) sets AdamW and the learning-rate schedule. ``start_step`` resumes a run
from a checkpoint: the schedule continues where it stopped. ``model`` may be wrapped in
``DistributedDataParallel``; the gradients are then averaged over processes.

Checked in ``tests/test_training.py``: a fixed batch is fitted, the history, evaluation in eval mode,
clipping to exactly ``grad_clip``, resuming equals one uninterrupted run, and bad arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from companion._checks import check_bool, check_positive_int
from companion.training.losses import LossFn
from companion.training.schedule import TrainConfig, lr_at, make_optimizer

__all__ = ["train"]


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
    """Run optimiser steps ``start_step`` .. ``config.steps - 1``; return one dict per step run.

    Each dict holds ``step`` (1-based), ``loss``, ``lr`` and ``grad_norm`` (before clipping).
    ``get_batch(step)`` returns the batch of that step, ``loss_fn(model, batch)`` its scalar loss.
    ``eval_fn(model)`` is called under ``torch.no_grad`` in eval mode every ``config.eval_every`` steps and
    after the last step; its dict is merged into that step's record. ``start_step`` (0 <= start_step <=
    config.steps; the ``step`` a checkpoint stored) resumes a run: pass the optimiser restored with
    ``load_checkpoint`` too, so that Adam's moments continue. The model is left in eval mode.

    Raises ``TypeError`` / ``ValueError`` naming the argument for bad arguments, and ``ValueError`` if the
    loss is not a finite scalar (a NaN usually means the learning rate is too high).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, fn in (("get_batch", get_batch), ("loss_fn", loss_fn)):
        if not callable(fn):
            raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if eval_fn is not None and not callable(eval_fn):
        raise TypeError(f"eval_fn must be callable or None, got {type(eval_fn).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    check_bool("progress", progress)
    check_positive_int("start_step", start_step, allow_zero=True)
    if start_step > config.steps:
        raise ValueError(f"start_step={start_step} is past the end of training; expected 0 <= start_step <= "
                         f"config.steps={config.steps}")

    optimizer = optimizer or make_optimizer(model, config)
    history: list[dict[str, float]] = []
    steps = range(start_step, config.steps)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(steps, desc="train", leave=False)
    max_norm = config.grad_clip if config.grad_clip is not None else float("inf")
    model.train()
    for step in steps:
        lr = lr_at(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = loss_fn(model, get_batch(step))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ValueError(f"loss_fn returned {shape}; expected a scalar tensor (the mean loss of the batch)")
        if not torch.isfinite(loss):
            raise ValueError(f"the loss became {loss.item()} at step {step}; lower TrainConfig.lr={config.lr}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        record = {"step": step + 1, "loss": loss.item(), "lr": lr, "grad_norm": float(grad_norm)}
        last = step == config.steps - 1
        if eval_fn is not None and (last or (config.eval_every and (step + 1) % config.eval_every == 0)):
            model.eval()
            with torch.no_grad():
                metrics = eval_fn(model)
            if not isinstance(metrics, dict):
                raise TypeError(f"eval_fn returned {type(metrics).__name__}; expected a dict of metrics")
            record.update(metrics)
            model.train()
        history.append(record)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}")
    if bar is not None:
        bar.close()
    model.eval()
    return history
