"""Training: teacher-forced losses, AdamW with warm-up and cosine decay, the loop, checkpoints, trainers.

Import from here (``from companion.training import train, lm_loss``); one concept per module, each importing
only the ones listed before it:

- :mod:`companion.training.losses` -- ``lm_loss`` / ``seq2seq_loss`` (teacher forcing, padding ignored),
  ``mlm_loss`` (BERT's masked LM) and ``classification_loss`` (sequence and token classification).
- :mod:`companion.training.schedule` -- ``TrainConfig`` (validated settings), ``make_optimizer`` (AdamW,
  Loshchilov & Hutter 2019, no decay on 1-D parameters, as in karpathy/nanoGPT ``train.py``) and ``lr_at``
  (linear warm-up then cosine decay).
- :mod:`companion.training.loop` -- ``train``: gradient-norm clipping, periodic evaluation, a tqdm progress
  bar, resuming at ``start_step``; returns a history (a list of dicts).
- :mod:`companion.training.checkpoints` -- ``save_checkpoint`` / ``load_checkpoint``: atomic, plain
  ``torch.save`` dicts read back with ``torch.load(weights_only=True)``.
- :mod:`companion.training.translation` -- ``train_translation`` and friends: chapter 8's encoder–decoder on
  ``companion.data.toy_translation``.
- :mod:`companion.training.scaling_sweep` -- ``scaling_sweep``: chapter 10's ladder of small GPTs on a source
  of known entropy, for fitting a scaling law.
- :mod:`companion.training.ddp` -- data parallelism: the command line ``python -m companion.training`` (or
  ``torchrun --nproc_per_node=N -m companion.training``), a tiny GPT trained with DistributedDataParallel.
  It is not imported here (``python -m companion.training`` runs it); import it by its name.
"""

from __future__ import annotations

from companion.training.checkpoints import load_checkpoint, save_checkpoint
from companion.training.loop import train
from companion.training.losses import LossFn, classification_loss, lm_loss, mlm_loss, seq2seq_loss
from companion.training.scaling_sweep import scaling_sweep
from companion.training.schedule import TrainConfig, lr_at, make_optimizer
from companion.training.translation import (
    chrf,
    train_translation,
    translate_pairs,
    translation_accuracy,
    translation_model_config,
)

__all__ = [
    "TrainConfig", "LossFn", "lm_loss", "seq2seq_loss", "mlm_loss", "classification_loss", "lr_at", "make_optimizer",
    "train", "save_checkpoint",
    "load_checkpoint", "train_translation", "translation_accuracy", "translate_pairs", "translation_model_config",
    "scaling_sweep", "chrf",
]  # fmt: skip
