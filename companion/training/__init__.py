"""Training: teacher-forced losses, AdamW with warm-up and cosine decay, the loop, checkpoints.

Import everything from here (``from companion.training import train, lm_loss``); the parts live in:

- :mod:`companion.training.losses` -- ``lm_loss`` / ``seq2seq_loss`` (teacher forcing, padding ignored).
- :mod:`companion.training.schedule` -- ``TrainConfig`` (validated settings), ``make_optimizer`` (AdamW,
  Loshchilov & Hutter 2019, no decay on 1-D parameters, as in karpathy/nanoGPT ``train.py``) and ``lr_at``
  (linear warm-up then cosine decay).
- :mod:`companion.training.loop` -- ``train``: gradient-norm clipping, periodic evaluation, a tqdm progress
  bar, resuming at ``start_step``; returns a history (a list of dicts).
- :mod:`companion.checkpoints` -- ``save_checkpoint`` / ``load_checkpoint`` (re-exported): atomic, plain
  ``torch.save`` dicts read back with ``torch.load(weights_only=True)``.
- :mod:`companion.translation` -- ``train_translation`` and friends (re-exported): chapter 8's
  encoder–decoder on ``companion.data.toy_translation``.
- :mod:`companion.training.ddp` -- the command line ``python -m companion.training`` (or
  ``torchrun --nproc_per_node=N -m companion.training``): a tiny GPT trained with DistributedDataParallel;
  its entry point is re-exported as ``main``.

The translation names and ``main`` are loaded on first use (PEP 562), which keeps ``companion.translation``
(which imports this package) free of an import cycle.
"""

from __future__ import annotations

import importlib
from typing import Any

from companion.checkpoints import load_checkpoint, save_checkpoint
from companion.training.loop import train
from companion.training.losses import LossFn, lm_loss, seq2seq_loss
from companion.training.schedule import TrainConfig, lr_at, make_optimizer

__all__ = [
    "TrainConfig", "LossFn", "lm_loss", "seq2seq_loss", "lr_at", "make_optimizer", "train", "save_checkpoint",
    "load_checkpoint", "train_translation", "translation_accuracy", "translate_pairs", "translation_model_config",
    "main",
]

_LAZY = {
    "train_translation": "companion.translation",
    "translation_accuracy": "companion.translation",
    "translate_pairs": "companion.translation",
    "translation_model_config": "companion.translation",
    "main": "companion.training.ddp",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
