"""Training: teacher forcing, AdamW with warm-up and cosine decay, checkpoints, data parallelism.

Import everything from here (``from companion.training import train, lm_loss``); the parts live in:

- :mod:`companion.train_loop` -- ``lm_loss`` / ``seq2seq_loss`` (teacher forcing, padding ignored),
  ``lr_at`` (linear warm-up then cosine decay), ``make_optimizer`` (AdamW, Loshchilov & Hutter 2019, no
  decay on 1-D parameters, as in karpathy/nanoGPT ``train.py``) and ``train``, the loop (gradient-norm
  clipping, periodic evaluation, a tqdm progress bar; returns a history, a list of dicts).
- :mod:`companion.checkpoints` -- ``save_checkpoint`` / ``load_checkpoint``: plain ``torch.save`` dicts read
  back with ``torch.load(weights_only=True)``; a bad, truncated or mismatched file raises a ``ValueError``.
- :mod:`companion.translation` -- ``train_translation`` and friends: the encoder–decoder of chapter 8 on
  ``companion.data.toy_translation``.
- this module -- ``python -m companion.training`` (or ``torchrun --nproc_per_node=N -m companion.training``):
  a tiny GPT trained with ``DistributedDataParallel`` (gloo on CPU, NCCL on GPU). Each of the N processes
  takes 1/N of the same global batch; DDP averages their gradients, so N processes take the same steps as
  one process on the whole batch (tests/test_training.py checks it).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import Tensor, nn

from companion.checkpoints import load_checkpoint, save_checkpoint
from companion.train_loop import LossFn as LossFn  # re-exported: the type of ``train``'s ``loss_fn``
from companion.train_loop import TrainConfig, lm_loss, lr_at, make_optimizer, seq2seq_loss, train
from companion.translation import train_translation, translate_pairs, translation_accuracy, translation_model_config

__all__ = [
    "TrainConfig", "lm_loss", "seq2seq_loss", "lr_at", "make_optimizer", "train", "save_checkpoint",
    "load_checkpoint", "train_translation", "translation_accuracy", "translate_pairs", "translation_model_config",
    "main",
]


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
