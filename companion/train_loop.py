"""Former home of the training loop, kept so that ``from companion.train_loop import train`` keeps working.

The loop, its losses and its schedule now live in the :mod:`companion.training` package
(``losses``, ``schedule``, ``loop``); import them from ``companion.training``.
"""

from __future__ import annotations

from companion.training.loop import train
from companion.training.losses import LossFn, lm_loss, seq2seq_loss
from companion.training.schedule import TrainConfig, lr_at, make_optimizer

__all__ = ["LossFn", "TrainConfig", "lm_loss", "seq2seq_loss", "lr_at", "make_optimizer", "train"]
