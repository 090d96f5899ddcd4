"""Training: teacher forcing, AdamW with warm-up and cosine decay, checkpoints, data parallelism.

- ``lm_loss`` / ``seq2seq_loss``: the two small adapters between a batch and a loss. Both use teacher
  forcing (the model reads the true previous tokens and predicts the next one at every position) and
  ignore padding in the cross-entropy (``ignore_index``).
- ``train``: one loop for both: AdamW (Loshchilov & Hutter 2019) with linear warm-up then cosine decay,
  gradient-norm clipping, periodic evaluation, a tqdm progress bar; returns a history (list of dicts).
- ``save_checkpoint`` / ``load_checkpoint``: plain ``torch.save`` dicts read back with
  ``torch.load(weights_only=True)``; a bad, truncated or mismatched file raises a ``ValueError`` naming why.
- ``train_translation``: the encoder–decoder of chapter 8 on ``companion.data.toy_translation``.
- ``python -m companion.training`` (or ``torchrun --nproc_per_node=N -m companion.training``): a tiny GPT
  trained with ``DistributedDataParallel`` (gloo on CPU, NCCL on GPU). Each of the N processes takes 1/N of
  the same global batch; DDP averages their gradients, so N processes take the same steps as one process
  on the whole batch (tests/test_training.py checks it).

The schedule and the weight-decay split follow nanoGPT (karpathy/nanoGPT ``train.py``): no decay on
biases, norm weights and other 1-D parameters.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import check_positive_int, check_tensor

__all__ = [
    "TrainConfig", "lm_loss", "seq2seq_loss", "lr_at", "make_optimizer", "train", "save_checkpoint",
    "load_checkpoint", "train_translation", "translation_accuracy", "translate_pairs", "translation_model_config",
    "main",
]

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


# --- checkpoints ---------------------------------------------------------------------------------------

_FORMAT = "companion-checkpoint-v1"


def _plain_config(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if isinstance(config, dict):
        return dict(config)
    raise TypeError(f"config must be a dataclass instance or a dict, got {type(config).__name__}")


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def save_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None, config: Any, step: int
) -> None:
    """Write weights, optimiser state, ``config`` (as a plain dict) and ``step`` to ``path``.

    Only tensors, numbers, strings, lists and dicts are stored, so ``torch.load(weights_only=True)`` reads it.
    """
    check_positive_int("step", step, allow_zero=True)
    state = {
        "format": _FORMAT,
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "config": _plain_config(config),
        "step": step,
    }
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # never leave a half-written checkpoint under the real name


def load_checkpoint(
    path: str | Path, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Read a checkpoint; load its weights into ``model`` and its state into ``optimizer`` when given.

    Returns the whole dict (``model``, ``optimizer``, ``config``, ``step``).
    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for a corrupt or truncated file, a
    file that is not a companion checkpoint, or weights that do not fit ``model`` (the message lists the
    missing and unexpected keys and the shape mismatches).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint path={str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError… depending on the damage
        raise ValueError(f"checkpoint {str(path)!r} is corrupt or truncated and cannot be read: {err}") from err
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise ValueError(f"{str(path)!r} is not a companion checkpoint (expected format={_FORMAT!r})")
    if model is not None:
        model = _unwrap(model)
        expected, found = model.state_dict(), state["model"]
        missing = sorted(set(expected) - set(found))
        unexpected = sorted(set(found) - set(expected))
        shapes = [
            f"{k}: checkpoint {tuple(found[k].shape)} vs model {tuple(expected[k].shape)}"
            for k in expected
            if k in found and found[k].shape != expected[k].shape
        ]
        problems = []
        if missing:
            problems.append(f"missing keys {missing}")
        if unexpected:
            problems.append(f"unexpected keys {unexpected}")
        if shapes:
            problems.append(f"shape mismatch {shapes}")
        if problems:
            raise ValueError(f"checkpoint {str(path)!r} does not fit the model: " + "; ".join(problems))
        model.load_state_dict(found)
    if optimizer is not None:
        if state["optimizer"] is None:
            raise ValueError(f"checkpoint {str(path)!r} holds no optimizer state, but an optimizer was given")
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError) as err:
            raise ValueError(f"optimizer state in {str(path)!r} does not fit the optimizer: {err}") from err
    return state


# --- chapter 8: the toy zh→en translation ----------------------------------------------------------------


def translation_model_config(vocab_size: int) -> Any:
    """The small encoder–decoder of chapter 8: 2 + 2 pre-norm layers, D=64, 4 heads, sinusoidal positions."""
    from companion.models import ModelConfig

    return ModelConfig(
        vocab_size=vocab_size, d_model=64, n_heads=4, n_layers=2, d_ff=256, max_seq_len=32,
        norm="layernorm", norm_placement="pre", activation="relu", positions="sinusoidal", embed_scale=True,
        dropout=0.0,
    )  # fmt: skip


@torch.no_grad()
def translate_pairs(model: nn.Module, data: Any, pairs: list, *, batch_size: int = 500) -> list[list[str]]:
    """Greedy translations (English token lists) of the Chinese side of ``pairs``."""
    from companion.data import encode_batch
    from companion.generation import translate

    out: list[list[str]] = []
    for i in range(0, len(pairs), batch_size):
        src, _ = encode_batch(pairs[i : i + batch_size], data.src_vocab, data.tgt_vocab)
        ids = translate(model, src, data.tgt_vocab.bos_id, data.tgt_vocab.eos_id, max_len=24, src_pad_id=0)
        out += [data.tgt_vocab.decode(row) for row in ids]
    return out


def translation_accuracy(model: nn.Module, data: Any, split: str = "test") -> float:
    """Exact-match rate of greedy translations on ``data.<split>`` (every English word must be right)."""
    from companion._checks import check_choice

    check_choice("split", split, ("train", "val", "test"))
    pairs = getattr(data, split)
    hyps = translate_pairs(model, data, pairs)
    return sum(h == en for h, (_, en) in zip(hyps, pairs)) / len(pairs)


def train_translation(
    data: Any = None,
    *,
    steps: int = 600,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    eval_every: int = 0,
    progress: bool = True,
    num_threads: int | None = 1,
) -> tuple[nn.Module, list[dict[str, float]]]:
    """Train the encoder–decoder of chapter 8 on ``companion.data.toy_translation`` (default: seed 0).

    Returns ``(model, history)``; the model is in eval mode. ``eval_every`` > 0 adds the validation
    exact-match rate (``val_accuracy``) to the history every that many steps.
    ``num_threads``: torch CPU threads while training (restored afterwards; None: leave as is). The
    default is 1: a D=64 model's matrices are too small to gain from intra-op threads, and on a busy
    2-core machine two threads ran 70 times slower than one (threads spin-waiting for each other).
    """
    if num_threads is None:
        return _train_translation(data, steps, batch_size, lr, seed, eval_every, progress)
    check_positive_int("num_threads", num_threads)
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        return _train_translation(data, steps, batch_size, lr, seed, eval_every, progress)
    finally:
        torch.set_num_threads(before)


def _train_translation(
    data: Any, steps: int, batch_size: int, lr: float, seed: int, eval_every: int, progress: bool
) -> tuple[nn.Module, list[dict[str, float]]]:
    from companion.data import encode_batch, toy_translation
    from companion.models import Transformer

    data = data if data is not None else toy_translation(seed)
    torch.manual_seed(seed)
    model = Transformer(translation_model_config(len(data.tgt_vocab)))
    if data.src_vocab is not data.tgt_vocab:
        raise ValueError("data must use one shared vocabulary (toy_translation(shared_vocab=True)): "
                         "companion.models.Transformer shares one embedding table")
    src_all, tgt_all = encode_batch(data.train, data.src_vocab, data.tgt_vocab)  # (N, S), (N, T + 1)
    g = torch.Generator().manual_seed(seed)
    epochs = steps * batch_size // len(src_all) + 1
    order = torch.cat([torch.randperm(len(src_all), generator=g) for _ in range(epochs)])  # shuffled epochs

    def get_batch(step: int) -> tuple[Tensor, Tensor]:
        idx = order[step * batch_size : (step + 1) * batch_size]  # epochs of shuffled sentences
        src, tgt = src_all[idx], tgt_all[idx]
        s, t = int((src != 0).sum(1).max()), int((tgt != 0).sum(1).max())
        return src[:, :s], tgt[:, :t]  # trim columns that are padding in the whole batch

    config = TrainConfig(steps=steps, lr=lr, warmup_steps=min(100, steps // 10 + 1), eval_every=eval_every,
                         weight_decay=0.01, grad_clip=1.0)
    eval_fn = (lambda m: {"val_accuracy": translation_accuracy(m, data, "val")}) if eval_every else None
    history = train(model, get_batch, seq2seq_loss, config, eval_fn=eval_fn, progress=progress)
    return model, history


# --- command line: a tiny GPT, optionally data-parallel under torchrun ---------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m companion.training",
        description="Train a tiny GPT on the course's character corpus or on a Markov source. Run it under "
        "`torchrun --nproc_per_node=N -m companion.training ...` for data parallelism (DDP).",
    )
    p.add_argument("--data", choices=("chars", "markov"), default="chars", help="training text (default: chars)")
    p.add_argument("--steps", type=int, default=200, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=16, help="GLOBAL batch, split evenly over the processes")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per training sequence")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20, help="warm-up steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", default=None, help="write final weights here (rank 0); a path containing "
                   "'{rank}' is written by every process, e.g. out/rank{rank}.pt")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    """Entry point of ``python -m companion.training``; returns the history (of this process's shard)."""
    import torch.distributed as dist

    from companion.data import char_corpus, markov_source
    from companion.models import GPT, ModelConfig

    args = _parse_args(argv)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if world > 1:
        use_cuda = torch.cuda.is_available()
        dist.init_process_group("nccl" if use_cuda else "gloo")  # NCCL for GPUs, gloo for CPUs
        if use_cuda:
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
    if args.batch_size % world:
        raise ValueError(f"--batch-size={args.batch_size} is not divisible by the number of processes {world}")
    shard = slice(rank * args.batch_size // world, (rank + 1) * args.batch_size // world)

    if args.data == "chars":
        text = char_corpus()
        chars = sorted(set(text))
        ids = torch.tensor([chars.index(c) for c in text])
        vocab_size = len(chars)

        def global_batch(g: torch.Generator) -> Tensor:
            starts = torch.randint(len(ids) - args.seq_len - 1, (args.batch_size,), generator=g)
            return torch.stack([ids[s : s + args.seq_len + 1] for s in starts.tolist()])  # (B, T + 1)
    else:
        source = markov_source(vocab_size=16, order=2, seed=args.seed)
        vocab_size = source.vocab_size

        def global_batch(g: torch.Generator) -> Tensor:
            return source.sample_batch(args.batch_size, args.seq_len + 1, g)  # (B, T + 1)

    def get_batch(step: int) -> Tensor:
        # every process draws the same global batch (same seed) and keeps its own rows
        g = torch.Generator().manual_seed(args.seed * 100_003 + step)
        return global_batch(g)[shard].to(device)  # (B / world, T + 1)

    torch.manual_seed(args.seed)  # identical initial weights everywhere (DDP also broadcasts rank 0's)
    model_config = ModelConfig(
        vocab_size=vocab_size, d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers,
        d_ff=4 * args.d_model, max_seq_len=args.seq_len, dropout=0.0,
    )  # fmt: skip
    model: nn.Module = GPT(model_config).to(device)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    config = TrainConfig(steps=args.steps, lr=args.lr, warmup_steps=args.warmup)
    start = time.perf_counter()
    history = train(model, get_batch, lm_loss, config, progress=not args.no_progress and rank == 0)
    if args.save and ("{rank}" in args.save or rank == 0):
        save_checkpoint(args.save.format(rank=rank), model, None, model_config, args.steps)
    if rank == 0:
        print(f"{world} process(es), {args.steps} steps in {time.perf_counter() - start:.1f} s; "
              f"last loss (rank 0's shard) {history[-1]['loss']:.4f}")
    if world > 1:
        dist.destroy_process_group()
    return history


if __name__ == "__main__":
    main()
