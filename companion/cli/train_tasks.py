"""What one step of ``companion-train`` trains on, three ways: a text, chats (``--chat``), preferences (``--dpo``).

The loop in :mod:`companion.cli.train` is the same for all three (warm-up and cosine, clipping, micro-batches,
checkpoints, Ctrl-C, resume); a task says what a batch is, what its loss is and how validation scores it:

- ``TextTask``: windows of the run's token ids (``companion.data.TokenData``), ``lm_loss``; validation in nats
  per token and bits per byte (``companion.cli.eval.score_windows``).
- ``ChatTask``: random conversations rendered with the chat template, padded into an ``sft_batch``; ``sft_loss``,
  the cross-entropy of the assistant's tokens only. Validation: the same loss per response token over the held-out
  conversations, and per byte of those responses.
- ``DPOTask``: random preference pairs, each a (chosen, rejected) pair of rows; ``dpo_loss`` against a frozen
  reference, the starting model (Rafailov et al. 2023). Every step also logs the implicit **reward margin**
  β (log π/π_ref (chosen) − log π/π_ref (rejected)), the **accuracy** (pairs whose margin is positive) and the
  **KL** from the reference per response token (``mean_token_kl``), on the batch and on the held-out pairs.

A batch is a tensor or a tuple of tensors whose first dimension is the examples, so the loop can take one
process's share of the rows (``torchrun``) and cut it into micro-batches (``--grad-accum``) without knowing which.
Batches depend only on (seed, step): a resumed run sees the ones an unbroken run would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from companion.cli.eval import Score, score_windows
from companion.cli.machine import autocast
from companion.data import TokenData
from companion.finetune import (
    IGNORE_INDEX,
    dpo_loss,
    implicit_rewards,
    mean_token_kl,
    sft_batch,
    sft_loss,
    token_logprobs,
)
from companion.training import lm_loss

__all__ = ["Batch", "Evaluation", "TextTask", "ChatTask", "DPOTask", "rows", "to_device", "micro_batches"]

Batch = Tensor | tuple[Tensor, ...]
Encoded = tuple[list[int], list[bool]]  # (ids, loss mask) of one conversation, from encode_chat


@dataclass(frozen=True)
class Evaluation:
    """A validation score: the mean loss, bits per byte where they mean something, a task's other numbers."""

    loss: float  # mean validation loss: nats per token (text, chat) or per pair (DPO)
    bits_per_byte: float | None  # the summed loss in bits over the UTF-8 bytes predicted; None for DPO
    metrics: dict[str, float] = field(default_factory=dict)  # DPO: reward_margin, accuracy, kl

    @classmethod
    def of(cls, score: Score) -> Evaluation:
        return cls(score.loss, score.bits_per_byte)


def rows(batch: Batch, index: Any) -> Batch:
    """The rows ``index`` of every tensor of the batch."""
    return batch[index] if isinstance(batch, Tensor) else tuple(t[index] for t in batch)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return batch.to(device) if isinstance(batch, Tensor) else tuple(t.to(device) for t in batch)


def micro_batches(batch: Batch, n: int) -> list[Batch]:
    """The batch cut into ``n`` micro-batches of (nearly) equal rows."""
    if isinstance(batch, Tensor):
        return list(batch.tensor_split(n))
    return list(zip(*(t.tensor_split(n) for t in batch), strict=True))


def _seeded_picks(seed: int, step: int, n: int, batch_size: int) -> list[int]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)  # the rule of TokenData.train_batch
    return torch.randint(n, (batch_size,), generator=g).tolist()


