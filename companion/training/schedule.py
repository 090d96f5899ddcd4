"""The optimiser and its learning-rate schedule: ``TrainConfig``, ``make_optimizer``, ``lr_at``.

AdamW (Loshchilov & Hutter 2019) with linear warm-up then cosine decay to ``lr * min_lr_ratio``; weight
decay on matrices and embeddings only, not on biases, norm weights or other 1-D parameters. Schedule and
decay split follow karpathy/nanoGPT ``train.py``. ``TrainConfig`` validates every field when it is built,
so a bad setting fails at once with a message naming the field, not as a NaN loss a thousand steps later.

Checked in ``tests/test_training.py``: the schedule's warm-up, mid-point and end point, the parameter
groups, and one error test per field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from companion._checks import check_positive_float, check_positive_int, check_probability

__all__ = ["TrainConfig", "lr_at", "make_optimizer"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of ``train``; every field is checked in ``__post_init__``."""

    steps: int = 1000  # optimiser steps (>= 1)
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up (finite, > 0)
    min_lr_ratio: float = 0.1  # the cosine decays to lr * min_lr_ratio at the last step (in [0, 1])
    warmup_steps: int = 100  # linear warm-up from lr / warmup_steps to lr (>= 0; 0: start at the peak)
    weight_decay: float = 0.01  # AdamW decoupled weight decay, matrices and embeddings only (finite, >= 0)
    betas: tuple[float, float] = (0.9, 0.98)  # Adam moment decay rates, each in [0, 1) (0.98: Vaswani 2017)
    grad_clip: float | None = 1.0  # clip the global gradient norm to this value (> 0); None: no clipping
    eval_every: int = 0  # call eval_fn every this many steps (and at the end); 0: only at the end

    def __post_init__(self) -> None:
        check_positive_int("TrainConfig.steps", self.steps)
        check_positive_float("TrainConfig.lr", self.lr)
        check_probability("TrainConfig.min_lr_ratio", self.min_lr_ratio)
        check_positive_int("TrainConfig.warmup_steps", self.warmup_steps, allow_zero=True)
        check_positive_float("TrainConfig.weight_decay", self.weight_decay, allow_zero=True)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise TypeError(f"TrainConfig.betas={self.betas!r} is invalid; expected a pair (beta1, beta2)")
        for k, beta in enumerate(self.betas):
            check_probability(f"TrainConfig.betas[{k}]", beta, allow_one=False)
        object.__setattr__(self, "betas", tuple(self.betas))
        if self.grad_clip is not None:
            check_positive_float("TrainConfig.grad_clip", self.grad_clip)
        check_positive_int("TrainConfig.eval_every", self.eval_every, allow_zero=True)


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate for optimiser step ``step`` (0-based): linear warm-up, then cosine to ``min_lr_ratio``."""
    check_positive_int("step", step, allow_zero=True)
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    decay_steps = max(1, config.steps - 1 - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    floor = config.lr * config.min_lr_ratio
    return floor + 0.5 * (config.lr - floor) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings (ndim >= 2) only, not on biases or norm weights."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"model ({type(model).__name__}) has no trainable parameters; expected at least one")
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)
