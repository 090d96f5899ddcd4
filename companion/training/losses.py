"""Losses: the small adapters between a batch and a scalar loss, one per kind of training.

- ``lm_loss`` / ``seq2seq_loss``: teacher forcing (the model reads the true previous tokens and predicts the
  next one at every position), padding left out of the cross-entropy (``ignore_index``): the mean is over the
  real target tokens of the batch. ``label_smoothing=ε`` scores every position against (1 − ε)·one-hot + ε/V
  instead of the one-hot target (Szegedy et al. 2016; Vaswani et al. 2017 use ε = 0.1).
- ``mlm_loss``: BERT's masked-LM loss, scored only where ``mask_tokens`` chose a token; the MLM head runs on
  those positions alone.
- ``classification_loss``: one label per sequence (``SequenceClassifier``, ``ViT``) or per token
  (``TokenClassifier``, -100 = not scored), with the labels checked against the number of classes.

The log-softmax runs in float32 even for a half-precision model. Checked in ``tests/test_training.py`` and
``tests/test_heads.py``: the losses equal ``F.cross_entropy`` on hand-shifted targets, on a teacher-forced
forward and on the full MLM logits, and extra padding changes nothing; ``tests/test_label_smoothing.py``: the
smoothed loss equals its formula written out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import check_labels, check_probability, check_tensor

__all__ = ["LossFn", "classification_loss", "lm_loss", "mlm_loss", "seq2seq_loss"]

LossFn = Callable[[nn.Module, Any], Tensor]  # (model, batch) -> scalar loss: the type of train's loss_fn


def lm_loss(model: nn.Module, batch: Tensor, *, pad_id: int | None = None, label_smoothing: float = 0.0) -> Tensor:
    """Next-token cross-entropy of a decoder-only model on ``batch`` (B, T + 1).

    The model reads ``batch[:, :-1]`` and is scored on ``batch[:, 1:]`` (targets shifted by one).
    Positions whose target is ``pad_id`` are ignored; ``label_smoothing`` as in the module docstring.
    Shapes: batch (B, T + 1) -> scalar.
    """
    check_tensor("batch", batch, ndim=2)
    if batch.size(1) < 2:
        raise ValueError(f"batch has shape {tuple(batch.shape)}; expected (B, T + 1) with T >= 1 "
                         "(one input and one target token at least)")
    inputs, targets = batch[:, :-1], batch[:, 1:]  # (B, T), (B, T)
    logits = model(inputs)  # (B, T, V)
    return _cross_entropy(logits, targets, pad_id, label_smoothing)


def seq2seq_loss(
    model: nn.Module, batch: tuple[Tensor, Tensor], *, pad_id: int = 0, label_smoothing: float = 0.0
) -> Tensor:
    """Teacher-forced cross-entropy of an encoder–decoder on ``(src, tgt)``.

    ``tgt`` is ``<bos> y_1 … y_n <eos> <pad>…``: the decoder reads ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``;
    padded source positions are masked out of attention, padded targets out of the loss (the mean is over
    the real target tokens); ``label_smoothing`` as in the module docstring.
    Shapes: src (B, S), tgt (B, T + 1) -> scalar.
    """
    from companion.masks import padding_mask

    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(f"batch must be a pair (src, tgt) of tensors, got {type(batch).__name__}")
    src, tgt = batch
    check_tensor("src", src, ndim=2)
    check_tensor("tgt", tgt, ndim=2)
    if tgt.size(1) < 2:
        raise ValueError(f"tgt has shape {tuple(tgt.shape)}; expected (B, T + 1) with T >= 1")
    src_padding = padding_mask(src, pad_id)  # (B, 1, 1, S): True = a real token
    memory = model.encode(src, src_padding)  # (B, S, D)
    logits = model.decode(tgt[:, :-1], memory, src_padding)  # (B, T, V); the third argument: padding of memory
    return _cross_entropy(logits, tgt[:, 1:], pad_id, label_smoothing)


def mlm_loss(model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
    """Masked-LM cross-entropy of an ``Encoder`` on ``(inputs, labels)`` or ``(inputs, labels, padding_mask)``
    from ``mask_tokens``: labels hold the original id where a token was chosen, -100 elsewhere.

    Only the chosen positions (15 %) are scored, so the MLM head (D -> V) runs on those vectors alone; the
    loss equals ``F.cross_entropy(model(inputs).flatten(0, 1), labels.flatten())`` with -100 ignored.
    Shapes: inputs (B, S), labels (B, S) -> scalar.
    """
    inputs, labels, padding = _unpack(batch)
    check_tensor("labels", labels, ndim=2)
    if labels.shape != inputs.shape:
        raise ValueError(f"labels has shape {tuple(labels.shape)}; expected the shape of inputs {tuple(inputs.shape)}")
    check_labels("labels", labels, model.config.vocab_size, bound="vocab_size", require_scored=True)
    chosen = labels != -100  # (B, S)
    h = model.hidden_states(inputs, padding)  # (B, S, D)
    logits = model.mlm_logits(h[chosen])  # (N_chosen, V): the head only where there is something to predict
    return F.cross_entropy(logits.float(), labels[chosen])


def classification_loss(model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
    """Cross-entropy of a classifier on ``(inputs, labels)``, ``(inputs, labels, padding_mask)`` or
    ``(inputs, labels, padding_mask, token_type_ids)`` (sentence pairs: segment A = 0, B = 1).

    ``model(inputs[, padding_mask])`` gives (B, K) logits with labels (B,) (a ``SequenceClassifier``, a
    ``ViT``), or (B, S, K) logits with labels (B, S), -100 where a token is not scored (a ``TokenClassifier``).
    Raises ``ValueError`` for labels outside [0, K) (naming the label), of the wrong shape, or all -100.
    """
    inputs, labels, padding = _unpack(batch, allow_types=True)
    if len(batch) == 4:
        logits = model(inputs, padding, batch[3])  # (B, K): a pair, with its token types
    else:
        logits = model(inputs) if padding is None else model(inputs, padding)  # (B, K) or (B, S, K)
    k = logits.size(-1)
    check_labels("labels", labels, k, require_scored=True)
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels has shape {tuple(labels.shape)}; expected {tuple(logits.shape[:-1])}, one label "
                         f"per row of the model's {tuple(logits.shape)} logits")
    return F.cross_entropy(logits.reshape(-1, k).float(), labels.reshape(-1), ignore_index=-100)


def _unpack(batch: tuple[Tensor, ...], allow_types: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    lengths = (2, 3, 4) if allow_types else (2, 3)
    if not isinstance(batch, (tuple, list)) or len(batch) not in lengths:
        expected = "(inputs, labels) or (inputs, labels, padding_mask)" + (
            " or (inputs, labels, padding_mask, token_type_ids)" if allow_types else "")
        raise TypeError(f"batch must be {expected}, got {type(batch).__name__}"
                        + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else ""))
    inputs, labels = batch[0], batch[1]
    return inputs, labels, batch[2] if len(batch) == 3 else None


def _cross_entropy(logits: Tensor, targets: Tensor, pad_id: int | None, label_smoothing: float) -> Tensor:
    check_probability("label_smoothing", label_smoothing, allow_one=False)
    v = logits.size(-1)
    ignore = -100 if pad_id is None else pad_id
    # float32 for the log-softmax even when the model runs in half precision
    return F.cross_entropy(logits.reshape(-1, v).float(), targets.reshape(-1), ignore_index=ignore,
                           label_smoothing=label_smoothing)  # (B*T, V) -> scalar