class TextTask:
    """Next-token prediction on windows of a text (the run's ``tokens.bin``)."""

    columns: tuple[str, ...] = ()  # numbers logged per step besides the loss

    def __init__(self, data: TokenData, lengths: Tensor, eval_windows: int) -> None:
        self.data, self.lengths = data, lengths
        self.val = data.val_batches(eval_windows)
        self.n_train, self.n_val, self.unit = data.n_train, data.n_val, "tokens"

    def batch(self, step: int) -> Tensor:
        return self.data.train_batch(step)  # (B, T + 1)

    def weight(self, micro: Tensor) -> int:
        return 1  # every window has T targets: micro-batches weigh the same

    def loss(self, model: nn.Module, micro: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        return lm_loss(model, micro), {}

    def evaluate(self, model: nn.Module, device: torch.device, dtype: str) -> Evaluation:
        return Evaluation.of(score_windows(model, self.val, self.lengths, device, dtype))


class ChatTask:
    """Supervised fine-tuning on conversations: the assistant's tokens carry the loss, nothing else does."""

    columns: tuple[str, ...] = ()

    def __init__(self, train: Sequence[Encoded], val: Sequence[Encoded], pad_id: int, batch_size: int, seed: int,
                 lengths: Tensor) -> None:  # fmt: skip
        self.train, self.val, self.pad_id = list(train), list(val), pad_id
        self.batch_size, self.seed, self.lengths = batch_size, seed, lengths
        self.n_train, self.n_val, self.unit = len(self.train), len(self.val), "conversations"

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        picks = _seeded_picks(self.seed, step, self.n_train, self.batch_size)
        return sft_batch([self.train[k] for k in picks], self.pad_id)  # inputs (B, T), labels (B, T)

    def weight(self, micro: tuple[Tensor, Tensor]) -> int:
        return int((micro[1] != IGNORE_INDEX).sum())  # the mean is over response tokens, whatever the micro-batch

    def loss(self, model: nn.Module, micro: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        return sft_loss(model, micro), {}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, device: torch.device, dtype: str) -> Evaluation:
        was_training = model.training
        model.eval()
        nats, n_tokens, n_bytes = 0.0, 0, 0
        for i in range(0, self.n_val, self.batch_size):
            inputs, labels = to_device(sft_batch(self.val[i : i + self.batch_size], self.pad_id), device)
            with autocast(device, dtype):
                logits = model(inputs)  # (B, T, V)
            scored = labels != IGNORE_INDEX  # (B, T)
            nats -= token_logprobs(logits, labels).sum().item()
            n_tokens += int(scored.sum())
            n_bytes += int(self.lengths.to(device)[labels[scored]].sum())
        model.train(was_training)
        return Evaluation.of(Score(nats, n_tokens, n_bytes))


class DPOTask:
    """Direct preference optimisation against a frozen reference (the model the run started from)."""

    columns = ("reward_margin", "accuracy", "kl")

    def __init__(self, train: Sequence[tuple[Encoded, Encoded]], val: Sequence[tuple[Encoded, Encoded]],
                 pad_id: int, batch_size: int, seed: int, reference: nn.Module, beta: float) -> None:  # fmt: skip
        self.train, self.val, self.pad_id = list(train), list(val), pad_id
        self.batch_size, self.seed, self.beta = batch_size, seed, beta
        self.reference = reference.requires_grad_(False).eval()
        self.n_train, self.n_val, self.unit = len(self.train), len(self.val), "preference pairs"

    def _pairs(self, pairs: Sequence[tuple[Encoded, Encoded]]) -> tuple[Tensor, Tensor]:
        """Pairs as (inputs, labels) of shape (B, 2, T): row 0 the chosen answer, row 1 the rejected one."""
        inputs, labels = sft_batch([p[0] for p in pairs] + [p[1] for p in pairs], self.pad_id)  # (2B, T)
        b = len(pairs)
        return (torch.stack([inputs[:b], inputs[b:]], dim=1),  # (B, 2, T)
                torch.stack([labels[:b], labels[b:]], dim=1))  # fmt: skip

    def batch(self, step: int) -> tuple[Tensor, Tensor]:
        picks = _seeded_picks(self.seed, step, self.n_train, self.batch_size)
        return self._pairs([self.train[k] for k in picks])

    def weight(self, micro: tuple[Tensor, Tensor]) -> int:
        return micro[0].size(0)  # pairs

    def loss(self, model: nn.Module, micro: tuple[Tensor, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        b, _, t = micro[0].shape
        inputs, labels = micro[0].reshape(2 * b, t), micro[1].reshape(2 * b, t)  # (2B, T): chosen, rejected, ...
        logits = model(inputs)  # (2B, T, V)
        with torch.no_grad():
            ref_logits = self.reference(inputs)  # (2B, T, V)
        logps = token_logprobs(logits, labels).sum(-1).view(b, 2)  # (B, 2): log π(answer | prompt)
        ref = token_logprobs(ref_logits, labels).sum(-1).view(b, 2)  # (B, 2)
        loss = dpo_loss(logps[:, 0], logps[:, 1], ref[:, 0], ref[:, 1], self.beta)
        with torch.no_grad():
            margin = (implicit_rewards(logps[:, 0], ref[:, 0], self.beta)
                      - implicit_rewards(logps[:, 1], ref[:, 1], self.beta))  # (B,)  # fmt: skip
            metrics = {"reward_margin": margin.mean(), "accuracy": (margin > 0).float().mean(),
                       "kl": mean_token_kl(logits, ref_logits, labels)}  # fmt: skip
        return loss, metrics

    @torch.no_grad()
    def evaluate(self, model: nn.Module, device: torch.device, dtype: str) -> Evaluation:
        was_training = model.training
        model.eval()
        totals = {"loss": 0.0, **dict.fromkeys(self.columns, 0.0)}
        for i in range(0, self.n_val, self.batch_size):
            micro = to_device(self._pairs(self.val[i : i + self.batch_size]), device)
            with autocast(device, dtype):
                loss, metrics = self.loss(model, micro)
            n = micro[0].size(0)
            totals["loss"] += loss.item() * n
            for key, value in metrics.items():
                totals[key] += value.item() * n  # KL: weighted by pairs, close to per token for like lengths
        model.train(was_training)
        return Evaluation(totals["loss"] / self.n_val, None, {key: totals[key] / self.n_val for key in self.columns})

